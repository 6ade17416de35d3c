"""FedFV: federated face verification via equivalent class embeddings (Liu et al. 2022, Alg. 2).

Every client is one person: it holds its own images and its own class embedding w_i, and may see
no one else's. Alone, its softmax has one class and is constantly 0 (Sec. 2.1). Each round the
server sends every selected client, besides the backbone theta and w_i, n *equivalent class
embeddings* W~ (Alg. 2 lines 6-11). Each is the normalised mean of k L2-normalised class
embeddings of clients NOT selected this round (Eq. 5; the paper's k = 2, FedFV(k) in its
Table 2), so a client never pushes away from itself or from a client training beside it. The
client trains the normalised softmax of Eq. 2 over [w_i ; W~] with W~ held fixed (line 4 of the
client: trainable W~ collapses to w_i = -w~) and sends back theta_i and w_i only (line 6). The
server averages theta with weights n_i (line 13) and stores the new w_i.

Readings (each a config switch where it matters):
  * Eq. 2 writes plain cosines as logits. The paper follows the normalised-softmax works it cites
    (b = 0, ||w|| = ||f|| = 1), which scale cosines by s; configs/fedfv/ set `head.loss='cosface'`
    with `head.margin=0` (CosFace with m = 0 is Eq. 2 with logits s·cos) and `head.scale` = s.
    s = 1 is Eq. 2 to the letter.
  * "Randomly select two class embeddings" (line 7): the k members of one equivalent embedding are
    distinct clients; the n embeddings are drawn independently (a client may serve in several).
  * Alg. 2 builds one W~ per round and sends it to every selected client (`fedfv.draw =
    'per_round'`); `'per_client'` draws each client its own W~ (from a key folded with its id).
  * The server initialises every w_i (line 1) and keeps the current ones; a client not selected
    keeps its last w_i on the server.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common
from fedjax_face.core import aggregation, arrays, checks, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import federated

ONE_CLIENT = False
DRAWS = ('per_round', 'per_client')


def config_section() -> ml_collections.ConfigDict:
  """`config.fedfv` (configs/fedfv/fedfv.py)."""
  c = ml_collections.ConfigDict()
  c.num_equivalent = 100    # n, equivalent class embeddings per client (FedFV-n, Table 1)
  c.group_size = 2          # k, class embeddings fused into each (FedFV(k), Table 2; Eq. 5: 2)
  c.draw = 'per_round'      # one W~ for the round's cohort (Alg. 2) | 'per_client'
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedfv', 'fedfv.config_section() (configs/fedfv/fedfv.py)')
  checks.check_int('fedfv.num_equivalent', c.num_equivalent)
  checks.check_int('fedfv.group_size', c.group_size)
  checks.check_choice('fedfv.draw', c.draw, DRAWS)
  if c.group_size < 2:
    raise ValueError(f'config.fedfv.group_size={c.group_size}; expected at least 2: an '
                     'equivalent embedding of one class embedding is that client\'s own '
                     'embedding, which FedFV never sends to another client.')
  if config.federated.partition != 'one_per_client':
    raise ValueError(f'config.federated.partition={config.federated.partition!r}; FedFV is the '
                     'one-identity-per-client setting: expected \'one_per_client\'.')
  fl = config.federated
  cohort = federated.cohort_size(fl.num_clients, fl.participation)
  if c.group_size > fl.num_clients - cohort:
    raise ValueError(f'config.fedfv.group_size={c.group_size} but only {fl.num_clients - cohort} '
                     f'clients are not selected in a round ({fl.num_clients} clients, {cohort} '
                     'per round): equivalent embeddings are built from '
                     'non-selected clients only. Lower fedfv.group_size or '
                     'federated.participation.')


def variant_name(config) -> str:
  """'fedfv-<n>' (Table 1), with '(k)' when k is not 2 (Table 2)."""
  c = config.fedfv
  name = f'fedfv-{c.num_equivalent}'
  return name if c.group_size == 2 else f'{name}({c.group_size})'


def draw_groups(rng: jax.Array, eligible: jax.Array, num: int, group_size: int) -> jax.Array:
  """`[num, group_size]` client ids: each row k distinct clients drawn uniformly from `eligible`.

  Gumbel top-k: the k largest of (Gumbel noise, -inf where not eligible) are a uniform draw of k
  distinct eligible clients; fixed shapes, so it runs inside the jitted round. Needs at least
  `group_size` eligible clients (`check_config`).
  """
  masked = jnp.where(eligible, 0.0, -jnp.inf)

  def one(key):
    return jax.lax.top_k(jax.random.gumbel(key, eligible.shape) + masked, group_size)[1]

  return jax.vmap(one)(jax.random.split(rng, num))


def equivalent_embeddings(class_embeddings: jax.Array, groups: jax.Array) -> jax.Array:
  """Eq. 5 for each row of `groups` `[n, k]`: w~ = w_bar / ||w_bar||, w_bar the mean of the k
  L2-normalised class embeddings `class_embeddings [C, d]` it names. -> `[n, d]`."""
  unit = arrays.l2_normalize(class_embeddings)
  w_bar = jnp.mean(unit[groups], axis=1)      # Eq. 5, first line (1/k for k > 2, Sec. 3.1)
  return arrays.l2_normalize(w_bar)           # Eq. 5, second line


def not_selected(num_clients: int, client_ids: jax.Array) -> jax.Array:
  """`[C]` bool: the clients outside this round's cohort, R_t (Alg. 2 line 5)."""
  return jnp.ones(num_clients, bool).at[client_ids].set(False, mode='drop')


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedFV over a one-identity-per-client partition `fed` (a `data.federated.FederatedData`)."""
  if fed.max_classes != 1:
    raise ValueError(f'FedFV needs one identity per client; the partition gives up to '
                     f'{fed.max_classes} (federated.partition=\'one_per_client\').')
  c = config.fedfv
  train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  num_clients = fed.num_clients

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method='fedfv')
    server = {'model': variables, 'W': w}
    # float16: each client's loss scale, kept between rounds (core/loss_scale.py); {} otherwise.
    clients = common.initial_loss_scales(model, num_clients)
    return RoundState(server=server, clients=clients, round=jnp.zeros((), jnp.int32))

  def equivalents(server, eligible, rng):
    groups = draw_groups(rng, eligible, c.num_equivalent, c.group_size)   # lines 6-9
    return equivalent_embeddings(server['W'][:, 0], groups)                # line 10: W~

  def broadcast(server, client_ids, round_index, rng):
    eligible = not_selected(num_clients, client_ids)
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    per_client = {'W': aggregation.gather_clients(server['W'], client_ids)}    # w_i, line 11
    if c.draw == 'per_round':
      shared['W_eq'] = equivalents(server, eligible, rng)
    else:
      keys = jax.vmap(lambda i: jax.random.fold_in(rng, i))(client_ids)
      per_client['W_eq'] = jax.vmap(lambda k: equivalents(server, eligible, k))(keys)
    return ClientInput(shared=shared, per_client=per_client)

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    w_eq = client_input.shared.get('W_eq', client_input.per_client.get('W_eq'))
    model_vars, w, opt_state, metrics = train(
        client_input.shared['model'], client_input.per_client['W'], data, rng,
        fixed_classes=w_eq, lr_scale=client_input.shared.get('lr_scale'),
        loss_scale_state=private.get('loss_scale'))
    kept = {**private, **common.kept_loss_scale(private, opt_state)}
    return ClientResult(update={'model': model_vars, 'W': w}, private=kept,   # client line 6
                        metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del round_index, rng
    return {'model': aggregation.weighted_mean(updates['model'], weights),        # line 13
            'W': aggregation.scatter_clients(server['W'], client_ids, updates['W'])}

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.server['W'], identity_table, fed.num_identities)

  return Algorithm(name='fedfv', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   update_origin=lambda ci: origin_by_key(ci, ('model', 'W')), client_rows=('W',))
