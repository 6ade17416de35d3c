r"""Throughput of the round engine against the ways peers run clients, all on the same machine.

    python -m fedjax_face.tools.bench --config=configs/bench.py --out=/tmp/bench

Prints markdown tables and writes `<out>/bench.json` (every figure, the config and the platform).
Sections (keys of bench.json; `bench.sections` picks them):

  rounds       (a) images/s of a FedPE round through `core.engine.RoundEngine` for every backend
               (vmap, map at each width, loop) x local-step mode (scan, unroll), per cohort
               (FedGC-like, FedFV-like, large), on padded round data from `data.federated`;
               (b) the same clients as a Python loop over clients and steps calling one jitted
               local step, then the weighted average (how fedjax and pfl-research run clients);
               (c) centralized training on the same images: each local step's K client batches
               concatenated into one batch of K·B over all the cohort's classes.
  regularizer  (d) FedGC's server step vs the number of classes (`bench_regularizer.bench_row`).
  eval         (e) backbone embeddings/s in eval mode; the 10-fold verification protocol's time.
  scaling      (f) the best non-loop combination with the clients axis over 1, 2, 4, ... devices.

How figures are taken (`timing.measure`): each call's result is blocked on (`jax.block_until_ready`);
`warmup` untimed calls come first, the first of them traces and compiles; then up to `repeats`
timed calls, stopped early once they pass `max_timed_s`; the median is the steady-state figure and
`compile_s` is the first call's time minus that median. Round inputs arrive as host numpy arrays,
as `federated.sample_round` hands them to the engine in a run, so host-to-device copies are part of
every round; drawing the batches is not. Images per round count only real clients' valid samples
(from the round's sample mask), never the padding clients of a padded cohort.

Sizes and what is skipped live in `configs/bench.py`; skipped combinations appear in bench.json with
`status: skipped` and the reason.
"""

import dataclasses
import fnmatch
import functools
import json
import os
import platform
import re
import time
from typing import Any, Callable

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
from ml_collections import config_flags

from fedjax_face import algorithms, config_lib, models
from fedjax_face.algorithms import common, fedgc
from fedjax_face.core import aggregation, local, policy, xla_flags
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated, preprocess, stores
from fedjax_face.eval.recognition import verification
from fedjax_face.proj.fedgc import bench_regularizer
from fedjax_face.tools.timing import measure

SECTIONS = ('rounds', 'regularizer', 'eval', 'scaling')
COHORT_FIELDS = ('num_clients', 'cohort_size', 'identities_per_client', 'images_per_identity',
                 'local_steps', 'batch_size')
CPU_SKIP_REASON = ('XLA CPU runs convolutions inside while loops (scanned steps, lax.map over '
                   'client groups) ~18x slower than straight-line code (REFERENCE_NOTES §9)')


# -- measurement helpers ---------------------------------------------------------------------------


def per_second(count: float, seconds: float) -> float:
  """`count / seconds`; a zero time (a clock too coarse for the call) is an error, not infinity."""
  if not seconds > 0:
    raise ValueError(f'measured {seconds} s for {count} items; cannot form a rate.')
  return float(count) / seconds


def platform_info() -> dict:
  """What the figures were measured on (they mean nothing without it)."""
  import jaxlib  # pylint: disable=g-import-not-at-top
  devices = jax.devices()
  return {
      'backend': jax.default_backend(),
      'device_kind': devices[0].device_kind,
      'device_count': jax.device_count(),
      'local_device_count': jax.local_device_count(),
      'jax_version': jax.__version__,
      'jaxlib_version': jaxlib.__version__,
      'python_version': platform.python_version(),
      'cpu_count': os.cpu_count(),
      'usable_cpus': len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else None,
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
      # A shared machine's other jobs skew every figure; the load says how much to trust them.
      'load_average_1min': os.getloadavg()[0] if hasattr(os, 'getloadavg') else None,
  }


# -- config ----------------------------------------------------------------------------------------


def variant_name(backend: str, width: int | None = None) -> str:
  """How a backend is written in names and skip patterns: 'vmap', 'map<width>', and 'loop' (one
  client at a time) or 'loop<threads>' (that many clients at once on host threads)."""
  if backend == 'map' or (backend == 'loop' and width and width > 1):
    return f'{backend}{width}'
  return backend


def parse_variant(name: str) -> tuple[str, int | None]:
  """Inverse of `variant_name`: 'map8' -> ('map', 8), 'loop2' -> ('loop', 2), 'vmap' -> ('vmap',
  None)."""
  match = re.fullmatch(r'(map|loop)([1-9][0-9]*)', name)
  if match:
    return match.group(1), int(match.group(2))
  if name in ('vmap', 'loop'):
    return name, None
  raise ValueError(f'backend {name!r}; expected vmap, loop, loop<threads> (e.g. loop2) or '
                   'map<width> (e.g. map8).')


