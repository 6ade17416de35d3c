"""The base experiment config, the `get_config(arg)` variant parser, and config validation.

Every file in `configs/` starts from `base_config()` and changes what its paper method needs, so
all methods share one schema: a field that does not exist here is a typo, and
`ml_collections.config_flags` rejects `--config.<field>=...` overrides of unknown fields.
"""

import ml_collections

from fedjax_face import algorithms
from fedjax_face.core import engine, local
from fedjax_face.data import partition

LOSSES = ('softmax', 'cosface', 'arcface')
DATA_SOURCES = ('synthetic',)
PAIR_SETS = ('lfw', 'cfp_fp', 'agedb_30')


def base_config() -> ml_collections.ConfigDict:
  """Defaults sized so one run finishes in a few minutes on 2 CPU cores (README)."""
  c = ml_collections.ConfigDict()
  c.algorithm = 'fedgc'
  c.seed = 0
  c.num_rounds = 60
  c.checkpoint_every = 20      # rounds; 0 = only at the end
  c.log_every = 5              # rounds

  c.data = ml_collections.ConfigDict()
  c.data.source = 'synthetic'
  c.data.num_identities = 360          # training identities (CASIA-WebFace has ~10,575)
  c.data.images_per_identity = 40
  c.data.images_per_identity_sigma = 0.0
  c.data.image_size = 32
  c.data.num_test_identities = 300     # held out: the pair sets are open-set
  c.data.num_pairs = 6000
  c.data.difficulty = 1.0

  c.federated = ml_collections.ConfigDict()
  c.federated.num_clients = 36         # FedGC splits CASIA-WebFace over 36 clients
  c.federated.partition = 'balanced'   # or 'lognormal' (ln X ~ N(0, 1), FedGC Table 3)
  c.federated.participation = 1.0      # C, the fraction of clients per round (FedGC Table 1)
  c.federated.local_steps = 2          # local SGD steps per round (the static cap with local_epochs)
  c.federated.local_epochs = 0.0       # > 0: ceil(E·n_k/B) steps per client, masked to the cap
  c.federated.batch_size = 32

  c.model = ml_collections.ConfigDict()
  c.model.name = 'small_cnn'           # or 'iresnet18' / 'iresnet34' (112x112, accelerators)
  c.model.width = 16
  c.model.embedding_dim = 128
  c.model.dtype = 'float32'

  c.head = ml_collections.ConfigDict()
  c.head.loss = 'softmax'              # 'softmax' (W^T x) | 'cosface' | 'arcface'
  c.head.scale = 64.0                  # s for cosface / arcface
  c.head.margin = -1.0                 # < 0: the paper's margin (CosFace 0.35, ArcFace 0.5)
  c.head.arcface_fallback = 'classic'  # 'classic' | 'easy' | 'none' (REFERENCE_NOTES §3)

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.learning_rate = 0.1      # constant, as in FedGC
  c.optimizer.momentum = 0.9
  c.optimizer.weight_decay = 5e-4

  c.fedgc = ml_collections.ConfigDict()
  c.fedgc.reg_lambda = 20.0            # lambda of Alg. 1 line 14 (FedGC Table 2)
  c.fedgc.reg_form = ''                # '' = the loss's own form; or 'softmax' / 'cosface' / 'arcface'
  c.fedgc.reg_reduction = 'sum'        # Eq. 5 as written; 'mean' = divided by the number of classes

  c.engine = ml_collections.ConfigDict()
  c.engine.backend = 'auto'            # 'auto' | 'vmap' | 'map' | 'loop'
  c.engine.step_mode = 'auto'          # 'auto' | 'scan' | 'unroll'
  c.engine.map_width = 8
  c.engine.num_devices = 0             # 0 = all visible devices

  c.eval = ml_collections.ConfigDict()
  c.eval.every_rounds = 0              # 0 = only after the last round
  c.eval.batch_size = 256
  c.eval.pair_sets = PAIR_SETS
  c.eval.far_target = 1e-3
  return c


