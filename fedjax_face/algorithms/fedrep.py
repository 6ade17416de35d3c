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

Readings:
  * The head, face recognition. A client's classifier, its class embeddings W_k, is private in
    every method here (FedPE), so FedRep's head always includes W_k. `fedrep.head='last_layers'`
    (the default) adds the backbone's last layers, its embedding: the 'fc' Dense layer and the
    'features' BatchNorm after it, with their running statistics (FedPer's personalization
    layers: the last fully-connected layers). `fedrep.head='class_embeddings'`: the head is W_k
    alone, the whole backbone is the shared body; FedRep then differs from FedPE only in the
    alternation, and every client's embedding is the shared one (no personalized model).
  * The head, anti-spoofing (FedPAD's detector, `pad_training`): the detector's classifier C
    (its 'classifier' part: the paper's ResNet-18's last Dense layer, or the Table II network's
    two); the feature extractor (and the depth head Dep of `pad_net`) is the body.
  * tau_h and tau. A client's steps of the round are split: its last `fedrep.body_steps` steps
    that hold a sample update the body, the ones before them the head (a client with fewer
    images than `federated.local_steps` batches has empty steps at the end: not counted),
    as FedRep's public code splits its local epochs (lgcollins/FedRep, models/Update.py:
    `head_eps = local_eps - local_rep_ep`, 10 epochs of which 1 for the body by default).
  * A frozen part is frozen whole: its parameters, and its BatchNorm running statistics, which a
    forward pass in training mode would otherwise move. Each step's gradient is taken with
    respect to the trained part only, so the frozen part is carried bit for bit, and each phase
    starts its own optimizer (its momentum) over the part it trains, as PyTorch's SGD skips a
    parameter without a gradient.
  * float16's loss scale (core/loss_scale.py): one per client, kept between rounds
    ('loss_scale'), and carried from the head phase into the body phase, not one per phase's
    optimizer. PyTorch serves several optimizers with one GradScaler, `update()` once per
    iteration after stepping the optimizers it used (pytorch/pytorch,
    docs/source/notes/amp_examples.rst, 'Working with Multiple Models, Losses, and
    Optimizers'); each step of the alternation steps one optimizer, so one scaler updates once
    a step across both phases, as here. The scale measures the client's loss and gradients,
    which both phases share, and two scales would each restart at the other's stale value.
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

from fedjax_face.algorithms import common, fedbn, pad_training, partial_sharing
from fedjax_face.core import aggregation, checks, class_tables, loss_scale
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import preprocess, sources
from fedjax_face.models import heads

ONE_CLIENT = False
HEADS = ('last_layers', 'class_embeddings')
# The head's top-level modules, by task: every recognition backbone's embedding layers (models/);
# a PAD detector's classifier C (models/pad.py).
LAST_LAYERS = {'recognition': ('fc', 'features'), 'anti_spoofing': ('classifier',)}


def config_section() -> ml_collections.ConfigDict:
  """`config.fedrep` (configs/fedfr/fedrep.py)."""
  c = ml_collections.ConfigDict()
  c.head = 'last_layers'   # the local head: W_k and the embedding layers (anti-spoofing: the
                           # classifier) | 'class_embeddings': W_k alone (recognition)
  c.alternate = True     # FedRep: head steps, then body steps | False: FedPer, jointly
  c.body_steps = 1       # tau: the round's last steps, which update the body (FedRep only)
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedrep', 'fedrep.config_section() (configs/fedfr/fedrep.py)')
  fedbn.check_task(config, config.algorithm)
  checks.check_choice('fedrep.head', c.head, HEADS)
  if c.head == 'class_embeddings' and sources.task_of(config) == 'anti_spoofing':
    raise ValueError("config.fedrep.head='class_embeddings' on anti-spoofing: a detector has no "
                     "class embeddings; expected 'last_layers' (its classifier).")
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

def alternate(loss_fn: Callable, optimizer: optax.GradientTransformation, head: dict,
              body: dict, xs, body_steps: int, *, step_mode: str, lr_scale=None,
              loss_scale_state=None):
  """FedRep's Algorithm 1 on one client: (head, body, losses `[steps]`).

  `head` and `body` are parts `{'params': ..., 'stats': ...}`; `loss_fn(trained, frozen, batch)
  -> (loss, the trained part's new stats)` takes the part a step trains and the other one. Of the
  steps with a sample (`xs['mask']` `[steps, batch]`), the last `body_steps` update the body with
  the new head fixed (tau), the ones before them the head with the received body fixed (tau_h).

  Under float16 with a client's kept `loss_scale_state`, the head phase starts from it, the body
  phase from the head phase's end scale (one scaler for both: the module docstring), and a
  fourth value comes back, `ended(head_end, body_end)`: the loss scale the client keeps and the
  round's metrics.
  """
  # A client's steps past its data are empty (`federated.sample_round` under local epochs):
  # moved first (where `train_part` skips them), the last steps are the client's last batches.
  order = jnp.argsort(jnp.any(xs['mask'], axis=-1), stable=True)
  ordered = jax.tree.map(lambda x: x[order], xs)
  num_steps = order.shape[0]
  head_xs = jax.tree.map(lambda x: x[:num_steps - body_steps], ordered)
  body_xs = jax.tree.map(lambda x: x[num_steps - body_steps:], ordered)
  part_loss = lambda p, s, frozen, batch: loss_fn({'params': p, 'stats': s}, frozen, batch)
  train = functools.partial(partial_sharing.train_part, part_loss, optimizer,
                            step_mode=step_mode, lr_scale=lr_scale)
  h_params, h_stats, head_losses, *head_end = train(head['params'], head['stats'], body, head_xs,
                                                    loss_scale_state=loss_scale_state)  # tau_h
  head = {'params': h_params, 'stats': h_stats}
  body_scale = head_end[0].loss_scale if head_end else None   # the head phase's end scale
  b_params, b_stats, body_losses, *body_end = train(body['params'], body['stats'], head, body_xs,
                                                    loss_scale_state=body_scale)  # tau
  losses = jnp.zeros(num_steps).at[order].set(jnp.concatenate([head_losses, body_losses]))
  trained = (head, {'params': b_params, 'stats': b_stats}, losses)   # losses in the steps' order
  return trained + ((ended(head_end[0], body_end[0]),) if head_end else ())


def ended(head_end, body_end):
  """The round's end state of `alternate`'s two phases (`loss_scale.ScaledOptState`): the body
  phase's, its loss scale the round's last, its `skipped_steps` counting both phases' (each
  phase's optimizer starts at 0), so `loss_scale.round_metrics(None, ·)` reads the round."""
  return body_end.replace(skipped_steps=head_end.skipped_steps + body_end.skipped_steps)


def jointly(loss_fn: Callable, optimizer: optax.GradientTransformation, head: dict, body: dict,
            xs, *, step_mode: str, lr_scale=None, loss_scale_state=None):
  """FedPer's local training: every step updates head and body together: (head, body, losses);
  under float16 with a client's kept `loss_scale_state`, the optimizer's end state fourth
  (`partial_sharing.train_part`)."""
  merged = lambda key: partial_sharing.merge(head[key], body[key])
  nothing = {'params': {}, 'stats': {}}
  whole_loss = lambda p, s, frozen, batch: loss_fn({'params': p, 'stats': s}, nothing, batch)
  params, stats, losses, *end = partial_sharing.train_part(
      whole_loss, optimizer, merged('params'), merged('stats'), None, xs, step_mode=step_mode,
      lr_scale=lr_scale, loss_scale_state=loss_scale_state)
  part = lambda template: {'params': partial_sharing.at_paths_of(params, template['params']),
                           'stats': partial_sharing.at_paths_of(stats, template['stats'])}
  return (part(head), part(body), losses, *end)


# -- the method ----------------------------------------------------------------------------------

def recognition_loss(model, head_kwargs: dict, class_mask):
  """`loss_fn(trained, frozen, batch)` of `alternate` for a recognition backbone: the client's
  classification loss over its own classes (FedPE's), the model being both parts together; a
  part's params may hold 'W', the class embeddings."""
  def loss_fn(trained, frozen, batch):
    params = partial_sharing.merge(trained['params'], frozen['params'])
    w = params.pop('W')
    stats = partial_sharing.merge(trained['stats'], frozen['stats'])
    variables = partial_sharing.as_variables({'params': params, 'stats': stats})
    images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
    features, state = model.apply(variables, images, train=True, mutable=['batch_stats'])
    loss = heads.loss(features, w, batch['labels'], class_mask, batch['mask'], **head_kwargs)
    # Only the trained part's statistics move (a frozen part is frozen whole).
    return loss, partial_sharing.at_paths_of(state.get('batch_stats', {}), trained['stats'])
  return loss_fn


def head_predicate(head: str, task: str) -> Callable:
  """`partial_sharing.split`'s predicate of the head's backbone variables (W_k is apart)."""
  layers = LAST_LAYERS[task] if head == 'last_layers' else ()
  return partial_sharing.under_top_level(layers)


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedRep (or FedPer) over the partition `fed` (a `data.federated.FederatedData`): a
  recognition client's backbone and class embeddings, or a data center's detector."""
  c = config.fedrep
  task = sources.task_of(config)
  recognition = task == 'recognition'
  optimizer = common.make_optimizer(config.optimizer)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  is_head = head_predicate(c.head, task)
  shape = fedbn.image_shape(config, fed)

  def init(rng, start=None):
    state = fedbn.initial_state(config, model, fed, shape, is_head, 'head', rng, start)
    # float16: each client's loss scale, kept between rounds (core/loss_scale.py).
    return state.replace(clients={**state.clients,
                                  **common.initial_loss_scales(model, fed.num_clients)})

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng   # every client receives the same body, never a head
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    head_vars, body_vars = private['head'], client_input.shared['model']
    head = {'params': dict(head_vars.get('params', {})),
            'stats': head_vars.get('batch_stats', {})}
    if recognition:
      head['params']['W'] = private['W']
      xs = {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
            'rng': jax.random.split(rng, data['images'].shape[0])}
      loss_fn = recognition_loss(model, common.head_kwargs(config), data['class_mask'])
    else:
      xs, loss_fn = pad_training.step_inputs(data, rng), pad_training.loss(model)
    body = {'params': body_vars['params'], 'stats': body_vars.get('batch_stats', {})}
    train = functools.partial(alternate, body_steps=c.body_steps) if c.alternate else jointly
    head, body, losses, *end = train(loss_fn, optimizer, head, body, xs, step_mode=step_mode,
                                     lr_scale=client_input.shared.get('lr_scale'),
                                     loss_scale_state=private.get('loss_scale'))
    end_state = end[0] if end else None   # float16: the round's end scale and skipped steps
    kept = {'W': head['params'].pop('W')} if recognition else {}
    kept.update(common.kept_loss_scale(private, end_state))
    metrics = {'train_loss': partial_sharing.mean_over_active(losses, data['mask']),
               **loss_scale.round_metrics(None, end_state)}
    return ClientResult(update={'model': _variables(body)},
                        private={**kept, 'head': _variables(head)}, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    # Alg. 1: the server averages the bodies (FedAvg's weights n_k); heads never arrive.
    return {**server, 'model': aggregation.weighted_mean(updates['model'], weights)}

  def class_embeddings(state: RoundState):
    if not recognition:
      return None
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  has_personal_model = c.head == 'last_layers'
  return Algorithm(
      name=config.algorithm, init=init, broadcast=broadcast, client_update=client_update,
      server_update=server_update,
      eval_variables=lambda server: partial_sharing.merge(server['model'], server['start_head']),
      class_embeddings=class_embeddings,
      personalized=(functools.partial(fedbn.personalized, fedbn.predict(model, task), 'head')
                    if has_personal_model else None),
      update_origin=lambda ci: origin_by_key(ci, ('model',)))


def _variables(part: dict) -> dict:
  """A part (`{'params', 'stats'}`) as flax variables (`{'params', 'batch_stats'}`), without
  empty collections."""
  return {name: tree for name, tree in (('params', part['params']),
                                        ('batch_stats', part['stats'])) if tree}
