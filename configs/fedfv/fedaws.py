r"""FedAwS (Yu et al. 2020; FedFV paper Eq. 3): positive-only clients, spreadout on the server.

    python -m fedjax_face.main --config=configs/fedfv/fedaws.py --workdir=/tmp/fedaws
    python -m fedjax_face.main --config=configs/fedfv/fedaws.py:distance=cosine --workdir=...

Argument (comma separated): distance=euclidean|cosine (Eq. 3's d; cosine takes FedFace's margin
0.7), paper (the paper's backbone at 64x64), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedaws, spreadout
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'distance': spreadout.DISTANCES, 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.one_per_client_config('fedaws', runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
  c.head.loss = 'positive_cosine'   # (max{0, m - cos})^2 on the client's one class
  c.head.margin = 0.9
  c.fedaws = fedaws.config_section()
  if args.get('distance') == 'cosine':
    c.fedaws.distance = 'cosine'
    c.fedaws.margin = 0.7
  return c
