r"""Ditto (Li et al., ICML 2021) in the FedFR paper's setting: started from the pre-trained model,
each client trains FedPE's model (backbone averaged, class embeddings kept) and a personal model
pulled towards the received one (fedjax_face/algorithms/ditto.py).

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain
    python -m fedjax_face.main --config=configs/fedfr/ditto.py --workdir=/tmp/ditto \
        --config.init_from=/tmp/fedfr_pretrain

Local data only (no public images); the personalized evaluation (FedFR's Table 1 protocol) scores
each client's personal model, the generic one the global model.

Argument (comma separated): paper (the paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import ditto
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'paper': (True,), 'runlocal': (True,)})
  c = setting.fedfr_config('ditto', runlocal=bool(args.get('runlocal')),
                           paper=bool(args.get('paper')))
  c.ditto = ditto.config_section()
  return c
