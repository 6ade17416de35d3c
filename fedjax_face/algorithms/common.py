"""Pieces shared by the face-recognition algorithms: optimizer, local training, class tables."""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_face.core import arrays, local, local_terms, loss_scale, precision
from fedjax_face.data import preprocess
from fedjax_face.models import starts
from fedjax_face.models import heads
from fedjax_face.models import initializers
from fedjax_face.models import partial_fc


def make_optimizer(config) -> optax.GradientTransformation:
  """SGD with momentum and (coupled, PyTorch-style) weight decay: the FedGC / insightface recipe.

  `config` is the `optimizer` section: learning_rate (constant, as in FedGC), momentum,
  weight_decay; `name='adam'` is Adam at that rate with the same weight decay added to the
  gradient (PyTorch's Adam, which FedGPAD's code uses). `correction` 'fedprox' / 'scaffold'
  chains `core.local_terms.transform` first: FedProx's proximal gradient or SCAFFOLD's c − c_i
  on the received model's parameters (`core/blocks.py` names them each round).
  """
  steps = [optax.add_decayed_weights(config.weight_decay)]
  if config.get('correction', 'none') != 'none':
    steps.insert(0, local_terms.transform())
  if config.get('name', 'sgd') == 'adam':
    return optax.chain(*steps, optax.adam(config.learning_rate))
  return optax.chain(*steps, optax.sgd(config.learning_rate, momentum=config.momentum or None))


def lr_scale_schedule(config) -> Callable[[jax.Array], jax.Array] | None:
  """Round -> factor on the learning rate, or None for a constant rate (no op is added).

  'step': times `decay_factor` from each round `round(f * num_rounds)`, f in `decay_at` (FedFV
  Sec. 4.2: lr 0.1, / 10 at rounds 10,000 and 13,000 of 15,000). The rate is a function of the
  round, not of the client's step count: client optimisers start afresh every round. Algorithms
  send the round's factor with the broadcast (`shared['lr_scale']`); scaling SGD's update by it
  is SGD at the scaled rate (momentum and weight decay act before the rate).
  """
  opt = config.optimizer
  if opt.schedule == 'constant':
    return None
  boundaries = {int(round(f * config.num_rounds)): opt.decay_factor for f in opt.decay_at}
  return optax.piecewise_constant_schedule(1.0, boundaries)


def with_lr_scale(shared: dict, schedule, round_index) -> dict:
  """`shared` plus the round's learning-rate factor when the rate is scheduled."""
  return shared if schedule is None else {**shared, 'lr_scale': schedule(round_index)}


def head_kwargs(config) -> dict:
  """The loss's kwargs from `config.head`; a negative margin means the paper's margin for the loss."""
  head = dict(config.head)
  if head.get('margin', -1.0) < 0:
    head['margin'] = None
  return heads.head_kwargs_from_config(head)


def init_backbone(model, rng: jax.Array, image_shape: tuple[int, ...], train: bool = False):
  """Backbone variables (`params` and, if the model has BatchNorm, `batch_stats`).

  Compiled as one program, its parameter draws batched (`models/initializers.batched_init`):
  eagerly, every layer's draws and forward operations compiled their own (seconds per fresh
  process), and one draw at a time compiles one set of random-number fusions per parameter. The
  parameters are the eager ones to the last bit (tests/models/test_initializers.py)."""
  zeros = jnp.zeros((1,) + tuple(image_shape), jnp.float32)
  init = initializers.batched_init(lambda key: model.init(key, zeros, train=train))
  return dict(jax.jit(init)(rng))


