r"""FedFV (Liu et al. 2022, Alg. 2): one identity per client, n equivalent class embeddings each.

    python -m fedjax_face.main --config=configs/fedfv/fedfv.py --workdir=/tmp/fedfv
    python -m fedjax_face.main --config=configs/fedfv/fedfv.py:n=10 --workdir=/tmp/fedfv10
    python -m fedjax_face.main --config=configs/fedfv/fedfv.py:k=3 --workdir=/tmp/fedfv_k3

Argument (comma separated): n=1|5|10|50|100|500|1000 (FedFV-n, Table 1), k=2|3|5|10|50|100
(FedFV(k), Table 2), draw=per_round|per_client, paper (the paper's backbone at 64x64), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedfv
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {
      'n': ('1', '5', '10', '50', '100', '500', '1000'),
      'k': ('2', '3', '5', '10', '50', '100'),
      'draw': fedfv.DRAWS, 'paper': (True,), 'runlocal': (True,)})
  c = setting.one_per_client_config('fedfv', runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
  c.fedfv = fedfv.config_section()
  c.fedfv.num_equivalent = int(args.get('n', 100))
  c.fedfv.group_size = int(args.get('k', 2))
  c.fedfv.draw = args.get('draw', 'per_round')
  if args.get('runlocal'):
    c.fedfv.num_equivalent = min(c.fedfv.num_equivalent, 4)
  return c
