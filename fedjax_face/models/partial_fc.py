"""Partial FC: a classification head trained on a sampled subset of its class centers per step.

The public source is arcface_torch (deepinsight/insightface, `recognition/arcface_torch/
partial_fc_v2.py`, class `PartialFC_V2`, and the README's Partial FC tables; An et al., "Killing
Two Birds with One Stone: Efficient and Robust Training of Face Recognition CNNs by Partial FC",
CVPR 2022, arXiv:2203.15565; docs/references.md, partial-fc). Its rule, per shard of the class
matrix:

- the C classes are split over `world_size` shards as contiguous slices: shard r holds
  `num_local = C // world + (r < C % world)` rows from `class_start = C // world * r +
  min(r, C % world)` (`shard_slices`);
- `num_sample = int(sample_rate * num_local)` centers are kept per step (`sample_sizes`);
- every positive (a class of the step's global batch that falls in the shard's slice) is kept, the
  rest are negatives drawn uniformly without replacement: a uniform draw per row, 2.0 written over
  the positives' draws, the `num_sample` largest kept, in ascending class order
  (`torch.topk(perm, k=num_sample)` then `sort`; `sample_classes`);
- the labels are remapped into the sampled index space (`torch.searchsorted(index, labels)`;
  `remap_labels`), and the margin softmax runs over the sampled centers only;
- at `sample_rate == 1` nothing is sampled: the full head.

Where this module differs, and why:
- **Static sample size.** Under jit a shape cannot depend on the batch. arcface_torch keeps
  exactly the positives when they outnumber `num_sample` (a tiny head or a large batch); here
  the size is `max(num_sample, min(batch, num_local))`, which always has room for every positive
  (a batch of B labels has at most B distinct ones) and equals arcface_torch's `num_sample`
  whenever `num_sample >= batch` (every 100k+ class head at arcface_torch's batch sizes).
  When `min(batch, num_local)` is larger, the sample is the positives plus uniform negatives up
  to that size instead of the positives alone.
- **Unsampled centers are frozen, optimizer state included.** In PartialFC_V2 the whole class
  matrix is one torch Parameter, so PyTorch's SGD still decays and moves an unsampled row through
  its momentum and weight decay (its gradient alone is zero). Here the optimizer steps on the
  sampled rows only (`take_rows` / `put_rows`): an unsampled row and its momentum stay bit for
  bit the same, as in arcface_torch's first Partial FC (`partial_fc.py`, which kept a sampled
  sub-weight and its momentum and wrote both back). With Adam, the step counter is shared by all
  rows (optax keeps one), so a row's bias correction counts steps it was not sampled in.
- **Padding samples** (`sample_mask` False) are not positives: they never force a class in.
- **The draw** is `jax.random.uniform` from the step's key, shard r's from `fold_in(key, r)`, so
  a run (and a resumed run) samples the same centers; torch draws from its global generator.

Sharded (`sharded_loss`, inside `jax.shard_map` over a mesh axis that splits W's rows): each
device holds its slice of W, samples from it with its own key `fold_in(key, r)` (so it draws
exactly `sample_classes(num_shards=S)`'s shard r), computes the logits of its sampled centers
for the whole (replicated, arcface_torch: all-gathered) batch, and the softmax's max, sum and
target logit are all-reduced across the axis as arcface_torch's `DistCrossEntropyFunc` does; JAX
differentiates through the all-reduces. It takes equal slices (C divisible by the axis size,
which shard_map needs) and no padded classes. A device may hold several consecutive shards
(`device_samples`, `shard_cross_entropy`): the sample is then a function of the shard count S
alone, not of the devices, so a run with `centralized.class_shards = S` draws the same centers on
1 or S devices (algorithms/sharded_classes.py, the run's step; docs/partial_fc.md, "Sharded").
"""

from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp

from fedjax_face.models import heads

# `fold_in` constant deriving the sampling key from a local step's key: the step's own key keeps
# drawing the image flips exactly as before, so switching Partial FC on changes nothing else.
SAMPLING_STREAM = 0x5046_4301   # 'PFC' 1

# The leaf of the trained parameters (and of every optimizer-state tree mirroring them) that holds
# the class centers, one row per class (algorithms/common.py: `params = {'backbone', 'W'}`).
CLASS_LEAF = 'W'

# The positives' draw: above every uniform draw in [0, 1), so top-k always keeps them
# (arcface_torch: `perm[positive] = 2.0`).
_POSITIVE_DRAW = 2.0


def shard_slices(num_classes: int, num_shards: int) -> list[tuple[int, int]]:
  """`[(class_start, num_local)]` per shard: arcface_torch's contiguous split of the classes
  (PartialFC_V2.__init__: the first `C % world` shards hold one row more)."""
  base, extra = divmod(num_classes, num_shards)
  return [(base * r + min(r, extra), base + int(r < extra)) for r in range(num_shards)]


