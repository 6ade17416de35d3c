"""The base experiment config, the `get_config(arg)` variant parser, and config validation.

Every file in `configs/` starts from `base_config()` and changes what its paper method needs, so
all methods share one schema: a field that does not exist here is a typo, and
`ml_collections.config_flags` rejects `--config.<field>=...` overrides of unknown fields.
"""

import ml_collections

from fedjax_face import algorithms
from fedjax_face.core import engine, local
from fedjax_face.data import partition
from fedjax_face.models.conv import CONV_GRADIENTS

LOSSES = ('softmax', 'cosface', 'arcface')
DATA_SOURCES = ('synthetic', 'insightface', 'image_folder', 'tfds')   # data/sources.py
PAIR_SETS = ('lfw', 'cfp_fp', 'agedb_30')    # the synthetic ones; real data: any <name>.bin / .txt
DISTRIBUTED_MODES = ('off', 'auto', 'on')    # engine.distributed (experiment.py)


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
  # Real data (README 'Training on real data'); the synthetic-only fields above are then unused.
  c.data.root = ''                     # insightface: train.rec/.idx/property; image_folder:
                                       # <root>/<identity>/*.jpg; tfds: the TFDS data_dir
  c.data.verification_dir = ''         # <name>.bin / <name>.txt of eval.pair_sets; '' = root
  c.data.center_crop = 1.0             # central square kept (share of the shorter side), then
                                       # resized to image_size when the size differs
  c.data.min_images_per_identity = 1   # identities with fewer images are dropped
  c.data.max_identities = 0            # keep the first N identities (0 = all); quick runs
  c.data.skip_bad_records = False      # True: mask out undecodable records, logged and counted
  c.data.prefetch = 1                  # rounds prepared ahead in a background thread; 0 = off
  c.data.decode_threads = 0            # image decode threads; 0 = every usable CPU
  c.data.tfds_name = 'lfw'             # tfds: 'lfw' | 'celeb_a' | another with tfds_label_key
  c.data.tfds_split = 'train'
  c.data.tfds_label_key = ''           # identity feature; '' = known for lfw / celeb_a
  c.data.tfds_manual_dir = ''          # prepare from these files if not prepared (no download)

  c.federated = ml_collections.ConfigDict()
  c.federated.num_clients = 36         # FedGC splits CASIA-WebFace over 36 clients
  c.federated.partition = 'balanced'   # or 'lognormal' (ln X ~ N(0, 1), FedGC Table 3)
  c.federated.participation = 1.0      # C, the fraction of clients per round (FedGC Table 1)
  c.federated.shared_fraction = 0.0    # general case: fraction of identities held by several clients
  c.federated.shared_group_size = 2    # clients holding each shared identity
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
  c.head.init_std = 0.01               # class embeddings ~ N(0, std^2) (arcface_torch's init)

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.learning_rate = 0.1      # constant, as in FedGC
  c.optimizer.momentum = 0.9
  c.optimizer.weight_decay = 5e-4

  c.fedpe = ml_collections.ConfigDict()
  c.fedpe.fixed_class_embeddings = False   # FedPE+Fixed (FedGC Table 5): W stays at its init
  c.fedgc = ml_collections.ConfigDict()
  c.fedgc.regularizer = 'softmax'      # Eq. 5 ('softmax', FedGC) or 'cosine' (FedCos, Table 4)
  c.fedgc.reg_lambda = 20.0            # lambda of Alg. 1 line 14 (FedGC Table 2)
  c.fedgc.reg_form = ''                # '' = the loss's own form; or 'softmax' / 'cosface' / 'arcface'
  c.fedgc.reg_reduction = 'sum'        # Eq. 5 as written; 'mean' = divided by the number of classes
  c.fedgc.reg_self_gradient = True     # Eq. 5's self term moves W_ki; False = Eq. 12's reading
  c.fedgc.reg_implementation = 'auto'  # 'dense' | 'blockwise' (streamed) | 'auto' (by class count)
  c.fedgc.reg_block_size = 0           # blockwise rows per block; 0 = the module default

  c.engine = ml_collections.ConfigDict()
  c.engine.backend = 'auto'            # 'auto' | 'vmap' | 'map' | 'loop'
  c.engine.step_mode = 'auto'          # 'auto' | 'scan' | 'unroll'
  c.engine.conv_gradient = 'auto'      # 'auto' | 'xla' | 'canonical' (models/conv.py: the same
                                       # gradients, fast in loops on XLA CPU; auto = it on CPU)
  c.engine.map_width = 0               # clients per chunk of 'map', and of 'vmap' when the cohort
                                       # does not fit at once; 0 = the widest chunk that fits the
                                       # device memory (RoundEngine.plan); > 0 is unused by 'vmap'
  c.engine.loop_threads = 0            # 'loop' clients run at once on host threads; 0 = the
                                       # usable CPUs on CPU, 1 on an accelerator
  c.engine.memory_fraction = 0.6       # share of free device memory the auto width plans for
  c.engine.num_devices = 0             # 0 = all visible devices (of every process)
  c.engine.distributed = 'auto'        # 'off' | 'auto' | 'on': jax.distributed.initialize() for
                                       # multi-host runs (experiment.initialize_distributed)

  c.eval = ml_collections.ConfigDict()
  c.eval.every_rounds = 0              # 0 = only after the last round
  c.eval.batch_size = 256
  c.eval.pair_sets = PAIR_SETS
  c.eval.far_target = 1e-3
  # 1:N identification (MegaFace / IJB-C 1:N analogue, FedGC Tables 6-7) on held-out identities.
  c.eval.identification = ml_collections.ConfigDict()
  c.eval.identification.enabled = True
  c.eval.identification.num_enrolled = 100
  c.eval.identification.num_distractors = 1000
  c.eval.identification.num_non_mated = 200
  c.eval.identification.probes_per_identity = 2
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
  c.eval.identification.num_enrolled = 8
  c.eval.identification.num_distractors = 16
  c.eval.identification.num_non_mated = 10
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


