"""FedAwS: federated averaging with spreadout (Yu et al., ICML 2020; the FedFV paper's Eq. 3).

Every client is one person with one class embedding w_i. It trains its backbone copy and w_i on a
positive-only loss, pulling its features towards w_i (FedAwS's cosine contrastive loss without the
negative term it cannot compute: `head.loss='positive_cosine'`, (max{0, 0.9 - cos})^2), and sends
theta_i and w_i back. The server averages theta (weights n_i), stores the new w_i, and takes one
gradient step of the spreadout regularizer over all C class embeddings it holds (Eq. 3,
`algorithms/spreadout.py`): W <- W - lambda·eta_t·grad reg_sp(W), eta_t the clients' learning
rate of the round. A client not selected keeps its w_i on the server, and spreadout moves it too.

Readings:
  * Eq. 3's distance d and margin nu are config (`fedaws.distance`, `fedaws.margin`). The default
    is FedAwS's form, the Euclidean distance between L2-normalised embeddings, with nu = sqrt(2):
    every pair pushed until orthogonal or beyond, which is where the FedFV paper's Fig. 5 finds
    FedAwS's class embeddings (cosines around 0).
  * The step size is lambda·eta_t, eta_t following the step schedule, as FedAwS's update writes it
    with the learning rate; lambda is `fedaws.reg_lambda`.
  * The server keeps W unnormalised, as the clients send it; both losses read only directions.

FedFace (`algorithms/fedface.py`) is this method with its own spreadout form and with each class
embedding initialised from its client's mean feature; `build_spreadout_method` serves both.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common, spreadout
from fedjax_face.core import aggregation, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import preprocess
from fedjax_face.models import heads

ONE_CLIENT = False


def config_section() -> ml_collections.ConfigDict:
  """`config.fedaws` (configs/fedfv/fedaws.py)."""
  return spreadout.config_section(distance='euclidean', margin=float(np.sqrt(2.0)),
                                  reg_lambda=1.0, reduction='sum')   # Eq. 3 as written


def check_one_class_setting(config, name: str) -> None:
  """What FedAwS and FedFace need beyond their section: one identity per client and a
  positive-only loss (a softmax over one class is constant)."""
  if config.federated.partition != 'one_per_client':
    raise ValueError(f'config.federated.partition={config.federated.partition!r}; {name} trains '
                     "one identity per client: expected 'one_per_client'.")
  if config.head.loss != 'positive_cosine':
    raise ValueError(f"config.head.loss={config.head.loss!r}; {name}'s clients train the "
                     "positive-only loss: expected 'positive_cosine'.")


def check_config(config) -> None:
  spreadout.check_config(config, 'fedaws')
  check_one_class_setting(config, 'FedAwS')


def variant_name(config) -> str:
  del config
  return 'fedaws'


def mean_features(model, variables, data, num_classes: int) -> jax.Array:
  """`[C, d]`: the L2-normalised mean feature of each of the client's classes over its real
  images under `variables` (eval mode, no augmentation), FedFace's class-embedding
  initialisation."""
  images = data['images'].reshape((-1,) + data['images'].shape[2:])
  features = model.apply(variables, preprocess.normalize(images), train=False)
  return common.class_mean_features(features, data['labels'].reshape(-1),
                                    data['mask'].reshape(-1), num_classes)


def check_client_loss(head_kind: str, max_classes: int, name: str) -> None:
  """A positive-only loss trains one class per client; a classification loss needs several (a
  softmax over one class is constant)."""
  positive = head_kind in heads.POSITIVE_HEADS
  if positive and max_classes != 1:
    raise ValueError(f'{name} with the positive-only head {head_kind!r} trains one identity per '
                     f'client; the partition gives up to {max_classes}: expected '
                     "federated.partition='one_per_client', or a classification head.")
  if not positive and max_classes == 1:
    raise ValueError(f'{name} with the classification head {head_kind!r} over one identity per '
                     "client trains a constant loss; expected head.loss='positive_cosine'.")


def build_spreadout_method(config, model, fed, *, step_mode: str, name: str,
                           init_from_features: bool) -> Algorithm:
  """Clients train their class embeddings (and send them), the server spreads them out: a
  spreadout step over `config.<name>` on every client's class embeddings after FedAvg.

  One identity per client (FedAwS, FedFace) trains the positive-only loss; several (FedFace as
  the FedFR paper re-implements it for its Fig. 4) train the config's classification head over
  the client's classes. `init_from_features`: a client selected for the first time replaces its
  class embeddings with its classes' mean features under the model it receives, before training
  (FedFace); the server tracks who has been selected (`server['initialised']`, which it knows
  anyway: it chose them). `config.init_from` starts the backbone from a finished run's model.
  """
  section = config[name]
  head_kwargs = common.head_kwargs(config)
  check_client_loss(head_kwargs['kind'], fed.max_classes, name)
  train = common.local_trainer(model, head_kwargs=head_kwargs,
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  num_clients, max_classes = fed.num_clients, fed.max_classes
  spread_kwargs = spreadout.kwargs_from_config(section)
  valid = jnp.asarray(fed.class_mask).reshape(-1)   # the real class-embedding rows

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method=name)
    server = {'model': variables, 'W': w}
    if init_from_features:
      server['initialised'] = jnp.zeros(num_clients, bool)
    # float16: each client's loss scale, kept between rounds (core/loss_scale.py); {} otherwise.
    clients = common.initial_loss_scales(model, num_clients)
    return RoundState(server=server, clients=clients, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del rng
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    per_client = {'W': aggregation.gather_clients(server['W'], client_ids)}   # its own rows only
    if init_from_features:
      per_client['initialised'] = aggregation.gather_clients(server['initialised'], client_ids)
    return ClientInput(shared=shared, per_client=per_client)

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    variables = client_input.shared['model']
    w = client_input.per_client['W']
    if init_from_features:
      w = jax.lax.cond(client_input.per_client['initialised'], lambda: w,
                       lambda: mean_features(model, variables, data, max_classes).astype(w.dtype))
    model_vars, w, opt_state, metrics = train(variables, w, data, rng,
                                              lr_scale=client_input.shared.get('lr_scale'),
                                              loss_scale_state=private.get('loss_scale'))
    kept = {**private, **common.kept_loss_scale(private, opt_state)}
    return ClientResult(update={'model': model_vars, 'W': w}, private=kept, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del rng
    w = aggregation.scatter_clients(server['W'], client_ids, updates['W'])
    eta = config.optimizer.learning_rate * (1.0 if lr_schedule is None
                                            else lr_schedule(round_index))
    rows = spreadout.spreadout_step(w.reshape(-1, w.shape[-1]), valid,
                                    step_size=section.reg_lambda * eta,
                                    steps=section.server_steps, **spread_kwargs)   # Eq. 3 step
    new = {'model': aggregation.weighted_mean(updates['model'], weights),
           'W': rows.reshape(w.shape)}
    if init_from_features:
      new['initialised'] = server['initialised'].at[client_ids].set(True, mode='drop')
    return new

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.server['W'], identity_table, fed.num_identities)

  return Algorithm(name=name, init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   update_origin=lambda ci: origin_by_key(ci, ('model', 'W')), client_rows=('W',))


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  return build_spreadout_method(config, model, fed, step_mode=step_mode, name='fedaws',
                                init_from_features=False)
