"""A FedFR client's round (Liu et al., AAAI 2022, Eq. 7), as functions of a fixed `Setup`.

  client_update   the round: W_l's first start, hard negatives, E epochs of Eq. 7, what is sent
  objective       Eq. 7 on one batch: alpha_1 L_cos + alpha_2 L_con + alpha_3 L_BCE (+ Table 2's KD)
  embed           eval-mode unit features (theta_g's: class init, hard negatives, f_glob)

`algorithm.build` fixes a `Setup` from the config and the partition and binds it with
`functools.partial`; the driver jits and maps `client_update` over clients.
"""

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_face.algorithms import common
from fedjax_face.algorithms.fedfr import losses
from fedjax_face.algorithms.fedfr.hard_negatives import (epoch_order, hard_negative_mask,
                                                         kept_public)
from fedjax_face.core import arrays, local, loss_scale
from fedjax_face.core.algorithm import ClientInput, ClientResult
from fedjax_face.data import preprocess
from fedjax_face.models import heads


@dataclasses.dataclass(frozen=True)
class Setup:
  """What `build` fixes once from the config and the partition, for every piece of a round.

  Attributes:
    fedfr: `config.fedfr`.
    model: the backbone (flax module).
    optimizer: the clients' optimizer (a fresh state every round).
    head: `heads.loss` kwargs of L_cos (CosFace).
    step_mode: 'scan' | 'unroll' (`core.local.run_steps`).
    embed: `(variables, images) -> [n, d]` unit eval-mode features (`embed` bound to the model).
    alphas: Eq. 7's weights by term name ('cosface', 'contrastive', 'dfc', 'kd').
    adaptation_round: the round of Table 2's local adaptation, None without it.
    use_public: whether clients train with the shared public images (Eq. 3).
    num_public: K_g, the public identities (rows of Phi).
    max_classes: C_max, the most local identities of a client (rows of W_l).
    capacity: public slots a client keeps per epoch (0 without public images).
    copies: passes over the kept public images per round (E; 0 without public images).
  """
  fedfr: Any
  model: Any
  optimizer: optax.GradientTransformation
  head: dict
  step_mode: str
  embed: Callable
  alphas: dict
  adaptation_round: int | None
  use_public: bool
  num_public: int
  max_classes: int
  capacity: int
  copies: int


def embed(model, batch_size: int, variables, images: jax.Array) -> jax.Array:
  """Eval-mode unit features of uint8 images, in batches of `batch_size` (`eval.batch_size`)."""
  n = images.shape[0]
  size = min(batch_size, n)
  padded = jnp.pad(images, [(0, arrays.round_up(n, size) - n)] + [(0, 0)] * (images.ndim - 1))
  chunks = padded.reshape((-1, size) + images.shape[1:])
  out = jax.lax.map(lambda x: model.apply(variables, preprocess.normalize(x), train=False),
                    chunks)
  return arrays.l2_normalize(out.reshape(-1, out.shape[-1])[:n].astype(jnp.float32))


def stage_weights(setup: Setup, adapting) -> dict:
  """Eq. 7's alphas; in the adaptation round the contrastive term is off and KD on."""
  alphas = setup.alphas
  if setup.adaptation_round is None:
    return alphas
  on = adapting.astype(jnp.float32)
  return {**alphas, 'contrastive': alphas['contrastive'] * (1.0 - on),
          'kd': alphas['kd'] * on}


# -- Eq. 7 on one batch ---------------------------------------------------------------------------

def _class_matrix(setup: Setup, params: dict, class_mask: jax.Array):
  """([W_l ; Phi], its class mask): Eq. 3's classes (public images are labelled C_max + id)."""
  w = params['W']
  all_mask = class_mask
  if setup.use_public:
    w = jnp.concatenate([w, params['Phi']])
    all_mask = jnp.concatenate([class_mask, jnp.ones(setup.num_public, bool)])
  return w, all_mask


