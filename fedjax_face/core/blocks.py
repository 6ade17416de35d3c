"""The federated building blocks every model-sending method gets from config switches, wrapped
around its `Algorithm` without touching its module.

  server optimizer   `server_optimizer.name`: FedAvgM / FedAdam / FedYogi on the pseudo-gradient
                     (`core/server_optimizers.py`), after the method's own server step;
  local correction   `optimizer.correction`: FedProx's proximal term or SCAFFOLD's control
                     variates (option II) in the client's optimizer (`core/local_terms.py`);
  compression        `compression.codec`: what a client sends is its update minus what it
                     received, quantized or top-k with error feedback (`core/compression.py`),
                     and the server decodes it before the method's server step; BatchNorm's
                     running statistics cross as they are (below).

Secure aggregation and DP act on the sum, so they live in the round engine
(`core/engine.py`, `core/secure_aggregation.py`, `core/privacy.py`); participation and
stragglers choose the cohort (`data/participation.py`).

The wrapped method's state: `server = {'method': <its own>, 'blocks': {...}}` and
`clients = {'method': <its own>, 'blocks': {...}}`, with the blocks' part holding the server
optimizer's state and SCAFFOLD's c (server), SCAFFOLD's c_i and top-k's residual (clients). With
every switch off `wrap` is not applied, so a run is today's bit for bit.

Which parameters: the update's averaged keys (every key but the client's own class rows,
`Algorithm.client_rows`), their float leaves outside BatchNorm's 'batch_stats'. The server decodes
a compressed update against the origin it recomputes from its own state (`update_origin` of a
broadcast of the pre-round server); every method here sends the model it received for those
keys, which no server key changes (tests/core/test_blocks.py checks it per method).

BatchNorm's running statistics ('batch_stats') are not a gradient, and no block treats them as
one. Under every codec each client sends its own statistics uncompressed (float32, counted so by
`core/communication.py`), with no error-feedback residual, and the server hands them to the
method's server step as sent. So the server's running mean and variance are the method's weighted
mean of the clients' statistics, with the client weights of an uncompressed round, whatever the
codec (tests/core/test_blocks_statistics.py). A server optimizer takes no step on them either:
its pseudo-gradient covers `chosen_leaves` only, so the statistics keep the method's mean, as
they do without compression. Momentum or an adaptive step on a running variance would carry
past rounds' changes into it and could make it negative, as top-k's error feedback did.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_face.core import compression as codecs
from fedjax_face.core import local_terms, server_optimizers
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

# The key SCAFFOLD's Δc travels under in a client's update.
CONTROL_DELTA = 'scaffold_delta_c'


class Blocks(NamedTuple):
  """What `wrap` adds (from `from_config`)."""
  server_optimizer: optax.GradientTransformation | None = None
  correction: str = 'none'
  prox_mu: float = 0.0
  client_learning_rate: float = 0.0
  compression: codecs.Spec | None = None

  @property
  def active(self) -> bool:
    return (self.server_optimizer is not None or self.correction != 'none'
            or self.compression is not None)


def from_config(config) -> Blocks:
  """The blocks `config` switches on (config_lib.validate has checked the fields)."""
  so = config.server_optimizer
  optimizer = None if so.name == 'fedavg' and so.learning_rate in (0, 1) else (
      server_optimizers.make(so.name, learning_rate=so.learning_rate, momentum=so.momentum,
                             b1=so.b1, b2=so.b2, tau=so.tau))
  comp = config.compression
  return Blocks(
      server_optimizer=optimizer, correction=config.optimizer.correction,
      prox_mu=float(config.optimizer.prox_mu) if config.optimizer.correction == 'fedprox' else 0.0,
      client_learning_rate=float(config.optimizer.learning_rate),
      compression=None if comp.codec == 'none' else codecs.Spec(
          comp.codec, int(comp.bits), float(comp.fraction)))


def method_start(start):
  """A finished run's final state (`Algorithm.init`'s `start`) as its method keeps it: the
  'method' part of a run that had the blocks on, else as it is (the blocks' own state, a server
  optimizer's moments or SCAFFOLD's variates, starts afresh)."""
  server = None if start is None else start.get('server')
  if not (isinstance(server, dict) and set(server) == {'method', 'blocks'}):
    return start
  return {**start, 'server': server['method'], 'clients': start['clients']['method']}


def _path_name(path) -> str:
  return '/'.join(str(getattr(p, 'key', getattr(p, 'idx', p))) for p in path)


def chosen_leaves(tree) -> dict:
  """{path: leaf} of the float leaves outside 'batch_stats' (what the blocks act on: the
  codecs, a server optimizer, FedProx and SCAFFOLD)."""
  return {_path_name(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
          if codecs.is_coded(path, leaf)}


def replace_leaves(tree, values: dict):
  """`tree` with the leaves at `values`' paths replaced."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: values.get(_path_name(path), leaf), tree)


