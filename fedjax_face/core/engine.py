"""The round engine: select -> broadcast -> clients (vmap / map / loop) -> aggregate -> server step.

One compiled program serves every round: the cohort is padded to a fixed size with padding clients
(id = num_clients, weight 0, all-false masks), and client data arrive stacked and padded as
`[cohort, steps, batch, ...]`.

Backends for the clients axis (measured, not assumed: docs/references.md, xla-cpu-loops;
`python -m fedjax_face.tools.bench`):
  vmap  all clients of the cohort at once (per-client weights become grouped convolutions);
  map   `map_width` clients at a time under vmap, the chunks one after another (`lax.map`);
  loop  a Python loop over a jitted client update, the way fedjax and pfl-research run clients
        (fastest on XLA CPU, where vmapped convolutions are slow), on `loop_threads` host threads:
        XLA CPU runs one small client's program on about one core, so clients run side by side
        fill the others (a client's result does not depend on which thread ran it).
With a device mesh, the clients axis is laid over the mesh axis `clients`.

Memory: `plan_width` sizes the chunks from the device's memory before the engine is built: one
client's update is compiled on its own, its compiled footprint read from `memory_analysis()`,
and the widest chunk that fits the device's budget is taken; the engine is then built with that
`map_width`. `vmap` runs the whole cohort at once when it fits (`map_width=0`) and in chunks when
it does not.

Several processes (`jax.distributed`, one per host or GPU): the mesh spans every process's
devices, ordered by process, so process p holds one contiguous block of cohort rows
(`process_rows`) and supplies only those rows' data; `run_round` assembles the global arrays with
`jax.make_array_from_process_local_data`. The loop backend runs each process's block on its own
first device. The state is replicated on every device, so every process can read it.

Per-client state (`RoundState.clients`: FedGC's W_k, FedFR's local models and DFC branches,
FedGPAD's ES and Dec) stays in device memory by default, gathered and scattered inside the
jitted round. With `client_state='host'` it stays in host memory between rounds: each round
sends the cohort's rows to the device and writes the updated rows back (`run_round`), so the
devices hold the cohort's share, not every client's.

Each client's randomness is `fold_in(round_rng, client_id)`, so a round's result does not depend on
the backend, the cohort padding, the chunking, the device count or the process count.
"""

import collections
import concurrent.futures
import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from fedjax_face.core import aggregation, arrays, privacy, secure_aggregation
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

BACKENDS = ('vmap', 'map', 'loop')
CLIENTS_AXIS = 'clients'
# Where `RoundState.clients` (every client's persistent private state) lives between rounds:
# 'device' in device memory, gathered and scattered inside the jitted round; 'host' in host
# memory (numpy), only the cohort's rows sent to the device each round, for per-client state
# larger than the devices hold (FedFR's local models for 1,000 clients: BUILD_NOTES.md, "Memory").
CLIENT_STATES = ('device', 'host')
# Share of a device's free memory a round may plan for: XLA's own workspace, fragmentation and the
# buffers of evaluation are not in the compiled estimate (config.engine.memory_fraction).
MEMORY_FRACTION = 0.6
# `fold_in` data of the server's key; client ids run 0..num_clients (padding), far below it.
SERVER_STREAM = 2**31 - 1


def make_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh with axis `clients` over `num_devices` devices (default: all, of every process).

  Devices are ordered by process, so each process's share of the cohort is one contiguous block
  of rows; with several processes each contributes the same number of its own devices.
  """
  devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
  if num_devices is None:
    return Mesh(np.asarray(devices), (CLIENTS_AXIS,))
  processes = jax.process_count()
  if not 1 <= num_devices <= len(devices) or num_devices % processes:
    raise ValueError(f'engine.num_devices={num_devices} but {len(devices)} devices are visible in '
                     f'{processes} process(es); expected a multiple of {processes} from '
                     f'{processes} to {len(devices)} (0 means all).')
  per_process = num_devices // processes
  by_process = collections.defaultdict(list)
  for d in devices:
    by_process[d.process_index].append(d)
  chosen = [d for p in sorted(by_process) for d in by_process[p][:per_process]]
  return Mesh(np.asarray(chosen), (CLIENTS_AXIS,))


def num_rows(clients) -> int:
  """The number of clients a `RoundState.clients` pytree holds (0 when it has no leaves)."""
  leaves = jax.tree.leaves(clients)
  return len(leaves[0]) if leaves else 0


def host_clients(clients):
  """`RoundState.clients` as writable numpy arrays (for `client_state='host'`), copying only
  what is not already a writable host array."""
  return jax.tree.map(lambda x: np.require(np.asarray(x), requirements=['W']), clients)


def local_copy(tree):
  """Each replicated leaf's copy on this process's first device holding it.

  Computations on the result run in this process alone, which is what evaluation, logging and
  the loop backend's clients need in a multi-process run. A tree holding a leaf split over
  devices (a centralized run's class rows over the `classes` mesh: algorithms/sharded_classes.py,
  one process) is returned as it is: its shards are not copies, and its replicated leaves stay
  on the same devices so that one program takes them together.
  """
  arrays_ = [x for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)]
  if any(not x.is_fully_replicated for x in arrays_):
    return tree
  return jax.tree.map(lambda x: x.addressable_data(0) if isinstance(x, jax.Array) else x, tree)


def host_available_bytes() -> int:
  """Memory this process may still allocate on the host: MemAvailable, capped by a cgroup limit."""
  available = os.sysconf('SC_AVPHYS_PAGES') * os.sysconf('SC_PAGE_SIZE')
  try:
    with open('/proc/meminfo') as f:
      for line in f:
        if line.startswith('MemAvailable:'):
          available = int(line.split()[1]) * 1024
  except OSError:
    pass
  try:  # containers: the cgroup (v2) limit can be far below the machine's memory
    with open('/sys/fs/cgroup/memory.max') as f, open('/sys/fs/cgroup/memory.current') as g:
      limit = f.read().strip()
      if limit != 'max':
        available = min(available, int(limit) - int(g.read().strip()))
  except (OSError, ValueError):
    pass
  return max(0, available)


def device_free_bytes(device: jax.Device) -> int:
  """Free memory of one device: its allocator's limit on GPU / TPU; on CPU the host's available
  memory shared by this process's CPU devices (forced CPU devices share one RAM)."""
  stats = device.memory_stats() if hasattr(device, 'memory_stats') else None
  if stats and 'bytes_limit' in stats:
    return max(0, int(stats['bytes_limit']) - int(stats.get('bytes_in_use', 0)))
  return host_available_bytes() // max(1, len(jax.local_devices(backend=device.platform)))


