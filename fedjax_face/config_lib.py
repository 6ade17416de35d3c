"""The sections every method shares, the `get_config(arg)` variant parser, and their checks.

Every file in `configs/` starts from `base_config()` and adds its method's own section
(`c.<method> = <method module>.config_section()`, checked by that module's `check_config`), so a
field that exists in neither is a typo, and `ml_collections.config_flags` rejects
`--config.<field>=...` overrides of unknown fields. The allowed values of a field are defined by
the module that uses them and checked from there.
"""

import math

import ml_collections

from fedjax_face.core import distributed, engine, local, privacy
from fedjax_face.data import partition, sources
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.data.synthetic import faces
from fedjax_face.models import heads
from fedjax_face.models.conv import CONV_GRADIENTS


SCHEDULES = ('constant', 'step')   # learning rate by round (algorithms/common.py:lr_scale_schedule)


def base_config() -> ml_collections.ConfigDict:
  """Defaults sized so one run finishes in a few minutes on 2 CPU cores (README)."""
  c = ml_collections.ConfigDict()
  c.algorithm = ''                     # a key of algorithms.ALGORITHMS, set by each config
  c.seed = 0
  c.num_rounds = 60
  c.checkpoint_every = 20      # rounds; 0 = only at the end
  c.init_from = ''             # a finished run's workdir whose final model starts this one
                               # (FedFR starts from its pre-training run); '' = random init
  c.log_every = 5              # rounds
  c.divergence_factor = 1e3    # stop when a round's training loss exceeds this times the first
                               # round's (a finite blow-up); 0 = off. Non-finite always stops.

  c.data = ml_collections.ConfigDict()
  c.data.source = 'synthetic'
  c.data.num_identities = 360          # training identities (CASIA-WebFace has ~10,575)
  c.data.images_per_identity = 40
  c.data.images_per_identity_sigma = 0.0
  c.data.image_size = 32
  c.data.num_test_identities = 300     # held out: the pair sets are open-set
  c.data.num_pairs = 6000
  c.data.difficulty = 1.0
  c.data.lookalike_family_size = 1     # g: training identities in look-alike families of g
                                       # (1 = independent identities); synthetic only
  c.data.lookalike_spread = faces.LOOKALIKE_SPREAD   # in (0, 1]: a member's distance from
                                       # its family centre (training families and sllfw's)
  # Public and private identities (FedFR; data/splits.py): the first K_g training identities are
  # public (the pre-training set, shared with every client), the rest are dealt to the clients.
  c.data.public_identities = 0         # K_g; 0 = every identity is a client's
  c.data.private_test_fraction = 0.0   # of each private identity's images, held out for the
                                       # personalized evaluation (FedFR: 40 of 100)
  c.data.centralized_on = 'all'        # a centralized run with public identities: 'public' (the
                                       # pre-training) | 'all' (public + private training images)
  # Real data (README 'Training on real data'); the synthetic-only fields above are then unused.
  c.data.root = ''                     # insightface: train.rec/.idx/property; image_folder:
                                       # <root>/<identity>/*.jpg; tfds: the TFDS data_dir
  c.data.verification_dir = ''         # <name>.bin / .txt of evals.verification.pair_sets; '' = root
  c.data.center_crop = 1.0             # central square kept (share of the shorter side), then
                                       # resized to image_size when the size differs
  c.data.min_images_per_identity = 1   # identities with fewer images are dropped
  c.data.max_identities = 0            # keep the first N identities (0 = all); quick runs
  c.data.skip_bad_records = False      # True: mask out undecodable records, logged and counted
  c.data.check_record_labels = True   # insightface: read every image record's header at load and
                                       # check its label against its identity's key range (an .idx
                                       # pointing at wrong records stops the run before round 1)
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
  c.federated.balanced_classes = False # every batch B / C_k samples of each of the client's
                                       # classes (PAD: live and attack frames alike)
  c.federated.batch_size = 32
  c.federated.client_optimizer_state = 'reset'   # 'reset': fresh momentum every round (a new
                                       # optimizer per round, as FL code usually does); 'keep':
                                       # each client keeps its own from its last round

  c.model = ml_collections.ConfigDict()
  c.model.name = 'small_cnn'           # or 'iresnet18' / 'iresnet34' (112x112, accelerators)
  c.model.width = 16
  c.model.embedding_dim = 128
  c.model.dtype = 'float32'

  c.head = ml_collections.ConfigDict()
  c.head.loss = 'softmax'              # 'softmax' (W^T x) | 'cosface' | 'arcface' | positive-only:
                                       # 'positive_cosine' (FedAwS, FedFace) | 'positive_dot' (FedUV)
  c.head.scale = 64.0                  # s for cosface / arcface
  c.head.margin = -1.0                 # < 0: the paper's margin (CosFace 0.35, ArcFace 0.5)
  c.head.arcface_fallback = 'classic'  # 'classic' | 'easy' | 'none' (REFERENCE_NOTES §3)
  c.head.init_std = 0.01               # class embeddings ~ N(0, std^2) (arcface_torch's init)

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'sgd'             # 'sgd' (momentum, coupled weight decay) | 'adam' (FedGPAD)
  c.optimizer.learning_rate = 0.1      # the initial rate (constant in FedGC)
  c.optimizer.schedule = 'constant'    # 'constant' | 'step': times decay_factor at each decay_at
  c.optimizer.decay_at = (2 / 3, 13 / 15)   # fractions of num_rounds (FedFV: 10k, 13k of 15k)
  c.optimizer.decay_factor = 0.1
  c.optimizer.momentum = 0.9
  c.optimizer.weight_decay = 5e-4

  c.engine = ml_collections.ConfigDict()
  c.engine.backend = 'auto'            # 'auto' | 'vmap' | 'map' | 'loop'
  c.engine.step_mode = 'auto'          # 'auto' | 'scan' | 'unroll'
  c.engine.conv_gradient = 'auto'      # 'auto' | 'xla' | 'canonical' (models/conv.py: the same
                                       # gradients, fast in loops on XLA CPU; auto = it on CPU)
  c.engine.map_width = 0               # clients per chunk of 'map' and 'vmap'; 0 = the widest
                                       # chunk that fits the device memory (engine.plan_width;
                                       # 'vmap' runs the whole cohort at once when it fits)
  c.engine.loop_threads = 0            # 'loop' clients run at once on host threads; 0 = the
                                       # usable CPUs on CPU, 1 on an accelerator
  c.engine.memory_fraction = 0.6       # share of free device memory the auto width plans for
  c.engine.client_state = 'device'     # where per-client state lives between rounds: 'device' |
                                       # 'host' (numpy; the cohort's rows go to the device)
  c.engine.num_devices = 0             # 0 = all visible devices (of every process)
  c.engine.distributed = 'auto'        # 'off' | 'auto' | 'on': jax.distributed.initialize() for
                                       # multi-host runs (core/distributed.py)

  # Client-level differential privacy, DP-FedAvg style (core/privacy.py says what it protects).
  c.dp = ml_collections.ConfigDict()
  c.dp.enabled = False
  c.dp.clip_norm = 1.0                 # S: L2 bound of a client's update minus what it received
  c.dp.noise_multiplier = 1.0          # sigma: the server's Gaussian noise has std sigma * S
  c.dp.target_delta = 1e-5             # epsilon is reported at this delta
  c.dp.target_epsilon = 0.0            # > 0: the noise multiplier that reaches this epsilon
                                       # after num_rounds replaces noise_multiplier
  c.dp.class_rows = 'private'          # a client's own class rows (FedGC's W_k): 'private' =
                                       # clipped and noised with the rest | 'unprotected' = sent
                                       # as they are, outside epsilon

  c.eval = ml_collections.ConfigDict()
  c.eval.every_rounds = 0              # 0 = only after the last round
  c.eval.batch_size = 256
  # Evaluators by type (eval/__init__.py:EVALUATORS); each present section runs, with its settings.
  c.evals = ml_collections.ConfigDict()
  c.evals.verification = ml_collections.ConfigDict()    # 1:1, the insightface 10-fold protocol
  c.evals.verification.pair_sets = faces.PAIR_SET_NAMES   # real data: <name>.bin / .txt stems
  c.evals.verification.far_target = 1e-3
  # 1:N identification (MegaFace / IJB-C 1:N analogue, FedGC Tables 6-7) on held-out synthetic
  # identities (skipped for real data).
  c.evals.identification = ml_collections.ConfigDict()
  c.evals.identification.num_enrolled = 100
  c.evals.identification.num_distractors = 1000
  c.evals.identification.num_non_mated = 200
  c.evals.identification.probes_per_identity = 2
  # Class-embedding cosines within / across clients (FedGC Fig. 3(c)(d)); methods that keep
  # class embeddings only.
  c.evals.diagnostics = ml_collections.ConfigDict()
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
  c.evals.identification.num_enrolled = 8
  c.evals.identification.num_distractors = 16
  c.evals.identification.num_non_mated = 10
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