def _take(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def wrap(algorithm: Algorithm, blocks: Blocks, num_clients: int) -> Algorithm:
  """`algorithm` with `blocks` (see the module docstring); `num_clients` is N of SCAFFOLD's
  server step c ← c + |S|/N · mean(Δc)."""
  client_rows = set(algorithm.client_rows)
  scaffold = blocks.correction == 'scaffold'
  probe = jax.random.PRNGKey(0)

  def origin_of(server, client_ids, round_index, rng):
    """Per cohort row, what each client received for its update's keys (the server's view)."""
    client_input = algorithm.broadcast(server, client_ids, round_index, rng)
    return jax.vmap(lambda row: algorithm.update_origin(ClientInput(client_input.shared, row)),
                    axis_size=len(client_ids))(client_input.per_client)

  def averaged(tree: dict) -> dict:
    return {k: v for k, v in tree.items() if k not in client_rows}

  def shapes(server):
    """(origin of one client, its averaged keys' chosen leaves), as shapes."""
    ids = jnp.zeros((1,), jnp.int32)
    origin = jax.eval_shape(lambda s: _take(origin_of(s, ids, jnp.int32(0), probe), 0), server)
    return origin, chosen_leaves(averaged(origin))

  def init(rng, start=None):
    state = algorithm.init(rng, start)
    origin, chosen = shapes(state.server)
    missing = [k for k in averaged(origin) if k not in state.server]
    if blocks.server_optimizer is not None and missing:
      raise ValueError(f'server_optimizer: {algorithm.name} averages update keys {missing} '
                       'that its server state does not hold under the same name, so their '
                       'pseudo-gradient is not defined.')
    zeros = {p: jnp.zeros(s.shape, jnp.float32) for p, s in chosen.items()}
    server, clients = {}, {}
    if blocks.server_optimizer is not None:
      server['optimizer'] = blocks.server_optimizer.init(
          chosen_leaves({k: state.server[k] for k in averaged(origin)}))
    if scaffold:
      server['control'] = zeros
      clients['control'] = {p: jnp.zeros((num_clients,) + z.shape) for p, z in zeros.items()}
    if blocks.compression is not None and blocks.compression.codec == 'topk':
      clients['residual'] = jax.tree.map(
          lambda z: jnp.zeros((num_clients,) + z.shape, jnp.float32),
          codecs.residual_like(origin))
    return RoundState(server={'method': state.server, 'blocks': server},
                      clients={'method': state.clients, 'blocks': clients}, round=state.round)

  def broadcast(server, client_ids, round_index, rng):
    client_input = algorithm.broadcast(server['method'], client_ids, round_index, rng)
    if scaffold:   # c goes down with the model
      client_input = client_input._replace(
          shared={**client_input.shared, 'scaffold_c': server['blocks']['control']})
    return client_input

  def method_input(client_input: ClientInput) -> ClientInput:
    return client_input._replace(
        shared={k: v for k, v in client_input.shared.items() if k != 'scaffold_c'})

  def update_origin(client_input: ClientInput):
    origin = dict(algorithm.update_origin(method_input(client_input)))
    if scaffold:
      origin[CONTROL_DELTA] = jax.tree.map(jnp.zeros_like, client_input.shared['scaffold_c'])
    return origin

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    inner_input = method_input(client_input)
    origin = algorithm.update_origin(inner_input)
    received = chosen_leaves(averaged(origin))
    own = private['blocks']
    corrections = None
    if scaffold:
      c = client_input.shared['scaffold_c']
      corrections = [c[p] - own['control'][p] for p in received]   # c − c_i
    if blocks.correction == 'none':
      result = algorithm.client_update(inner_input, private['method'], data, rng)
      matched = set()
    else:
      with local_terms.applied(list(received.values()), corrections, blocks.prox_mu) as matched:
        result = algorithm.client_update(inner_input, private['method'], data, rng)
      if not matched:
        raise ValueError(f'optimizer.correction={blocks.correction!r}: {algorithm.name}\'s client '
                         'optimizer trains none of the arrays it received for its averaged '
                         'update keys, so FedProx / SCAFFOLD cannot reach its model.')
    update, kept, metrics = dict(result.update), {}, dict(result.metrics)
    if scaffold:
      sent = chosen_leaves(averaged(result.update))
      lr = blocks.client_learning_rate * client_input.shared.get('lr_scale', 1.0)
      steps = local_terms.active_steps(data['mask'])
      paths = list(received)
      new = local_terms.scaffold_control(
          [own['control'][p] for p in paths], [client_input.shared['scaffold_c'][p] for p in paths],
          [received[p] for p in paths], [sent[p] for p in paths], steps, lr)
      tied = {p: (new[s] if s in matched else own['control'][p]) for s, p in enumerate(paths)}
      kept['control'] = tied
      update[CONTROL_DELTA] = {p: tied[p] - own['control'][p] for p in paths}
    if blocks.compression is not None:
      method_update = {k: v for k, v in update.items() if k != CONTROL_DELTA}
      # The difference for coded leaves; the statistics (and integers) as the client has them.
      delta = jax.tree_util.tree_map_with_path(
          lambda path, u, o: u - o if codecs.is_coded(path, u) else u, method_update, origin)
      payload, residual = codecs.encode(blocks.compression, delta, own.get('residual'), rng)
      update = {**payload, **({CONTROL_DELTA: update[CONTROL_DELTA]} if scaffold else {})}
      if residual is not None:
        kept['residual'] = residual
    return ClientResult(update=update, private={'method': result.private, 'blocks': kept},
                        metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    inner = server['method']
    method_updates = {k: v for k, v in updates.items() if k != CONTROL_DELTA}
    if blocks.compression is not None:   # decode against what each client received
      origins = origin_of(inner, client_ids, round_index, probe)
      origins = {k: v for k, v in origins.items() if k != CONTROL_DELTA}
      decoded = jax.vmap(lambda p, o: codecs.decode(blocks.compression, p, o))(
          method_updates, origins)
      # Coded leaves back from their difference; the statistics stay as the clients sent them,
      # so the method averages them exactly as in an uncompressed round.
      method_updates = jax.tree_util.tree_map_with_path(
          lambda path, o, d: o + d if codecs.is_coded(path, o) else d, origins, decoded)
    new_inner = algorithm.server_update(inner, method_updates, weights, client_ids, round_index,
                                        rng)
    own = dict(server['blocks'])
    if blocks.server_optimizer is not None:
      keys = [k for k in inner if k in method_updates and k not in client_rows]
      before = chosen_leaves({k: inner[k] for k in keys})
      after = chosen_leaves({k: new_inner[k] for k in keys})
      stepped, own['optimizer'] = server_optimizers.step(blocks.server_optimizer, before, after,
                                                         own['optimizer'])
      new_inner = {**new_inner, **replace_leaves({k: new_inner[k] for k in keys}, stepped)}
    if scaffold:   # c ← c + |S|/N · mean over the cohort's real clients of Δc (Alg. 1 line 17)
      real = (weights > 0).astype(jnp.float32)
      share = real / num_clients
      own['control'] = jax.tree.map(
          lambda c, d: c + jnp.tensordot(share, d, axes=1), own['control'], updates[CONTROL_DELTA])
    return {'method': new_inner, 'blocks': own}

  def unwrapped(state: RoundState) -> RoundState:
    return RoundState(server=state.server['method'], clients=state.clients['method'],
                      round=state.round)

  personalized = None if algorithm.personalized is None else (
      lambda state: algorithm.personalized(unwrapped(state)))
  return algorithm._replace(
      init=init, broadcast=broadcast, client_update=client_update, server_update=server_update,
      eval_variables=lambda server: algorithm.eval_variables(server['method']),
      class_embeddings=lambda state: algorithm.class_embeddings(unwrapped(state)),
      personalized=personalized, update_origin=update_origin,
      summary=None if algorithm.summary is None else (
          lambda state: algorithm.summary(unwrapped(state))))


def check(config, method_name: str, refusal: str | None) -> None:
  """The combinations the blocks refuse, each with why (field names in the message)."""
  blocks = from_config(config)
  if not blocks.active:
    return
  if refusal:
    raise ValueError(f'{_switched_on(config, blocks)} with {method_name}: {refusal}')
  if blocks.correction != 'none' and config.federated.client_optimizer_state == 'keep':
    raise ValueError(f"optimizer.correction={blocks.correction!r} needs "
                     "federated.client_optimizer_state='reset': FedProx's anchor and SCAFFOLD's "
                     'correction are set when the client optimizer starts its round.')
  if config.dp.enabled and blocks.compression is not None:
    raise ValueError('compression.codec with dp.enabled: the clip must come before the encoding '
                     '(what the engine clips is the decoded update); not built yet.')
  if config.dp.enabled and blocks.correction == 'scaffold':
    raise ValueError("optimizer.correction='scaffold' with dp.enabled: SCAFFOLD's Δc leaves the "
                     'client too and would need its own clip and noise; not built.')
  if config.secure_aggregation.enabled and (blocks.compression is not None or
                                            blocks.correction == 'scaffold'):
    raise ValueError('secure_aggregation.enabled with compression.codec or SCAFFOLD: the ring '
                     'sums dense fixed-point vectors (top-k supports differ by client, quantized '
                     "codes need one shared scale, SCAFFOLD's Δc an unweighted mean); not built.")


def _switched_on(config, blocks: Blocks) -> str:
  """The fields of the blocks `from_config` switched on, for an error message."""
  on = []
  if blocks.server_optimizer is not None:
    on.append(f'server_optimizer.name={config.server_optimizer.name!r}')
  if blocks.correction != 'none':
    on.append(f'optimizer.correction={blocks.correction!r}')
  if blocks.compression is not None:
    on.append(f'compression.codec={blocks.compression.codec!r}')
  return ', '.join(on)
