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

Each block is a wrapper, `Algorithm -> Algorithm` (`server_optimizer`, `fedprox`, `scaffold`,
`compression`), and `wrap` composes the ones the config switches on with `chain`, as optax.chain
composes GradientTransformations; `wrappers` names them in their order, innermost first.

Secure aggregation and DP act on the sum, so they live in the round engine
(`core/engine.py`, `core/secure_aggregation.py`, `core/privacy.py`); participation and
stragglers choose the cohort (`data/participation.py`). Adaptive clipping (`dp.clip_rule=
'adaptive'`) is a block only for its state: `adaptive_clip` keeps the clip C_t in the server's
'blocks' (privacy.CLIP_KEY), which the engine reads before a round and writes after it.

The wrapped method's state: `server = {'method': <its own>, 'blocks': {...}}` and
`clients = {'method': <its own>, 'blocks': {...}}` (`nested`, first in every chain), with the
blocks' part holding, each block under its own key, the server optimizer's state ('optimizer') and
SCAFFOLD's c ('control') on the server, SCAFFOLD's c_i ('control') and top-k's residual
('residual') on the clients: one 'blocks' dict, so that checkpoints keep one layout
(tests/core/test_blocks_checkpoint.py restores one written before the wrappers). With every switch
off `wrap` is not applied, so a run is today's bit for bit.

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

import contextlib
import functools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_face.core import compression as codecs
from fedjax_face.core import local_terms, privacy, server_optimizers
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

# The key SCAFFOLD's Δc travels under in a client's update.
CONTROL_DELTA = 'scaffold_delta_c'
# The key SCAFFOLD's c travels under in the broadcast's shared part.
SCAFFOLD_C = 'scaffold_c'
# The keys the blocks add to an update: the method never sees them, and no codec codes them.
BLOCK_KEYS = (CONTROL_DELTA,)


class Blocks(NamedTuple):
  """What `wrap` adds (from `from_config`)."""
  server_optimizer: optax.GradientTransformation | None = None
  correction: str = 'none'
  prox_mu: float = 0.0
  client_learning_rate: float = 0.0
  compression: codecs.Spec | None = None
  adaptive_clip: float = 0.0   # > 0: the initial clip C_0 of `dp.clip_rule='adaptive'`

  @property
  def active(self) -> bool:
    return (self.server_optimizer is not None or self.correction != 'none'
            or self.compression is not None or self.adaptive_clip > 0)


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
          comp.codec, int(comp.bits), float(comp.fraction)),
      adaptive_clip=(float(config.dp.clip_norm) if config.dp.enabled and
                     config.dp.get('clip_rule', 'fixed') == 'adaptive' else 0.0))


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


# A block: the method's `Algorithm` in, the same with the block around it out.
Wrapper = Callable[[Algorithm], Algorithm]


def chain(*wrappers: Wrapper) -> Wrapper:
  """The wrappers applied in order, the first next to the method (as optax.chain applies its
  transformations in order to the updates)."""
  def wrapped(algorithm: Algorithm) -> Algorithm:
    for wrapper in wrappers:
      algorithm = wrapper(algorithm)
    return algorithm
  return wrapped


def wrap(algorithm: Algorithm, blocks: Blocks, num_clients: int) -> Algorithm:
  """`algorithm` with `blocks` (see the module docstring); `num_clients` is N of SCAFFOLD's
  server step c ← c + |S|/N · mean(Δc) and the number of rows of the clients' state."""
  return chain(*wrappers(blocks, num_clients))(algorithm)


def wrappers(blocks: Blocks, num_clients: int) -> list[Wrapper]:
  """The chain `blocks` switches on, innermost first (`nested` always). The order is the
  data's: compression outermost, so that the server decodes before anything reads an update and
  a client encodes the update SCAFFOLD measured its variates on; the server optimizer next to the
  method, so that it steps along the method's own server step."""
  chosen = [nested]
  if blocks.server_optimizer is not None:
    chosen.append(server_optimizer(blocks.server_optimizer))
  if blocks.correction == 'fedprox':
    chosen.append(fedprox(blocks.prox_mu))
  if blocks.correction == 'scaffold':
    chosen.append(scaffold(blocks.client_learning_rate, num_clients))
  if blocks.compression is not None:
    chosen.append(compression(blocks.compression, num_clients))
  if blocks.adaptive_clip > 0:
    chosen.append(adaptive_clip(blocks.adaptive_clip))
  return chosen