def _kd_term(setup: Setup, features, global_features, w, all_mask, mask) -> jax.Array:
  """Table 2's KD: T^2 KL to the global model's logits over the same classes (W_l held fixed
  in the teacher)."""
  logits_of = lambda f, w: heads.logits(f, w, None, all_mask, kind='cosface',
                                        scale=setup.head['scale'])
  teacher = logits_of(global_features, jax.lax.stop_gradient(w))
  return losses.distillation_loss(logits_of(features, w), teacher, setup.fedfr.kd_temperature,
                                  mask)


def _dfc_term(setup: Setup, dfc: dict, features, labels, is_local, class_mask,
              mask) -> jax.Array:
  """The DFC branch's loss on f' = Pi(f): Eq. 6, or Table 2's CosFace variant."""
  c = setup.fedfr
  cos = losses.dfc_cosines(features, dfc['projection'], dfc['omega'])
  local_labels = jnp.where(is_local, labels, 0)
  if c.dfc_loss == 'bce':   # Eq. 6
    return losses.dfc_loss(cos, dfc['bias'], local_labels, is_local, class_mask, mask,
                           scale=c.dfc_scale, margin=c.dfc_margin, balance=c.dfc_balance,
                           power=c.dfc_power)
  return losses.dfc_cosface_loss(cos, local_labels, is_local, class_mask, mask,
                                 scale=c.dfc_scale, margin=c.dfc_margin)


def objective(setup: Setup, params: dict, batch_stats, fixed: dict, batch: dict,
              class_mask: jax.Array):
  """Eq. 7 on one batch: (total, (the backbone's new batch_stats, each term by name)).

  `params`: the trained 'backbone', 'W' (W_l), 'Phi' (with public images) and 'dfc' (the branch);
  `fixed`: the eval-mode 'global' (f_glob) and 'prev' (f_prev) models, and 'adapting'.
  """
  c, model = setup.fedfr, setup.model
  variables = {'params': params['backbone']}
  if batch_stats:
    variables['batch_stats'] = batch_stats
  images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
  features, new_state = model.apply(variables, images, train=True, mutable=['batch_stats'])
  mask, labels, is_local = batch['mask'], batch['labels'], batch['is_local']
  terms = {}
  w, all_mask = _class_matrix(setup, params, class_mask)
  terms['cosface'] = heads.loss(features, w, labels, all_mask, mask, **setup.head)   # Eq. 3
  if c.contrastive_weight or c.adaptation == 'kd':
    global_features = model.apply(fixed['global'], images, train=False)
  if c.contrastive_weight:   # Eq. 5
    prev_features = model.apply(fixed['prev'], images, train=False)
    terms['contrastive'] = losses.contrastive_loss(features, global_features, prev_features,
                                                   c.temperature, mask)
  if c.adaptation == 'kd':
    terms['kd'] = _kd_term(setup, features, global_features, w, all_mask, mask)
  if c.dfc:
    terms['dfc'] = _dfc_term(setup, params['dfc'], features, labels, is_local, class_mask, mask)
  weights = stage_weights(setup, fixed.get('adapting'))
  total = sum(weights[k] * v for k, v in terms.items())   # Eq. 7
  return total, (new_state.get('batch_stats', {}), terms)


# -- the round's pieces ---------------------------------------------------------------------------

def _start_params(setup: Setup, shared: dict, private: dict, local_features, local_labels,
                  local_mask) -> dict:
  """The round's trained parameters. At a client's first round W_l (and Omega) start from its
  identities' mean features under theta_g (`fedfr.local_class_init='mean_feature'`)."""
  c = setup.fedfr
  started = private['started']
  w = private['W']
  if c.local_class_init == 'mean_feature':
    means = common.class_mean_features(local_features, local_labels, local_mask,
                                       setup.max_classes)
    w = jnp.where(started, w, means)
  params = {'backbone': shared['model']['params'], 'W': w}
  if setup.use_public:
    params['Phi'] = shared['Phi']
  if c.dfc:
    dfc = private['dfc']
    params['dfc'] = {**dfc, 'omega': jnp.where(started, dfc['omega'], w)}
  return params