def loop_thread_counts(bench) -> list[int]:
  """`bench.loop_threads` with 0 read as the usable CPUs (what `engine.loop_threads=0` picks on
  CPU), repeats dropped."""
  counts = [int(t) or stores.usable_cpus() for t in bench.loop_threads]
  return list(dict.fromkeys(counts))


def backend_variants(bench) -> list[tuple[str, int | None]]:
  """(backend, width) pairs of section (a): 'map' once per width of `bench.map_widths`, 'loop'
  once per thread count of `bench.loop_threads` (width None = one thread)."""
  out = []
  for backend in bench.backends:
    if backend == 'map':
      out.extend(('map', int(w)) for w in bench.map_widths)
    elif backend == 'loop':
      out.extend(('loop', t if t > 1 else None) for t in loop_thread_counts(bench))
    else:
      out.append((backend, None))
  return out


def combination_name(cohort: str, backend: str, width: int | None, step_mode: str) -> str:
  """'<cohort>/<backend>/<step mode>', the key skip patterns match."""
  return f'{cohort}/{variant_name(backend, width)}/{step_mode}'


def skip_reason(bench, name: str, platform_name: str) -> str | None:
  """Why combination `name` is not run, or None to run it."""
  for pattern in bench.skip:
    if fnmatch.fnmatchcase(name, pattern):
      return f'matches bench.skip pattern {pattern!r}'
  if platform_name == 'cpu':
    for pattern in bench.skip_on_cpu:
      if fnmatch.fnmatchcase(name, pattern):
        return f'matches bench.skip_on_cpu pattern {pattern!r}: {CPU_SKIP_REASON}'
  return None


def _positive_int(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f'config.{name}={value!r}; expected a positive integer.')


def _tuple_of(name: str, value, choices=None, *, allow_empty: bool = False) -> None:
  if isinstance(value, str) or not isinstance(value, (tuple, list)):
    raise ValueError(f'config.{name}={value!r}; expected a tuple, e.g. '
                     f'"{tuple(choices or ())!r}".')
  if not value and not allow_empty:
    raise ValueError(f'config.{name} is empty; expected at least one of {tuple(choices or ())}.')
  if len(set(value)) != len(value):
    raise ValueError(f'config.{name}={tuple(value)!r} repeats an entry; expected distinct ones.')
  if choices is not None:
    for item in value:
      if item not in choices:
        raise ValueError(f'config.{name} has {item!r}; expected entries from {tuple(choices)}.')


def parse_combination(name: str) -> tuple[str, int | None, str]:
  """'map8/scan' -> ('map', 8, 'scan'); the form of `bench.scaling.combination`."""
  variant, _, step_mode = name.partition('/')
  if step_mode not in local.STEP_MODES:
    raise ValueError(f'combination {name!r}; expected <backend>/<step mode> with step mode one of '
                     f'{local.STEP_MODES}, e.g. vmap/scan.')
  backend, width = parse_variant(variant)
  return backend, width, step_mode


def scaling_device_counts(bench, visible: int) -> list[int]:
  """`bench.scaling.device_counts`, or 1, 2, 4, ... up to `visible` and `visible` itself."""
  if bench.scaling.device_counts:
    return [int(n) for n in bench.scaling.device_counts]
  counts = [1 << i for i in range(visible.bit_length()) if 1 << i <= visible]
  return counts if counts[-1] == visible else counts + [visible]