def sample_sizes(num_classes: int, sample_rate: float, batch_size: int,
                 num_shards: int = 1) -> list[int]:
  """Centers kept per shard: `int(sample_rate * num_local)` (PartialFC_V2's `num_sample`), raised
  to `min(batch_size, num_local)` so every positive fits (module docstring, "Static sample
  size"); `num_local` itself at `sample_rate == 1`."""
  sizes = []
  for _, num_local in shard_slices(num_classes, num_shards):
    if sample_rate >= 1.0:
      sizes.append(num_local)
    else:
      sizes.append(max(int(sample_rate * num_local), min(batch_size, num_local)))
  return sizes


def samples(num_classes: int, sample_rate: float, batch_size: int, num_shards: int = 1) -> bool:
  """Whether a step at these sizes samples at all (some shard keeps fewer rows than it holds)."""
  sizes = sample_sizes(num_classes, sample_rate, batch_size, num_shards)
  return any(k < n for k, (_, n) in zip(sizes, shard_slices(num_classes, num_shards)))


def sample_classes(rng: jax.Array, labels: jax.Array, sample_mask: Optional[jax.Array],
                   num_classes: int, sample_rate: float, num_shards: int = 1) -> jax.Array:
  """The sampled classes, `[sum(sample_sizes)]` int32 in ascending order: per shard, its
  positives and uniform negatives without replacement (PartialFC_V2.sample).

  Args:
    rng: the step's sampling key (shard r draws from `fold_in(rng, r)`).
    labels: `[B]` int classes of the batch (global ids in [0, num_classes)).
    sample_mask: `[B]` bool, False for padding samples (never forced in); None: all real.
    num_classes: C, the rows of the class matrix.
    sample_rate: in (0, 1]; a Python float (the sizes are static).
    num_shards: the shards C is split over (`shard_slices`); each samples its own slice.
  """
  valid = jnp.ones(labels.shape, bool) if sample_mask is None else sample_mask
  sizes = sample_sizes(num_classes, sample_rate, labels.shape[0], num_shards)
  picked = []
  for r, ((start, num_local), size) in enumerate(zip(shard_slices(num_classes, num_shards),
                                                       sizes)):
    draws = jax.random.uniform(jax.random.fold_in(rng, r), (num_local,), jnp.float32)
    local = labels - start
    positive = valid & (local >= 0) & (local < num_local)
    # `max` with 0 leaves a draw in [0, 1) as it is: labels outside the slice (clipped onto a row
    # of it) and padding samples write nothing.
    draws = draws.at[jnp.clip(local, 0, num_local - 1)].max(
        jnp.where(positive, _POSITIVE_DRAW, 0.0))
    _, index = jax.lax.top_k(draws, size)
    picked.append(jnp.sort(index).astype(jnp.int32) + start)
  return jnp.concatenate(picked)


def remap_labels(index: jax.Array, labels: jax.Array) -> jax.Array:
  """Each label's column among the sampled classes `index` (ascending): `searchsorted`, as
  PartialFC_V2 remaps its positives. A label not sampled (only a padding sample's) is clipped
  onto a valid column; its loss is masked out."""
  return jnp.clip(jnp.searchsorted(index, labels), 0, index.shape[0] - 1).astype(labels.dtype)


def sampled_loss(features: jax.Array, class_embeddings: jax.Array, labels: jax.Array,
                 class_mask: Optional[jax.Array], sample_mask: Optional[jax.Array],
                 index: jax.Array, **head_kwargs: Any) -> jax.Array:
  """`heads.loss` over the sampled centers `class_embeddings[index]` only, the labels remapped.

  Its gradient with respect to the full `class_embeddings` is zero on every row outside `index`
  (the gather's transpose scatters into those rows nothing)."""
  mask = None if class_mask is None else class_mask[index]
  return heads.loss(features, class_embeddings[index], remap_labels(index, labels), mask,
                    sample_mask, **head_kwargs)


def is_class_leaf(path: Sequence[Any]) -> bool:
  """Whether the leaf at `path` (a `tree_flatten_with_path` path) holds class-center rows."""
  return bool(path) and isinstance(path[-1], jax.tree_util.DictKey) and path[-1].key == CLASS_LEAF


def take_rows(tree: Any, index: jax.Array) -> Any:
  """`tree` with each class-center leaf (a leaf keyed `CLASS_LEAF`: the parameters' W and the
  optimizer state's mirrors of it, momentum or Adam's moments) cut to its rows `index`."""
  return jax.tree_util.tree_map_with_path(
      lambda path, leaf: leaf[index] if is_class_leaf(path) else leaf, tree)


def put_rows(full: Any, sampled: Any, index: jax.Array) -> Any:
  """The inverse of `take_rows` after a step: `sampled`'s class-center rows written back into
  `full`'s at `index` (every other row of `full` as it was, bit for bit); every other leaf is
  `sampled`'s (the backbone, the step counters)."""
  return jax.tree_util.tree_map_with_path(
      lambda path, whole, part: (jnp.asarray(whole).at[index].set(part) if is_class_leaf(path)
                                 else part),
      full, sampled)


