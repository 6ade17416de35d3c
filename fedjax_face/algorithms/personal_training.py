"""What Ditto and APFL share: a client's model on either task, as parameters, BatchNorm statistics
and a loss of one local step, so that the methods' steps (algorithms/ditto.py, apfl.py) are
written once over pytrees.

  recognition    params {'backbone': the backbone's parameters, 'W': the client's class rows};
                 the loss: the client's classification loss over its own classes (FedGC Eq. 3
                 and its margins, `head`), on the step's images flipped at random and normalised,
                 as `common.local_step` computes it
  anti_spoofing  params: FedPAD's detector's parameters (`model.name` 'pad_resnet18' or 'pad_net'
                 without ES / Dec); the loss: FedPAD's, `pad_training.detector_loss` (the
                 authors' term weights on FedGPAD's batches: frames and depth flipped together,
                 RGB + HSV), as FedBN and FedRep train it

A step's inputs `xs` carry each step's `mask` (`core.local.skip_if_empty` skips a step without
a sample) and `rng`; the loss draws its flips from that rng, so that two models trained in one
step (Ditto's w and v, APFL's w and v_bar) see the same sample.
"""

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_face.algorithms import common, fedgpad, pad_training
from fedjax_face.core import aggregation, class_tables, local, loss_scale, precision
from fedjax_face.core.algorithm import Algorithm, ClientInput, RoundState, origin_by_key
from fedjax_face.data import preprocess, sources
from fedjax_face.models import heads

class LocalModel(NamedTuple):
  """A client's model on its task.

  Attributes:
    recognition: True for face recognition (class rows W_k in the parameters).
    image_shape: the backbone's input (H, W, C).
    pack: (backbone variables, class rows or None) -> trained params.
    variables: (params, batch_stats) -> backbone variables (what is sent, what evaluates).
    loss: (params, batch_stats, x) -> (loss, new batch_stats), x one step of `step_inputs`.
    step_inputs: (data, rng) -> xs, a round's steps `[steps, ...]`.
    predict: (backbone variables, images) -> the task's prediction (an embedding, the live
      logit), jitted once per run.
  """
  recognition: bool
  image_shape: tuple
  pack: Callable
  variables: Callable
  loss: Callable
  step_inputs: Callable
  predict: Callable


def check_task(config, method: str) -> None:
  """On anti-spoofing, FedPAD's detector at the data's size (`pad_training.check_detector`); a
  ValueError naming the field otherwise."""
  if sources.task_of(config) != 'recognition':
    pad_training.check_detector(config, method)


def _with_stats(params, batch_stats) -> dict:
  variables = {'params': params}
  if batch_stats:
    variables['batch_stats'] = batch_stats
  return variables


def recognition_model(config, model, image_shape) -> LocalModel:
  """A face-recognition client: the backbone and its own class rows."""
  head_kwargs = common.head_kwargs(config)

  def loss(params, batch_stats, x):
    images = preprocess.normalize(preprocess.random_flip(x['rng'], x['images']))
    features, state = model.apply(_with_stats(params['backbone'], batch_stats), images,
                                  train=True, mutable=['batch_stats'])
    value = heads.loss(features, params['W'], x['labels'], x['class_mask'], x['mask'],
                       **head_kwargs)
    return value, state.get('batch_stats', {})

  def step_inputs(data, rng):
    steps = data['images'].shape[0]
    return {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
            'rng': jax.random.split(rng, steps),
            'class_mask': jnp.broadcast_to(data['class_mask'], (steps,) + data['class_mask'].shape)}

  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  return LocalModel(
      recognition=True, image_shape=tuple(image_shape),
      pack=lambda variables, rows: {'backbone': variables['params'], 'W': rows},
      variables=lambda params, stats: _with_stats(params['backbone'], stats),
      loss=loss, step_inputs=step_inputs, predict=apply)


def detector_model(config, model) -> LocalModel:
  """An anti-spoofing data center: FedPAD's detector."""

  def loss(params, batch_stats, x):
    return pad_training.detector_loss(model, _with_stats(params, batch_stats), x)

  apply = jax.jit(lambda variables, x: pad_training.live_logit(
      model.apply(variables, x, train=False)))
  return LocalModel(
      recognition=False, image_shape=pad_training.image_shape(config),
      pack=lambda variables, rows: variables['params'], variables=_with_stats, loss=loss,
      step_inputs=fedgpad.step_inputs, predict=apply)


def local_model(config, model, fed) -> LocalModel:
  """The client's model on the config's task."""
  if sources.task_of(config) == 'recognition':
    return recognition_model(config, model, fed.images.shape[1:])
  return detector_model(config, model)


def initial(config, model, fed, local_model_: LocalModel, rng, start, method: str):
  """(the starting backbone variables, every client's class rows [K, C_max, d] or None): the
  random draw, or the backbone of `start` (`config.init_from`)."""
  if local_model_.recognition:
    variables, rows = common.init_federated(config, model, fed, rng)
  else:
    variables = common.init_backbone(model, rng, local_model_.image_shape, train=True)
    rows = None
  if start is not None:
    variables, _ = common.start_from(start, variables, method=method)
  return variables, rows


def stacked(tree, num_clients: int):
  """`tree` repeated on a leading clients axis (every client starts from the same copy)."""
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_clients,) + x.shape), tree)


