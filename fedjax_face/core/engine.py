"""The round engine: select -> broadcast -> clients (vmap / map / loop) -> aggregate -> server step.

One compiled program serves every round: the cohort is padded to a fixed size with padding clients
(id = num_clients, weight 0, all-false masks), and client data arrive stacked and padded as
`[cohort, steps, batch, ...]`.

Backends for the clients axis (measured, not assumed — REFERENCE_NOTES §9, `python -m fedjax_face.bench`):
  vmap  all clients of the cohort at once (per-client weights become grouped convolutions);
  map   `map_width` clients at a time under vmap, the groups one after another (`lax.map`);
  loop  one client at a time: a Python loop over a jitted client update, the way fedjax and
        pfl-research run clients (fastest on XLA CPU, where vmapped convolutions are slow).
With a device mesh, the clients axis of `vmap` / `map` is laid over the mesh axis `clients`.

Each client's randomness is `fold_in(round_rng, client_id)`, so a round's result does not depend on
the backend, the cohort padding or the device count.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from fedjax_face.core import aggregation
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

BACKENDS = ('vmap', 'map', 'loop')
CLIENTS_AXIS = 'clients'


def make_mesh(num_devices: int | None = None) -> Mesh:
  """A 1-D mesh with axis `clients` over the first `num_devices` devices (default: all)."""
  devices = jax.devices()
  if num_devices is not None:
    if not 1 <= num_devices <= len(devices):
      raise ValueError(f'engine.num_devices={num_devices} but {len(devices)} devices are visible; '
                       f'expected 1..{len(devices)} (0 means all).')
    devices = devices[:num_devices]
  return Mesh(np.asarray(devices), (CLIENTS_AXIS,))


class RoundEngine:
  """Runs federated rounds of one `Algorithm` with one execution backend."""

  def __init__(self, algorithm: Algorithm, *, backend: str, map_width: int = 8,
               mesh: Mesh | None = None):
    if backend not in BACKENDS:
      raise ValueError(f'engine.backend={backend!r}; expected one of {BACKENDS}.')
    if map_width < 1:
      raise ValueError(f'engine.map_width={map_width}; expected a positive integer.')
    self.algorithm = algorithm
    self.backend = backend
    self.map_width = map_width
    self.mesh = mesh
    self.num_shards = 1 if mesh is None or backend == 'loop' else mesh.size
    if backend == 'map' and map_width % self.num_shards:
      raise ValueError(f'engine.map_width={map_width} must be a multiple of the device count '
                       f'{self.num_shards} so each group of clients splits over the devices.')
    self.trace_count = 0  # incremented at trace time: tests use it to catch recompilation
    if backend == 'loop':
      self._prepare = jax.jit(self._prepare_fn)
      self._client = jax.jit(self._one_client)
      self._finish = jax.jit(self._finish_fn)
    else:
      self._round = jax.jit(self._round_fn)

  def cohort_multiple(self) -> int:
    """Cohort sizes are padded up to a multiple of this (devices, map width)."""
    if self.backend == 'map':
      return self.map_width
    return self.num_shards

  # -- pure pieces ---------------------------------------------------------------------------

  def _one_client(self, shared, per_client, private, data, client_id, rng) -> ClientResult:
    rng = jax.random.fold_in(rng, client_id)
    return self.algorithm.client_update(ClientInput(shared, per_client), private, data, rng)

  def _prepare_fn(self, state: RoundState, client_ids):
    client_input = self.algorithm.broadcast(state.server, client_ids)
    private = aggregation.gather_clients(state.clients, client_ids)
    return client_input, private

  def _finish_fn(self, state: RoundState, results: ClientResult, weights, client_ids):
    self.trace_count += 1
    server = self.algorithm.server_update(state.server, results.update, weights, client_ids)
    clients = aggregation.scatter_clients(state.clients, client_ids, results.private)
    metrics = aggregation.weighted_mean(results.metrics, weights)
    return RoundState(server=server, clients=clients, round=state.round + 1), metrics

  def _shard(self, tree, axis: int):
    if self.num_shards == 1:
      return tree
    spec = P(*([None] * axis + [CLIENTS_AXIS]))
    sharding = NamedSharding(self.mesh, spec)
    return jax.tree.map(lambda x: jax.lax.with_sharding_constraint(x, sharding), tree)

  def _run_clients(self, client_input: ClientInput, private, data, client_ids, rng):
    over_clients = jax.vmap(self._one_client, in_axes=(None, 0, 0, 0, 0, None))
    xs = (client_input.per_client, private, data, client_ids)
    if self.backend == 'vmap':
      per_client, private, data, client_ids = self._shard(xs, axis=0)
      return over_clients(client_input.shared, per_client, private, data, client_ids, rng)
    # 'map': groups of map_width clients under vmap, the groups one after another.
    width = self.map_width
    groups = jax.tree.map(lambda x: x.reshape((-1, width) + x.shape[1:]), xs)
    groups = self._shard(groups, axis=1)
    run_group = lambda g: over_clients(client_input.shared, *g, rng)
    results = jax.lax.map(run_group, groups)
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), results)

  def _round_fn(self, state: RoundState, client_ids, weights, data, rng):
    client_input, private = self._prepare_fn(state, client_ids)
    results = self._run_clients(client_input, private, data, client_ids, rng)
    return self._finish_fn(state, results, weights, client_ids)

  # -- driver ------------------------------------------------------------------------------

  def run_round(self, state: RoundState, client_ids: np.ndarray, weights: np.ndarray,
                data: dict[str, np.ndarray], rng: jax.Array) -> tuple[RoundState, dict[str, Any]]:
    """One round over a padded cohort.

    Args:
      state: the current state.
      client_ids: int32 `[m]`, padding clients have id num_clients; m is a multiple of
        `cohort_multiple()`.
      weights: float32 `[m]` aggregation weights (n_k; 0 for padding clients).
      data: per-client arrays `[m, steps, batch, ...]`.
      rng: the round's key.

    Returns:
      (new state, metrics averaged over clients with `weights`).
    """
    m = len(client_ids)
    if m % self.cohort_multiple():
      raise ValueError(f'cohort of {m} clients is not a multiple of {self.cohort_multiple()}; '
                       'pad it with padding clients (see data.federated.pad_cohort).')
    client_ids = jnp.asarray(client_ids, jnp.int32)
    weights = jnp.asarray(weights, jnp.float32)
    if self.backend != 'loop':
      return self._round(state, client_ids, weights, data, rng)
    client_input, private = self._prepare(state, client_ids)
    results = []
    for i in range(m):
      take = lambda x, i=i: x[i]
      results.append(self._client(client_input.shared, jax.tree.map(take, client_input.per_client),
                                  jax.tree.map(take, private), jax.tree.map(take, data),
                                  client_ids[i], rng))
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *results)
    return self._finish(state, stacked, weights, client_ids)