def validate(config, num_devices: int | None = None) -> None:
  """Raises ValueError naming the first bad `config.bench` field (and the experiment fields)."""
  config_lib.validate(config)
  if config.algorithm != 'fedpe':
    raise ValueError(f'config.algorithm={config.algorithm!r}; the bench runs FedPE (its sequential '
                     "baseline mirrors FedPE's local step): expected 'fedpe'.")
  if config.fedpe.fixed_class_embeddings:
    raise ValueError('config.fedpe.fixed_class_embeddings=True; the bench expects False (its '
                     'sequential baseline trains the class embeddings, as FedPE does).')
  b = config.bench
  _tuple_of('bench.sections', b.sections, SECTIONS)
  _tuple_of('bench.backends', b.backends, engine_lib.BACKENDS)
  _tuple_of('bench.step_modes', b.step_modes, local.STEP_MODES)
  if 'map' in b.backends:
    _tuple_of('bench.map_widths', b.map_widths)
    for w in b.map_widths:
      _positive_int('bench.map_widths[...]', w)
  if 'loop' in b.backends:
    _tuple_of('bench.loop_threads', b.loop_threads)
    for t in b.loop_threads:
      if isinstance(t, bool) or not isinstance(t, int) or t < 0:
        raise ValueError(f'config.bench.loop_threads has {t!r}; expected non-negative integers '
                         '(0 = the usable CPUs).')
  for name in ('warmup', 'repeats'):
    _positive_int(f'bench.{name}', b[name])
  if isinstance(b.max_timed_s, bool) or not isinstance(b.max_timed_s, (int, float)) or not (
      b.max_timed_s > 0):
    raise ValueError(f'config.bench.max_timed_s={b.max_timed_s!r}; expected a positive number of '
                     'seconds.')
  for field in ('skip', 'skip_on_cpu'):
    _tuple_of(f'bench.{field}', b[field], allow_empty=True)
    for pattern in b[field]:
      if not isinstance(pattern, str) or pattern.count('/') != 2:
        raise ValueError(f'config.bench.{field} has {pattern!r}; expected a pattern '
                         "'<cohort>/<backend>/<step mode>', e.g. 'large/map8/scan' or '*/*/scan'.")
  _tuple_of('bench.run_cohorts', b.run_cohorts, tuple(b.cohorts.keys()))
  for name in b.run_cohorts:
    spec = b.cohorts[name]
    for field in COHORT_FIELDS:
      if field not in spec:
        raise ValueError(f'config.bench.cohorts.{name} has no field {field!r}; expected all of '
                         f'{COHORT_FIELDS}.')
      _positive_int(f'bench.cohorts.{name}.{field}', spec[field])
    if spec.cohort_size > spec.num_clients:
      raise ValueError(f'config.bench.cohorts.{name}.cohort_size={spec.cohort_size} exceeds its '
                       f'num_clients={spec.num_clients}; expected at most num_clients.')
  r = b.regularizer
  _tuple_of('bench.regularizer.classes', r.classes)
  for n in r.classes:
    _positive_int('bench.regularizer.classes[...]', n)
  for field in ('dim', 'block', 'classes_per_client', 'repeats'):
    _positive_int(f'bench.regularizer.{field}', r[field])
  _positive_int('bench.eval.batch_size', b.eval.batch_size)
  _positive_int('bench.eval.num_folds', b.eval.num_folds)
  if b.eval.num_folds < 2:
    raise ValueError(f'config.bench.eval.num_folds={b.eval.num_folds}; expected at least 2.')
  _positive_int('bench.eval.num_pairs', b.eval.num_pairs)
  if b.eval.num_pairs % (2 * b.eval.num_folds):
    raise ValueError(f'config.bench.eval.num_pairs={b.eval.num_pairs}; expected a multiple of '
                     f'2 x bench.eval.num_folds = {2 * b.eval.num_folds} (equal folds, half '
                     'genuine).')
  s = b.scaling
  if 'scaling' in b.sections:
    if s.cohort not in b.run_cohorts:
      raise ValueError(f'config.bench.scaling.cohort={s.cohort!r}; expected one of '
                       f'bench.run_cohorts {tuple(b.run_cohorts)}.')
    width = None
    if s.combination == 'best':
      if 'rounds' not in b.sections:
        raise ValueError("config.bench.scaling.combination='best' needs 'rounds' in "
                         'bench.sections; otherwise name one, e.g. vmap/scan.')
    else:
      try:
        backend, width, _ = parse_combination(s.combination)
      except ValueError as e:
        raise ValueError(f'config.bench.scaling.combination: {e}') from None
      if backend == 'loop':
        raise ValueError(f'config.bench.scaling.combination={s.combination!r}; the loop backend '
                         'runs on one device: expected vmap/<mode> or map<width>/<mode>.')
    _tuple_of('bench.scaling.device_counts', s.device_counts, allow_empty=True)
    visible = jax.device_count() if num_devices is None else num_devices
    for n in s.device_counts:
      _positive_int('bench.scaling.device_counts[...]', n)
      if n > visible:
        raise ValueError(f'config.bench.scaling.device_counts has {n} but {visible} devices are '
                         f'visible; expected counts from 1 to {visible}.')
      if width is not None and width % n:
        raise ValueError(f'config.bench.scaling.device_counts has {n}, which does not divide the '
                         f'map width {width} of bench.scaling.combination={s.combination!r}: each '
                         'group of clients must split evenly over the devices.')


# -- the problems ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Problem:
  """One cohort's federated data and the clients a round selects (unpadded)."""
  name: str
  spec: Any
  fed: federated.FederatedData
  cohort: np.ndarray


