"""FedBN: federated learning with local batch normalization (Li, Jiang, Zhang, Kamp, Dou, ICLR
2021, "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization").

Every client trains the whole model on its own data (FedAvg's local epochs); the server averages
every layer except the BatchNorm layers, which each client keeps (Algorithm 1, its aggregation
step: a layer l that is not BatchNorm is averaged, a BatchNorm layer is not). The public code
(med-air/FedBN, federated/fed_digits.py, `communication`) averages every state-dict entry whose
name lacks 'bn' and leaves the rest with the client: a BatchNorm's weight, bias, running mean and
running variance alike.

Face recognition: the class embeddings W_k are private anyway (FedPE, algorithms/fedpe.py), so a
client sends the backbone without its BatchNorm layers and keeps W_k and its BatchNorm layers.
Anti-spoofing: a data center trains FedPAD's detector (`pad_training`) and keeps every BatchNorm
layer of it. Readings:
  * "BatchNorm layer": a layer with running statistics (`partial_sharing.batch_norm_layers`). Its
    learned scale and shift and its running mean and variance all stay on the client. The small
    CNN has one after each convolution and the 'features' BatchNorm of the embedding (shift only);
    the IResNets have theirs in every block. The GroupNorm CNN (`gn_cnn`) has none: refused.
  * The average is weighted by the clients' image counts n_k (FedAvg's, as FedPE's); the public
    code's digits experiment weighs its equally sized clients equally, which is the same there.
  * Each client's BatchNorm layers start as the starting model's (the pre-trained model with
    `config.init_from`, FedFR's setting; else the random initialisation).
  * Which BatchNorm the shared model uses: the server never receives one, so the model it
    evaluates (the generic protocols, the unseen anti-spoofing target) is the averaged layers
    with the starting model's BatchNorm parameters and running statistics, kept unchanged on the
    server: the pre-trained model's in FedFR's setting; on anti-spoofing, which starts from
    random weights, the initialisation's (scale 1, shift 0, mean 0, variance 1). Each client's
    personalized model (`Algorithm.personalized`: FedFR's personalized protocol, a data center's
    in-domain error) is the averaged layers with that client's own BatchNorm layers.
"""

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common, pad_training, partial_sharing
from fedjax_face.core import aggregation, class_tables, loss_scale
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import sources

ONE_CLIENT = False
NO_BATCH_NORM = ('gn_cnn',)   # backbones without BatchNorm (GroupNorm)


def config_section() -> ml_collections.ConfigDict | None:
  """FedBN has no settings of its own: what it keeps is every BatchNorm layer."""
  return None


def check_task(config, method: str) -> None:
  """A recognition backbone with BatchNorm, or on anti-spoofing FedPAD's detector
  (`pad_training.check_detector`)."""
  task = sources.task_of(config)
  if task == 'anti_spoofing':
    pad_training.check_detector(config, method)
  elif config.model.name in NO_BATCH_NORM and method == 'fedbn':
    raise ValueError(f'config.model.name={config.model.name!r} has no BatchNorm (GroupNorm); '
                     'FedBN keeps each client\'s BatchNorm layers: expected a backbone with '
                     "BatchNorm ('small_cnn', an 'iresnet').")


def initial_state(config, model, fed, shape, is_kept: Callable, kept: str, rng,
                  start=None) -> RoundState:
  """The round state FedBN and FedRep start from: the backbone (and on recognition each client's
  class rows 'W') from `rng` or the warm start, split by `is_kept` into the server's shared
  'model' and the kept layers, which every client starts from (`clients[kept]`) and the server
  keeps as they began (`server['start_' + kept]`: the shared model's own, for evaluation)."""
  recognition = sources.task_of(config) == 'recognition'
  if recognition:
    variables, w = common.init_federated(config, model, fed, rng)
  else:
    variables, w = common.init_backbone(model, rng, shape, train=True), None
  if start is not None:
    variables, _ = common.start_from(start, variables, method=config.algorithm)
  shared, kept_layers = partial_sharing.split(variables, is_kept)
  stack = lambda x: jnp.broadcast_to(x, (fed.num_clients,) + x.shape)
  clients = {kept: jax.tree.map(stack, kept_layers)}
  if recognition:
    clients['W'] = w
  return RoundState(server={'model': shared, f'start_{kept}': kept_layers}, clients=clients,
                    round=jnp.zeros((), jnp.int32))


def check_config(config) -> None:
  check_task(config, 'fedbn')


def variant_name(config) -> str:
  del config
  return 'fedbn'


def image_shape(config, fed) -> tuple[int, ...]:
  """The backbone's input: the training images' (recognition) or the detector's."""
  if sources.task_of(config) == 'anti_spoofing':
    return pad_training.image_shape(config)
  return tuple(fed.images.shape[1:])