def nested(algorithm: Algorithm) -> Algorithm:
  """`algorithm` with its state under 'method' and an empty 'blocks' beside it (server and
  clients), for the block wrappers to fill; the method sees its own part only."""

  def init(rng, start=None):
    state = algorithm.init(rng, start)
    return RoundState(server={'method': state.server, 'blocks': {}},
                      clients={'method': state.clients, 'blocks': {}}, round=state.round)

  def broadcast(server, client_ids, round_index, rng):
    return algorithm.broadcast(server['method'], client_ids, round_index, rng)

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    result = algorithm.client_update(client_input, private['method'], data, rng)
    return ClientResult(update=dict(result.update),
                        private={'method': result.private, 'blocks': {}},
                        metrics=dict(result.metrics))

  def server_update(server, updates, weights, client_ids, round_index, rng):
    return {'method': algorithm.server_update(server['method'], updates, weights, client_ids,
                                              round_index, rng),
            'blocks': dict(server['blocks'])}

  def unwrapped(state: RoundState) -> RoundState:
    return RoundState(server=state.server['method'], clients=state.clients['method'],
                      round=state.round)

  personalized = None if algorithm.personalized is None else (
      lambda state: algorithm.personalized(unwrapped(state)))
  return algorithm._replace(
      init=init, broadcast=broadcast, client_update=client_update, server_update=server_update,
      eval_variables=lambda server: algorithm.eval_variables(server['method']),
      class_embeddings=lambda state: algorithm.class_embeddings(unwrapped(state)),
      personalized=personalized,
      summary=None if algorithm.summary is None else (
          lambda state: algorithm.summary(unwrapped(state))))


def server_optimizer(optimizer: optax.GradientTransformation) -> Wrapper:
  """FedAvgM / FedAdam / FedYogi: `optimizer` steps from the server's model before the round
  along the method's own step to the model after it (`core/server_optimizers.py`), on the chosen
  leaves of the averaged keys. Its state: the server's 'optimizer'."""

  def wrapper(inner: Algorithm) -> Algorithm:
    def init(rng, start=None):
      state = inner.init(rng, start)
      method = state.server['method']
      averaged = _averaged(inner, _one_origin_shape(inner, state.server))
      missing = [k for k in averaged if k not in method]
      if missing:
        raise ValueError(f'server_optimizer: {inner.name} averages update keys {missing} '
                         'that its server state does not hold under the same name, so their '
                         'pseudo-gradient is not defined.')
      own = optimizer.init(chosen_leaves({k: method[k] for k in averaged}))
      return state.replace(server={**state.server,
                                   'blocks': {**state.server['blocks'], 'optimizer': own}})

    def server_update(server, updates, weights, client_ids, round_index, rng):
      new = inner.server_update(server, updates, weights, client_ids, round_index, rng)
      before, after = server['method'], new['method']
      keys = [k for k in before if k in updates and k not in inner.client_rows]
      stepped, own = server_optimizers.step(
          optimizer, chosen_leaves({k: before[k] for k in keys}),
          chosen_leaves({k: after[k] for k in keys}), server['blocks']['optimizer'])
      return {'method': {**after, **replace_leaves({k: after[k] for k in keys}, stepped)},
              'blocks': {**new['blocks'], 'optimizer': own}}

    return inner._replace(init=init, server_update=server_update)
  return wrapper


def adaptive_clip(initial: float) -> Wrapper:
  """The state of DP's adaptive clip (core/privacy.py): C_0 = `initial` in the server's
  'blocks' under privacy.CLIP_KEY. The method never sees it and every server step keeps the
  'blocks' it is given; the engine clips with it and writes C_{t+1} after the server step."""

  def wrapper(inner: Algorithm) -> Algorithm:
    def init(rng, start=None):
      state = inner.init(rng, start)
      return state.replace(server=privacy.with_clip(state.server, initial))
    return inner._replace(init=init)
  return wrapper


def fedprox(mu: float) -> Wrapper:
  """FedProx: μ/2·‖θ − θ_received‖² in the client's optimizer (`core/local_terms.py`) for what
  it received for its averaged keys. No state."""

  def wrapper(inner: Algorithm) -> Algorithm:
    def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
      with _local_terms(inner, 'fedprox', _received(inner, client_input), None, mu):
        return inner.client_update(client_input, private, data, rng)
    return inner._replace(client_update=client_update)
  return wrapper


