r"""FedFV in its one-identity setting (1,000 clients, 8 a round) with one federated building block
switched on (docs/blocks.md; the variants: fedjax_face/proj/blocks/setting.py).

    python -m fedjax_face.main --config=configs/blocks/fedfv_setting.py:block=scaffold --workdir=/tmp/scaffold

Argument (comma separated): block=fedavg|fedavgm|fedadam|fedprox|scaffold|stragglers|q8|top1|
secagg|secagg_dp16, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedfv
from fedjax_face.proj.blocks import setting as blocks_setting
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'block': tuple(blocks_setting.VARIANTS), 'runlocal': (True,)})
  runlocal = bool(args.get('runlocal'))
  c = setting.one_per_client_config('fedfv', runlocal=runlocal)
  c.fedfv = fedfv.config_section()
  if runlocal:
    c.fedfv.num_equivalent = 4
  return blocks_setting.apply(c, 'fedfv', args.get('block', 'fedavg'))