def make_problem(name: str, spec, image_size: int, seed: int) -> Problem:
  """Random uint8 images split over `spec.num_clients` clients of equal identity counts.

  Random pixels cost the same to train on as faces; rendering 10^4 synthetic faces would cost more
  than the bench itself. The cohort is `federated.select_clients` of round 0.
  """
  per_client, per_identity = spec.identities_per_client, spec.images_per_identity
  num_identities = spec.num_clients * per_client
  rng = np.random.default_rng([seed, 0xbe4c])
  images = rng.integers(0, 256, size=(num_identities * per_identity, image_size, image_size, 3),
                        dtype=np.uint8)
  labels = np.repeat(np.arange(num_identities, dtype=np.int32), per_identity)
  clients = [np.arange(k * per_client, (k + 1) * per_client, dtype=np.int32)
             for k in range(spec.num_clients)]
  fed = federated.build(images, labels, clients)
  cohort = federated.select_clients(spec.num_clients, spec.cohort_size / spec.num_clients, 0, seed)
  if len(cohort) != spec.cohort_size:   # round(C·K) must give back the configured size
    raise ValueError(f'bench.cohorts.{name}: selected {len(cohort)} clients, expected '
                     f'{spec.cohort_size}.')
  return Problem(name, spec, fed, cohort)


def round_inputs(problem: Problem, multiple: int, seed: int):
  """(client ids padded to `multiple`, weights n_k (0 for padding), round data) of round 0."""
  fed, spec = problem.fed, problem.spec
  ids = federated.pad_cohort(problem.cohort, multiple, fed.num_clients)
  real = ids < fed.num_clients
  weights = np.where(real, fed.num_examples[np.minimum(ids, fed.num_clients - 1)], 0)
  data = federated.sample_round(fed, ids, round_index=0, seed=seed, steps=spec.local_steps,
                                batch_size=spec.batch_size)
  return ids, weights.astype(np.float32), data


def images_per_round(client_ids: np.ndarray, data: dict, num_clients: int) -> int:
  """Valid training samples of the real clients (padding clients' rows are all masked anyway)."""
  return int(data['mask'][client_ids < num_clients].sum())


# -- (b), (c): the one-step baselines ------------------------------------------------------------


def make_local_step(config, model) -> tuple[Callable, Callable]:
  """(jitted `step((params, batch_stats, opt_state), batch) -> (carry, loss)`, jitted opt init).

  FedPE's local step (`common.local_step`, the one the engine's clients run) on its own, so a
  Python loop can drive it the way fedjax and pfl-research run clients. `params` is
  {'backbone', 'W'}; `batch` holds one step's `images` [B, H, W, 3] uint8, `labels`, `mask` [B],
  the client's `class_mask` [C] and the step's `rng`.
  """
  optimizer = common.make_optimizer(config.optimizer)
  one_step = common.local_step(model, head_kwargs=common.head_kwargs(config), optimizer=optimizer)

  def step(carry, batch):
    return one_step(carry, batch, batch['class_mask'])

  return jax.jit(local.skip_if_empty(step)), jax.jit(optimizer.init)


@functools.partial(jax.jit, static_argnums=2)
def _client_step_keys(round_rng, client_id, num_steps: int):
  """The engine's client key (fold_in of the id) split per step, as `local_trainer` does."""
  return jax.random.split(jax.random.fold_in(round_rng, client_id), num_steps)


_weighted_mean = jax.jit(aggregation.weighted_mean)


def sequential_round(step: Callable, init_opt: Callable, server_model, class_embeddings,
                     client_ids: np.ndarray, weights: np.ndarray, data: dict, rng: jax.Array):
  """One FedPE round as a Python loop over clients, each a Python loop of jitted steps.

  Args:
    step, init_opt: from `make_local_step`.
    server_model: the broadcast backbone variables ({'params', 'batch_stats'}).
    class_embeddings: every client's W stacked `[K, C_max, d]` (FedPE's private state).
    client_ids, weights, data: the round (`round_inputs`); padding clients are skipped, as their
      weight is 0.
    rng: the round's key (client k's steps use the engine's `fold_in(rng, k)` split per step).

  Returns:
    (weighted mean of the client backbones, list of the real clients' new W).
  """
  models_out, ws = [], []
  real = [row for row, k in enumerate(client_ids) if k < len(class_embeddings)]
  for row in real:
    k = int(client_ids[row])
    params = {'backbone': server_model['params'], 'W': class_embeddings[k]}
    carry = (params, server_model.get('batch_stats', {}), init_opt(params))
    num_steps = data['images'].shape[1]
    keys = _client_step_keys(rng, k, num_steps)
    for s in range(num_steps):
      batch = {'images': data['images'][row, s], 'labels': data['labels'][row, s],
               'mask': data['mask'][row, s], 'class_mask': data['class_mask'][row],
               'rng': keys[s]}
      carry, _ = step(carry, batch)
    params, batch_stats, _ = carry
    variables = {'params': params['backbone']}
    if batch_stats:
      variables['batch_stats'] = batch_stats
    models_out.append(variables)
    ws.append(params['W'])
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *models_out)
  return _weighted_mean(stacked, jnp.asarray(weights[real])), ws