class WidthPlan(NamedTuple):
  """How `plan_width` sized the client chunks (for the log and results.json).

  Attributes:
    map_width: what to build the engine with (`RoundEngine(map_width=...)`): the chunk width,
      or 0 for 'vmap' running the whole cohort at once.
    width: clients per chunk (the whole padded cohort when it fits at once).
    chunks: chunks per round, run one after another.
    client_bytes: compiled footprint of one client's update (temp + arguments + outputs).
    resident_bytes: per device, what the round holds whatever the width (state in and out, the
      cohort's data, inputs and results rows).
    budget_bytes: per device, free memory times the safety fraction.
  """
  map_width: int
  width: int
  chunks: int
  client_bytes: int | None
  resident_bytes: int | None
  budget_bytes: int | None

  def describe(self) -> str:
    if self.client_bytes is None:
      return f'{self.width} clients per chunk (the backend reports no memory figures)'
    mb = lambda b: f'{b / 2**20:,.1f} MiB'
    return (f'{self.width} clients per chunk, {self.chunks} chunk(s) per round (one client '
            f'{mb(self.client_bytes)}, resident {mb(self.resident_bytes)}, budget '
            f'{mb(self.budget_bytes)} per device)')


def choose_width(cohort: int, per_device_capacity: int, num_shards: int) -> int:
  """The chunk width for a cohort padded to `num_shards`: as few chunks as fit, as even as can be.

  With c clients per device per chunk, at most W = c · num_shards clients run at once; the cohort
  needs ceil(cohort / W) chunks, and the narrowest width (a multiple of `num_shards`) that still
  gives that many chunks pads the cohort least.
  """
  widest = max(1, per_device_capacity) * num_shards
  if widest >= cohort:
    return cohort
  chunks = arrays.ceil_div(cohort, widest)
  return arrays.round_up(arrays.ceil_div(cohort, chunks), num_shards)


