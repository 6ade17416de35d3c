"""The sections every method shares, the `get_config(arg)` variant parser, and their checks.

A config is of one task ('recognition' | 'anti_spoofing'): `base_config(task)` holds the shared
sections and the task's own, each asked of the module that owns it (sources, evaluators, the
head, the split), so an anti-spoofing config.json carries no face-recognition field.
Every file in `configs/` starts from `base_config(task)` and adds its method's own section
(`c.<method> = <method module>.config_section()`, checked by that module's `check_config`), so a
field that exists in neither is a typo, and `ml_collections.config_flags` rejects
`--config.<field>=...` overrides of unknown fields. The allowed values of a field are defined by
the module that uses them and checked from there.
"""

import ml_collections

from fedjax_face import eval as eval_lib
from fedjax_face.core import (compression, distributed, engine, local, local_terms, precision,
                              privacy, server_optimizers, xla_flags)
from fedjax_face.core.checks import (check_bool, check_choice, check_fraction, check_int,  # pylint: disable=unused-import
                                     check_number, section)
from fedjax_face.data import participation, partition, sources, splits
from fedjax_face.models import heads
from fedjax_face.models.conv import CONV_GRADIENTS


TASKS = ('recognition', 'anti_spoofing')
SCHEDULES = ('constant', 'step')   # learning rate by round (algorithms/common.py:lr_scale_schedule)


