"""FedPE: Federated Averaging with Private Embeddings (Niu & Deng, AAAI 2022, "Problem Formulation").

FedAvg in which every client keeps its last fully-connected layer — its class embeddings W_k — to
itself: the backbone theta is averaged with weights n_k / n (Alg. 1 lines 10-11), W_k never leaves
the client. This is FedGC's Algorithm 1 without the server's gradient correction (lines 13-14).

Client optimiser: SGD (momentum 0.9, weight decay 5e-4 in the paper), its momentum reset at the
start of every round. Batch-norm statistics are averaged with the parameters.
"""

import jax
import ml_collections
import numpy as np

from fedjax_face.algorithms import common
from fedjax_face.core import aggregation, checks, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)

ONE_CLIENT = False
KEEPS_CLIENT_OPTIMIZER = True


def config_section() -> ml_collections.ConfigDict:
  """`config.fedpe` (configs/fedgc/fedpe.py, fedpe_fixed.py)."""
  c = ml_collections.ConfigDict()
  c.fixed_class_embeddings = False   # FedPE+Fixed (FedGC Table 5): W stays at its init
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedpe', 'fedpe.config_section() (configs/fedgc/fedpe.py)')
  checks.check_bool('fedpe.fixed_class_embeddings', c.fixed_class_embeddings)


def variant_name(config) -> str:
  """'fedpe+fixed' with fixed class embeddings (FedGC Table 5), else 'fedpe'."""
  return 'fedpe+fixed' if config.fedpe.fixed_class_embeddings else 'fedpe'


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedPE over the partition `fed` (a `data.federated.FederatedData`)."""
  head_kwargs = common.head_kwargs(config)
  train = common.local_trainer(model, head_kwargs=head_kwargs,
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode,
                               train_class_embeddings=not config.fedpe.fixed_class_embeddings)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)

  keep_opt_state = common.keeps_client_optimizer(config)

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method=config.algorithm)
    clients = {'W': w}
    if keep_opt_state:
      clients['opt_state'] = common.client_opt_states(train, variables, w)
    else:   # float16: each client's loss scale, kept between rounds (core/loss_scale.py)
      clients.update(common.initial_loss_scales(model, fed.num_clients))
    return RoundState(server={'model': variables}, clients=clients,
                      round=jax.numpy.zeros((), jax.numpy.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng  # every client receives the same backbone
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    model_vars, w, opt_state, metrics = train(client_input.shared['model'], private['W'], data,
                                              rng, private.get('opt_state'),
                                              lr_scale=client_input.shared.get('lr_scale'),
                                              loss_scale_state=private.get('loss_scale'))
    kept = {'W': w, 'opt_state': opt_state} if keep_opt_state else {'W': w}
    kept.update(common.kept_loss_scale(private, opt_state))
    return ClientResult(update={'model': model_vars}, private=kept, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    return {'model': aggregation.weighted_mean(updates['model'], weights)}   # Alg. 1 line 11

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  return Algorithm(name='fedpe', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   update_origin=lambda ci: origin_by_key(ci, ('model',)))