def server_keys(round_rng: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The server's keys of a round, (broadcast, server_update): from a stream no client id
  reaches (clients fold their id into the round key)."""
  keys = jax.random.split(jax.random.fold_in(round_rng, SERVER_STREAM))
  return keys[0], keys[1]


def noise_key(base: jax.Array, secret: jax.Array | None) -> jax.Array:
  """The key DP noise is drawn from: `base` (a function of the run's seed), or `base` XOR a
  secret drawn from the operating system (`dp.noise_seed='os'`), which nothing records."""
  return base if secret is None else base ^ secret


def round_clip(dp: privacy.DpSpec | None, state: RoundState):
  """The clip of the round that starts from `state`: the adaptive C_t it holds, or None (the
  spec's fixed S, a Python constant in the programs, as before adaptive clipping existed)."""
  return privacy.clip_of(state.server) if dp is not None and dp.adaptive else None


def _prepare(algorithm: Algorithm, state: RoundState, client_ids, positions, rng):
  """What the cohort receives (`broadcast`) and its private rows, read at `positions` of
  `state.clients` (the client ids themselves, or 0..m-1 when `state.clients` holds the
  cohort's rows alone: `client_state='host'`)."""
  client_input = algorithm.broadcast(state.server, client_ids, state.round, server_keys(rng)[0])
  private = aggregation.gather_clients(state.clients, positions)
  return client_input, private


def aggregation_shares(weights, dp: privacy.DpSpec | None):
  """Each row's share of the mean under secure aggregation: w_k / Σw, or 1 / m over the real
  rows under DP (whose mean is uniform)."""
  weights = (weights > 0).astype(jnp.float32) if dp is not None else weights
  return weights / jnp.maximum(jnp.sum(weights), 1e-30)


def _one_client(algorithm: Algorithm, shared, per_client, private, data, client_id,
                rng, dp: privacy.DpSpec | None = None,
                secure: secure_aggregation.Spec | None = None, position=None, share=None,
                cohort: int = 0, secret: jax.Array | None = None, clip=None,
                mask_secret: jax.Array | None = None) -> ClientResult:
  """One client's update; its randomness is fold_in(round rng, client id). With `dp` the client
  clips what it sends (its difference from what it received) before it leaves, to `clip` (the
  round's adaptive C_t; None: the spec's fixed S), and under adaptive clipping also sends its bit
  b_i = 1[norm <= C_t] (under privacy.COUNT_KEY, taken out by the server step). With `secure`
  the client at cohort row `position` (of `cohort`) sends its averaged keys as masked ring
  vectors of `share` times its difference (and, with `dp`, its share of the sum's noise), and
  under adaptive clipping its bit as `share` times (b_i + its share of the count's noise), in
  the same ring vector (`privacy.count_share`). `mask_secret` (a federation's holders' secret,
  federation/protocol.py) is XORed into the pair secrets' key: other masks, the same sum."""
  round_rng = rng
  rng = jax.random.fold_in(rng, client_id)
  client_input = ClientInput(shared, per_client)
  result = algorithm.client_update(client_input, private, data, rng)
  if dp is None and secure is None:
    return result
  origin = algorithm.update_origin(client_input)
  if dp is not None:
    bound = dp.clip_norm if clip is None else clip
    covered, passed = dp.covered(result.update)
    clipped, norm = privacy.clip_update(covered, {k: origin[k] for k in covered}, bound)
    metrics = {**result.metrics, 'dp/update_norm': norm,
               'dp/clipped': (norm > bound).astype(jnp.float32)}
    update = {**clipped, **passed}
    if dp.adaptive:   # Andrew et al.'s one bit per client, beside its update
      update[privacy.COUNT_KEY] = privacy.under_clip(norm, bound)
    result = result._replace(update=update, metrics=metrics)
  if secure is None:
    return result
  summed = [k for k in result.update
            if k not in algorithm.client_rows and k != privacy.COUNT_KEY]
  delta = {k: jax.tree.map(lambda u, o: u.astype(jnp.float32) - o.astype(jnp.float32),
                           result.update[k], origin[k]) for k in summed}
  if dp is not None:   # distributed DP: each client adds N(0, (σS)²·share), the sum N(0, (σS)²)
    delta = privacy.noise_share(delta, dp.noise_std_at(bound) * jnp.sqrt(share),
                                noise_key(jax.random.fold_in(rng, privacy.NOISE_STREAM), secret))
    if dp.adaptive:   # the count too: summed by the masks, its noise drawn in shares
      delta[privacy.COUNT_KEY] = privacy.count_share(
          result.update[privacy.COUNT_KEY], share, dp,
          noise_key(jax.random.fold_in(rng, privacy.COUNT_STREAM), secret))
  masked, clamped = secure_aggregation.mask_update(
      secure, delta, share,
      noise_key(jax.random.fold_in(round_rng, secure_aggregation.SECRET_STREAM), mask_secret),
      position, cohort)
  return result._replace(update={**result.update, **masked},
                         metrics={**result.metrics, 'secagg/clamped': clamped})


def _client_row(algorithm: Algorithm, dp: privacy.DpSpec | None, shared, per_client, private,
                data, index, client_id, rng, clip=None) -> ClientResult:
  """`_one_client` of row `index` of the cohort's stacked `per_client` / `private`, taken inside
  the program: the loop backend's client (`RoundEngine._client_at`) without secure aggregation."""
  take = lambda x: x[index]
  return _one_client(algorithm, shared, jax.tree.map(take, per_client),
                     jax.tree.map(take, private), data, client_id, rng, dp, clip=clip)


@functools.lru_cache(maxsize=4)
def _message_programs(algorithm: Algorithm, dp: privacy.DpSpec | None):
  """The jitted `_prepare` and `_client_row` of `client_messages`, compiled once per algorithm
  and DP spec (a replay of several rounds compiles its client program once)."""
  return (jax.jit(functools.partial(_prepare, algorithm)),
          jax.jit(functools.partial(_client_row, algorithm, dp)))


def client_messages(algorithm: Algorithm, state: RoundState, client_ids, data, round_rng,
                    dp: privacy.DpSpec | None = None, *, num_clients: int | None = None
                    ) -> list[ClientResult]:
  """What each real client of a cohort sends in the round that starts from `state`: its
  `ClientResult` (`update`: what the server receives; `private`, `metrics`), in cohort order,
  padding clients (id >= `num_clients`) left out.

  Computed as `RoundEngine` computes it on the loop backend, program for program: the jitted
  `_prepare` (the broadcast and the cohort's private rows) on the whole cohort, then the jitted
  client (`_one_client` of one row) per client with the round key `round_rng`, so the results are
  the very arrays the run's clients sent, bit for bit. With `dp` (the run's `DpSpec`) each update
  is clipped as it left the client; its noise is the server's and is not in it. Secure
  aggregation is not applied: these are the updates before masking (with `dp` and secure
  aggregation, also before each client's share of the noise), which no server ever sees.

  Args:
    algorithm: the algorithm the round ran.
    state: the round state the round started from (the checkpoint of the round before).
    client_ids: int32 `[m]`: the round's cohort, padded as the engine ran it.
    data: the cohort's round data, `[m, steps, batch, ...]` per key.
    round_rng: the round's key (what `RoundEngine.run_round` was given).
    dp: the engine's DP spec (None: no DP).
    num_clients: the number of clients (the padding id); default the rows of `state.clients`,
      required when the method keeps no per-client state.
  """
  client_ids = np.asarray(client_ids, np.int32)
  rows = num_rows(state.clients)
  if num_clients is None and not rows:
    raise ValueError(f'{algorithm.name} keeps no per-client state, so the padding id is not '
                     'known; pass num_clients.')
  num_clients = rows if num_clients is None else num_clients
  state = local_copy(state)
  positions = client_ids
  if jax.tree.leaves(state.clients) and all(
      isinstance(x, np.ndarray) for x in jax.tree.leaves(state.clients)):
    # host rows (engine.client_state='host', or a checkpoint read back): the cohort's rows alone
    # go to the device, at positions 0..m-1, as `run_round` sends them.
    state = state.replace(clients=jax.tree.map(
        lambda x: np.take(x, client_ids, axis=0, mode='clip'), state.clients))
    positions = np.arange(len(client_ids), dtype=np.int32)
  try:
    prepare, client = _message_programs(algorithm, dp)
  except TypeError:   # an algorithm holding an unhashable value: compiled for this call alone
    prepare, client = _message_programs.__wrapped__(algorithm, dp)
  client_input, private = prepare(state, client_ids, positions, round_rng)
  clip = round_clip(dp, state)
  return [client(client_input.shared, client_input.per_client, private,
                 jax.tree.map(lambda x, i=i: x[i], data), np.int32(i), client_ids[i], round_rng,
                 clip)
          for i in range(len(client_ids)) if client_ids[i] < num_clients]


def plan_width(algorithm: Algorithm, state: RoundState, cohort_size: int, client_data, *,
               backend: str, mesh: Mesh | None = None,
               memory_fraction: float = MEMORY_FRACTION,
               dp: privacy.DpSpec | None = None, client_state: str = 'device') -> WidthPlan:
  """The widest client chunk of a 'vmap' or 'map' round that fits the device memory.

  Compiles one client's update alone (`memory_analysis()`: temp + argument + output bytes, which
  counts the shared model once per client: an overestimate on purpose), adds what the round
  holds whatever the width, and takes the widest chunk that fits `memory_fraction` of the free
  memory of the fullest device. Build the engine with the plan's `map_width`.

  Args:
    algorithm: the algorithm the engine will run.
    state: the round state (arrays or ShapeDtypeStructs).
    cohort_size: clients per round before padding.
    client_data: one client's data, without the cohort axis (arrays or ShapeDtypeStructs).
    backend: 'vmap' or 'map'.
    mesh: the engine's mesh (None: one device).
    memory_fraction: share of the free device memory to plan for.
    dp: the engine's DP spec: the client update is measured with its clip, as it will run.
    client_state: the engine's; with 'host' only the cohort's rows of `state.clients` are on
      the device during a round.
  """
  if backend not in ('vmap', 'map'):
    raise ValueError(f'plan_width sizes vmap / map chunks, not backend {backend!r}.')
  if not 0.0 < memory_fraction <= 1.0:
    raise ValueError(f'engine.memory_fraction={memory_fraction!r}; expected a fraction in '
                     '(0, 1].')
  num_shards = 1 if mesh is None else mesh.size
  one_id = jax.ShapeDtypeStruct((1,), jnp.int32)
  state_spec = arrays.shape_structs(state)
  if client_state == 'host':
    cohort_rows = arrays.round_up(cohort_size, num_shards)
    state_spec = state_spec.replace(clients=jax.tree.map(
        lambda x: jax.ShapeDtypeStruct((cohort_rows,) + x.shape[1:], x.dtype), state_spec.clients))
  rng = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  client_input, private = jax.eval_shape(functools.partial(_prepare, algorithm), state_spec,
                                         one_id, one_id, rng)
  row = lambda x: jax.ShapeDtypeStruct((1,) + tuple(np.shape(x)), x.dtype)
  data = jax.tree.map(row, client_data)
  over_one = jax.vmap(functools.partial(_one_client, algorithm, dp=dp),
                      in_axes=(None, 0, 0, 0, 0, None))
  args = (client_input.shared, client_input.per_client, private, data, one_id, rng)
  results = jax.eval_shape(over_one, *args)
  stats = jax.jit(over_one).lower(*args).compile().memory_analysis()
  cohort = arrays.round_up(cohort_size, num_shards)
  if stats is None:   # the backend cannot tell: run the cohort at once
    return WidthPlan(map_width=0 if backend == 'vmap' else cohort, width=cohort, chunks=1,
                     client_bytes=None, resident_bytes=None, budget_bytes=None)
  client_bytes = int(stats.temp_size_in_bytes + stats.argument_size_in_bytes +
                     stats.output_size_in_bytes)
  rows_per_device = cohort // num_shards
  row_bytes = arrays.tree_bytes((client_input.per_client, private, data, results))
  resident = 2 * arrays.tree_bytes(state_spec) + rows_per_device * row_bytes
  devices = list(mesh.devices.flat) if mesh is not None else jax.local_devices()[:1]
  free = min(device_free_bytes(d) for d in devices if d.process_index == jax.process_index())
  if jax.process_count() > 1:   # every process must pick the same width
    free = int(np.min(multihost_utils.process_allgather(np.int64(free))))
  budget = int(memory_fraction * free)
  capacity = (budget - resident) // max(1, client_bytes)   # clients per device per chunk
  if capacity < 1:
    logging.warning('engine: not even one client per device fits the memory budget (%d bytes '
                    'resident + %d per client > %d); running one per device anyway. Lower '
                    'federated.participation, local_steps or batch_size, or raise '
                    'engine.memory_fraction.', resident, client_bytes, budget)
  width = choose_width(cohort, capacity, num_shards)
  return WidthPlan(map_width=0 if backend == 'vmap' and width == cohort else width, width=width,
                   chunks=arrays.ceil_div(cohort, width), client_bytes=client_bytes,
                   resident_bytes=resident, budget_bytes=budget)


class RoundEngine:
  """Runs federated rounds of one `Algorithm` with one execution backend."""

  def __init__(self, algorithm: Algorithm, *, backend: str, map_width: int = 0,
               mesh: Mesh | None = None, loop_threads: int = 1,
               dp: privacy.DpSpec | None = None, client_state: str = 'device',
               secure: secure_aggregation.Spec | None = None,
               noise_secret: np.ndarray | None = None):
    if backend not in BACKENDS:
      raise ValueError(f'engine.backend={backend!r}; expected one of {BACKENDS}.')
    if client_state not in CLIENT_STATES:
      raise ValueError(f'engine.client_state={client_state!r}; expected one of {CLIENT_STATES}.')
    if not isinstance(map_width, (int, np.integer)) or map_width < 0:
      raise ValueError(f'engine.map_width={map_width!r}; expected a non-negative integer '
                       '(0 = sized from the device memory by plan_width).')
    if backend == 'map' and not map_width:
      raise ValueError('backend \'map\' needs a positive map_width: pass the one plan_width '
                       'sized from the device memory (run.setup.plan_engine does).')
    if not isinstance(loop_threads, (int, np.integer)) or loop_threads < 1:
      raise ValueError(f'engine.loop_threads={loop_threads!r}; expected a positive integer '
                       '(host threads running loop-backend clients at once).')
    if dp is not None and algorithm.update_origin is None:
      raise ValueError(f'dp.enabled=True but {algorithm.name} does not say what its clients '
                       'received (Algorithm.update_origin), so their updates cannot be clipped.')
    if secure is not None and algorithm.update_origin is None:
      raise ValueError(f'secure_aggregation.enabled=True but {algorithm.name} does not say what '
                       'its clients received (Algorithm.update_origin), so their differences '
                       'cannot be summed.')
    if noise_secret is not None and np.shape(noise_secret) != (2,):
      raise ValueError(f'noise_secret of shape {np.shape(noise_secret)}; expected a uint32 [2] '
                       'key (privacy.noise_secret).')
    self.algorithm = algorithm
    self.dp = dp
    # XORed into every DP noise key (`noise_key`); None: the noise follows the round keys alone.
    self.noise_secret = None if noise_secret is None else np.asarray(noise_secret, np.uint32)
    self.secure = secure
    self.client_state = client_state
    self.backend = backend
    self.map_width = int(map_width)
    self.loop_threads = int(loop_threads)
    self.mesh = mesh
    self.num_shards = 1 if mesh is None else mesh.size
    if backend != 'loop' and self.map_width % self.num_shards:
      raise ValueError(f'engine.map_width={map_width} must be a multiple of the device count '
                       f'{self.num_shards} so each chunk of clients splits over the devices.')
    if mesh is None and jax.process_count() > 1:
      raise ValueError(f'{jax.process_count()} processes but no mesh: a multi-process run needs '
                       'engine.make_mesh() so the clients axis spans every process.')
    # Clients per chunk; None runs the whole cohort at once (vmap) or one by one (loop).
    self.width = self.map_width if backend != 'loop' and self.map_width else None
    # Traces per jitted entry point; a second trace of any of them is a recompilation.
    self.traces = collections.Counter()
    # (shared, own row, update) of one client as the client program was traced, as
    # ShapeDtypeStructs: what crosses the wire (core/communication.py), with no trace of its own.
    self.client_wire = None
    self._compiled = set()   # the loop's client signatures already compiled (`_loop`)
    if mesh is not None:
      self._replicated = NamedSharding(mesh, P())
      self._rows = NamedSharding(mesh, P(CLIENTS_AXIS))
    self._compile()

  @property
  def trace_count(self) -> int:
    """The most traces of any jitted piece: 1 for a whole run means no recompilation."""
    return max(self.traces.values(), default=0)

  def _jit(self, name: str, fn, *, global_out: bool):
    def traced(*args):
      self.traces[name] += 1
      return fn(*args)
    out = self._replicated if global_out and self.mesh is not None else None
    return jax.jit(traced, out_shardings=out)

  def _compile(self):
    if self.backend == 'loop':
      self._prepare = self._jit('prepare', self._prepare_fn, global_out=False)
      self._client = self._jit('client', self._client_at, global_out=False)
      self._finish = self._jit('finish', self._finish_fn, global_out=True)
      # One device: the clients' results are stacked inside the server's program, one copy
      # instead of a dispatched stack per leaf (BUILD_NOTES.md, "Client step on XLA CPU").
      self._finish_list = self._jit('finish', self._finish_list_fn, global_out=True)
    else:
      self._round = self._jit('round', self._round_fn, global_out=True)

  def cohort_multiple(self) -> int:
    """Cohort sizes are padded up to a multiple of this (devices, chunk width)."""
    return self.width or self.num_shards

  # -- pure pieces ---------------------------------------------------------------------------

  def _one_client(self, shared, per_client, private, data, client_id, rng, position, share,
                  secret, clip, cohort: int) -> ClientResult:
    result = _one_client(self.algorithm, shared, per_client, private, data, client_id, rng,
                         self.dp, self.secure, position, share, cohort, secret, clip)
    # Inside vmap / lax.map / the loop's program alike, these are one client's shapes.
    self.client_wire = arrays.shape_structs((shared, per_client, result.update))
    return result

  def _client_at(self, shared, per_client, private, data, index, client_id, rng, position,
                 shares, secret, clip) -> ClientResult:
    """The loop backend's client: row `index` of the cohort's stacked `per_client` / `private`
    is taken inside the jitted program, so a client costs one dispatch, not one per leaf.
    `position` is its row in the whole cohort, `shares` every row's (secure aggregation)."""
    take = lambda x: x[index]
    return self._one_client(shared, jax.tree.map(take, per_client), jax.tree.map(take, private),
                            data, client_id, rng, position, shares[position], secret, clip,
                            len(shares))

  def _prepare_fn(self, state: RoundState, client_ids, positions, rng):
    return _prepare(self.algorithm, state, client_ids, positions, rng)

  def _unmask(self, state: RoundState, updates: dict, weights, client_ids, broadcast_key):
    """Secure aggregation's server side: the masked sums decoded into the mean of the averaged
    keys, given to every row (any weighted mean of the rows is then that mean); the client rows
    as sent. The mean adds the shares of what each client received, which the server sent."""
    # The broadcast again, from the pre-round state: the origins each client differenced from.
    client_input = self.algorithm.broadcast(state.server, client_ids, state.round, broadcast_key)
    origins = jax.vmap(lambda row: self.algorithm.update_origin(
        ClientInput(client_input.shared, row)), axis_size=len(client_ids))(
            client_input.per_client)
    shares = aggregation_shares(weights, self.dp)
    out = dict(updates)
    for k, masked in updates.items():
      if k in self.algorithm.client_rows:
        continue
      total = secure_aggregation.unmasked_sum(self.secure, masked)
      def mean_row(origin, summed):
        mean = jnp.tensordot(shares, origin.astype(jnp.float32), axes=1) + summed
        return jnp.broadcast_to(mean.astype(origin.dtype), origin.shape)
      out[k] = jax.tree.map(mean_row, origins[k], total)
    return out

  def _finish_fn(self, state: RoundState, results: ClientResult, weights, client_ids, positions,
                 rng, secret):
    updates, server_weights = results.update, weights
    clip = round_clip(self.dp, state)
    if clip is not None:   # the bits leave the update before anything else reads it
      updates = dict(updates)
      bits = updates.pop(privacy.COUNT_KEY)
    if self.secure is not None:
      updates = self._unmask(state, updates, weights, client_ids, server_keys(rng)[0])
      if self.dp is not None:   # the averaged keys' noise came from the clients
        rows = {k: v for k, v in updates.items() if k in self.algorithm.client_rows}
        noise_rng = noise_key(jax.random.fold_in(server_keys(rng)[1], privacy.NOISE_STREAM),
                              secret)
        rows, server_weights = privacy.noisy_updates(
            rows, weights, self.dp, noise_rng,
            None if clip is None else self.dp.noise_std_at(clip))
        updates = {**updates, **rows}
    elif self.dp is not None:   # the noise is the server's, drawn inside this jitted step
      noise_rng = noise_key(jax.random.fold_in(server_keys(rng)[1], privacy.NOISE_STREAM), secret)
      updates, server_weights = privacy.noisy_updates(
          updates, weights, self.dp, noise_rng,
          None if clip is None else self.dp.noise_std_at(clip))
    server = self.algorithm.server_update(state.server, updates, server_weights, client_ids,
                                          state.round, server_keys(rng)[1])
    if self.dp is not None:
      server = privacy.valid_statistics(server)
    clients = aggregation.scatter_clients(state.clients, positions, results.private)
    metrics = aggregation.weighted_mean(results.metrics, weights)
    if clip is not None and self.secure is not None:
      # The masked shares s_k (b_k + n_k) decode to b̃ itself: its noise came from the clients.
      fraction = secure_aggregation.unmasked_sum(self.secure, bits)
      new_clip = privacy.clip_step(clip, fraction, self.dp)
    elif clip is not None:   # Andrew et al.'s server step: C_{t+1} from the noised count
      count_rng = noise_key(jax.random.fold_in(server_keys(rng)[1], privacy.COUNT_STREAM), secret)
      new_clip, fraction = privacy.next_clip(clip, bits, weights, self.dp, count_rng)
    if clip is not None:
      server = privacy.with_clip(server, new_clip)
      metrics = {**metrics, 'dp/clip_norm': clip, 'dp/noisy_fraction_under_clip': fraction}
    return RoundState(server=server, clients=clients, round=state.round + 1), metrics

  def _finish_list_fn(self, state: RoundState, results: list[ClientResult], weights, client_ids,
                      positions, rng, secret):
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *results)
    return self._finish_fn(state, stacked, weights, client_ids, positions, rng, secret)

  def _shard(self, tree, axis: int):
    if self.num_shards == 1:
      return tree
    spec = P(*([None] * axis + [CLIENTS_AXIS]))
    sharding = NamedSharding(self.mesh, spec)
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

  def _run_clients(self, client_input: ClientInput, private, data, client_ids, rng, weights,
                   secret, clip=None):
    m = len(client_ids)
    one = functools.partial(self._one_client, cohort=m)
    over_clients = jax.vmap(one, in_axes=(None, 0, 0, 0, 0, None, 0, 0, None, None))
    xs = (client_input.per_client, private, data, client_ids,
          jnp.arange(m, dtype=jnp.int32), aggregation_shares(weights, self.dp))
    if self.width is None or self.width == m:
      per_client, private, data, client_ids, rows, shares = self._shard(xs, axis=0)
      return over_clients(client_input.shared, per_client, private, data, client_ids, rng,
                          rows, shares, secret, clip)
    # Chunks of `width` clients under vmap, one after another. Row r = j·G + g goes to chunk g,
    # so a device's block of rows (the cohort axis is split in blocks over the mesh) is exactly
    # its share of every chunk: no client's data moves between devices.
    width = self.width
    chunks = jax.tree.map(lambda x: jnp.swapaxes(x.reshape((width, -1) + x.shape[1:]), 0, 1), xs)
    chunks = self._shard(chunks, axis=1)
    run_chunk = lambda c: over_clients(client_input.shared, *c[:4], rng, *c[4:], secret, clip)
    results = jax.lax.map(run_chunk, chunks)
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:]), results)

  def _round_fn(self, state: RoundState, client_ids, positions, weights, data, rng, secret):
    client_input, private = self._prepare_fn(state, client_ids, positions, rng)
    results = self._run_clients(client_input, private, data, client_ids, rng, weights, secret,
                                round_clip(self.dp, state))
    return self._finish_fn(state, results, weights, client_ids, positions, rng, secret)

  def _loop(self, run_client, n: int, signature) -> list[ClientResult]:
    """`run_client(i)` for i < n, in order, on up to `loop_threads` threads at once.

    `signature` (hashable: the shapes the client program is called with) says when it compiles:
    the first client of a signature not seen before runs alone on this thread, so no two threads
    trace and compile it; otherwise every client starts on the pool.
    """
    if self.loop_threads == 1 or n <= 1:
      return [run_client(i) for i in range(n)]
    first = [] if signature in self._compiled else [run_client(0)]
    self._compiled.add(signature)
    # Each thread waits for its client, so at most `loop_threads` programs run at once.
    finish = lambda i: jax.block_until_ready(run_client(i))
    with concurrent.futures.ThreadPoolExecutor(min(self.loop_threads, n - len(first))) as pool:
      return first + list(pool.map(finish, range(len(first), n)))

  # -- several devices and processes --------------------------------------------------------

  def process_rows(self, m: int) -> slice:
    """The rows of an m-client cohort whose data this process supplies (all rows in one process)."""
    if self.mesh is None:
      return slice(0, m)
    spans = sorted((idx[0].start or 0, m if idx[0].stop is None else idx[0].stop)
                   for idx in self._rows.addressable_devices_indices_map((m,)).values())
    for (_, stop), (start, _) in zip(spans, spans[1:]):
      if stop != start:
        raise ValueError(f'this process holds cohort rows {spans}, not one block; build the mesh '
                         'with engine.make_mesh (devices ordered by process).')
    return slice(spans[0][0], spans[-1][1])

  def _local_rows(self, tree, m: int):
    """This process's rows of `tree`, given either all m rows or this process's rows."""
    rows = self.process_rows(m)
    n = rows.stop - rows.start
    def take(x):
      if len(x) == n:
        return x
      if len(x) == m:
        return x[rows]
      raise ValueError(f'client data has {len(x)} rows; expected the cohort ({m}) or this '
                       f'process\'s rows {rows.start}:{rows.stop} ({n}).')
    return jax.tree.map(take, tree)

  def _global_rows(self, tree, m: int):
    """This process's rows -> global arrays with the cohort axis split over the mesh."""
    return jax.tree.map(
        lambda x: jax.make_array_from_process_local_data(self._rows, x, (m,) + x.shape[1:]), tree)

  def _place(self, state):
    """The state replicated on every mesh device (a no-op after the first round)."""
    def put(x):
      if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(self._replicated, x.ndim):
        return x
      # Through the host: a process's committed local array cannot move to another process.
      return jax.device_put(np.asarray(x), self._replicated)
    return jax.tree.map(put, state)

  # -- driver ------------------------------------------------------------------------------

  def run_round(self, state: RoundState, client_ids: np.ndarray, weights: np.ndarray,
                data: dict[str, np.ndarray], rng: jax.Array) -> tuple[RoundState, dict[str, Any]]:
    """One round over a padded cohort.

    Args:
      state: the current state.
      client_ids: int32 `[m]`, padding clients have id num_clients; m is a multiple of
        `cohort_multiple()`. Every process passes the whole cohort.
      weights: float32 `[m]` aggregation weights (n_k; 0 for padding clients).
      data: per-client arrays `[m, steps, batch, ...]`, or only the rows `process_rows(m)` of
        this process (what a multi-process run loads).
      rng: the round's key.

    Returns:
      (new state, metrics averaged over clients with `weights`).
    """
    m = len(client_ids)
    if m % self.cohort_multiple():
      raise ValueError(f'cohort of {m} clients is not a multiple of {self.cohort_multiple()}; '
                       'pad it with padding clients (see data.federated.pad_cohort).')
    client_ids = np.asarray(client_ids, np.int32)
    weights = np.asarray(weights, np.float32)
    data = self._local_rows(data, m)
    if self.client_state == 'device':
      return self._run(state, client_ids, client_ids, weights, data, rng)
    # host: the device sees the cohort's rows alone, at positions 0..m-1; the updated rows are
    # written back into the host arrays (padding clients' rows are dropped).
    host = state.clients
    rows = jax.tree.map(lambda x: np.take(x, client_ids, axis=0, mode='clip'), host)
    state, metrics = self._run(state.replace(clients=rows), client_ids,
                               np.arange(m, dtype=np.int32), weights, data, rng)
    real = client_ids < num_rows(host)

    def write_back(x, updated):
      x[client_ids[real]] = np.asarray(local_copy(updated))[real]
    jax.tree.map(write_back, host, state.clients)
    return state.replace(clients=host), metrics

  def _run(self, state: RoundState, client_ids: np.ndarray, positions: np.ndarray,
           weights: np.ndarray, data, rng: jax.Array) -> tuple[RoundState, dict[str, Any]]:
    """`run_round` with the cohort's private rows at `positions` of `state.clients`."""
    m = len(client_ids)
    if self.mesh is not None:
      state = self._place(state)
    if self.backend != 'loop':
      if self.mesh is not None:
        data = self._global_rows(data, m)
      return self._round(state, client_ids, positions, weights, data, rng, self.noise_secret)
    # loop: this process runs its rows one by one on its first device, then all processes meet
    # in the jitted server step.
    rows = self.process_rows(m)
    ids = client_ids[rows]
    local = local_copy(state)
    client_input, private = self._prepare(local, ids, positions[rows], rng)

    shares = np.asarray(aggregation_shares(weights, self.dp), np.float32)
    clip = round_clip(self.dp, local)

    def run_client(i: int) -> ClientResult:
      # Host data is sliced on the host (free); device-resident rows are sliced in `_client_at`.
      return self._client(client_input.shared, client_input.per_client, private,
                          jax.tree.map(lambda x: x[i], data), np.int32(i), ids[i], rng,
                          np.int32(rows.start + i), shares, self.noise_secret, clip)

    signature = tuple((x.shape, x.dtype) for x in jax.tree.leaves(
        (client_input.per_client, private, data)))
    results = self._loop(run_client, len(ids), signature)
    if self.mesh is None:
      return self._finish_list(state, results, weights, client_ids, positions, rng,
                               self.noise_secret)
    stacked = self._global_rows(jax.tree.map(lambda *xs: jnp.stack(xs), *results), m)
    return self._finish(state, stacked, weights, client_ids, positions, rng, self.noise_secret)