def scaffold(learning_rate: float, num_clients: int) -> Wrapper:
  """SCAFFOLD, option II (Karimireddy et al. 2020, Alg. 1): c goes down with the model, each
  local gradient is corrected by c − c_i, the client sends Δc_i beside its update, and the
  server moves c by |S|/N · mean(Δc) (line 17). Its state: the server's and the clients'
  'control' (c; c_i, one row per client), keyed by `chosen_leaves` path."""

  def wrapper(inner: Algorithm) -> Algorithm:
    def init(rng, start=None):
      state = inner.init(rng, start)
      zeros = {p: jnp.zeros(s.shape, jnp.float32) for p, s in
               chosen_leaves(_averaged(inner, _one_origin_shape(inner, state.server))).items()}
      per_client = {p: jnp.zeros((num_clients,) + z.shape) for p, z in zeros.items()}
      return state.replace(
          server={**state.server, 'blocks': {**state.server['blocks'], 'control': zeros}},
          clients={**state.clients, 'blocks': {**state.clients['blocks'], 'control': per_client}})

    def broadcast(server, client_ids, round_index, rng):
      client_input = inner.broadcast(server, client_ids, round_index, rng)
      return client_input._replace(
          shared={**client_input.shared, SCAFFOLD_C: server['blocks']['control']})

    def update_origin(client_input: ClientInput):
      origin = dict(inner.update_origin(_without_c(client_input)))
      origin[CONTROL_DELTA] = jax.tree.map(jnp.zeros_like, client_input.shared[SCAFFOLD_C])
      return origin

    def server_update(server, updates, weights, client_ids, round_index, rng):
      new = inner.server_update(server, {k: v for k, v in updates.items() if k != CONTROL_DELTA},
                                weights, client_ids, round_index, rng)
      share = (weights > 0).astype(jnp.float32) / num_clients   # real clients' |S|/N
      control = jax.tree.map(lambda c, d: c + jnp.tensordot(share, d, axes=1),
                             server['blocks']['control'], updates[CONTROL_DELTA])
      return {**new, 'blocks': {**new['blocks'], 'control': control}}

    return inner._replace(init=init, broadcast=broadcast, update_origin=update_origin,
                          client_update=functools.partial(_scaffold_client, inner, learning_rate),
                          server_update=server_update)
  return wrapper


def _scaffold_client(inner: Algorithm, learning_rate: float, client_input: ClientInput, private,
                     data, rng) -> ClientResult:
  """SCAFFOLD's client: trains with c − c_i added to its gradients, then c_i⁺ by option II
  (`local_terms.scaffold_control`) for the leaves its optimizer tied; Δc_i goes up."""
  c, c_i = client_input.shared[SCAFFOLD_C], private['blocks']['control']
  method_input = _without_c(client_input)
  received = _received(inner, method_input)
  paths = list(received)
  with _local_terms(inner, 'scaffold', received, [c[p] - c_i[p] for p in paths], 0.0) as matched:
    result = inner.client_update(method_input, private, data, rng)
  sent = chosen_leaves(_averaged(inner, result.update))
  lr = learning_rate * client_input.shared.get('lr_scale', 1.0)
  new = local_terms.scaffold_control(
      [c_i[p] for p in paths], [c[p] for p in paths], [received[p] for p in paths],
      [sent[p] for p in paths], local_terms.active_steps(data['mask']), lr)
  tied = {p: (new[s] if s in matched else c_i[p]) for s, p in enumerate(paths)}
  return ClientResult(
      update={**result.update, CONTROL_DELTA: {p: tied[p] - c_i[p] for p in paths}},
      private={**result.private, 'blocks': {**result.private['blocks'], 'control': tied}},
      metrics=result.metrics)