def _fixed_models(setup: Setup, shared: dict, private: dict) -> dict:
  """f_glob's and f_prev's models, held fixed. f_prev: the client's last local model; before its
  first round, the model it starts from (Eq. 5 is then log 2 with zero gradient)."""
  global_vars = shared['model']
  prev = jax.tree.map(lambda p, g: jnp.where(private['started'], p, g), private['prev_model'],
                      global_vars)
  fixed = {'global': global_vars, 'prev': prev}
  if setup.adaptation_round is not None:
    fixed['adapting'] = shared['adapting']
  return fixed


def _public_slots(setup: Setup, shared: dict, local_features, local_mask, rng):
  """(hard `[P]`, chosen `[capacity]` public indices, their valid): the round's hard negatives."""
  if not setup.use_public:
    return jnp.zeros(0, bool), jnp.zeros(0, jnp.int32), jnp.zeros(0, bool)
  hard = hard_negative_mask(local_features, local_mask, shared['public_features'],
                            setup.fedfr.hn_threshold)
  chosen, chosen_valid = kept_public(rng, hard, setup.capacity)
  return hard, chosen, chosen_valid


def _gather(setup: Setup, shared: dict, local_images, local_labels, chosen, pos, ok) -> dict:
  """One step's batch from `epoch_order`'s positions: local samples, then kept public slots
  (labelled C_max + public id)."""
  num_local = local_images.shape[0]
  is_local = pos < num_local
  local_pos = jnp.minimum(pos, num_local - 1)
  images, labels = local_images[local_pos], local_labels[local_pos]
  if setup.use_public:
    slot = chosen[jnp.maximum(pos - num_local, 0) % setup.capacity]
    images = jnp.where(is_local[:, None, None, None], images, shared['public_images'][slot])
    labels = jnp.where(is_local, labels, setup.max_classes + shared['public_labels'][slot])
  return {'images': images, 'labels': labels, 'mask': ok, 'is_local': is_local}


def _local_epochs(setup: Setup, shared: dict, fixed: dict, class_mask, gather: Callable,
                  carry, positions, valid, rng):
  """SGD on Eq. 7 over the round's ordered steps: ((params, batch_stats, opt_state), `[T]` terms).

  Steps past the valid samples are skipped (`lax.cond`: skipped at run time by the loop backend
  on CPU; computed and discarded under vmap), their terms zero.
  """
  loss_and_grad = loss_scale.value_and_grad_of(functools.partial(objective, setup),
                                               has_aux=True)
  optimizer = client_optimizer(setup)

  def step(carry, xs):
    params, batch_stats, opt_state = carry
    batch = {**gather(xs['positions'], xs['valid']), 'rng': xs['rng']}
    (_, (new_stats, terms)), grads = loss_and_grad(opt_state, params, batch_stats, fixed, batch,
                                                   class_mask)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    if 'lr_scale' in shared:
      updates = jax.tree.map(lambda u: u * shared['lr_scale'].astype(u.dtype), updates)
    params, batch_stats = loss_scale.undo_if_skipped(
        new_opt_state, opt_state, (optax.apply_updates(params, updates), new_stats),
        (params, batch_stats))
    return (params, batch_stats, new_opt_state), terms

  def step_or_skip(carry, xs):
    zero_terms = jax.eval_shape(lambda: step(carry, xs)[1])
    skip = lambda carry, xs: (carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                                  zero_terms))
    return jax.lax.cond(jnp.any(xs['valid']), step, skip, carry, xs)

  xs = {'positions': positions, 'valid': valid,
        'rng': jax.random.split(rng, positions.shape[0])}
  return local.run_steps(step_or_skip, carry, xs, mode=setup.step_mode)