def _check_data(c: ml_collections.ConfigDict) -> None:
  """The real-data fields of `c.data` and the pair-set names (any file name for real data)."""
  d = c.data
  if not c.eval.pair_sets or isinstance(c.eval.pair_sets, str):
    raise ValueError(f'config.eval.pair_sets={c.eval.pair_sets!r}; expected a non-empty tuple of '
                     'names, e.g. "(\'lfw\', \'cfp_fp\')".')
  for name in c.eval.pair_sets:
    if d.source == 'synthetic':
      _check_choice('eval.pair_sets[...]', name, PAIR_SETS)
    elif not isinstance(name, str) or not name or any(ch in name for ch in ',/\\ '):
      raise ValueError(f'config.eval.pair_sets has {name!r}; expected the file stem of a '
                       '<name>.bin or <name>.txt pair set, one name per tuple item, e.g. '
                       '"(\'lfw\', \'calfw\')".')
  if d.source in ('insightface', 'image_folder') and not d.root:
    raise ValueError(f'config.data.root is empty; data.source={d.source!r} needs the data '
                     'directory.')
  if not 0.0 < d.center_crop <= 1.0:
    raise ValueError(f'config.data.center_crop={d.center_crop!r}; expected a fraction in (0, 1].')
  if not isinstance(d.min_images_per_identity, int) or d.min_images_per_identity < 1:
    raise ValueError(f'config.data.min_images_per_identity={d.min_images_per_identity!r}; '
                     'expected a positive integer.')
  for name in ('max_identities', 'prefetch', 'decode_threads'):
    if not isinstance(d[name], int) or d[name] < 0:
      raise ValueError(f'config.data.{name}={d[name]!r}; expected a non-negative integer.')
  if not isinstance(d.skip_bad_records, bool):
    raise ValueError(f'config.data.skip_bad_records={d.skip_bad_records!r}; expected True or '
                     'False.')
  if d.source == 'tfds' and not d.tfds_name:
    raise ValueError('config.data.tfds_name is empty; data.source=\'tfds\' needs a TFDS name '
                     '(lfw, celeb_a).')


def method_name(c: ml_collections.ConfigDict) -> str:
  """The paper's name of the method a config runs (FedCos and FedPE+Fixed are variants)."""
  if c.algorithm == 'fedgc' and c.fedgc.regularizer == 'cosine':
    return 'fedcos'
  if c.algorithm == 'fedpe' and c.fedpe.fixed_class_embeddings:
    return 'fedpe+fixed'
  return c.algorithm