def base_config(task: str = 'recognition') -> ml_collections.ConfigDict:
  """The sections every run shares, defaults sized so one run finishes in a few minutes on 2 CPU
  cores (README), and those of `task` ('recognition' | 'anti_spoofing'), each from the module
  that owns it: every data source of the task (so that `--config.data.source=` moves a config
  between them), its evaluators (`eval.TASK_EVALUATORS`), and for recognition the head's loss
  (`models/heads.py`) and the public / private split (`data/splits.py`)."""
  if task not in TASKS:
    raise ValueError(f'task={task!r}; expected one of {TASKS}.')
  c = ml_collections.ConfigDict()
  c.algorithm = ''                     # a key of algorithms.ALGORITHMS, set by each config
  c.seed = 0
  c.num_rounds = 60
  c.checkpoint_every = 20      # rounds; 0 = only at the end
  c.checkpoint_every_seconds = 0.0   # also save when this long has passed since the last save
                               # (a preemptible machine loses at most that much); 0 = off
  c.checkpoint_keep = 2        # newest checkpoints kept (older ones are deleted as rounds go on)
  c.trust_unverified_checkpoints = False   # resume from a checkpoint whose digests are missing
                               # (checkpoint_digests/ deleted, or saved before they existed)
  c.init_from = ''             # a finished run's workdir whose final model starts this one, or
                               # an arcface_torch backbone file (.pth: models/arcface_torch.py)
                               # (FedFR starts from its pre-training run); '' = random init
  c.init_from_step = 0         # the round of init_from's checkpoint to start from; 0 = its final
                               # one (init_from must then be a finished run)
  c.log_every = 5              # rounds
  c.divergence_factor = 1e3    # stop when a round's training loss exceeds this times the first
                               # round's (a finite blow-up); 0 = off. Non-finite always stops.

  # The data every run shares; the source's own fields are in `c.data.<source>`
  # (`data/sources/`: a task's configs carry every source of the task).
  c.data = ml_collections.ConfigDict()
  c.data.source = sources.of_task(task)[0]   # a key of data.sources.SOURCES
  c.data.image_size = 32
  c.data.prefetch = 1                  # rounds prepared ahead in a background thread; 0 = off
  c.data.decode_threads = 0            # image decode threads; 0 = every usable CPU
  sources.add_sections(c, task)

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
  # Who takes part (data/participation.py): 'uniform' (round(C·K) without replacement) |
  # 'weighted' (by data size, without replacement) | 'availability' (client k online with its own
  # probability each round, drawn once from a Dirichlet of concentration availability_alpha
  # scaled to mean C; the cohort is up to round(C·K) of those online).
  c.federated.sampling = 'uniform'
  c.federated.availability_alpha = 1.0
  c.federated.straggler_drop = 0.0     # the slowest fraction of each cohort misses the deadline
  c.federated.speed_sigma = 0.5        # client speeds: ln s ~ N(0, sigma^2), drawn once per seed

  c.model = ml_collections.ConfigDict()
  c.model.name = 'small_cnn'           # or 'iresnet18' / 'iresnet34' (112x112, accelerators)
  c.model.width = 16
  c.model.embedding_dim = 128
  # The compute dtype (core/precision.py): 'float32' | 'bfloat16' | 'float16' (with dynamic loss
  # scaling, core/loss_scale.py) | 'auto' (float32 on CPU, bfloat16 on TPU and on GPUs with
  # bfloat16 tensor cores). Parameters, optimizer state and BatchNorm statistics stay float32.
  c.model.dtype = 'float32'

  c.optimizer = ml_collections.ConfigDict()
  c.optimizer.name = 'sgd'             # 'sgd' (momentum, coupled weight decay) | 'adam' (FedGPAD)
  c.optimizer.learning_rate = 0.1      # the initial rate (constant in FedGC)
  c.optimizer.schedule = 'constant'    # 'constant' | 'step': times decay_factor at each decay_at
  c.optimizer.decay_at = (2 / 3, 13 / 15)   # fractions of num_rounds (FedFV: 10k, 13k of 15k)
  c.optimizer.decay_factor = 0.1
  c.optimizer.momentum = 0.9
  c.optimizer.weight_decay = 5e-4
  c.optimizer.correction = 'none'      # 'fedprox' | 'scaffold' (option II): core/local_terms.py
  c.optimizer.prox_mu = 0.01           # FedProx's mu

  # The server's step on the pseudo-gradient (core/server_optimizers.py); 'fedavg' with rate 0
  # or 1 is the method's own step unchanged.
  c.server_optimizer = ml_collections.ConfigDict(dict(
      name='fedavg', learning_rate=0.0, momentum=0.9, b1=0.9, b2=0.99, tau=1e-3))
  # What a client sends, compressed (core/compression.py): 'quantize' (bits per coordinate) |
  # 'topk' (fraction of each tensor, error feedback).
  c.compression = ml_collections.ConfigDict(dict(codec='none', bits=8, fraction=0.01))
  # Pairwise-masked sums in Z_2^32 (core/secure_aggregation.py): fraction_bits of fixed point;
  # neighbors 0 = every pair (Bonawitz et al.), k = k on each side of a ring of the cohort.
  c.secure_aggregation = ml_collections.ConfigDict(dict(enabled=False, fraction_bits=24,
                                                        neighbors=0))

  c.engine = ml_collections.ConfigDict()
  c.engine.backend = 'auto'            # 'auto' | 'vmap' | 'map' | 'loop'
  c.engine.step_mode = 'auto'          # 'auto' | 'scan' | 'unroll'
  c.engine.conv_gradient = 'auto'      # 'auto' | 'xla' | 'canonical' | 'chunked' (models/conv.py:
                                       # the same gradients; canonical is fast in loops on XLA
                                       # CPU, auto = it there; chunked sums kernel gradients over
                                       # chunks of images, faster for large batches on XLA CPU,
                                       # auto = it for the IResNets elsewhere: core/policy.py)
  c.engine.cpu_convolutions = 'auto'   # 'auto' | 'ynnpack' | 'eigen': XLA CPU's convolution
                                       # library, process-wide (core/xla_flags.py; auto = eigen
                                       # for the IResNets, ynnpack otherwise: core/policy.py)
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
  c.dp.allow_sigma_increase = False    # an extension (more num_rounds) may run its new rounds
                                       # at a higher noise multiplier than the rounds before
                                       # (run/noise.py refuses it otherwise)
  c.dp.noise_seed = 'config'           # where the noise comes from: 'config' = keys of
                                       # config.seed (recorded, so epsilon holds only while it
                                       # is secret; resumes bit for bit) | 'os' = XORed with a
                                       # secret from the OS, new at every start (core/privacy.py)
  c.dp.class_rows = 'private'          # a client's own class rows (FedGC's W_k): 'private' =
                                       # clipped and noised with the rest | 'unprotected' = sent
                                       # as they are, outside epsilon
  c.dp.clip_rule = 'fixed'             # 'fixed': clip at clip_norm | 'adaptive': the clip
                                       # starts at clip_norm and follows a quantile of the update
                                       # norms (Andrew et al. 2021; core/privacy.py)
  c.dp.target_quantile = 0.5           # adaptive: gamma, the share of clients left unclipped
  c.dp.clip_learning_rate = 0.2        # adaptive: eta_C of C <- C exp(-eta_C (b - gamma))
  c.dp.count_noise_multiplier = 5.0    # adaptive: sigma_b, std of the noise on the count of
                                       # clients under the clip (> noise_multiplier / 2; the
                                       # paper suggests cohort size / 20)

  c.eval = ml_collections.ConfigDict()
  c.eval.every_rounds = 0              # 0 = only after the last round
  c.eval.batch_size = 256
  # Evaluators by type (eval/__init__.py:EVALUATORS); each present section runs, with its settings.
  c.evals = ml_collections.ConfigDict()
  eval_lib.add_sections(c, task)
  if task == 'recognition':   # the recognition task's own sections: its loss, and FedFR's split
    splits.add_fields(c.data)
    c.head = heads.config_section()
  return c


