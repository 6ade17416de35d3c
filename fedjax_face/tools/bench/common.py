"""What every bench section shares: platform facts, variant and combination names, the bench
config's checks, and the synthetic problem (data, round inputs, images counted).
"""

from typing import Any
import dataclasses
import fnmatch
import os
import platform
import re

import jax
import numpy as np

from fedjax_face import config_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import local, xla_flags
from fedjax_face.data import federated
from fedjax_face.data import stores
from fedjax_face.eval.recognition import ijb
from fedjax_face.models import conv as conv_lib
from fedjax_face.models import heads


SECTIONS = ('rounds', 'regularizer', 'eval', 'scaling', 'one_per_client', 'fedavg_cnn', 'ijb',
            'backbone_training', 'fedma_matching', 'inversion', 'leakage', 'membership',
            'federation', 'partial_fc')


COHORT_FIELDS = ('num_clients', 'cohort_size', 'identities_per_client', 'images_per_identity',
                 'local_steps', 'batch_size')


CPU_SKIP_REASON = ('XLA CPU runs convolutions inside while loops (scanned steps, lax.map over '
                   'client groups) ~18x slower than straight-line code '
                   '(docs/references.md, xla-cpu-loops)')


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


def parse_engines(engines) -> list[tuple[str, str]]:
  """Section (j)'s `bench.backbone_training.engines` as (library, gradient) pairs; a clear
  error naming the entry otherwise."""
  pairs = []
  for entry in engines:
    library, _, gradient = entry.partition('/')
    if library not in xla_flags.CPU_CONVOLUTIONS or gradient not in conv_lib.CONV_GRADIENTS:
      raise ValueError(
          f'bench.backbone_training.engines: {entry!r} is not library/gradient with a library '
          f'in {xla_flags.CPU_CONVOLUTIONS} and a gradient in {conv_lib.CONV_GRADIENTS}')
    pairs.append((library, gradient))
  return pairs


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
  chunk = ijb.CHUNK_BATCHES * b.ijb.batch_size
  if b.ijb.crops <= chunk:
    raise ValueError(f'config.bench.ijb.crops={b.ijb.crops}; expected more than one chunk of '
                     f'{ijb.CHUNK_BATCHES} x bench.ijb.batch_size = {chunk} (the rate is counted '
                     'after the first).')
  parse_engines(b.backbone_training.engines)
  v = b.inversion
  _tuple_of('bench.inversion.batch_sizes', v.batch_sizes)
  _tuple_of('bench.inversion.local_steps', v.local_steps)
  for field in ('batch_sizes', 'local_steps'):
    for n in v[field]:
      _positive_int(f'bench.inversion.{field}[...]', n)
  for field in ('targets', 'iterations', 'timed_iterations'):
    _positive_int(f'bench.inversion.{field}', v[field])
  k = b.leakage
  _tuple_of('bench.leakage.cells', k.cells)
  for cell in k.cells:
    if (not isinstance(cell, (tuple, list)) or len(cell) != 2
        or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in cell)):
      raise ValueError(f'config.bench.leakage.cells has {cell!r}; expected (identities, '
                       'distractors), two positive integers.')
  for field in ('probes_per_identity', 'exact_images', 'rate_images', 'equivalents', 'classes',
                'group_size'):
    _positive_int(f'bench.leakage.{field}', k[field])
  if k.classes < k.group_size + 6:
    raise ValueError(f'config.bench.leakage.classes={k.classes}; expected at least group_size + '
                     f'6 = {k.group_size + 6} (the decode searches that many rows).')
  n = b.membership
  _tuple_of('bench.membership.samples', n.samples)
  _tuple_of('bench.membership.pad_frames', n.pad_frames, allow_empty=True)
  for field in ('samples', 'pad_frames'):
    for count in n[field]:
      _positive_int(f'bench.membership.{field}[...]', count)
  for field in ('images_per_identity', 'classes', 'rate_images'):
    _positive_int(f'bench.membership.{field}', n[field])
  if n.pad_model.name not in ('pad_net', 'pad_resnet18'):
    raise ValueError(f'config.bench.membership.pad_model.name={n.pad_model.name!r}; expected '
                     "'pad_net' or 'pad_resnet18' (an anti-spoofing detector).")
  for field in ('width', 'image_size'):
    _positive_int(f'bench.membership.pad_model.{field}', n.pad_model[field])
  for count in n.samples:
    if count % n.images_per_identity or count // n.images_per_identity < 2:
      raise ValueError(f'config.bench.membership.samples has {count}; expected a multiple of '
                       f'images_per_identity={n.images_per_identity} covering at least 2 '
                       'identities (as evals.membership.samples).')
  m = b.fedma_matching
  for field in ('client_width', 'cap_width', 'clients'):
    _positive_int(f'bench.fedma_matching.{field}', m[field])
  if m.cap_width < m.client_width:
    raise ValueError(f'config.bench.fedma_matching.cap_width={m.cap_width} < its client_width='
                     f'{m.client_width}; expected the cap at least the width.')
  _check_partial_fc(b.partial_fc)
  o = b.one_per_client
  if isinstance(o.rounds, bool) or not isinstance(o.rounds, int) or o.rounds < 2:
    raise ValueError(f'config.bench.one_per_client.rounds={o.rounds!r}; expected an integer of at '
                     'least 2 (the first round compiles; the rest are the steady state).')
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


def _check_partial_fc(p) -> None:
  """Section (p)'s fields: head sizes, sample rates in (0, 1], a batch, a classifier loss."""
  _tuple_of('bench.partial_fc.classes', p.classes)
  for n in p.classes:
    _positive_int('bench.partial_fc.classes[...]', n)
  _tuple_of('bench.partial_fc.sample_rates', p.sample_rates)
  for rate in p.sample_rates:
    config_lib.check_fraction('bench.partial_fc.sample_rates[...]', rate)
  _positive_int('bench.partial_fc.batch_size', p.batch_size)
  config_lib.check_choice('bench.partial_fc.loss', p.loss, heads.CLASSIFIER_HEADS)


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


def measured(row: dict, images: int, timed: dict) -> dict:
  """A result row: `row`'s labels, the images one call trains on, its rate and its timings."""
  return {**row, 'status': 'measured', 'images_per_round': images,
          'images_per_s': per_second(images, timed['median_s']), **timed}
