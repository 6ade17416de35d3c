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
  runlocal = bool(args.get('runlocal'))
  c = setting.fedfr_config('centralized', runlocal=runlocal, paper=bool(args.get('paper')))
  c.data.centralized_on = 'public'
  del c.evals.diagnostics               # no clients' class embeddings: the public ones only
  c.optimizer.learning_rate = 0.1        # the usual CosFace recipe (REFERENCE_NOTES §3)
  c.engine.step_mode = 'auto'
  c.federated.local_steps = 2 if runlocal else 8
  c.num_rounds = 4 if runlocal else 250  # 2,000 steps of 32: 32 epochs of the 2,000 public images
  c.log_every = 1 if runlocal else 50
  c.checkpoint_every = 2 if runlocal else 125
  return c