def predict(model, task: str):
  """`apply(variables, images)`, jitted once: the embedding (recognition) or the live logit
  (anti-spoofing), what a client's personalized model gives the evaluators."""
  if task == 'anti_spoofing':
    return jax.jit(lambda variables, x: pad_training.live_logit(
        model.apply(variables, x, train=False)))
  return jax.jit(lambda variables, x: model.apply(variables, x, train=False))


def personalized(apply, kept: str, state: RoundState):
  """Client k's model: the averaged layers with its own kept layers (`state.clients[kept]`)."""
  def for_client(k: int):
    own = jax.tree.map(lambda x: jnp.asarray(x[k]), state.clients[kept])
    variables = partial_sharing.merge(state.server['model'], own)
    return lambda images: apply(variables, images)
  return for_client


def batch_norm_layers(config, model, shape) -> frozenset:
  """The backbone's BatchNorm layers, from its variables' shapes (nothing is computed)."""
  shapes = jax.eval_shape(lambda: common.init_backbone(model, jax.random.PRNGKey(0), shape))
  layers = partial_sharing.batch_norm_layers(shapes)
  if not layers:
    raise ValueError(f'config.model.name={config.model.name!r} has no BatchNorm layer; FedBN '
                     "keeps each client's: expected a backbone with BatchNorm.")
  return layers


def pad_trainer(model, optimizer, step_mode: str):
  """`train(variables, data, rng, lr_scale, loss_scale_state) -> (variables, metrics, the
  optimizer's end state or None)`: a data center's round, every parameter trained (FedAvg's
  local steps on the detector's loss); under float16 from its kept loss scale, the end state
  carrying the next (`partial_sharing.train_part`)."""
  loss_fn = pad_training.loss(model)
  nothing = {'params': {}, 'stats': {}}

  def train(variables, data, rng, lr_scale=None, loss_scale_state=None):
    whole = lambda p, s, frozen, batch: loss_fn({'params': p, 'stats': s}, frozen, batch)
    params, stats, losses, *end = partial_sharing.train_part(
        whole, optimizer, variables['params'], variables.get('batch_stats', {}), nothing,
        pad_training.step_inputs(data, rng), step_mode=step_mode, lr_scale=lr_scale,
        loss_scale_state=loss_scale_state)
    end_state = end[0] if end else None
    metrics = {'train_loss': partial_sharing.mean_over_active(losses, data['mask']),
               **loss_scale.round_metrics(None, end_state)}
    return partial_sharing.as_variables({'params': params, 'stats': stats}), metrics, end_state

  return train


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedBN over the partition `fed` (a `data.federated.FederatedData`): a recognition client's
  backbone and class embeddings, or a data center's detector."""
  task = sources.task_of(config)
  shape = image_shape(config, fed)
  optimizer = common.make_optimizer(config.optimizer)
  recognition = task == 'recognition'
  if recognition:
    train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                                 optimizer=optimizer, step_mode=step_mode)
  else:
    train = pad_trainer(model, optimizer, step_mode)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  is_kept = partial_sharing.in_layers(batch_norm_layers(config, model, shape))

  def init(rng, start=None):
    state = initial_state(config, model, fed, shape, is_kept, 'bn', rng, start)
    # float16: each client's loss scale, kept between rounds (core/loss_scale.py).
    return state.replace(clients={**state.clients,
                                  **common.initial_loss_scales(model, fed.num_clients)})

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng   # every client receives the same averaged layers, never a BatchNorm
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    variables = partial_sharing.merge(client_input.shared['model'], private['bn'])
    lr_scale = client_input.shared.get('lr_scale')
    scale = private.get('loss_scale')
    if recognition:
      trained, w, opt_state, metrics = train(variables, private['W'], data, rng,
                                             lr_scale=lr_scale, loss_scale_state=scale)
      kept = {'W': w}
    else:
      trained, metrics, opt_state = train(variables, data, rng, lr_scale, scale)
      kept = {}
    kept.update(common.kept_loss_scale(private, opt_state))
    shared, bn = partial_sharing.split(trained, is_kept)
    return ClientResult(update={'model': shared}, private={**kept, 'bn': bn}, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    # Algorithm 1's aggregation: every layer but the BatchNorm layers, which never arrive.
    return {**server, 'model': aggregation.weighted_mean(updates['model'], weights)}

  def class_embeddings(state: RoundState):
    if not recognition:
      return None
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  apply = predict(model, task)
  return Algorithm(
      name='fedbn', init=init, broadcast=broadcast, client_update=client_update,
      server_update=server_update,
      eval_variables=lambda server: partial_sharing.merge(server['model'], server['start_bn']),
      class_embeddings=class_embeddings,
      personalized=functools.partial(personalized, apply, 'bn'),
      update_origin=lambda ci: origin_by_key(ci, ('model',)))
