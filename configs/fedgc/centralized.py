r"""Centralized training on all training identities: the upper bound (FedGC Table 5, "*" rows).

    python -m fedjax_face.main --config=configs/fedgc/centralized.py --workdir=/tmp/central

Same data, backbone, head, batch size and learning rate as the federated configs, and the same
number of training images seen (`federated.num_clients` only groups identities for the
FedGC Fig. 3 diagnostic here): a federated round of K clients x S steps is K·S centralized steps,
run here as proportionally more rounds of fewer steps (keeping each compiled program small).

Argument (comma separated): loss=softmax|cosface|arcface, lookalikes (the same look-alike
families as the federated configs' `lookalikes`), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.models import heads
from fedjax_face.proj.fedgc import setting

ARGS = {'loss': heads.CLASSIFIER_HEADS, 'lookalikes': (True,), 'runlocal': (True,)}


def get_config(arg=None):
  args = config_lib.parse_arg(arg, ARGS)
  c = setting.config('centralized', arg, ARGS)
  # Same images seen as the federated run (rounds x clients x steps x batch): a federated round
  # becomes `factor` centralized rounds of `local_steps` steps each.
  fed_steps_per_round = c.federated.num_clients * c.federated.local_steps
  c.federated.local_steps = 8 if not args.get('runlocal') else 2
  factor = fed_steps_per_round // c.federated.local_steps
  c.num_rounds *= factor
  c.log_every *= factor
  c.checkpoint_every *= factor
  return c
