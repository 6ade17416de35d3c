r"""APFL (Deng et al., 2020) in the FedFR paper's setting: started from the pre-trained model,
each client trains FedPE's model (backbone averaged, class embeddings kept), a personal model and
the weight alpha that mixes the two (fedjax_face/algorithms/apfl.py).

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain
    python -m fedjax_face.main --config=configs/fedfr/apfl.py --workdir=/tmp/apfl \
        --config.init_from=/tmp/fedfr_pretrain

Local data only (no public images); the personalized evaluation (FedFR's Table 1 protocol) scores
each client's mixed model, the generic one the global model.

Argument (comma separated): alpha=A (a fixed alpha, the paper's 0.25 | 0.5 | 0.75; default: the
adaptive alpha from 0.5), paper (the paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import apfl
from fedjax_face.proj.fedfr import setting

FIXED_ALPHAS = ('0.25', '0.5', '0.75')


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'alpha': FIXED_ALPHAS, 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.fedfr_config('apfl', runlocal=bool(args.get('runlocal')),
                           paper=bool(args.get('paper')))
  c.apfl = apfl.config_section()
  if 'alpha' in args:
    c.apfl.adaptive_alpha = False
    c.apfl.alpha_init = float(args['alpha'])
  return c
