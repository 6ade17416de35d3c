r"""FedRep (Collins et al., ICML 2021) and FedPer (Arivazhagan et al. 2019) in the FedFR paper's
setting: started from the pre-trained model, every client keeps its head (its class embeddings
and the backbone's embedding layers), the body is averaged; scored on FedFR's personalized
protocol with each client's own head (docs/personalization.md).

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain
    python -m fedjax_face.main --config=configs/fedfr/fedrep.py --workdir=/tmp/fedrep \
        --config.init_from=/tmp/fedfr_pretrain

Local data only (no public images), CosFace over the client's own identities (the setting's
head). Argument (comma separated): fedper (FedPer: head and body trained together),
classifier (the head is the class embeddings alone), paper (the paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedrep
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'fedper': (True,), 'classifier': (True,), 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.fedfr_config('fedrep', runlocal=bool(args.get('runlocal')),
                           paper=bool(args.get('paper')))
  c.fedrep = fedrep.config_section()
  c.fedrep.alternate = not args.get('fedper')
  if args.get('classifier'):
    c.fedrep.head = 'class_embeddings'
  return c
