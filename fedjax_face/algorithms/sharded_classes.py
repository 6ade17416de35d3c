"""Centralized training with the class matrix W split over devices: Partial FC sharded as
arcface_torch shards it (`recognition/arcface_torch/partial_fc_v2.py`, PartialFC_V2 with
`world_size` ranks; docs/partial_fc.md, "Sharded").

`centralized.class_shards = S` (0: off, W whole on one device as before) splits W's C rows into S
contiguous shards of C / S rows (arcface_torch's rank r holds rows `r C / S` on; equal shards
only: C must divide by S, refused in one line otherwise). The shards lie on a 1-D mesh with axis
`classes` over D devices, S / D consecutive shards a device (D: `engine.num_devices`, 0 = as
many of the visible devices as there are shards; S must divide by D). Each device holds its
shards' rows of W and of every optimizer-state leaf that mirrors W (momentum, Adam's moments);
the backbone, its optimizer state and the step counters are replicated.

One local step, inside one `jax.shard_map` over `classes`:
- every device runs the backbone on the whole batch (replicated: the same images, flips and
  BatchNorm statistics as one device; arcface_torch instead splits the batch over ranks and
  all-gathers the features, so its backbone gradient is a sum over ranks' sub-batches and its
  BatchNorm statistics per rank: our reading keeps a sharded run the one-device run, at the cost
  of the backbone's compute on every device);
- shard r samples its own rows from `fold_in(key, r)` (`partial_fc.device_samples`), so the
  sample depends on S, as arcface_torch's depends on its world size, and not on D: the same run
  on 1, 2 or 4 devices draws the same centers;
- the logits of each shard's sampled rows, the softmax's max, sum and target logit all-reduced
  (`partial_fc.shard_cross_entropy`, DistCrossEntropyFunc); JAX differentiates through the
  all-reduces, so the features' gradient is the sum of every shard's part;
- the optimizer steps on the backbone (the same on every device) and on each shard's sampled
  rows and their optimizer state only (`partial_fc.take_rows` / `put_rows` on the device's rows):
  unsampled rows and their momentum stay bit for bit, as in the one-device step.

What differs from the one-device step (algorithms/common.local_step) at the same S: the order
of the softmax's sums over shards (an all-reduce instead of one reduction), so a run on D
devices equals the run on one device to float32 rounding, not bit for bit. Runs on the same D
are bit for bit (a resumed run equals the uninterrupted one). At S = 1 the sample is the
one-device step's (`fold_in(key, 0)`).

Compute dtypes: float32 and bfloat16 (the logits and the softmax's sums are float32 either way:
`heads.logits`); float16, which needs dynamic loss scaling, is refused in one line.

The run: one process, the engine's loop backend without a clients mesh (the one client's program
spans the classes mesh); `engine.backend` must be 'loop' (configs/fedfr/pretrain.py:class_shards
sets it). A restored checkpoint (whole arrays) is put back on the mesh by the initial state's
placement (run/setup.restored_state).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from fedjax_face.core import local, precision
from fedjax_face.core.checks import UsageError
from fedjax_face.data import preprocess
from fedjax_face.models import heads, partial_fc

CLASSES_AXIS = 'classes'


def check_config(config) -> None:
  """`centralized.class_shards`'s own field and the engine it needs (one line each)."""
  shards = config.get('centralized', {}).get('class_shards', 0)
  if not isinstance(shards, (int, np.integer)) or isinstance(shards, bool) or shards < 0:
    raise UsageError(f'config.centralized.class_shards={shards!r}; expected a non-negative '
                     'integer (0 = W whole on one device).')
  if shards and config.engine.backend != 'loop':
    raise UsageError(f'config.centralized.class_shards={shards} with '
                     f'engine.backend={config.engine.backend!r}: the one client\'s program spans '
                     "the classes mesh; expected engine.backend='loop'.")


def class_mesh(num_shards: int, num_devices: int = 0) -> Mesh:
  """The 1-D mesh `classes` the `num_shards` shards lie on: `num_devices` devices (0: as many of
  this process's devices as there are shards, at most all), each holding `num_shards / D`
  consecutive shards."""
  if jax.process_count() > 1:
    raise UsageError(f'config.centralized.class_shards={num_shards} in {jax.process_count()} '
                     'processes; expected one process (a multi-process sharded head is not built).')
  devices = jax.local_devices()
  count = num_devices or min(num_shards, len(devices))
  if count > len(devices) or num_shards % count:
    raise UsageError(f'config.centralized.class_shards={num_shards} over engine.num_devices='
                     f'{count} ({len(devices)} visible); expected a device count dividing '
                     f'{num_shards}, at most {len(devices)}.')
  return Mesh(np.asarray(devices[:count]), (CLASSES_AXIS,))


def check_classes(num_classes: int, num_shards: int) -> None:
  """Equal shards only (shard_map's blocks): C must divide by S."""
  if num_classes % num_shards:
    raise UsageError(f'config.centralized.class_shards={num_shards} but the training view has '
                     f'{num_classes} classes; expected a shard count dividing {num_classes} '
                     '(equal shards of W).')


