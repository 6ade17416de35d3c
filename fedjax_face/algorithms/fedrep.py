"""FedRep: a shared representation, a local head (Collins, Hassani, Mokhtari, Shakkottai, ICML 2021,
"Exploiting Shared Representations for Personalized Federated Learning"); and FedPer, the same
split trained jointly (Arivazhagan, Aggarwal, Singh, Choudhary 2019, "Federated Learning with
Personalization Layers").

FedRep's Algorithm 1, a client's round: from the received body phi^t and its own head h_k,
  1. tau_h head updates with the body fixed:  h_k <- GRD(f_k(h_k, phi^t), h_k, alpha);
  2. tau body updates with that new head fixed: phi_k <- GRD(f_k(h_k, phi_k), phi_k, alpha);
then it sends phi_k and keeps h_k; the server averages the bodies, phi^{t+1} = mean_k phi_k.
FedPer (`fedrep.alternate=False`): every step updates body and head together (its base and
personalization layers), the base layers averaged, the personalization layers kept.

Readings for face recognition:
  * The head. A recognition client's classifier, its class embeddings W_k, is private in every
    method here (FedPE), so FedRep's head always includes W_k. `fedrep.head='embedding'` (the
    default) adds the backbone's last layers, its embedding: the 'fc' Dense layer and the
    'features' BatchNorm after it, with their running statistics (FedPer's personalization
    layers: the last fully-connected layers). `fedrep.head='class_embeddings'`: the head is W_k
    alone, the whole backbone is the shared body; FedRep then differs from FedPE only in the
    alternation, and every client's embedding is the shared one (no personalized model).
  * tau_h and tau. The round's `federated.local_steps` steps are split: the first
    local_steps - `fedrep.body_steps` update the head, the last `fedrep.body_steps` the body,
    as FedRep's public code splits its local epochs (lgcollins/FedRep, models/Update.py:
    `head_eps = local_eps - local_rep_ep`, 10 epochs of which 1 for the body by default).
  * A frozen part is frozen whole: its parameters, and its BatchNorm running statistics, which a
    forward pass in training mode would otherwise move. Each step's gradient is taken with
    respect to the trained part only, so the frozen part is carried bit for bit, and each phase
    starts its own optimizer (its momentum) over the part it trains, as PyTorch's SGD skips a
    parameter without a gradient.
  * The shared model (the generic protocols) is the averaged body with the starting model's head
    layers, kept on the server: the server never receives a head. Client k's personalized model
    is the body with its own head layers.
"""

import functools
from typing import Callable

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face.algorithms import common, fedbn, partial_sharing
from fedjax_face.core import aggregation, checks, class_tables, local
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import preprocess
from fedjax_face.models import heads

ONE_CLIENT = False
HEADS = ('embedding', 'class_embeddings')
EMBEDDING_LAYERS = ('fc', 'features')   # every recognition backbone's last layers (models/)


def config_section() -> ml_collections.ConfigDict:
  """`config.fedrep` (configs/fedfr/fedrep.py)."""
  c = ml_collections.ConfigDict()
  c.head = 'embedding'   # the local head: W_k and the embedding layers | 'class_embeddings': W_k
  c.alternate = True     # FedRep: head steps, then body steps | False: FedPer, jointly
  c.body_steps = 1       # tau: the round's last steps, which update the body (FedRep only)
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedrep', 'fedrep.config_section() (configs/fedfr/fedrep.py)')
  fedbn.check_recognition(config, config.algorithm)
  checks.check_choice('fedrep.head', c.head, HEADS)
  checks.check_bool('fedrep.alternate', c.alternate)
  checks.check_int('fedrep.body_steps', c.body_steps)
  if c.alternate and c.body_steps >= config.federated.local_steps:
    raise ValueError(f'config.fedrep.body_steps={c.body_steps} with federated.local_steps='
                     f'{config.federated.local_steps}; FedRep updates the head first: expected '
                     'fewer body steps than local steps.')


