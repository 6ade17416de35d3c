"""FedGC: Federated Averaging with Gradient Correction (Niu & Deng, AAAI 2022, Algorithm 1).

Clients train the shared backbone theta and their own class embeddings W_k on their local softmax
(Alg. 1 lines 6-8) and send both back. The server averages the backbones with weights n_k / n
(line 11), stacks every client's W_k into W~ (line 12) — clients not selected this round keep the
server's last copy — and applies one step of the softmax regularizer (line 14, Eq. 5):

    W <- W~ - lambda·eta·grad Reg(W~)

with eta the clients' learning rate and lambda `config.fedgc.reg_lambda` (20 in the paper, Table
2). The regularizer form follows the loss (`config.fedgc.reg_form`, default: the loss's own form);
`config.fedgc.regularizer='cosine'` swaps in the cosine regularizer (FedCos, Table 4). Each client
then starts the next round from its corrected W_k. Client optimiser as in FedPE: SGD with momentum
reset every round.

The server works on one row per identity. In the identity-exclusive case that is just W~ in
another order. In the general case (the paper's "Extend FedGC to More General Case") an identity
held by a client group K_l has one copy per holder: the server averages the copies (a plain mean
over the holders), regularises the average only against classes none of its holders has
(`regularizers` module docstring), and sends the result back to every holder.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.algorithms import common, regularizers
from fedjax_face.core import aggregation
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState


def regularizer_kwargs(config) -> dict:
  """The regularizer's form and its scale / margin, matching the loss unless overridden."""
  form = config.fedgc.reg_form or config.head.loss
  head_kwargs = common.head_kwargs(config)
  kwargs = {'kind': config.fedgc.regularizer, 'form': form,
            'reduction': config.fedgc.reg_reduction}
  if form == 'softmax' and config.fedgc.regularizer == 'softmax':
    kwargs['self_gradient'] = bool(config.fedgc.reg_self_gradient)
  else:
    kwargs['scale'] = head_kwargs.get('scale', 64.0)
    kwargs['margin'] = head_kwargs.get('margin', 0.0)
  return kwargs


def identity_holders(identity_table: np.ndarray, num_identities: int):
  """(valid [N] bool, holders) of the identity rows: holders is the owner client id `[N]` when no
  identity is shared (no N x K matrix), else the `[N, K]` bool holder matrix."""
  num_clients = identity_table.shape[0]
  matrix = np.zeros((num_identities, num_clients), bool)
  for k in range(num_clients):
    ids = identity_table[k][identity_table[k] >= 0]
    matrix[ids, k] = True
  valid = matrix.any(axis=1)
  if (matrix.sum(axis=1) <= 1).all():
    return valid, np.where(valid, matrix.argmax(axis=1), -1).astype(np.int32)
  return valid, matrix


def identity_rows(w_slots, identity_table: np.ndarray, num_identities: int):
  """`[K, C_max, d]` per-client copies -> `[N, d]`: each identity's mean over its holders."""
  ids = identity_table.reshape(-1)
  slot_valid = ids >= 0
  rows = w_slots.reshape((-1, w_slots.shape[-1])) * jnp.asarray(slot_valid, w_slots.dtype)[:, None]
  safe_ids = np.maximum(ids, 0)
  sums = jnp.zeros((num_identities, w_slots.shape[-1]), w_slots.dtype).at[safe_ids].add(rows)
  counts = np.bincount(safe_ids[slot_valid], minlength=num_identities).astype(np.float32)
  return sums / jnp.asarray(np.maximum(counts, 1.0))[:, None]


def client_slots(w_rows, identity_table: np.ndarray):
  """`[N, d]` identity rows -> `[K, C_max, d]` per-client copies (padding slots zero)."""
  slots = w_rows[np.maximum(identity_table, 0)]
  return slots * jnp.asarray(identity_table >= 0, w_rows.dtype)[..., None]


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedGC over the partition `fed` (a `data.federated.FederatedData`)."""
  head_kwargs = common.head_kwargs(config)
  train = common.local_trainer(model, head_kwargs=head_kwargs,
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  image_shape = fed.images.shape[1:]
  identity_table = np.asarray(fed.identity_table)
  step_size = config.fedgc.reg_lambda * config.optimizer.learning_rate   # lambda·eta, Alg. 1 l. 14
  reg_kwargs = regularizer_kwargs(config)
  valid, holders = identity_holders(identity_table, fed.num_identities)
  valid, holders = jnp.asarray(valid), jnp.asarray(holders)
  block_size = config.fedgc.reg_block_size or None

  def init(rng):
    backbone_rng, w_rng = jax.random.split(rng)
    w = common.init_client_class_embeddings(w_rng, fed.class_mask, config.model.embedding_dim,
                                            config.head.loss, config.head.init_std)
    server = {'model': common.init_backbone(model, backbone_rng, image_shape), 'W': w}
    return RoundState(server=server, clients={}, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids):
    w_k = aggregation.gather_clients(server['W'], client_ids)   # Alg. 1 line 4
    return ClientInput(shared={'model': server['model']}, per_client={'W': w_k})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    model_vars, w, _, metrics = train(client_input.shared['model'], client_input.per_client['W'],
                                   data, rng)
    return ClientResult(update={'model': model_vars, 'W': w}, private=private, metrics=metrics)

  def server_update(server, updates, weights, client_ids):
    model_vars = aggregation.weighted_mean(updates['model'], weights)           # line 11
    w_tilde = aggregation.scatter_clients(server['W'], client_ids, updates['W'])  # line 12
    rows = identity_rows(w_tilde, identity_table, fed.num_identities)  # shared ids: mean of copies
    rows = regularizers.flat_gradient_correction(                              # line 14, Eq. 5
        rows, valid, holders, step_size=step_size, block_size=block_size,
        implementation=config.fedgc.reg_implementation, **reg_kwargs)
    return {'model': model_vars, 'W': client_slots(rows, identity_table)}

  def class_embeddings(state: RoundState):
    return common.to_global_order(state.server['W'], identity_table, fed.num_identities)

  return Algorithm(name='fedgc', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings)