def local_step(model, *, head_kwargs: dict, optimizer: optax.GradientTransformation,
               train_class_embeddings: bool = True,
               class_rows: Callable | None = None, sample_rate: float = 1.0) -> Callable:
  """One local SGD step: `step(carry, batch, class_mask, class_embeddings, fixed_classes=None,
  lr_scale=None, row_input=None) -> (carry, loss)`.

  `carry` is `(params, batch_stats, opt_state)` with `params = {'backbone': ..., 'W': ...}`
  (no 'W' when `train_class_embeddings=False`: the `class_embeddings` argument is then the fixed
  W, FedPE+Fixed; otherwise it is unused). `batch` holds one step's `images` `[B, H, W, 3]` uint8,
  `labels`, `mask` `[B]` and `rng`; `class_mask` `[C]` marks the client's real classes. The local
  objective is the client's classification loss (FedGC Eq. 3/4 and its CosFace / ArcFace
  variants) over its own classes only. `fixed_classes` `[n, d]` are further classes appended after
  the client's, held fixed (no gradient): FedFV's equivalent class embeddings. `lr_scale` scales
  the update (`lr_scale_schedule`). `class_rows(W, row_input) -> [C, d]`, when given, makes the
  class embeddings a function of the trained parameter W and of a per-client input held fixed
  (FedUV: W is the shared projection W', `row_input` the client's codeword, rows W'^T v / ||v||^2).
  `optimizer` is the setting's; a float16 `model` wraps it in dynamic loss scaling
  (`loss_scale.scaled_optimizer`; `opt_state` then holds the scale, and an overflowed step leaves
  the carry as it was but for the scale).
  `local_trainer` runs it over a client's steps; the bench drives it from a Python loop, the way
  sequential simulators run clients.

  `sample_rate` < 1 is Partial FC (models/partial_fc.py): each step draws its class centers (the
  batch's classes and uniform others) from a key folded out of `batch['rng']`, the loss runs over
  those rows of W, and the optimizer steps on those rows and their optimizer state only
  (`partial_fc.take_rows` / `put_rows`): every other row of W and of its momentum stays bit for
  bit as it was. It needs W trained as itself (no `class_rows`, no `fixed_classes`).
  """

  def loss_fn(params, batch_stats, class_embeddings, fixed_classes, row_input, images, labels,
              sample_mask, class_mask):
    variables = {'params': params['backbone']}
    if batch_stats:
      variables['batch_stats'] = batch_stats
    features, new_state = model.apply(variables, images, train=True, mutable=['batch_stats'])
    w = params['W'] if train_class_embeddings else jax.lax.stop_gradient(class_embeddings)
    if class_rows is not None:
      w = class_rows(w, jax.lax.stop_gradient(row_input))
    if fixed_classes is not None:
      w = jnp.concatenate([w, jax.lax.stop_gradient(fixed_classes).astype(w.dtype)])
      class_mask = jnp.concatenate([class_mask, jnp.ones(fixed_classes.shape[0], bool)])
    loss = heads.loss(features, w, labels, class_mask, sample_mask, **head_kwargs)
    return loss, new_state.get('batch_stats', {})

  optimizer = scaled_for(model, optimizer)
  if sample_rate < 1.0 and (not train_class_embeddings or class_rows is not None):
    raise ValueError('local_step: sample_rate < 1 (Partial FC) samples the rows of a trained W; '
                     'expected train_class_embeddings=True and no class_rows.')

  def step(carry, batch, class_mask, class_embeddings=None, fixed_classes=None, lr_scale=None,
           row_input=None):
    params, batch_stats, opt_state = carry
    images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
    labels, sampled = batch['labels'], sampled_classes(params, batch)
    if sampled is not None:
      if fixed_classes is not None:
        raise ValueError('local_step: Partial FC takes no fixed_classes (FedFV equivalents).')
      full_params, full_opt_state = params, opt_state
      params = partial_fc.take_rows(params, sampled)
      opt_state = partial_fc.take_rows(opt_state, sampled)
      labels, class_mask = partial_fc.remap_labels(sampled, labels), class_mask[sampled]
    (loss, new_stats), grads = loss_scale.value_and_grad_of(loss_fn, has_aux=True)(
        opt_state, params, batch_stats, class_embeddings, fixed_classes, row_input, images,
        labels, batch['mask'], class_mask)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    if lr_scale is not None:
      updates = jax.tree.map(lambda u: u * lr_scale.astype(u.dtype), updates)
    params, batch_stats = loss_scale.undo_if_skipped(
        new_opt_state, opt_state, (optax.apply_updates(params, updates), new_stats),
        (params, batch_stats))
    opt_state = new_opt_state
    if sampled is not None:
      params = partial_fc.put_rows(full_params, params, sampled)
      opt_state = partial_fc.put_rows(full_opt_state, opt_state, sampled)
    return (params, batch_stats, opt_state), loss

  def sampled_classes(params, batch):
    """This step's Partial FC classes (`partial_fc.sample_classes`), or None for the full head
    (rate 1, or a head too small for the rate to leave any row out)."""
    if sample_rate >= 1.0:   # before reading W: FedPE+Fixed's params have none
      return None
    num_classes, batch_size = params['W'].shape[0], batch['labels'].shape[0]
    if not partial_fc.samples(num_classes, sample_rate, batch_size):
      return None
    rng = jax.random.fold_in(batch['rng'], partial_fc.SAMPLING_STREAM)
    return partial_fc.sample_classes(rng, batch['labels'], batch['mask'], num_classes,
                                     sample_rate)

  return step