def check_choice(name: str, value, choices) -> None:
  """Raises ValueError unless `config.<name>` is one of `choices`."""
  if value not in choices:
    raise ValueError(f'config.{name}={value!r}; expected one of {tuple(choices)}.')


def check_number(name: str, value, *, allow_zero: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is a finite positive (or, with allow_zero, >= 0)
  number (nan and inf are refused: they would fail rounds later as a divergence)."""
  if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
      or value < 0 or (value == 0 and not allow_zero)):
    expected = 'a finite non-negative number' if allow_zero else 'a finite positive number'
    raise ValueError(f'config.{name}={value!r}; expected {expected}.')


def check_int(name: str, value, *, allow_zero: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is a positive (or, with allow_zero, >= 0) integer."""
  if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
    expected = 'a non-negative integer' if allow_zero else 'a positive integer'
    raise ValueError(f'config.{name}={value!r}; expected {expected}.')


def check_bool(name: str, value) -> None:
  if not isinstance(value, bool):
    raise ValueError(f'config.{name}={value!r}; expected True or False.')


def check_fraction(name: str, value, *, closed_below: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is in (0, 1] (or [0, 1] with closed_below)."""
  ok = isinstance(value, (int, float)) and (0.0 <= value if closed_below else 0.0 < value)
  if not (ok and value <= 1.0):
    interval = '[0, 1]' if closed_below else '(0, 1]'
    raise ValueError(f'config.{name}={value!r}; expected a fraction in {interval}.')


def section(c: ml_collections.ConfigDict, name: str, added_by: str) -> ml_collections.ConfigDict:
  """`c.<name>`, or a ValueError saying which config adds it (a method or evaluator section)."""
  if name not in c:
    raise ValueError(f'config.{name} is missing; {added_by} adds it (start from a file in '
                     'configs/).')
  return c[name]


def _check_data(c: ml_collections.ConfigDict) -> None:
  """The real-data fields of `c.data`."""
  d = c.data
  check_choice('data.source', d.source, sources.SOURCES)
  if d.source == 'pad':
    pad_benchmark.check_config(c)
  if d.source in ('insightface', 'image_folder') and not d.root:
    raise ValueError(f'config.data.root is empty; data.source={d.source!r} needs the data '
                     'directory.')
  if not isinstance(d.center_crop, (int, float)) or not 0.0 < d.center_crop <= 1.0:
    raise ValueError(f'config.data.center_crop={d.center_crop!r}; expected a fraction in (0, 1].')
  check_int('data.min_images_per_identity', d.min_images_per_identity)
  for name in ('max_identities', 'prefetch', 'decode_threads'):
    check_int(f'data.{name}', d[name], allow_zero=True)
  check_bool('data.skip_bad_records', d.skip_bad_records)
  check_bool('data.check_record_labels', d.check_record_labels)
  if d.source == 'tfds' and not d.tfds_name:
    raise ValueError('config.data.tfds_name is empty; data.source=\'tfds\' needs a TFDS name '
                     '(lfw, celeb_a).')
  for name in ('num_identities', 'images_per_identity', 'image_size', 'num_test_identities',
               'num_pairs'):
    check_int(f'data.{name}', d[name])
  check_number('data.difficulty', d.difficulty, allow_zero=True)
  check_int('data.lookalike_family_size', d.lookalike_family_size)
  if d.lookalike_family_size > 1 and d.source != 'synthetic':
    raise ValueError(f'config.data.lookalike_family_size={d.lookalike_family_size} with '
                     f'data.source={d.source!r}; look-alike families exist only in the synthetic '
                     'benchmark: expected 1.')
  spread = d.lookalike_spread
  if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0 < spread <= 1:
    raise ValueError(f'config.data.lookalike_spread={spread!r}; expected a number in (0, 1] '
                     '(1 = independent identities; 0 would make clones).')
  if d.images_per_identity < 2:
    raise ValueError('config.data.images_per_identity must be at least 2 (pairs need two images).')
  _check_public_private(c)
  if d.num_pairs % (2 * 10):
    raise ValueError(f'config.data.num_pairs={d.num_pairs}; expected a multiple of 20 '
                     '(10 folds, half genuine).')


def _check_public_private(c: ml_collections.ConfigDict) -> None:
  """`data.public_identities`, `data.private_test_fraction`, `data.centralized_on`, `init_from`."""
  d = c.data
  check_int('data.public_identities', d.public_identities, allow_zero=True)
  fraction = d.private_test_fraction
  if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
          and 0.0 <= fraction < 1.0):
    raise ValueError(f'config.data.private_test_fraction={fraction!r}; expected a fraction in '
                     '[0, 1).')
  check_choice('data.centralized_on', d.centralized_on, ('all', 'public'))
  if d.public_identities:
    if d.source == 'synthetic' and d.public_identities >= d.num_identities:
      raise ValueError(f'config.data.public_identities={d.public_identities} of '
                       f'data.num_identities={d.num_identities}; expected fewer, so that clients '
                       'hold some identities.')
    if d.lookalike_family_size > 1:
      raise ValueError('config.data.public_identities > 0 with data.lookalike_family_size > 1: '
                       'look-alike families would straddle the public / private boundary; use '
                       'one or the other.')
  elif d.centralized_on != 'all':
    raise ValueError(f'config.data.centralized_on={d.centralized_on!r} needs public identities '
                     '(data.public_identities > 0).')
  if not isinstance(c.init_from, str):
    raise ValueError(f'config.init_from={c.init_from!r}; expected a workdir path or \'\'.')


def _check_federated(c: ml_collections.ConfigDict) -> None:
  fl = c.federated
  check_int('federated.num_clients', fl.num_clients)
  check_choice('federated.partition', fl.partition, partition.PARTITIONS)
  check_fraction('federated.participation', fl.participation)
  check_fraction('federated.shared_fraction', fl.shared_fraction, closed_below=True)
  if fl.shared_fraction > 0 and not (
      isinstance(fl.shared_group_size, int) and 2 <= fl.shared_group_size <= fl.num_clients):
    raise ValueError(f'config.federated.shared_group_size={fl.shared_group_size!r}; '
                     f'expected an integer from 2 to federated.num_clients ({fl.num_clients}).')
  if c.data.lookalike_family_size > fl.num_clients and fl.partition != 'one_per_client':
    raise ValueError(f'config.data.lookalike_family_size={c.data.lookalike_family_size} cannot '
                     f'be spread over federated.num_clients={fl.num_clients}: expected a family '
                     'size of at most the number of clients.')
  if c.data.source == 'synthetic':   # real data: the identities are known only once loaded
    private = c.data.num_identities - c.data.public_identities
    if fl.num_clients > private:
      raise ValueError(f'config.federated.num_clients={fl.num_clients} but there are only '
                       f'{private} client identities (data.num_identities - '
                       'data.public_identities): every client needs one. Expected at most '
                       f'{private}.')
    if fl.partition == 'one_per_client' and fl.num_clients != private:
      raise ValueError(f"config.federated.partition='one_per_client' with "
                       f'federated.num_clients={fl.num_clients}: expected one client per client '
                       f'identity, {private}.')
  check_int('federated.local_steps', fl.local_steps)
  check_number('federated.local_epochs', fl.local_epochs, allow_zero=True)
  check_int('federated.batch_size', fl.batch_size)
  check_choice('federated.client_optimizer_state', fl.client_optimizer_state, ('reset', 'keep'))
  check_bool('federated.balanced_classes', fl.balanced_classes)


def _check_model_and_head(c: ml_collections.ConfigDict) -> None:
  check_int('model.embedding_dim', c.model.embedding_dim)
  check_choice('model.dtype', c.model.dtype, ('float32', 'bfloat16'))
  check_choice('head.loss', c.head.loss, heads.HEADS)
  check_choice('head.arcface_fallback', c.head.arcface_fallback, heads.ARCFACE_FALLBACKS)
  check_number('head.init_std', c.head.init_std)


def _check_optimizer(c: ml_collections.ConfigDict) -> None:
  check_choice('optimizer.name', c.optimizer.name, ('sgd', 'adam'))
  check_number('optimizer.learning_rate', c.optimizer.learning_rate)
  check_number('optimizer.momentum', c.optimizer.momentum, allow_zero=True)
  check_number('optimizer.weight_decay', c.optimizer.weight_decay, allow_zero=True)
  check_choice('optimizer.schedule', c.optimizer.schedule, SCHEDULES)
  decay_at = c.optimizer.decay_at
  if (not isinstance(decay_at, (tuple, list)) or
      not all(isinstance(f, (int, float)) and 0 < f < 1 for f in decay_at) or
      list(decay_at) != sorted(set(decay_at))):
    raise ValueError(f'config.optimizer.decay_at={decay_at!r}; expected increasing fractions of '
                     'num_rounds in (0, 1), e.g. (2/3, 13/15).')
  check_fraction('optimizer.decay_factor', c.optimizer.decay_factor)


def _check_engine(c: ml_collections.ConfigDict) -> None:
  e = c.engine
  check_choice('engine.backend', e.backend, ('auto',) + engine.BACKENDS)
  check_choice('engine.step_mode', e.step_mode, ('auto',) + local.STEP_MODES)
  check_choice('engine.conv_gradient', e.conv_gradient, ('auto',) + CONV_GRADIENTS)
  check_choice('engine.distributed', e.distributed, distributed.MODES)
  check_choice('engine.client_state', e.client_state, engine.CLIENT_STATES)
  check_fraction('engine.memory_fraction', e.memory_fraction)
  for name in ('num_devices', 'map_width', 'loop_threads'):
    check_int(f'engine.{name}', e[name], allow_zero=True)


def _check_dp(c: ml_collections.ConfigDict) -> None:
  d = c.dp
  check_bool('dp.enabled', d.enabled)
  check_number('dp.clip_norm', d.clip_norm)
  check_number('dp.noise_multiplier', d.noise_multiplier, allow_zero=True)
  if not isinstance(d.target_delta, float) or not 0 < d.target_delta < 1:
    raise ValueError(f'config.dp.target_delta={d.target_delta!r}; expected a number in (0, 1).')
  check_choice('dp.class_rows', d.class_rows, privacy.CLASS_ROWS)
  check_number('dp.target_epsilon', d.target_epsilon, allow_zero=True)


def validate(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first shared field that is wrong and what was expected.

  The method's own section is checked by its module (`algorithms.check_config`), each
  evaluator's by the evaluator (`eval.check_config`).
  """
  if not isinstance(c.algorithm, str) or not c.algorithm:
    raise ValueError(f'config.algorithm={c.algorithm!r}; expected a method name (each file in '
                     'configs/ sets it).')
  check_int('num_rounds', c.num_rounds)
  for name in ('checkpoint_every', 'log_every'):
    check_int(name, c[name], allow_zero=True)
  check_number('divergence_factor', c.divergence_factor, allow_zero=True)
  _check_data(c)
  _check_federated(c)
  _check_model_and_head(c)
  _check_optimizer(c)
  _check_engine(c)
  _check_dp(c)
  check_int('eval.every_rounds', c.eval.every_rounds, allow_zero=True)
  check_int('eval.batch_size', c.eval.batch_size)
