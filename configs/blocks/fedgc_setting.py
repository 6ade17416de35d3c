r"""FedPE in the FedGC paper's setting with one federated building block switched on
(docs/blocks.md; the variants: fedjax_face/proj/blocks/setting.py).

    python -m fedjax_face.main --config=configs/blocks/fedgc_setting.py:block=fedadam --workdir=/tmp/fedadam
    python -m fedjax_face.main --config=configs/blocks/fedgc_setting.py:block=secagg_dp16,runlocal \
        --workdir=/tmp/secagg

Argument (comma separated): block=fedavg|fedavgm|fedadam|fedprox|scaffold|stragglers|q8|top1|
secagg|secagg_dp16, runlocal. Any block is also a field of every config
(`--config.server_optimizer.name=fedadam`, ...).
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedpe
from fedjax_face.proj.blocks import setting as blocks_setting
from fedjax_face.proj.fedgc import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'block': tuple(blocks_setting.VARIANTS), 'runlocal': (True,)})
  c = setting.config('fedpe', 'runlocal' if args.get('runlocal') else None)
  c.fedpe = fedpe.config_section()
  return blocks_setting.apply(c, 'fedpe', args.get('block', 'fedavg'))