def centralized_batches(client_ids: np.ndarray, data: dict, num_clients: int,
                        rng: jax.Array) -> list[dict]:
  """Per local step, the real clients' batches concatenated into one of K·B samples.

  Labels become indices into the cohort's classes laid end to end (client row r's local class c is
  r·C_max + c), so one head over all of them is a softmax over every identity of the cohort, the
  "global optimization" of centralized training.
  """
  real = client_ids < num_clients
  images, labels, mask = data['images'][real], data['labels'][real], data['mask'][real]
  class_mask = data['class_mask'][real]
  num_rows, max_classes = class_mask.shape
  labels = labels + (np.arange(num_rows, dtype=np.int32) * max_classes)[:, None, None]
  keys = jax.random.split(rng, images.shape[1])
  return [{'images': images[:, s].reshape((-1,) + images.shape[3:]),
           'labels': labels[:, s].reshape(-1), 'mask': mask[:, s].reshape(-1),
           'class_mask': class_mask.reshape(-1), 'rng': keys[s]}
          for s in range(images.shape[1])]


def centralized_round(step: Callable, carry, batches: list[dict]):
  """S jitted steps of batch K·B; returns the final carry."""
  for batch in batches:
    carry, _ = step(carry, batch)
  return carry


# -- (a) + (b) + (c) per cohort -------------------------------------------------------------------


def measured(row: dict, images: int, timed: dict) -> dict:
  """A result row: `row`'s labels, the images one call trains on, its rate and its timings."""
  return {**row, 'status': 'measured', 'images_per_round': images,
          'images_per_s': per_second(images, timed['median_s']), **timed}


def bench_backend(algorithm, problem: Problem, state, rng, backend: str, width: int | None,
                  round_in: Callable, timing: dict, mesh=None) -> dict:
  """One combination: `RoundEngine.run_round` on the cohort padded as the engine needs it
  (section (a) on one device; section (f) with the clients axis over `mesh`). `width` is the map
  width or the loop's threads (None: the engine's default)."""
  width_arg = {}
  if width is not None:
    width_arg = {'loop_threads': width} if backend == 'loop' else {'map_width': width}
  eng = engine_lib.RoundEngine(algorithm, backend=backend, mesh=mesh, **width_arg)
  ids, weights, data = round_in(eng.cohort_multiple())
  timed = measure(eng.run_round, state, ids, weights, data, rng, **timing)
  return measured({'padded_cohort': len(ids)},
                  images_per_round(ids, data, problem.fed.num_clients), timed)


def bench_sequential(config, model, problem: Problem, state, rng, round_in: Callable,
                     timing: dict) -> dict:
  """Section (b): `sequential_round` over the unpadded cohort."""
  ids, weights, data = round_in(1)
  step, init_opt = make_local_step(config, model)
  timed = measure(sequential_round, step, init_opt, state.server['model'], state.clients['W'],
                  ids, weights, data, rng, **timing)
  return measured({'name': f'{problem.name}/sequential'},
                  images_per_round(ids, data, problem.fed.num_clients), timed)


def bench_centralized(config, model, problem: Problem, state, rng, round_in: Callable,
                      timing: dict) -> dict:
  """Section (c): S steps of the cohort's batches concatenated, one head over all its classes."""
  ids, _, data = round_in(1)
  batches = centralized_batches(ids, data, problem.fed.num_clients, rng)
  w = state.clients['W'][ids[ids < problem.fed.num_clients]]
  server_model = state.server['model']
  params = {'backbone': server_model['params'], 'W': w.reshape((-1, w.shape[-1]))}
  step, init_opt = make_local_step(config, model)
  carry = (params, server_model.get('batch_stats', {}), init_opt(params))
  timed = measure(centralized_round, step, carry, batches, **timing)
  row = {'name': f'{problem.name}/centralized', 'batch_size': int(batches[0]['images'].shape[0]),
         'steps': len(batches), 'classes': int(batches[0]['class_mask'].sum())}
  return measured(row, int(sum(batch['mask'].sum() for batch in batches)), timed)