def compression(spec: codecs.Spec, num_clients: int) -> Wrapper:
  """A client sends its update minus what it received, encoded by `spec` (`core/compression.py`;
  top-k with its error-feedback residual, the clients' 'residual'); the server decodes it
  against the origin it recomputes from its own state. BatchNorm's statistics and the blocks'
  own keys (SCAFFOLD's Δc) cross as they are."""

  def wrapper(inner: Algorithm) -> Algorithm:
    probe = jax.random.PRNGKey(0)   # origins do not depend on the broadcast's key

    def init(rng, start=None):
      state = inner.init(rng, start)
      if spec.codec != 'topk':
        return state
      origin = _method_part(_one_origin_shape(inner, state.server))
      residual = jax.tree.map(lambda z: jnp.zeros((num_clients,) + z.shape, jnp.float32),
                              codecs.residual_like(origin))
      return state.replace(
          clients={**state.clients, 'blocks': {**state.clients['blocks'], 'residual': residual}})

    def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
      origin = _method_part(inner.update_origin(client_input))
      result = inner.client_update(client_input, private, data, rng)
      # The difference for coded leaves; the statistics (and integers) as the client has them.
      delta = jax.tree_util.tree_map_with_path(
          lambda path, u, o: u - o if codecs.is_coded(path, u) else u,
          _method_part(result.update), origin)
      payload, residual = codecs.encode(spec, delta, private['blocks'].get('residual'), rng)
      kept = dict(result.private['blocks'])
      if residual is not None:
        kept['residual'] = residual
      return ClientResult(update={**payload, **_blocks_part(result.update)},
                          private={**result.private, 'blocks': kept}, metrics=result.metrics)

    def server_update(server, updates, weights, client_ids, round_index, rng):
      origins = _method_part(_origins(inner, server, client_ids, round_index, probe))
      decoded = jax.vmap(lambda p, o: codecs.decode(spec, p, o))(_method_part(updates), origins)
      # Coded leaves back from their difference; the statistics stay as the clients sent them,
      # so the method averages them exactly as in an uncompressed round.
      restored = jax.tree_util.tree_map_with_path(
          lambda path, o, d: o + d if codecs.is_coded(path, o) else d, origins, decoded)
      return inner.server_update(server, {**restored, **_blocks_part(updates)}, weights,
                                 client_ids, round_index, rng)

    return inner._replace(init=init, client_update=client_update, server_update=server_update)
  return wrapper


# What the wrappers share: which keys are averaged, what a client received, FedProx's and
# SCAFFOLD's local terms.

def _averaged(algorithm: Algorithm, tree: dict) -> dict:
  """`tree` without the client's own class rows (`Algorithm.client_rows`)."""
  return {k: v for k, v in tree.items() if k not in algorithm.client_rows}


def _method_part(update: dict) -> dict:
  """An update (or its origin) without the keys the blocks add to it."""
  return {k: v for k, v in update.items() if k not in BLOCK_KEYS}


def _blocks_part(update: dict) -> dict:
  return {k: v for k, v in update.items() if k in BLOCK_KEYS}


def _without_c(client_input: ClientInput) -> ClientInput:
  """What the method receives: the broadcast without SCAFFOLD's c."""
  return client_input._replace(
      shared={k: v for k, v in client_input.shared.items() if k != SCAFFOLD_C})


def _take(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def _origins(algorithm: Algorithm, server, client_ids, round_index, rng):
  """Per cohort row, what each client received for its update's keys (the server's view)."""
  client_input = algorithm.broadcast(server, client_ids, round_index, rng)
  return jax.vmap(lambda row: algorithm.update_origin(ClientInput(client_input.shared, row)),
                  axis_size=len(client_ids))(client_input.per_client)


def _one_origin_shape(algorithm: Algorithm, server):
  """One client's origin, as shapes."""
  ids = jnp.zeros((1,), jnp.int32)
  probe = jax.random.PRNGKey(0)
  return jax.eval_shape(lambda s: _take(_origins(algorithm, s, ids, jnp.int32(0), probe), 0),
                        server)


def _received(algorithm: Algorithm, client_input: ClientInput) -> dict:
  """{path: array} the client received for its averaged keys' chosen leaves: the very arrays
  its method trains from, which `local_terms.applied` ties by identity."""
  return chosen_leaves(_averaged(algorithm, algorithm.update_origin(client_input)))


@contextlib.contextmanager
def _local_terms(algorithm: Algorithm, name: str, received: dict, corrections, mu: float):
  """While the client trains: FedProx's term (`mu`) and SCAFFOLD's `corrections` on the
  `received` leaves; yields the slots its optimizer tied. A method whose optimizer tied none is
  refused."""
  with local_terms.applied(list(received.values()), corrections, mu) as matched:
    yield matched
  if not matched:
    raise ValueError(f'optimizer.correction={name!r}: {algorithm.name}\'s client '
                     'optimizer trains none of the arrays it received for its averaged '
                     'update keys, so FedProx / SCAFFOLD cannot reach its model.')


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
  if blocks.adaptive_clip > 0:
    on.append("dp.clip_rule='adaptive'")
  return ', '.join(on)
