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
(`regularizer` module docstring), and sends the result back to every holder.
"""

import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common, pairwise
from fedjax_face.core import aggregation, checks, class_tables
from fedjax_face.algorithms.fedgc import correction, regularizer
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)

ONE_CLIENT = False
KEEPS_CLIENT_OPTIMIZER = True


def config_section() -> ml_collections.ConfigDict:
  """`config.fedgc`: the server step's settings (configs/fedgc/fedgc.py, fedcos.py)."""
  c = ml_collections.ConfigDict()
  c.regularizer = 'softmax'      # Eq. 5 ('softmax', FedGC) or 'cosine' (FedCos, Table 4)
  c.reg_lambda = 20.0            # lambda of Alg. 1 line 14 (FedGC Table 2)
  c.reg_form = ''                # '' = the loss's own form; or 'softmax' / 'cosface' / 'arcface'
  c.reg_reduction = 'sum'        # Eq. 5 as written; 'mean' = divided by the number of classes
  c.reg_self_gradient = False    # Eq. 12's reading (the default: regularizer.py says why);
                                 # True = Eq. 5's self term also moves W_ki
  c.reg_implementation = 'auto'  # 'dense' | 'blockwise' (streamed) | 'auto' (by class count)
  c.reg_block_size = 0           # streamed rows per block; 0 = streamed.DEFAULT_BLOCK
  return c


def check_config(config) -> None:
  """Raises ValueError naming the `config.fedgc` field that is wrong."""
  c = checks.section(config, 'fedgc', 'fedgc.config_section() (configs/fedgc/fedgc.py)')
  checks.check_choice('fedgc.regularizer', c.regularizer, regularizer.KINDS)
  checks.check_number('fedgc.reg_lambda', c.reg_lambda, allow_zero=True)
  checks.check_choice('fedgc.reg_form', c.reg_form, ('',) + regularizer.FORMS)
  if not c.reg_form and config.head.loss not in regularizer.FORMS:
    raise ValueError(f"config.fedgc.reg_form='' takes the head's form, but head.loss="
                     f'{config.head.loss!r} has no logits; set fedgc.reg_form to one of '
                     f'{regularizer.FORMS} or head.loss to a classifier.')
  checks.check_choice('fedgc.reg_reduction', c.reg_reduction, regularizer.REDUCTIONS)
  checks.check_bool('fedgc.reg_self_gradient', c.reg_self_gradient)
  checks.check_choice('fedgc.reg_implementation', c.reg_implementation,
                          pairwise.IMPLEMENTATIONS)
  checks.check_int('fedgc.reg_block_size', c.reg_block_size, allow_zero=True)


def variant_name(config) -> str:
  """'fedcos' with the cosine regularizer (Table 4), else 'fedgc'."""
  return 'fedcos' if config.fedgc.regularizer == 'cosine' else 'fedgc'


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


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedGC over the partition `fed` (a `data.federated.FederatedData`)."""
  head_kwargs = common.head_kwargs(config)
  train = common.local_trainer(model, head_kwargs=head_kwargs,
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  step_size = config.fedgc.reg_lambda * config.optimizer.learning_rate   # lambda·eta, Alg. 1 l. 14
  reg_kwargs = regularizer_kwargs(config)
  valid, holders = class_tables.identity_holders(identity_table, fed.num_identities)
  valid, holders = jnp.asarray(valid), jnp.asarray(holders)
  block_size = config.fedgc.reg_block_size or None

  keep_opt_state = common.keeps_client_optimizer(config)

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method=config.algorithm)
    server = {'model': variables, 'W': w}
    clients = ({'opt_state': common.client_opt_states(train, variables, w)} if keep_opt_state
               else common.initial_loss_scales(model, fed.num_clients))   # float16's scales
    return RoundState(server=server, clients=clients, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del rng
    w_k = aggregation.gather_clients(server['W'], client_ids)   # Alg. 1 line 4
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={'W': w_k})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    model_vars, w, opt_state, metrics = train(
        client_input.shared['model'], client_input.per_client['W'], data, rng,
        private.get('opt_state'), lr_scale=client_input.shared.get('lr_scale'),
        loss_scale_state=private.get('loss_scale'))
    kept = ({'opt_state': opt_state} if keep_opt_state else
            {**private, **common.kept_loss_scale(private, opt_state)})
    return ClientResult(update={'model': model_vars, 'W': w}, private=kept, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del rng
    # lambda·eta_t: the correction steps at the clients' rate of the round (Alg. 1 line 14).
    step = step_size if lr_schedule is None else step_size * lr_schedule(round_index)
    model_vars = aggregation.weighted_mean(updates['model'], weights)           # line 11
    w_tilde = aggregation.scatter_clients(server['W'], client_ids, updates['W'])  # line 12
    rows = class_tables.to_identity_rows(w_tilde, identity_table, fed.num_identities)
    rows = correction.flat_gradient_correction(                              # line 14, Eq. 5
        rows, valid, holders, step_size=step, block_size=block_size,
        implementation=config.fedgc.reg_implementation, **reg_kwargs)
    return {'model': model_vars, 'W': class_tables.to_client_slots(rows, identity_table)}

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.server['W'], identity_table, fed.num_identities)

  return Algorithm(name='fedgc', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   update_origin=lambda ci: origin_by_key(ci, ('model', 'W')), client_rows=('W',))