def specs(tree):
  """`P('classes')` for each class-center leaf of `tree` (W and its optimizer-state mirrors:
  `partial_fc.is_class_leaf`), `P()` (replicated) for every other leaf."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: P(CLASSES_AXIS) if partial_fc.is_class_leaf(path) else P(), tree)


def place(tree, mesh: Mesh):
  """`tree` on `mesh`: the class rows split, the rest replicated (`specs`)."""
  return jax.tree.map(lambda x, spec: jax.device_put(x, NamedSharding(mesh, spec)), tree,
                      specs(tree))


def constrain(tree, mesh: Mesh):
  """`place` inside a jitted program (the server step's output keeps the placement)."""
  return jax.tree.map(
      lambda x, spec: jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec)), tree,
      specs(tree))


def sharded_trainer(model, *, head_kwargs: dict, optimizer: optax.GradientTransformation,
                    step_mode: str, mesh: Mesh, num_classes: int, num_shards: int,
                    sample_rate: float, batch_size: int):
  """`train(variables, W, data, rng, opt_state, *, lr_scale=None) -> (variables, W, opt_state,
  metrics)`, `common.local_trainer`'s contract with W and its mirrors split over `mesh`
  (`num_shards` shards of `num_classes / num_shards` rows, module docstring)."""
  check_classes(num_classes, num_shards)
  if precision.model_needs_loss_scaling(model):
    raise UsageError(f"config.centralized.class_shards={num_shards} with model.dtype='float16': "
                     'the sharded step has no dynamic loss scaling (core/loss_scale.py); '
                     "expected model.dtype 'float32' or 'bfloat16'.")
  shards_here = num_shards // mesh.size
  num_local = num_classes // num_shards
  (size,) = set(partial_fc.sample_sizes(num_classes, sample_rate, batch_size, num_shards))
  sampling = size < num_local

  def loss_fn(params, batch_stats, images, columns, sample_mask, class_mask):
    variables = {'params': params['backbone']}
    if batch_stats:
      variables['batch_stats'] = batch_stats
    features, new_state = model.apply(variables, images, train=True, mutable=['batch_stats'])
    w = params['W'].reshape(shards_here, -1, params['W'].shape[-1])
    mask = class_mask.reshape(shards_here, -1)
    logits = jax.vmap(lambda w, column, mask: heads.logits(features, w, column, mask,
                                                           **head_kwargs))(w, columns, mask)
    loss = partial_fc.shard_cross_entropy(logits, columns, sample_mask, CLASSES_AXIS)
    return loss, new_state.get('batch_stats', {})

  def step(carry, batch, class_mask, lr_scale):
    """One device's step; `class_mask` its rows' `[shards_here * num_local]`."""
    params, batch_stats, opt_state = carry
    images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
    index, columns = partial_fc.device_samples(
        jax.random.fold_in(batch['rng'], partial_fc.SAMPLING_STREAM), batch['labels'],
        batch['mask'], first_shard=jax.lax.axis_index(CLASSES_AXIS) * shards_here,
        shards_here=shards_here, num_local=num_local, size=size)
    if sampling:
      full_params, full_opt_state = params, opt_state
      params = partial_fc.take_rows(params, index)
      opt_state = partial_fc.take_rows(opt_state, index)
      class_mask = class_mask[index]
    (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, batch_stats, images, columns, batch['mask'], class_mask)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if lr_scale is not None:
      updates = jax.tree.map(lambda u: u * lr_scale.astype(u.dtype), updates)
    params = optax.apply_updates(params, updates)
    if sampling:
      params = partial_fc.put_rows(full_params, params, index)
      opt_state = partial_fc.put_rows(full_opt_state, opt_state, index)
    return (params, batch_stats, opt_state), loss

  def device_steps(carry, xs, class_mask, lr_scale):
    one = lambda carry, batch: step(carry, batch, class_mask, lr_scale)
    return local.run_steps(local.skip_if_empty(one), carry, xs, mode=step_mode)

  def train(variables, class_embeddings, data, rng, opt_state, *, lr_scale=None):
    params = {'backbone': variables['params'], 'W': class_embeddings}
    carry = (params, variables.get('batch_stats', {}), opt_state)
    num_steps = data['images'].shape[0]
    xs = {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
          'rng': jax.random.split(rng, num_steps)}
    run = jax.shard_map(device_steps, mesh=mesh,
                        in_specs=(specs(carry), P(), P(CLASSES_AXIS), P()),
                        out_specs=(specs(carry), P()))
    (params, batch_stats, opt_state), losses = run(carry, xs, data['class_mask'], lr_scale)
    active = jnp.any(data['mask'], axis=-1)
    metrics = {'train_loss': jnp.sum(losses * active) / jnp.maximum(active.sum(), 1)}
    new_variables = {'params': params['backbone']}
    if batch_stats:
      new_variables['batch_stats'] = batch_stats
    return new_variables, params['W'], opt_state, metrics

  train.init_opt_state = lambda variables, w: optimizer.init(
      {'backbone': variables['params'], 'W': w})
  return train
