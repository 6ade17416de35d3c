r"""FedFR's pre-training: centralized CosFace (s = 30, m = 0.4) on the public identities only.

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain

Every FedFR run starts from this run's final model and public class matrix
(`--config.init_from=/tmp/fedfr_pretrain`); evaluated as it is, it is Table 1's first row.

Argument (comma separated): paper (the paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'paper': (True,), 'runlocal': (True,)})
  return setting.pretraining_config(runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
