"""The FedGC paper's setting, shared by its configs (configs/fedgc/): identity-exclusive clients
of the embedded benchmark, evaluated on all six pair sets.

The paper tests on seven sets; the benchmark renders six analogues (LFW, CFP-FP, AgeDB-30 and the
look-alike, cross-pose and cross-age sets SLLFW, CPLFW, CALFW). The `lookalikes` argument puts the
training identities in look-alike families (`data.synthetic.lookalike_family_size`), spread over different
clients: the condition FedGC's Fig. 3 says breaks FedPE.
"""

import ml_collections

from fedjax_face import config_lib
from fedjax_face.data import partition
from fedjax_face.data.synthetic import pairs
from fedjax_face.models import heads

# Family size of the `lookalikes` argument: 90 families of 4 over the 360 default identities,
# each member on a different one of the 36 clients.
LOOKALIKE_FAMILY_SIZE = 4
ARGS = {'loss': heads.CLASSIFIER_HEADS, 'partition': partition.PARTITIONS,
        'lookalikes': (True,), 'runlocal': (True,)}


def config(algorithm: str, arg: str | None,
           allowed: dict[str, tuple] | None = None) -> ml_collections.ConfigDict:
  """The base config of a FedGC-paper method, with the variant argument applied.

  Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal,
  lookalikes, runlocal (`allowed` narrows the keys).
  """
  args = config_lib.parse_arg(arg, allowed or ARGS)
  c = config_lib.base_config()
  c.algorithm = algorithm
  c.head.loss = args.get('loss', 'softmax')
  c.federated.partition = args.get('partition', 'balanced')
  c.evals.verification.pair_sets = pairs.ALL_PAIR_SET_NAMES
  if args.get('runlocal'):
    config_lib.runlocal(c)
  if args.get('lookalikes'):
    c.data.synthetic.lookalike_family_size = LOOKALIKE_FAMILY_SIZE
  return c