def best_and_ratios(result: dict) -> tuple[dict | None, dict | None]:
  """The fastest measured combination of a cohort and its rate over the two baselines."""
  rows = [r for r in result['backends'] if r['status'] == 'measured']
  if not rows:
    return None, None
  best = max(rows, key=lambda r: r['images_per_s'])
  return ({'name': best['name'], 'images_per_s': best['images_per_s']},
          {'best_over_sequential': best['images_per_s'] / result['sequential']['images_per_s'],
           'best_over_centralized': best['images_per_s'] / result['centralized']['images_per_s']})


def bench_cohort(config, model, problem: Problem, platform_name: str, log=print) -> dict:
  """Sections (a)-(c) for one cohort: every backend x step mode, then the two baselines.

  Every call starts from the same initial state, key and round data, so each does the same work.
  """
  b, seed = config.bench, config.seed

  @functools.cache
  def algorithm(mode: str, conv_gradient: str):
    backbone = models.build_backbone(config.model, conv_gradient=conv_gradient)
    return algorithms.get('fedpe').build(config, backbone, problem.fed, step_mode=mode)

  # Neither the step mode nor the conv gradient changes the parameters: one initial state.
  state = algorithms.get('fedpe').build(config, model, problem.fed, step_mode='unroll').init(
      jax.random.PRNGKey(seed))
  rng = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
  round_in = functools.cache(lambda multiple: round_inputs(problem, multiple, seed))
  timing = dict(warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  ids, _, data = round_in(1)
  out = {'cohort': {**problem.spec.to_dict(),
                    'images_per_round': images_per_round(ids, data, problem.fed.num_clients),
                    'classes': int(problem.fed.class_mask[problem.cohort].sum())},
         'backends': []}
  for backend, width in backend_variants(b):
    for mode in b.step_modes:
      name = combination_name(problem.name, backend, width, mode)
      conv_gradient = policy.conv_gradient_for(config, backend, mode, platform_name)
      row = {'name': name, 'backend': backend, 'step_mode': mode, 'conv_gradient': conv_gradient,
             'map_width': width if backend == 'map' else None,
             'loop_threads': (width or 1) if backend == 'loop' else None}
      reason = skip_reason(b, name, platform_name)
      if reason:
        out['backends'].append({**row, 'status': 'skipped', 'reason': reason})
        log(f'{name}: skipped ({reason})')
        continue
      row.update(bench_backend(algorithm(mode, conv_gradient), problem, state, rng, backend, width,
                               round_in, timing))
      out['backends'].append(row)
      log(f"{name}: {row['images_per_s']:,.0f} images/s")
  for key, fn in (('sequential', bench_sequential), ('centralized', bench_centralized)):
    out[key] = fn(config, model, problem, state, rng, round_in, timing)
    log(f"{problem.name}/{key}: {out[key]['images_per_s']:,.0f} images/s")
  out['best'], out['ratios'] = best_and_ratios(out)
  return out


# -- (d), (e), (f) ---------------------------------------------------------------------------------


def bench_regularizer_section(config, log=print) -> list[dict]:
  """`bench_regularizer.bench_row` per class count, dense timed too, in the config's form."""
  r = config.bench.regularizer
  rows = []
  for num_classes in r.classes:
    rows.append(bench_regularizer.bench_row(
        int(num_classes), r.dim, r.block, classes_per_client=r.classes_per_client,
        repeats=r.repeats, time_max_classes=r.time_max_classes,
        dense_max_classes=r.dense_max_classes, time_dense=True,
        **fedgc.regularizer_kwargs(config)))
    log(f'regularizer R={num_classes} done')
  return rows


def bench_eval(config, model, log=print) -> dict:
  """Embeddings/s of the backbone in eval mode, and the verification protocol's time."""
  b, size = config.bench, config.data.image_size
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed), (size, size, 3))
  embed = jax.jit(lambda v, x: model.apply(v, x, train=False))
  rng = np.random.default_rng(config.seed)
  images = rng.integers(0, 256, size=(b.eval.batch_size, size, size, 3), dtype=np.uint8)
  x = jax.device_put(preprocess.normalize(images))
  timed = measure(embed, variables, x, warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  # The protocol is host numpy over pair distances: its time depends on the pair count only.
  num_pairs = b.eval.num_pairs
  embeddings = rng.normal(size=(2 * num_pairs, config.model.embedding_dim)).astype(np.float32)
  embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
  issame = np.arange(num_pairs) % 2 == 0
  protocol = measure(functools.partial(verification.evaluate_pairs, num_folds=b.eval.num_folds),
                     embeddings, issame, warmup=b.warmup, repeats=b.repeats,
                     budget_s=b.max_timed_s)
  out = {'batch_size': b.eval.batch_size,
         'embeddings_per_s': per_second(b.eval.batch_size, timed['median_s']),
         'embed': timed,
         'verification': {'num_pairs': num_pairs, 'num_folds': b.eval.num_folds,
                          'seconds': protocol['median_s'], **protocol}}
  log(f"eval: {out['embeddings_per_s']:,.0f} embeddings/s; protocol on {num_pairs} pairs "
      f"{protocol['median_s']:.3f} s")
  return out


def best_parallel_combination(cohort_result: dict) -> str | None:
  """The fastest measured non-loop 'backend/mode' of a cohort's section (a), or None."""
  rows = [r for r in cohort_result['backends']
          if r['status'] == 'measured' and r['backend'] != 'loop']
  if not rows:
    return None
  best = max(rows, key=lambda r: r['images_per_s'])
  return f"{variant_name(best['backend'], best['map_width'])}/{best['step_mode']}"


def bench_scaling(config, problem: Problem, combination: str | None, log=print) -> dict:
  """One combination with the clients axis over 1, 2, 4, ... of the visible devices."""
  b = config.bench
  visible = jax.device_count()
  out = {'cohort': problem.name, 'combination': combination, 'visible_devices': visible,
         'rows': []}
  counts = scaling_device_counts(b, visible)
  if combination is None:
    out['rows'] = [{'devices': n, 'status': 'skipped',
                    'reason': 'no non-loop combination was measured in section rounds'}
                   for n in counts]
    return out
  backend, width, mode = parse_combination(combination)
  backbone = models.build_backbone(
      config.model, conv_gradient=policy.conv_gradient_for(config, backend, mode))
  alg = algorithms.get('fedpe').build(config, backbone, problem.fed, step_mode=mode)
  state = alg.init(jax.random.PRNGKey(config.seed))
  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  round_in = functools.cache(lambda multiple: round_inputs(problem, multiple, config.seed))
  timing = dict(warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  for n in counts:
    if width is not None and width % n:
      out['rows'].append({'devices': n, 'status': 'skipped',
                          'reason': f'map width {width} is not a multiple of {n} devices'})
      continue
    out['rows'].append({'devices': n, **bench_backend(alg, problem, state, rng, backend, width,
                                                      round_in, timing,
                                                      mesh=engine_lib.make_mesh(n))})
    log(f"scaling {combination}, devices={n}: {out['rows'][-1]['images_per_s']:,.0f} images/s")
  return out


# -- report ----------------------------------------------------------------------------------------


def _num(x, fmt: str = ',.0f') -> str:
  return '—' if x is None else format(x, fmt)


def rounds_table(rounds: dict) -> str:
  """One markdown table of sections (a)-(c): a row per combination and per baseline."""
  lines = ['| cohort | clients | images/round | how | compile s | s/round | images/s | '
           'x sequential | x centralized |',
           '| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |']
  for name, res in rounds.items():
    c = res['cohort']
    seq = res['sequential']['images_per_s']
    cen = res['centralized']['images_per_s']
    head = f"| {name} | {c['cohort_size']}/{c['num_clients']} | {c['images_per_round']:,} |"
    rows = [(r['name'].split('/', 1)[1], r) for r in res['backends']]
    rows += [('sequential loop of a jitted step', res['sequential']),
             (f"centralized, batch {res['centralized']['batch_size']}", res['centralized'])]
    for label, r in rows:
      if r['status'] == 'skipped':   # the full reason is in bench.json
        field = 'bench.skip_on_cpu' if 'skip_on_cpu' in r['reason'] else 'bench.skip'
        lines.append(f'{head} {label} | skipped ({field}) | | | | |')
        continue
      if r.get('padded_cohort', c['cohort_size']) != c['cohort_size']:
        label += f" (padded to {r['padded_cohort']})"
      lines.append(f"{head} {label} | {r['compile_s']:.2f} | {r['median_s']:.3f} | "
                   f"{r['images_per_s']:,.0f} | {r['images_per_s'] / seq:.2f} | "
                   f"{r['images_per_s'] / cen:.2f} |")
  return '\n'.join(lines)


def summary_lines(rounds: dict) -> list[str]:
  out = []
  for name, res in rounds.items():
    if res['best'] is None:
      out.append(f'- {name}: no backend measured')
      continue
    out.append(f"- {name}: best {res['best']['name'].split('/', 1)[1]} "
               f"{res['best']['images_per_s']:,.0f} images/s = "
               f"{res['ratios']['best_over_sequential']:.2f}x the sequential loop, "
               f"{res['ratios']['best_over_centralized']:.2f}x centralized")
  return out


def markdown(results: dict) -> str:
  """The whole report: platform line, then one table per section run."""
  p = results['platform']
  parts = [f"# fedjax_face bench: {p['backend']} ({p['device_kind']}) x{p['device_count']}, "
           f"jax {p['jax_version']}, load {_num(p['load_average_1min'], '.2f')}",
           f"model {results['model']}; FedPE; steady state = median of timed rounds, "
           'compile excluded']
  if 'rounds' in results:
    parts += ['## (a)-(c) round throughput', rounds_table(results['rounds']), '',
              *summary_lines(results['rounds'])]
  if 'regularizer' in results:
    parts += ['## (d) FedGC server step (gradient correction)',
              bench_regularizer.markdown_table(results['regularizer'])]
  if 'eval' in results:
    e = results['eval']
    parts += ['## (e) evaluation', '| what | figure |', '| --- | ---: |',
              f"| backbone eval, batch {e['batch_size']} | {e['embeddings_per_s']:,.0f} "
              'embeddings/s |',
              f"| {e['verification']['num_folds']}-fold verification protocol, "
              f"{e['verification']['num_pairs']:,} pairs | {e['verification']['seconds']:.3f} s |"]
  if 'scaling' in results:
    s = results['scaling']
    parts += [f"## (f) device scaling: {s['cohort']} cohort, {s['combination']} "
              f"(devices visible: {s['visible_devices']})",
              '| devices | clients (padded) | images/s | x 1 device |',
              '| ---: | ---: | ---: | ---: |']
    one = next((r['images_per_s'] for r in s['rows']
                if r['status'] == 'measured' and r['devices'] == 1), None)
    for r in s['rows']:
      if r['status'] == 'skipped':
        parts.append(f"| {r['devices']} | skipped: {r['reason']} | | |")
      else:
        ratio = _num(r['images_per_s'] / one, '.2f') if one else '—'
        parts.append(f"| {r['devices']} | {r['padded_cohort']} | {r['images_per_s']:,.0f} | "
                     f'{ratio} |')
  parts.append(f"\ntotal {results['total_s']:.1f} s")
  return '\n'.join(parts)


def run(config, out_dir: str, log=print) -> dict:
  """Runs the sections of `config.bench.sections`; writes bench.json and bench.md to `out_dir`."""
  validate(config)
  t_start = time.perf_counter()
  os.makedirs(out_dir, exist_ok=True)
  b = config.bench
  info = platform_info()
  # The baselines, eval and scaling's default: no while loops, so the gradient a run would pick
  # for unrolled loop steps. Each round combination picks its own (`bench_cohort`).
  conv_gradient = policy.conv_gradient_for(config, 'loop', 'unroll')
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  results = {'platform': info,
             'model': (f'{config.model.name} w={config.model.width} '
                       f'd={config.model.embedding_dim} {config.data.image_size}x'
                       f'{config.data.image_size}'),
             'config': config.to_dict()}
  problems = {}

  def problem(name):
    if name not in problems:
      problems[name] = make_problem(name, b.cohorts[name], config.data.image_size, config.seed)
    return problems[name]

  if 'rounds' in b.sections:
    results['rounds'] = {name: bench_cohort(config, model, problem(name), info['backend'], log)
                         for name in b.run_cohorts}
  if 'regularizer' in b.sections:
    results['regularizer'] = bench_regularizer_section(config, log)
  if 'eval' in b.sections:
    results['eval'] = bench_eval(config, model, log)
  if 'scaling' in b.sections:
    combination = b.scaling.combination
    if combination == 'best':
      combination = best_parallel_combination(results['rounds'][b.scaling.cohort])
    results['scaling'] = bench_scaling(config, problem(b.scaling.cohort), combination, log)
  results['total_s'] = time.perf_counter() - t_start
  results['platform']['load_average_1min_end'] = os.getloadavg()[0] if hasattr(
      os, 'getloadavg') else None
  text = markdown(results)
  with open(os.path.join(out_dir, 'bench.json'), 'w') as f:
    json.dump(results, f, indent=2)
  with open(os.path.join(out_dir, 'bench.md'), 'w') as f:
    f.write(text + '\n')
  return results


def define_flags():
  """--config and --out, defined only when run as a program: other modules' tools define an
  `out` flag too, and absl refuses a flag defined twice in one process (e.g. a test session)."""
  config_flags.DEFINE_config_file('config', None, 'Bench config file (configs/bench.py).',
                                  lock_config=True)
  flags.DEFINE_string('out', None, 'Directory for bench.json and bench.md.')
  flags.mark_flags_as_required(['config', 'out'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  results = run(flags.FLAGS.config, flags.FLAGS.out)
  print(markdown(results), flush=True)


if __name__ == '__main__':
  define_flags()
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main)
