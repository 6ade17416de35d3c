"""FedGC: Federated Averaging with Gradient Correction (Niu & Deng, AAAI 2022, Algorithm 1).

Clients train the shared backbone theta and their own class embeddings W_k on their local softmax
(Alg. 1 lines 6-8) and send both back. The server averages the backbones with weights n_k / n
(line 11), stacks every client's W_k into W~ (line 12) — clients not selected this round keep the
server's last copy — and applies one step of the softmax regularizer (line 14, Eq. 5):

    W <- W~ - lambda·eta·grad Reg(W~)

with eta the clients' learning rate and lambda `config.fedgc.reg_lambda` (20 in the paper, Table
2). The regularizer form follows the loss (`config.fedgc.reg_form`, default: the loss's own form).
Each client then starts the next round from its corrected W_k. Client optimiser as in FedPE:
SGD with momentum reset every round.
"""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.algorithms import common, regularizers
from fedjax_face.core import aggregation
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.models import heads


def regularizer_kwargs(config) -> dict:
  """The regularizer's form and its scale / margin, matching the loss unless overridden."""
  form = config.fedgc.reg_form or config.head.loss
  head_kwargs = common.head_kwargs(config)
  kwargs = {'form': form, 'reduction': config.fedgc.reg_reduction}
  if form != 'softmax':
    kwargs['scale'] = head_kwargs.get('scale', 64.0)
    kwargs['margin'] = head_kwargs.get('margin', 0.0)
  return kwargs


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedGC over the partition `fed` (a `data.federated.FederatedData`)."""
  head_kwargs = common.head_kwargs(config)
  train = common.local_trainer(model, head_kwargs=head_kwargs,
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  image_shape = fed.images.shape[1:]
  identity_table = np.asarray(fed.identity_table)
  class_mask = jnp.asarray(fed.class_mask)
  step_size = config.fedgc.reg_lambda * config.optimizer.learning_rate   # lambda·eta, Alg. 1 l. 14
  reg_kwargs = regularizer_kwargs(config)

  def init(rng):
    backbone_rng, w_rng = jax.random.split(rng)
    w = common.init_client_class_embeddings(w_rng, fed.class_mask, config.model.embedding_dim,
                                            config.head.loss)
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
    w = regularizers.gradient_correction(w_tilde, class_mask, step_size=step_size,
                                         **reg_kwargs)                          # line 14, Eq. 5
    return {'model': model_vars, 'W': w}

  def class_embeddings(state: RoundState):
    return common.to_global_order(state.server['W'], identity_table, fed.num_identities)

  return Algorithm(name='fedgc', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings)