def value_and_grad(loss_fn, opt_state, params, state, x):
  """((loss, new_state), grads) of `loss_fn(params, state, x)`, under the loss scale `opt_state`
  holds when its optimizer is `loss_scale.scaled_optimizer`'s (`jax.value_and_grad` otherwise)."""
  return loss_scale.value_and_grad_of(loss_fn, has_aux=True)(opt_state, params, state, x)


def apply_update(optimizer: optax.GradientTransformation, params, opt_state, grads, scale):
  """One optimizer step, its update scaled by the round's learning-rate factor; under loss
  scaling a step whose gradients overflowed leaves `params` bit for bit."""
  updates, new_opt_state = optimizer.update(grads, opt_state, params)
  updates = jax.tree.map(lambda u: u * scale.astype(u.dtype), updates)
  new_params = loss_scale.undo_if_skipped(new_opt_state, opt_state,
                                          optax.apply_updates(params, updates), params)
  return new_params, new_opt_state


def initial_scales(model, num_clients: int) -> dict:
  """Under float16, every client's kept loss scales before its first round, one for the global
  model's optimizer and one for the personal model's (`{'loss_scale': {'global', 'personal'}}`,
  core/loss_scale.py: the scale is the client's private state); {} otherwise."""
  if not precision.model_needs_loss_scaling(model):
    return {}
  return {'loss_scale': {'global': loss_scale.client_states(num_clients),
                         'personal': loss_scale.client_states(num_clients)}}


def start_scales(private: dict, w_opt, v_opt) -> tuple:
  """The round's fresh optimizer states of w and v, started from the client's kept scales."""
  kept = private.get('loss_scale', {})
  return (loss_scale.with_scale(w_opt, kept.get('global')),
          loss_scale.with_scale(v_opt, kept.get('personal')))


def end_scales(w_opt, v_opt) -> dict:
  """What the client keeps of the round's loss scales (`initial_scales`' structure)."""
  if not loss_scale.is_scaled(w_opt):
    return {}
  return {'loss_scale': {'global': w_opt.loss_scale, 'personal': v_opt.loss_scale}}


def scaled_optimizers(model, optimizers) -> tuple:
  """Each of `optimizers` under dynamic loss scaling when `model` computes in float16
  (`common.scaled_for`): each model a step trains keeps its own scale."""
  return tuple(common.scaled_for(model, opt) for opt in optimizers)


def run_round(step, carry, xs, lr_scale, step_mode: str):
  """`step(carry, x) -> (carry, losses)` over a round's steps (padding steps skipped), each x
  with the round's learning-rate factor."""
  scale = jnp.ones((), jnp.float32) if lr_scale is None else lr_scale
  return local.run_steps(local.skip_if_empty(lambda c, x: step(c, {**x, 'lr_scale': scale})),
                         carry, xs, mode=step_mode)


def scaling_metrics(start_opt_state, end_opt_state, prefix: str = '') -> dict:
  """A model's loss-scaling metrics over the round (`loss_scale.round_metrics`; none without
  loss scaling), named 'loss_scale/<prefix>...' (the personal model's: prefix 'personal_')."""
  return {name.replace('loss_scale/', 'loss_scale/' + prefix): value
          for name, value in loss_scale.round_metrics(start_opt_state, end_opt_state).items()}


def mean_over_steps(losses, mask):
  """A round's mean loss over the steps that had a sample (`mask` [steps, batch])."""
  active = jnp.any(mask, axis=-1)
  return jnp.sum(losses * active) / jnp.maximum(active.sum(), 1)


def personal_start(task: LocalModel, variables, rows, num_clients: int) -> dict:
  """Every client's personal model at round 0, the global one: v_k^0 = w^0 (params and
  BatchNorm statistics, stacked over the clients)."""
  return {'params': task.pack(stacked(variables, num_clients), rows),
          'batch_stats': stacked(variables.get('batch_stats', {}), num_clients)}


def initial_state(variables, rows, clients: dict, task: LocalModel) -> RoundState:
  """Round 0: the server holds the global model w; the clients their personal state and, on
  recognition, their class rows W_k."""
  if task.recognition:
    clients = dict(clients, W=rows)
  return RoundState(server={'model': variables}, clients=clients, round=jnp.zeros((), jnp.int32))


def global_model_algorithm(name: str, task: LocalModel, fed, lr_schedule, init: Callable,
                           client_update: Callable, personalized: Callable) -> Algorithm:
  """Ditto's and APFL's `Algorithm` around their own round 0, client update and personal models:
  every client receives the global model w with the round's learning-rate scale; the server's
  step is the weighted mean of the clients' w (the only thing that crosses); on recognition the
  class embeddings are the clients' rows."""
  identity_table = np.asarray(fed.identity_table)

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng   # every client receives w^t
    return ClientInput(shared=common.with_lr_scale({'model': server['model']}, lr_schedule,
                                                   round_index), per_client={})

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del server, client_ids, round_index, rng
    return {'model': aggregation.weighted_mean(updates['model'], weights)}

  def class_embeddings(state: RoundState):
    if not task.recognition:
      return None
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  return Algorithm(name=name, init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings, personalized=personalized,
                   update_origin=lambda ci: origin_by_key(ci, ('model',)))