def client_optimizer(setup: Setup) -> optax.GradientTransformation:
  """The clients' optimizer, under dynamic loss scaling when the backbone computes in float16
  (its scale fresh every round with the optimizer's state, core/loss_scale.py)."""
  return common.scaled_for(setup.model, setup.optimizer)


def _round_metrics(setup: Setup, shared: dict, terms: dict, valid, hard) -> dict:
  """Each term's and Eq. 7's mean over the steps a client ran, those steps (Fig. 3's steps per
  epoch) and its hard public images."""
  ran = jnp.any(valid, axis=1)
  steps_run = ran.sum()
  mean = lambda x: jnp.sum(x * ran) / jnp.maximum(steps_run, 1)
  metrics = {f'loss_{k}': mean(v) for k, v in terms.items()}
  weights = stage_weights(setup, shared.get('adapting'))
  metrics['train_loss'] = sum(weights[k] * metrics[f'loss_{k}'] for k in terms)
  metrics['steps_run'] = steps_run.astype(jnp.float32)
  metrics['hard_public'] = hard.sum().astype(jnp.float32)
  return metrics


def _result(setup: Setup, params: dict, batch_stats, metrics: dict,
            kept_scale: dict) -> ClientResult:
  """Sends theta_l (and Phi_l); keeps W_l, the DFC branch and theta_l (next round's f_prev), and
  `kept_scale` (`common.kept_loss_scale`: its loss scale, when its state holds one)."""
  local_model = {'params': params['backbone']}
  if batch_stats:
    local_model['batch_stats'] = batch_stats
  update = {'model': local_model}
  if setup.use_public:
    update['Phi'] = params['Phi']
  kept = {'W': params['W'], 'prev_model': local_model, 'started': jnp.ones((), bool),
          **kept_scale}
  if setup.fedfr.dfc:
    kept['dfc'] = params['dfc']
  return ClientResult(update=update, private=kept, metrics=metrics)


def client_update(setup: Setup, client_input: ClientInput, private: dict, data: dict,
                  rng: jax.Array) -> ClientResult:
  """A client's round (Eq. 7): hard negatives under theta_g, E epochs over local + hard public
  images, then what it sends and what it keeps."""
  shared = client_input.shared
  global_vars = shared['model']
  order_rng, public_rng, step_rng = jax.random.split(rng, 3)
  data = jax.tree.map(jnp.asarray, data)
  local_images = data['images'].reshape((-1,) + data['images'].shape[2:])
  local_labels = data['labels'].reshape(-1)
  local_mask = data['mask'].reshape(-1)
  class_mask = data['class_mask']

  local_features = setup.embed(global_vars, local_images)   # class init and hard negatives
  params = _start_params(setup, shared, private, local_features, local_labels, local_mask)
  fixed = _fixed_models(setup, shared, private)
  hard, chosen, chosen_valid = _public_slots(setup, shared, local_features, local_mask,
                                             public_rng)
  batch_size = data['images'].shape[1]
  positions, valid = epoch_order(order_rng, local_mask, chosen_valid, setup.copies, batch_size)
  gather = functools.partial(_gather, setup, shared, local_images, local_labels, chosen)

  start_opt_state = loss_scale.with_scale(client_optimizer(setup).init(params),
                                          private.get('loss_scale'))
  carry = (params, global_vars.get('batch_stats', {}), start_opt_state)
  (params, batch_stats, opt_state), terms = _local_epochs(setup, shared, fixed, class_mask,
                                                          gather, carry, positions, valid,
                                                          step_rng)
  metrics = {**_round_metrics(setup, shared, terms, valid, hard),
             **loss_scale.round_metrics(start_opt_state, opt_state)}
  return _result(setup, params, batch_stats, metrics, common.kept_loss_scale(private, opt_state))
