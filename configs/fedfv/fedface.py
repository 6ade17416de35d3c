r"""FedFace (Aggarwal et al. 2021): positive-only clients, class embeddings initialised from the
clients' mean features, cosine spreadout on the server.

    python -m fedjax_face.main --config=configs/fedfv/fedface.py --workdir=/tmp/fedface

Argument (comma separated): init=mean_feature|random, paper (the paper's backbone at 64x64),
runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedface
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'init': fedface.EMBEDDING_INITS, 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.one_per_client_config('fedface', runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
  c.head.loss = 'positive_cosine'   # FedFace: mean (max{0, 0.9 - cos})^2
  c.head.margin = 0.9
  c.fedface = fedface.config_section()
  c.fedface.embedding_init = args.get('init', 'mean_feature')
  return c