def validate(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first field that is wrong and what was expected."""
  _check_choice('algorithm', c.algorithm, sorted(algorithms.ALGORITHMS))
  _check_choice('data.source', c.data.source, DATA_SOURCES)
  _check_choice('federated.partition', c.federated.partition, partition.PARTITIONS)
  _check_choice('head.loss', c.head.loss, LOSSES)
  _check_choice('head.arcface_fallback', c.head.arcface_fallback, ('classic', 'easy', 'none'))
  _check_choice('fedgc.reg_form', c.fedgc.reg_form, ('',) + LOSSES)
  _check_choice('fedgc.reg_reduction', c.fedgc.reg_reduction, ('sum', 'mean'))
  _check_choice('fedgc.regularizer', c.fedgc.regularizer, ('softmax', 'cosine'))
  _check_choice('fedgc.reg_implementation', c.fedgc.reg_implementation,
                ('auto', 'dense', 'blockwise'))
  _check_choice('engine.backend', c.engine.backend, ('auto',) + engine.BACKENDS)
  _check_choice('engine.step_mode', c.engine.step_mode, ('auto',) + local.STEP_MODES)
  _check_choice('engine.conv_gradient', c.engine.conv_gradient, ('auto',) + CONV_GRADIENTS)
  _check_choice('engine.distributed', c.engine.distributed, DISTRIBUTED_MODES)
  if not (isinstance(c.engine.memory_fraction, (int, float))
          and 0.0 < c.engine.memory_fraction <= 1.0):
    raise ValueError(f'config.engine.memory_fraction={c.engine.memory_fraction!r}; expected a '
                     'fraction in (0, 1].')
  _check_choice('model.dtype', c.model.dtype, ('float32', 'bfloat16'))
  _check_data(c)
  for name in ('num_rounds', 'data.num_identities', 'data.images_per_identity', 'data.image_size',
               'data.num_test_identities', 'data.num_pairs', 'federated.num_clients',
               'federated.local_steps', 'federated.batch_size', 'model.embedding_dim',
               'eval.batch_size', 'eval.identification.num_enrolled',
               'eval.identification.num_non_mated', 'eval.identification.probes_per_identity'):
    value = c
    for part in name.split('.'):
      value = value[part]
    if not isinstance(value, int) or value <= 0:
      raise ValueError(f'config.{name}={value!r}; expected a positive integer.')
  for name, value in (('checkpoint_every', c.checkpoint_every), ('log_every', c.log_every),
                      ('eval.every_rounds', c.eval.every_rounds),
                      ('fedgc.reg_block_size', c.fedgc.reg_block_size),
                      ('eval.identification.num_distractors',
                       c.eval.identification.num_distractors),
                      ('engine.num_devices', c.engine.num_devices),
                      ('engine.map_width', c.engine.map_width),
                      ('engine.loop_threads', c.engine.loop_threads)):
    if not isinstance(value, int) or value < 0:
      raise ValueError(f'config.{name}={value!r}; expected a non-negative integer.')
  if not 0.0 < c.federated.participation <= 1.0:
    raise ValueError(f'config.federated.participation={c.federated.participation!r}; expected a '
                     'fraction in (0, 1].')
  _check_positive('optimizer.learning_rate', c.optimizer.learning_rate)
  _check_positive('optimizer.momentum', c.optimizer.momentum, allow_zero=True)
  _check_positive('optimizer.weight_decay', c.optimizer.weight_decay, allow_zero=True)
  _check_positive('fedgc.reg_lambda', c.fedgc.reg_lambda, allow_zero=True)
  _check_positive('head.init_std', c.head.init_std)
  if not isinstance(c.fedpe.fixed_class_embeddings, bool):
    raise ValueError(f'config.fedpe.fixed_class_embeddings={c.fedpe.fixed_class_embeddings!r}; '
                     'expected True or False.')
  if not isinstance(c.fedgc.reg_self_gradient, bool):
    raise ValueError(f'config.fedgc.reg_self_gradient={c.fedgc.reg_self_gradient!r}; expected '
                     'True or False.')
  _check_positive('federated.local_epochs', c.federated.local_epochs, allow_zero=True)
  if not 0.0 <= c.federated.shared_fraction <= 1.0:
    raise ValueError(f'config.federated.shared_fraction={c.federated.shared_fraction!r}; expected '
                     'a fraction in [0, 1].')
  if c.federated.shared_fraction > 0 and not (
      isinstance(c.federated.shared_group_size, int)
      and 2 <= c.federated.shared_group_size <= c.federated.num_clients):
    raise ValueError(f'config.federated.shared_group_size={c.federated.shared_group_size!r}; '
                     f'expected an integer from 2 to federated.num_clients '
                     f'({c.federated.num_clients}).')
  _check_positive('data.difficulty', c.data.difficulty, allow_zero=True)
  if c.data.images_per_identity < 2:
    raise ValueError('config.data.images_per_identity must be at least 2 (pairs need two images).')
  if c.data.num_pairs % (2 * 10):
    raise ValueError(f'config.data.num_pairs={c.data.num_pairs}; expected a multiple of 20 '
                     '(10 folds, half genuine).')