def runlocal(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a config to seconds on CPU, for tests (`get_config('runlocal')`)."""
  c.num_rounds = 2
  c.checkpoint_every = 1
  c.log_every = 1
  if 'synthetic' in c.data:
    c.data.synthetic.num_identities = 16
    c.data.synthetic.images_per_identity = 6
    c.data.synthetic.num_test_identities = 12
    c.data.synthetic.num_pairs = 100
  c.data.image_size = 16
  c.federated.num_clients = 4
  c.federated.local_steps = 2
  c.federated.batch_size = 8
  c.model.width = 4
  c.model.embedding_dim = 16
  c.eval.batch_size = 64
  if 'identification' in c.evals:
    c.evals.identification.update(num_enrolled=8, num_distractors=16, num_non_mated=10)
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


def _check_data(c: ml_collections.ConfigDict) -> None:
  """The shared fields of `c.data`; the split's and the source's own section are checked by
  their modules."""
  d = c.data
  check_int('data.image_size', d.image_size)
  for name in ('prefetch', 'decode_threads'):
    check_int(f'data.{name}', d[name], allow_zero=True)
  if 'public_identities' in d:
    splits.check_config(c)
  if not isinstance(c.init_from, str):
    raise ValueError(f'config.init_from={c.init_from!r}; expected a workdir path, an '
                     "arcface_torch backbone file (.pth or .onnx) or ''.")
  sources.check_config(c)


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
  check_int('federated.local_steps', fl.local_steps)
  check_number('federated.local_epochs', fl.local_epochs, allow_zero=True)
  check_int('federated.batch_size', fl.batch_size)
  check_choice('federated.client_optimizer_state', fl.client_optimizer_state, ('reset', 'keep'))
  check_choice('federated.sampling', fl.sampling, participation.SAMPLINGS)
  check_number('federated.availability_alpha', fl.availability_alpha)
  if not isinstance(fl.straggler_drop, (int, float)) or not 0 <= fl.straggler_drop < 1:
    raise ValueError(f'config.federated.straggler_drop={fl.straggler_drop!r}; expected a '
                     'fraction in [0, 1) of each cohort to drop.')
  check_number('federated.speed_sigma', fl.speed_sigma, allow_zero=True)
  check_bool('federated.balanced_classes', fl.balanced_classes)


def _check_model_and_head(c: ml_collections.ConfigDict) -> None:
  check_int('model.embedding_dim', c.model.embedding_dim)
  check_compute_dtype(c.model.dtype)
  if 'head' in c:
    heads.check_config(c)


def check_compute_dtype(name) -> None:
  """`model.dtype` is one of `core.precision.CHOICES`. float16 trains under dynamic loss scaling
  in every method's local step (core/loss_scale.py); with subject-level DP-SGD it is refused by
  `algorithms.pad_dp_sgd.check_config`."""
  check_choice('model.dtype', name, precision.CHOICES)


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
  check_choice('optimizer.correction', c.optimizer.correction, local_terms.KINDS)
  check_number('optimizer.prox_mu', c.optimizer.prox_mu, allow_zero=True)


def _check_blocks(c: ml_collections.ConfigDict) -> None:
  so = c.server_optimizer
  check_choice('server_optimizer.name', so.name, server_optimizers.OPTIMIZERS)
  check_number('server_optimizer.learning_rate', so.learning_rate, allow_zero=True)
  check_number('server_optimizer.tau', so.tau)
  for name in ('momentum', 'b1', 'b2'):
    if not isinstance(so[name], (int, float)) or not 0 <= so[name] < 1:
      raise ValueError(f'config.server_optimizer.{name}={so[name]!r}; expected a number in '
                       '[0, 1).')
  check_choice('compression.codec', c.compression.codec, compression.CODECS)
  check_choice('compression.bits', c.compression.bits, compression.BITS)
  check_fraction('compression.fraction', c.compression.fraction)
  sa = c.secure_aggregation
  check_bool('secure_aggregation.enabled', sa.enabled)
  if not isinstance(sa.fraction_bits, int) or not 1 <= sa.fraction_bits <= 30:
    raise ValueError(f'config.secure_aggregation.fraction_bits={sa.fraction_bits!r}; expected '
                     'an integer from 1 to 30 (fixed point in 32 bits).')
  check_int('secure_aggregation.neighbors', sa.neighbors, allow_zero=True)


def _check_engine(c: ml_collections.ConfigDict) -> None:
  e = c.engine
  check_choice('engine.backend', e.backend, ('auto',) + engine.BACKENDS)
  check_choice('engine.step_mode', e.step_mode, ('auto',) + local.STEP_MODES)
  check_choice('engine.conv_gradient', e.conv_gradient, ('auto',) + CONV_GRADIENTS)
  check_choice('engine.cpu_convolutions', e.cpu_convolutions,
               ('auto',) + xla_flags.CPU_CONVOLUTIONS)
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
  check_choice('dp.noise_seed', d.noise_seed, privacy.NOISE_SEEDS)
  check_number('dp.target_epsilon', d.target_epsilon, allow_zero=True)
  check_bool('dp.allow_sigma_increase', d.allow_sigma_increase)
  check_choice('dp.clip_rule', d.clip_rule, privacy.CLIP_RULES)
  if not isinstance(d.target_quantile, float) or not 0 < d.target_quantile < 1:
    raise ValueError(f'config.dp.target_quantile={d.target_quantile!r}; expected a number in '
                     '(0, 1) (the share of clients whose update the clip leaves whole).')
  check_number('dp.clip_learning_rate', d.clip_learning_rate)
  check_number('dp.count_noise_multiplier', d.count_noise_multiplier)
  if d.enabled and d.clip_rule == 'adaptive' and not d.target_epsilon:
    privacy.update_noise_multiplier(d.noise_multiplier, d.count_noise_multiplier)
  if d.enabled and c.federated.sampling == 'weighted':
    raise ValueError("config.federated.sampling='weighted' with dp.enabled: the cohort would be "
                     "drawn by the clients' data sizes, which DP must not reveal; expected "
                     "'uniform' (amplified) or 'availability' (data-independent, not amplified).")
  if d.enabled and c.federated.straggler_drop:
    raise ValueError(f'config.federated.straggler_drop={c.federated.straggler_drop} with '
                     'dp.enabled: who misses the deadline depends on the data size, which DP '
                     'must not reveal; expected 0.')


def validate(c: ml_collections.ConfigDict) -> None:
  """Raises ValueError naming the first shared field that is wrong and what was expected.

  The method's own section is checked by its module (`algorithms.check_config`), each
  evaluator's by the evaluator (`eval.check_config`).
  """
  if not isinstance(c.algorithm, str) or not c.algorithm:
    raise ValueError(f'config.algorithm={c.algorithm!r}; expected a method name (each file in '
                     'configs/ sets it).')
  check_int('seed', c.seed, allow_zero=True)
  check_int('num_rounds', c.num_rounds)
  for name in ('checkpoint_every', 'log_every'):
    check_int(name, c[name], allow_zero=True)
  check_number('divergence_factor', c.divergence_factor, allow_zero=True)
  check_number('checkpoint_every_seconds', c.checkpoint_every_seconds, allow_zero=True)
  check_int('init_from_step', c.init_from_step, allow_zero=True)
  if c.init_from_step and not c.init_from:
    raise ValueError(f'config.init_from_step={c.init_from_step} without config.init_from; '
                     'expected the run it names a round of (config.init_from=<workdir>).')
  check_int('checkpoint_keep', c.checkpoint_keep)
  check_bool('trust_unverified_checkpoints', c.trust_unverified_checkpoints)
  _check_federated(c)   # first: the data source's checks compare against its fields
  _check_data(c)
  _check_model_and_head(c)
  _check_optimizer(c)
  _check_engine(c)
  _check_dp(c)
  _check_blocks(c)
  check_int('eval.every_rounds', c.eval.every_rounds, allow_zero=True)
  check_int('eval.batch_size', c.eval.batch_size)