def variant_name(config) -> str:
  """'fedrep' or 'fedper' (joint steps), '+classifier' when the head is W_k alone."""
  name = 'fedrep' if config.fedrep.alternate else 'fedper'
  return name + ('+classifier' if config.fedrep.head == 'class_embeddings' else '')


# -- the alternation, on any loss ----------------------------------------------------------------

def train_part(loss_fn: Callable, optimizer: optax.GradientTransformation, params, stats,
               frozen, xs, *, step_mode: str, lr_scale=None):
  """Steps over `xs` (leading axis: steps) that update `params` alone: (params, stats, losses).

  `loss_fn(params, stats, frozen, batch) -> (loss, new stats)`; the gradient is taken with
  respect to `params` only, and `frozen` is a constant of every step, so it cannot move. `stats`
  are what the forward pass updates without a gradient (the trained part's BatchNorm running
  statistics). The optimizer starts afresh over `params`. A step without a valid sample
  (`batch['mask']`) leaves everything as it was.
  """
  def step(carry, batch):
    params, stats, opt_state = carry
    (loss, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats, frozen, batch)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if lr_scale is not None:
      updates = jax.tree.map(lambda u: u * lr_scale.astype(u.dtype), updates)
    return (optax.apply_updates(params, updates), stats, opt_state), loss

  carry = (params, stats, optimizer.init(params))
  (params, stats, _), losses = local.run_steps(local.skip_if_empty(step), carry, xs,
                                               mode=step_mode)
  return params, stats, losses


def alternate(loss_fn: Callable, optimizer: optax.GradientTransformation, head: dict,
              body: dict, xs, body_steps: int, *, step_mode: str, lr_scale=None):
  """FedRep's Algorithm 1 on one client: (head, body, losses `[steps]`).

  `head` and `body` are parts `{'params': ..., 'stats': ...}`; `loss_fn(trained, frozen, batch)
  -> (loss, the trained part's new stats)` takes the part a step trains and the other one. The
  first `len(xs) - body_steps` steps update the head with the received body fixed (tau_h), the
  last `body_steps` the body with that new head fixed (tau).
  """
  num_steps = jax.tree.leaves(xs)[0].shape[0]
  head_xs = jax.tree.map(lambda x: x[:num_steps - body_steps], xs)
  body_xs = jax.tree.map(lambda x: x[num_steps - body_steps:], xs)
  part_loss = lambda p, s, frozen, batch: loss_fn({'params': p, 'stats': s}, frozen, batch)
  train = functools.partial(train_part, part_loss, optimizer, step_mode=step_mode,
                            lr_scale=lr_scale)
  h_params, h_stats, head_losses = train(head['params'], head['stats'], body, head_xs)  # tau_h
  head = {'params': h_params, 'stats': h_stats}
  b_params, b_stats, body_losses = train(body['params'], body['stats'], head, body_xs)  # tau
  return head, {'params': b_params, 'stats': b_stats}, jnp.concatenate([head_losses,
                                                                        body_losses])


def jointly(loss_fn: Callable, optimizer: optax.GradientTransformation, head: dict, body: dict,
            xs, *, step_mode: str, lr_scale=None):
  """FedPer's local training: every step updates head and body together: (head, body, losses)."""
  merged = lambda key: partial_sharing.merge(head[key], body[key])
  nothing = {'params': {}, 'stats': {}}
  whole_loss = lambda p, s, frozen, batch: loss_fn({'params': p, 'stats': s}, nothing, batch)
  params, stats, losses = train_part(whole_loss, optimizer, merged('params'), merged('stats'),
                                     None, xs, step_mode=step_mode, lr_scale=lr_scale)
  part = lambda template: {'params': partial_sharing.at_paths_of(params, template['params']),
                           'stats': partial_sharing.at_paths_of(stats, template['stats'])}
  return part(head), part(body), losses


# -- the method ----------------------------------------------------------------------------------