def runlocal(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a config to seconds on CPU, for tests (`get_config('runlocal')`)."""
  c.num_rounds = 2
  c.checkpoint_every = 1
  c.log_every = 1
  c.data.num_identities = 16
  c.data.images_per_identity = 6
  c.data.num_test_identities = 12
  c.data.num_pairs = 100
  c.data.image_size = 16
  c.federated.num_clients = 4
  c.federated.local_steps = 2
  c.federated.batch_size = 8
  c.model.width = 4
  c.model.embedding_dim = 16
  c.eval.batch_size = 64
  return c


def federated_config(algorithm: str, arg: str | None) -> ml_collections.ConfigDict:
  """The base config for a federated FR method, with the variant argument applied.

  Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, runlocal.
  """
  args = parse_arg(arg, {'loss': LOSSES, 'partition': partition.PARTITIONS, 'runlocal': (True,)})
  c = base_config()
  c.algorithm = algorithm
  c.head.loss = args.get('loss', 'softmax')
  c.federated.partition = args.get('partition', 'balanced')
  if args.get('runlocal'):
    runlocal(c)
  return c


def parse_arg(arg: str | None, allowed: dict[str, tuple]) -> dict[str, str | bool]:
  """Parses `get_config`'s argument `key=value,flag` (big_vision style).

  Args:
    arg: e.g. 'loss=cosface,runlocal'.
    allowed: key -> tuple of valid values; a flag (no '=') is valid when its tuple is (True,).
  """
  parsed = {}
  for item in filter(None, (arg or '').split(',')):
    key, _, value = item.partition('=')
    key = key.strip()
    if key not in allowed:
      raise ValueError(f'config argument {key!r} is unknown; expected one of {sorted(allowed)}.')
    if not value:
      if allowed[key] != (True,):
        raise ValueError(f'config argument {key!r} needs a value, one of {allowed[key]}.')
      parsed[key] = True
      continue
    if value not in allowed[key]:
      raise ValueError(f'config argument {key}={value!r}; expected one of {allowed[key]}.')
    parsed[key] = value
  return parsed


def _check_choice(name: str, value, choices):
  if value not in choices:
    raise ValueError(f'config.{name}={value!r}; expected one of {tuple(choices)}.')


def _check_positive(name: str, value, *, allow_zero: bool = False):
  if value < 0 or (value == 0 and not allow_zero):
    expected = 'a non-negative number' if allow_zero else 'a positive number'
    raise ValueError(f'config.{name}={value!r}; expected {expected}.')


def validate(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first field that is wrong and what was expected."""
  _check_choice('algorithm', c.algorithm, sorted(algorithms.ALGORITHMS))
  _check_choice('data.source', c.data.source, DATA_SOURCES)
  _check_choice('federated.partition', c.federated.partition, partition.PARTITIONS)
  _check_choice('head.loss', c.head.loss, LOSSES)
  _check_choice('head.arcface_fallback', c.head.arcface_fallback, ('classic', 'easy', 'none'))
  _check_choice('fedgc.reg_form', c.fedgc.reg_form, ('',) + LOSSES)
  _check_choice('fedgc.reg_reduction', c.fedgc.reg_reduction, ('sum', 'mean'))
  _check_choice('engine.backend', c.engine.backend, ('auto',) + engine.BACKENDS)
  _check_choice('engine.step_mode', c.engine.step_mode, ('auto',) + local.STEP_MODES)
  _check_choice('model.dtype', c.model.dtype, ('float32', 'bfloat16'))
  for name in c.eval.pair_sets:
    _check_choice('eval.pair_sets[...]', name, PAIR_SETS)
  for name in ('num_rounds', 'data.num_identities', 'data.images_per_identity', 'data.image_size',
               'data.num_test_identities', 'data.num_pairs', 'federated.num_clients',
               'federated.local_steps', 'federated.batch_size', 'model.embedding_dim',
               'engine.map_width', 'eval.batch_size'):
    value = c
    for part in name.split('.'):
      value = value[part]
    if not isinstance(value, int) or value <= 0:
      raise ValueError(f'config.{name}={value!r}; expected a positive integer.')
  for name, value in (('checkpoint_every', c.checkpoint_every), ('log_every', c.log_every),
                      ('eval.every_rounds', c.eval.every_rounds),
                      ('engine.num_devices', c.engine.num_devices)):
    if not isinstance(value, int) or value < 0:
      raise ValueError(f'config.{name}={value!r}; expected a non-negative integer.')
  if not 0.0 < c.federated.participation <= 1.0:
    raise ValueError(f'config.federated.participation={c.federated.participation!r}; expected a '
                     'fraction in (0, 1].')
  _check_positive('optimizer.learning_rate', c.optimizer.learning_rate)
  _check_positive('optimizer.momentum', c.optimizer.momentum, allow_zero=True)
  _check_positive('optimizer.weight_decay', c.optimizer.weight_decay, allow_zero=True)
  _check_positive('fedgc.reg_lambda', c.fedgc.reg_lambda, allow_zero=True)
  _check_positive('federated.local_epochs', c.federated.local_epochs, allow_zero=True)
  _check_positive('data.difficulty', c.data.difficulty, allow_zero=True)
  if c.data.images_per_identity < 2:
    raise ValueError('config.data.images_per_identity must be at least 2 (pairs need two images).')
  if c.data.num_pairs % (2 * 10):
    raise ValueError(f'config.data.num_pairs={c.data.num_pairs}; expected a multiple of 20 '
                     '(10 folds, half genuine).')