def scaled_for(model, optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
  """`optimizer` under dynamic loss scaling when `model` computes in float16, else itself
  (core/loss_scale.py: the scale lives in the optimizer's state)."""
  return loss_scale.scaled_optimizer(optimizer, precision.model_needs_loss_scaling(model))


def initial_loss_scales(model, num_clients: int) -> dict:
  """For a method's round state: under float16, every client's loss scale before its first round,
  `{'loss_scale': [K] states}` (core/loss_scale.py: the scale is the client's private state,
  kept between rounds while its optimizer starts afresh); {} otherwise."""
  if not precision.model_needs_loss_scaling(model):
    return {}
  return {'loss_scale': loss_scale.client_states(num_clients)}


def kept_loss_scale(private: dict, opt_state) -> dict:
  """What a client keeps of its round's loss scale: `{'loss_scale': ...}`, the end state carried
  by `opt_state`, when its private state holds one (`initial_loss_scales`); {} otherwise."""
  return {'loss_scale': opt_state.loss_scale} if 'loss_scale' in private else {}


def local_trainer(model, *, head_kwargs: dict, optimizer: optax.GradientTransformation,
                  step_mode: str, train_class_embeddings: bool = True,
                  class_rows: Callable | None = None, sample_rate: float = 1.0) -> Callable:
  """Builds `train(variables, W, data, rng, opt_state=None, *, fixed_classes=None,
  lr_scale=None, row_input=None, loss_scale_state=None) -> (variables, W, opt_state, metrics)`
  (the keywords, `class_rows` and `sample_rate`: `local_step`).

  Runs `local_step` over the client's steps (`data` leaves have a leading steps axis; padded
  steps are skipped). Without `opt_state` the momentum is created afresh at the start of the
  round (`federated.client_optimizer_state='reset'`); clients that keep theirs
  (`client_opt_states`) and centralized training pass it in. With
  `train_class_embeddings=False` W is held fixed (FedPE+Fixed). Under float16 the returned
  `opt_state` carries the loss scale (`loss_scale.ScaledOptState`), and `loss_scale_state`, a
  client's kept one, starts the round's optimizer from it (core/loss_scale.py: where the scale
  lives); the metrics gain 'loss_scale/skipped_steps' and 'loss_scale/scale'.
  """
  one_step = local_step(model, head_kwargs=head_kwargs, optimizer=optimizer,
                        train_class_embeddings=train_class_embeddings, class_rows=class_rows,
                        sample_rate=sample_rate)
  optimizer = scaled_for(model, optimizer)   # the state `local_step`'s optimizer steps

  def params_of(variables, class_embeddings):
    params = {'backbone': variables['params']}
    if train_class_embeddings:
      params['W'] = class_embeddings
    return params

  def init_opt_state(variables, class_embeddings):
    return optimizer.init(params_of(variables, class_embeddings))

  def train(variables, class_embeddings, data, rng, opt_state=None, *, fixed_classes=None,
            lr_scale=None, row_input=None, loss_scale_state=None):
    params = params_of(variables, class_embeddings)
    if opt_state is None:
      opt_state = optimizer.init(params)
    opt_state = loss_scale.with_scale(opt_state, loss_scale_state)
    carry = (params, variables.get('batch_stats', {}), opt_state)
    num_steps = data['images'].shape[0]
    xs = {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
          'rng': jax.random.split(rng, num_steps)}

    def step(carry, batch):
      return one_step(carry, batch, data['class_mask'], class_embeddings, fixed_classes,
                      lr_scale, row_input)

    start_opt_state = opt_state
    (params, batch_stats, opt_state), losses = local.run_steps(
        local.skip_if_empty(step), carry, xs, mode=step_mode)
    active = jnp.any(data['mask'], axis=-1)
    metrics = {'train_loss': jnp.sum(losses * active) / jnp.maximum(active.sum(), 1),
               **loss_scale.round_metrics(start_opt_state, opt_state)}
    new_variables = {'params': params['backbone']}
    if batch_stats:
      new_variables['batch_stats'] = batch_stats
    return new_variables, params.get('W', class_embeddings), opt_state, metrics

  train.init_opt_state = init_opt_state
  return train


def keeps_client_optimizer(config) -> bool:
  return config.federated.client_optimizer_state == 'keep'


def client_opt_states(train, variables, class_embeddings: jax.Array):
  """Every client's fresh optimizer state, stacked on a leading clients axis, for
  `federated.client_optimizer_state='keep'` (`class_embeddings` `[K, C_max, d]`: each client's
  rows)."""
  return jax.vmap(lambda w: train.init_opt_state(variables, w))(class_embeddings)


def class_mean_features(features: jax.Array, labels: jax.Array, mask: jax.Array,
                        num_classes: int) -> jax.Array:
  """`[C, d]` unit mean of the unit features of each local class's valid samples (zero for a
  class without one): the mean-feature initialisation of class embeddings (FedFace, FedFR)."""
  onehot = jax.nn.one_hot(labels, num_classes, dtype=features.dtype) * mask[:, None]
  total = onehot.T @ arrays.l2_normalize(features)
  return arrays.l2_normalize(total / jnp.maximum(1.0, onehot.sum(axis=0))[:, None])


def init_federated(config, model, fed, rng: jax.Array):
  """(backbone variables, `[K, C_max, d]` class embeddings) of a federated method's first round."""
  backbone_rng, w_rng = jax.random.split(rng)
  w = init_client_class_embeddings(w_rng, fed.class_mask, config.model.embedding_dim,
                                   config.head.loss, config.head.init_std)
  return init_backbone(model, backbone_rng, fed.images.shape[1:]), w


def init_client_class_embeddings(rng: jax.Array, class_mask: np.ndarray, dim: int, kind: str,
                                 std: float = 0.01):
  """`[K, C_max, d]` class embeddings, one independent draw per client, padded rows zero."""
  num_clients, max_classes = class_mask.shape
  w = heads.init_class_embeddings(rng, num_clients * max_classes, dim, kind, std)
  w = w.reshape(num_clients, max_classes, dim)
  return w * jnp.asarray(class_mask, w.dtype)[..., None]


def start_from(start, variables, public_classes=None, *, method: str):
  """(backbone variables, public class matrix) of a run that starts from `start`, the final state
  of the finished run `config.init_from` names (FedFR's pre-training, configs/fedfr/pretrain.py;
  nested dicts, read by the driver): its final model and, when `public_classes` (the template
  `[K_g, d]`) is given, its class matrix. With `start` None (no init_from, or a resume, whose
  checkpoint replaces them) the templates come back unchanged (random weights).

  The run must have trained on this run's data, which `run.setup.validate` checks
  (`run.resume.check_init_data`): the synthetic benchmark draws other identities for another seed
  or size, and an inherited class matrix would then name other people.
  """
  if start is None:
    return variables, public_classes
  name = 'config.init_from: server'
  server = start['server']
  if 'model' not in server:
    raise ValueError(f"{name} holds {sorted(server)}; expected a run's 'model' "
                     '(configs/fedfr/pretrain.py) or a backbone file.')
  variables = starts.matching_tree(f'{name}.model', variables, server['model'])
  if public_classes is None:
    return variables, None
  if 'W' not in server:
    raise ValueError(f"{name} holds {sorted(server)}, a backbone alone; {method} also needs the "
                     "public identities' class matrix W: pre-train first (configs/fedfr/"
                     'pretrain.py, which can start from the backbone file) and start from that '
                     'run.')
  if np.shape(server['W']) != np.shape(public_classes):
    raise ValueError(f"{name}.W has shape {np.shape(server['W'])}; expected "
                     f'{np.shape(public_classes)}: the public identities\' class matrix '
                     "(pre-train with the same data.public_identities, data.centralized_on='public').")
  return variables, jnp.asarray(server['W'], jnp.float32)