def recognition_loss(model, head_kwargs: dict, class_mask):
  """`loss_fn(trained, frozen, batch)` of `alternate` for a recognition backbone: the client's
  classification loss over its own classes (FedPE's), the model being both parts together; a
  part's params may hold 'W', the class embeddings."""
  def loss_fn(trained, frozen, batch):
    params = partial_sharing.merge(trained['params'], frozen['params'])
    w = params.pop('W')
    stats = partial_sharing.merge(trained['stats'], frozen['stats'])
    variables = {'params': params, 'batch_stats': stats} if stats else {'params': params}
    images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
    features, state = model.apply(variables, images, train=True, mutable=['batch_stats'])
    loss = heads.loss(features, w, batch['labels'], class_mask, batch['mask'], **head_kwargs)
    # Only the trained part's statistics move (a frozen part is frozen whole).
    return loss, partial_sharing.at_paths_of(state.get('batch_stats', {}), trained['stats'])
  return loss_fn


def head_predicate(head: str) -> Callable:
  """`partial_sharing.split`'s predicate of the head's backbone variables (W_k is apart)."""
  layers = EMBEDDING_LAYERS if head == 'embedding' else ()
  return partial_sharing.under_top_level(layers)


def _personalized(apply, state: RoundState):
  """Client k's model: the averaged body with its own head layers."""
  def for_client(k: int):
    own = jax.tree.map(lambda x: jnp.asarray(x[k]), state.clients['head'])
    variables = partial_sharing.merge(state.server['model'], own)
    return lambda images: apply(variables, images)
  return for_client


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedRep (or FedPer) over the partition `fed` (a `data.federated.FederatedData`)."""
  c = config.fedrep
  optimizer = common.make_optimizer(config.optimizer)
  head_kwargs = common.head_kwargs(config)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  is_head = head_predicate(c.head)

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method=config.algorithm)
    body, head = partial_sharing.split(variables, is_head)
    stack = lambda x: jnp.broadcast_to(x, (fed.num_clients,) + x.shape)
    return RoundState(server={'model': body, 'start_head': head},
                      clients={'W': w, 'head': jax.tree.map(stack, head)},
                      round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng   # every client receives the same body, never a head
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    head_vars = private['head']
    head = {'params': {**head_vars.get('params', {}), 'W': private['W']},
            'stats': head_vars.get('batch_stats', {})}
    body_vars = client_input.shared['model']
    body = {'params': body_vars['params'], 'stats': body_vars.get('batch_stats', {})}
    num_steps = data['images'].shape[0]
    xs = {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
          'rng': jax.random.split(rng, num_steps)}
    loss_fn = recognition_loss(model, head_kwargs, data['class_mask'])
    train = functools.partial(alternate, body_steps=c.body_steps) if c.alternate else jointly
    head, body, losses = train(loss_fn, optimizer, head, body, xs, step_mode=step_mode,
                               lr_scale=client_input.shared.get('lr_scale'))
    active = jnp.any(data['mask'], axis=-1)
    metrics = {'train_loss': jnp.sum(losses * active) / jnp.maximum(active.sum(), 1)}
    w = head['params'].pop('W')
    return ClientResult(update={'model': _variables(body)},
                        private={'W': w, 'head': _variables(head)}, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    # Alg. 1: the server averages the bodies (FedAvg's weights n_k); heads never arrive.
    return {**server, 'model': aggregation.weighted_mean(updates['model'], weights)}

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  return Algorithm(
      name=config.algorithm, init=init, broadcast=broadcast, client_update=client_update,
      server_update=server_update,
      eval_variables=lambda server: partial_sharing.merge(server['model'], server['start_head']),
      class_embeddings=class_embeddings,
      personalized=(lambda state: _personalized(apply, state)) if c.head == 'embedding' else None,
      update_origin=lambda ci: origin_by_key(ci, ('model',)))


def _variables(part: dict) -> dict:
  """A part (`{'params', 'stats'}`) as flax variables (`{'params', 'batch_stats'}`), without
  empty collections."""
  out = {name: tree for name, tree in (('params', part['params']),
                                       ('batch_stats', part['stats'])) if tree}
  return out