def _sample_local(rng: jax.Array, labels: jax.Array, valid: jax.Array, start: jax.Array,
                  num_local: int, size: int) -> tuple[jax.Array, jax.Array]:
  """One shard's sampled rows (local ids, ascending) and each label's column among them (-1 for
  a label outside the shard or a padding sample): `sample_classes`'s per-shard rule with a traced
  `start`. At `size == num_local` every row is kept (no draw: the shard's full head)."""
  local = labels - start
  positive = valid & (local >= 0) & (local < num_local)
  if size == num_local:
    return jnp.arange(num_local, dtype=jnp.int32), jnp.where(positive, local, -1)
  draws = jax.random.uniform(rng, (num_local,), jnp.float32)
  draws = draws.at[jnp.clip(local, 0, num_local - 1)].max(jnp.where(positive, _POSITIVE_DRAW,
                                                                     0.0))
  index = jnp.sort(jax.lax.top_k(draws, size)[1]).astype(jnp.int32)
  column = jnp.clip(jnp.searchsorted(index, local), 0, size - 1)
  return index, jnp.where(positive, column, -1)


def device_samples(rng: jax.Array, labels: jax.Array, sample_mask: Optional[jax.Array], *,
                   first_shard: jax.Array, shards_here: int, num_local: int,
                   size: int) -> tuple[jax.Array, jax.Array]:
  """The sampled rows of a device holding `shards_here` consecutive shards of `num_local` rows
  each, the first being global shard `first_shard`: `([shards_here * size]` row ids into the
  device's `[shards_here * num_local]` rows, ascending; `[shards_here, B]` each label's column
  among its shard's `size` sampled rows, -1 outside the shard). Shard r draws from
  `fold_in(rng, r)`, so the sample is `sample_classes(num_shards=S)`'s whichever device holds r
  (the device count changes nothing)."""
  valid = jnp.ones(labels.shape, bool) if sample_mask is None else sample_mask
  index, columns = [], []
  for local_shard in range(shards_here):
    shard = first_shard + local_shard
    rows, column = _sample_local(jax.random.fold_in(rng, shard), labels, valid,
                                 shard * num_local, num_local, size)
    index.append(rows + local_shard * num_local)
    columns.append(column)
  return jnp.concatenate(index), jnp.stack(columns)


def shard_cross_entropy(logits: jax.Array, columns: jax.Array, sample_mask: Optional[jax.Array],
                        axis_name: str) -> jax.Array:
  """The mean cross-entropy over valid samples of logits split over shards: `logits`
  `[shards_here, B, k]` this device's shards' (each sample's target in at most one shard of the
  whole axis, at `columns` `[shards_here, B]`, -1 elsewhere). Per sample `log sum_j exp(z_j - m)
  + m - z_y` with the max `m`, the sum and `z_y` all-reduced over `axis_name`
  (DistCrossEntropyFunc.forward: `all_reduce(max)`, `all_reduce(sum)` of the exps, the target
  logit all-reduced); the same value on every device."""
  top = jax.lax.pmax(jax.lax.stop_gradient(jnp.max(logits, axis=(0, 2))), axis_name)
  total = jax.lax.psum(jnp.sum(jnp.exp(logits - top[None, :, None]), axis=(0, 2)), axis_name)
  own = columns >= 0
  target = jnp.take_along_axis(logits, jnp.maximum(columns, 0)[:, :, None], axis=2)[:, :, 0]
  target = jax.lax.psum(jnp.sum(jnp.where(own, target, 0.0), axis=0), axis_name)
  return heads.masked_mean(jnp.log(total) + top - target, sample_mask)


def sharded_loss(features: jax.Array, local_embeddings: jax.Array, labels: jax.Array,
                 sample_mask: Optional[jax.Array], rng: jax.Array, *, num_classes: int,
                 sample_rate: float, axis_name: str, **head_kwargs: Any) -> jax.Array:
  """Partial FC's loss with W's rows split over `axis_name`, one shard a device; call it inside
  `jax.shard_map` (a run's step, several shards a device: algorithms/sharded_classes.py).

  Args:
    features: `[B, d]` the whole batch on every device (replicated).
    local_embeddings: `[C / S, d]` this device's slice of W (rows `r C / S` on).
    labels: `[B]` global class ids; sample_mask: `[B]` bool or None.
    rng: the step's sampling key, the same on every device.
    num_classes: C; sample_rate: as `sample_classes`; axis_name: the mesh axis W is split over.
    head_kwargs: `heads.logits`'s (`kind`, `scale`, `margin`, ...).

  Returns:
    `shard_cross_entropy` over this device's sampled logits: the same on every device.
  """
  num_shards = jax.lax.axis_size(axis_name)
  if num_classes % num_shards:
    raise ValueError(f'sharded_loss: {num_classes} classes do not split evenly over '
                     f'{num_shards} shards of axis {axis_name!r}.')
  num_local = num_classes // num_shards
  (size,) = set(sample_sizes(num_classes, sample_rate, labels.shape[0], num_shards))
  index, columns = device_samples(rng, labels, sample_mask,
                                  first_shard=jax.lax.axis_index(axis_name), shards_here=1,
                                  num_local=num_local, size=size)
  # A label of another shard gets column -1: its one-hot row is all False, so no margin here.
  logits = heads.logits(features, local_embeddings[index], columns[0], None, **head_kwargs)
  return shard_cross_entropy(logits[None], columns, sample_mask, axis_name)
