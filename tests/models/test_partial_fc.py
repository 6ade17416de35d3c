"""Partial FC (models/partial_fc.py, algorithms/common.local_step's `sample_rate`): arcface_torch's
sizes and shard split; every positive sampled and the rest the top of the same uniform draws;
the sampled loss and its gradients exactly those of a dense head built by hand over the sampled
centers; the full sample and rate 1.0 bit for bit the full head; unsampled rows of W and of its
momentum unchanged to the bit under SGD with momentum and weight decay; the one-line refusals,
`centralized.class_shards`' among them (before any file); on 4 forced CPU devices the sharded
step (algorithms/sharded_classes.py) equal to the one-device step over the same per-shard sample
to float32 rounding, each shard's unsampled rows and momentum to the bit, a checkpoint read back
onto the mesh, and configs/fedfr/pretrain.py:partial_fc=0.5,class_shards=4 end to end. Full tier:
the unsharded run end to end, the sharded loss against the dense one, and sharded runs on 1 and 4
devices and resumed."""

import functools
import types

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_face import config_lib, experiment
from fedjax_face.algorithms import common, sharded_classes
from fedjax_face.core.checks import UsageError
from fedjax_face.data import preprocess
from fedjax_face.models import heads, partial_fc
from fedjax_face.run import setup
from tests import config_files, forced_devices, saved_checkpoints

NUM_CLASSES, DIM, BATCH = 200, 8, 8


class TinyBackbone(nn.Module):
  """A dense layer over the flattened image: the step's contract (`train`, no batch_stats)."""

  @nn.compact
  def __call__(self, images, train: bool = False):
    del train
    return nn.Dense(DIM)(images.reshape(images.shape[0], -1))


def test_sizes_and_shards_are_arcface_torch_s():
  # PartialFC_V2: num_local = C // world + (rank < C % world), class_start after the shards
  # before; num_sample = int(rate * num_local).
  assert partial_fc.shard_slices(10, 3) == [(0, 4), (4, 3), (7, 3)]
  assert partial_fc.shard_slices(100_003, 4) == [(0, 25_001), (25_001, 25_001), (50_002, 25_001),
                                                 (75_003, 25_000)]
  assert partial_fc.sample_sizes(100_003, 0.1, 128, 4) == [2500, 2500, 2500, 2500]
  assert partial_fc.sample_sizes(1_000_000, 0.1, 128) == [100_000]
  # Raised to min(batch, num_local) where int(rate * num_local) could not hold every positive.
  assert partial_fc.sample_sizes(200, 0.1, 32) == [32]
  assert partial_fc.sample_sizes(10, 0.1, 32, 3) == [4, 3, 3]
  assert partial_fc.sample_sizes(200, 1.0, 8) == [200]
  assert partial_fc.samples(200, 0.1, 8) and not partial_fc.samples(10, 0.1, 32, 3)
  assert not partial_fc.samples(200, 1.0, 8)


def _batch_labels(seed: int):
  rng = np.random.default_rng(seed)
  labels = rng.integers(0, NUM_CLASSES, BATCH)
  mask = np.arange(BATCH) < BATCH - 2           # the last two are padding samples
  return labels, mask


def test_positives_are_always_in_and_the_rest_is_the_top_of_the_same_uniform_draws():
  # Two shards (the unsharded draw is shard 0 of one: the same code, S = 1 in the step tests).
  num_shards = 2
  labels, mask = _batch_labels(0)
  keys = jax.random.split(jax.random.PRNGKey(0), 32)
  # One key at a time through one compiled sampler (a vmapped sort over the keys compiles slower).
  sample = jax.jit(lambda key: partial_fc.sample_classes(
      key, jnp.asarray(labels), jnp.asarray(mask), NUM_CLASSES, 0.1, num_shards))
  sampled = np.stack([np.asarray(sample(key)) for key in keys])
  sizes = partial_fc.sample_sizes(NUM_CLASSES, 0.1, BATCH, num_shards)
  assert sampled.shape == (32, sum(sizes))
  slices = partial_fc.shard_slices(NUM_CLASSES, num_shards)
  # By hand: shard r's uniform draws, 2.0 over its real samples' classes, the `size` largest.
  draws = [np.array(jax.vmap(lambda key, r=r, n=n: jax.random.uniform(
      jax.random.fold_in(key, r), (n,)))(keys)) for r, (_, n) in enumerate(slices)]
  for k, index in enumerate(sampled):
    expected = []
    for (start, num_local), size, shard_draws in zip(slices, sizes, draws):
      row = shard_draws[k].copy()
      for label in labels[mask]:
        if start <= label < start + num_local:
          row[label - start] = 2.0
      expected.append(np.sort(np.argsort(-row, kind='stable')[:size]) + start)
    np.testing.assert_array_equal(index, np.concatenate(expected))
    assert set(labels[mask]) <= set(index)
    np.testing.assert_array_equal(index[np.asarray(partial_fc.remap_labels(
        jnp.asarray(index), jnp.asarray(labels[mask])))], labels[mask])
  # Different keys draw different negatives.
  assert len({tuple(index) for index in sampled}) == 32


def _head_problem(kind: str):
  rng = np.random.default_rng(1)
  features = jnp.asarray(rng.normal(size=(BATCH, DIM)).astype(np.float32))
  w = jnp.asarray(rng.normal(size=(NUM_CLASSES, DIM)).astype(np.float32))
  class_mask = jnp.asarray(np.arange(NUM_CLASSES) < NUM_CLASSES - 5)   # 5 padded classes
  labels, mask = _batch_labels(2)
  head = heads.head_kwargs_from_config({'loss': kind})
  return features, w, jnp.asarray(labels), class_mask, jnp.asarray(mask), head


@pytest.mark.parametrize('kind', [pytest.param('softmax', marks=pytest.mark.full), 'arcface'])
def test_sampled_loss_and_gradients_are_a_dense_head_over_the_sampled_centers(kind):
  features, w, labels, class_mask, mask, head = _head_problem(kind)
  index = partial_fc.sample_classes(jax.random.PRNGKey(3), labels, mask, NUM_CLASSES, 0.1)
  rows = np.asarray(index)
  column = {c: i for i, c in enumerate(rows)}
  # By hand: the real samples' labels as columns of the gathered matrix (padding samples' any).
  dense_labels = jnp.asarray([column.get(int(c), 0) for c in labels])

  def dense(features, sub_w):
    return heads.loss(features, sub_w, dense_labels, class_mask[rows], mask, **head)

  def sampled(features, w):
    return partial_fc.sampled_loss(features, w, labels, class_mask, mask, index, **head)

  # Op by op (not jitted): two jitted programs may fuse the two orders of the same sums apart.
  dense_value, (dense_df, dense_dw) = jax.value_and_grad(dense, (0, 1))(features, w[rows])
  value, (df, dw) = jax.value_and_grad(sampled, (0, 1))(features, w)
  assert np.asarray(value) == np.asarray(dense_value)
  np.testing.assert_array_equal(df, dense_df)
  np.testing.assert_array_equal(np.asarray(dw)[rows], dense_dw)
  unsampled = np.setdiff1d(np.arange(NUM_CLASSES), rows)
  assert unsampled.size == NUM_CLASSES - 20   # int(0.1 * 200) >= batch 8
  np.testing.assert_array_equal(np.asarray(dw)[unsampled], 0.0)


@pytest.mark.full   # the dense-head property above with every row sampled
@pytest.mark.parametrize('kind', ['cosface'])
def test_the_full_sample_is_the_full_head_bit_for_bit(kind):
  features, w, labels, class_mask, mask, head = _head_problem(kind)
  index = partial_fc.sample_classes(jax.random.PRNGKey(3), labels, mask, NUM_CLASSES, 1.0)
  np.testing.assert_array_equal(index, np.arange(NUM_CLASSES))
  full = jax.jit(jax.value_and_grad(
      lambda f, w: heads.loss(f, w, labels, class_mask, mask, **head), (0, 1)))(features, w)
  sampled = jax.jit(jax.value_and_grad(
      lambda f, w: partial_fc.sampled_loss(f, w, labels, class_mask, mask, index, **head),
      (0, 1)))(features, w)
  jax.tree.map(np.testing.assert_array_equal, sampled, full)


HEAD = {'kind': 'cosface', 'scale': 8.0, 'margin': 0.2}
# SGD with momentum and coupled weight decay (common.make_optimizer: FedGC / insightface recipe).
OPTIMIZER = common.make_optimizer(ml_collections.ConfigDict(dict(
    name='sgd', learning_rate=0.1, momentum=0.9, weight_decay=5e-4)))


def _batch(seed: int):
  labels, mask = _batch_labels(seed)
  images = np.random.default_rng(seed).integers(0, 256, (BATCH, 2, 2, 3), dtype=np.uint8)
  return {'images': jnp.asarray(images), 'labels': jnp.asarray(labels),
          'mask': jnp.asarray(mask), 'rng': jax.random.PRNGKey(seed)}


def _sampled_steps(carry, seeds):
  """`carry` after one jitted local step at rate 0.1 on `_batch(seed)` for each seed, and the
  batches."""
  step = jax.jit(common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                                   sample_rate=0.1))
  batches = [_batch(seed) for seed in seeds]
  for batch in batches:
    carry, _ = step(carry, batch, jnp.ones(NUM_CLASSES, bool))
  return carry, batches


def _tiny_params(rng: np.random.Generator, num_classes: int) -> dict:
  """TinyBackbone's parameters and a W of `num_classes` rows, drawn with NumPy (no program to
  compile for a start)."""
  return {'backbone': {'Dense_0': {
              'kernel': (0.3 * rng.normal(size=(2 * 2 * 3, DIM))).astype(np.float32),
              'bias': np.zeros(DIM, np.float32)}},
          'W': (0.1 * rng.normal(size=(num_classes, DIM))).astype(np.float32)}


@functools.lru_cache(maxsize=None)
def _start():
  """(params, batch_stats, opt_state) at the start, once for the module (immutable)."""
  params = jax.tree.map(jnp.asarray, _tiny_params(np.random.default_rng(0), NUM_CLASSES))
  return params, {}, OPTIMIZER.init(params)


def _momentum_of_w(opt_state) -> np.ndarray:
  leaves = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(opt_state)[0]
            if path[-1] == jax.tree_util.DictKey('W')]
  assert len(leaves) == 1   # SGD's trace; add_decayed_weights keeps no state
  return np.asarray(leaves[0])


def test_rate_one_steps_are_the_full_head_s_bit_for_bit():
  # The step at rate 1.0 is the step without the argument as a program (its jaxpr, sampling
  # nothing), so its loss, gradients and every optimizer step are the full head's to the bit.
  default_step = common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER)
  rate_one = common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                               sample_rate=1.0)
  sampled = common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                              sample_rate=0.1)
  args = (_start(), _batch(10), jnp.ones(NUM_CLASSES, bool))
  assert str(jax.make_jaxpr(rate_one)(*args)) == str(jax.make_jaxpr(default_step)(*args))
  assert str(jax.make_jaxpr(sampled)(*args)) != str(jax.make_jaxpr(default_step)(*args))
  # A head too small for the rate to leave a row out (8 rows, batch 8: all kept) samples nothing.
  small = _start()[0] | {'W': jnp.zeros((8, DIM))}
  small = (small, {}, OPTIMIZER.init(small))
  small_batch = _batch(10) | {'labels': jnp.arange(BATCH)}
  assert str(jax.make_jaxpr(sampled)(small, small_batch, jnp.ones(8, bool))) == str(
      jax.make_jaxpr(default_step)(small, small_batch, jnp.ones(8, bool)))


def test_a_fixed_head_without_w_still_traces_and_sampling_it_is_refused():
  # FedPE+Fixed trains no W: its params have none, and the default rate never looks for one.
  params = {'backbone': _start()[0]['backbone']}
  fixed = common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                            train_class_embeddings=False)
  jax.make_jaxpr(fixed)((params, {}, OPTIMIZER.init(params)), _batch(10),
                        jnp.ones(NUM_CLASSES, bool), jnp.zeros((NUM_CLASSES, DIM)))
  with pytest.raises(ValueError, match='^local_step: sample_rate < 1 .Partial FC. samples the '
                                       'rows of a trained W; expected train_class_embeddings=True '
                                       'and no class_rows.$'):
    common.local_step(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                      train_class_embeddings=False, sample_rate=0.1)


def test_unsampled_rows_and_their_momentum_stay_bit_for_bit_under_momentum_and_decay():
  # Every row's momentum nonzero, so that it would move under a step that touched the row.
  params, batch_stats, opt_state = _start()
  warm = (params, batch_stats, jax.tree.map(lambda m: jnp.full_like(m, 0.01), opt_state))
  after, batches = _sampled_steps(warm, (10, 11, 12))
  sampled = set()
  for batch in batches:
    index = partial_fc.sample_classes(
        jax.random.fold_in(batch['rng'], partial_fc.SAMPLING_STREAM), batch['labels'],
        batch['mask'], NUM_CLASSES, 0.1)
    assert index.shape == (20,)    # int(0.1 * 200) = 20 >= batch 8
    sampled |= set(np.asarray(index).tolist())
  rows = sorted(sampled)
  unsampled = np.setdiff1d(np.arange(NUM_CLASSES), rows)
  assert 20 <= len(rows) <= 60 and unsampled.size == NUM_CLASSES - len(rows)
  (w0, _, state0), (w1, _, state1) = warm, after
  np.testing.assert_array_equal(np.asarray(w1['W'])[unsampled], np.asarray(w0['W'])[unsampled])
  np.testing.assert_array_equal(_momentum_of_w(state1)[unsampled],
                                _momentum_of_w(state0)[unsampled])
  assert np.all(np.any(np.asarray(w1['W'])[rows] != np.asarray(w0['W'])[rows], axis=1))
  assert np.all(np.any(_momentum_of_w(state1)[rows] != _momentum_of_w(state0)[rows], axis=1))
  assert not np.array_equal(w1['backbone']['Dense_0']['kernel'],
                            w0['backbone']['Dense_0']['kernel'])
  # An optimizer step on every row moves each row and its momentum even where its gradient is
  # zero (weight decay, momentum): the checks above can fail.
  updates, moved = OPTIMIZER.update(jax.tree.map(jnp.zeros_like, w0), state0, w0)
  assert np.all(np.any(np.asarray(updates['W']) != 0.0, axis=1))
  assert np.all(np.any(_momentum_of_w(moved) != _momentum_of_w(state0), axis=1))


def test_take_rows_and_put_rows_cut_and_write_only_the_class_rows():
  # SGD's momentum and Adam's two moments mirror W; the backbone and Adam's count do not.
  params = {'backbone': {'Dense_0': {'kernel': np.arange(6.0).reshape(3, 2)}},
            'W': np.arange(10.0).reshape(5, 2)}
  index = np.array([1, 4])
  for optimizer, mirrors in ((optax.sgd(0.1, momentum=0.9), 1), (optax.adam(0.1), 2)):
    state = jax.tree.map(lambda x: x + 100.0, optimizer.init(params))
    taken = partial_fc.take_rows((params, state), index)
    w_leaves = [leaf for path, leaf in jax.tree_util.tree_flatten_with_path(taken)[0]
                if path[-1] == jax.tree_util.DictKey('W')]
    assert [leaf.shape for leaf in w_leaves] == [(2, 2)] * (1 + mirrors)
    np.testing.assert_array_equal(taken[0]['W'], [[2.0, 3.0], [8.0, 9.0]])
    np.testing.assert_array_equal(taken[0]['backbone']['Dense_0']['kernel'],
                                  params['backbone']['Dense_0']['kernel'])
    stepped = jax.tree.map(lambda x: -x, taken)
    written = partial_fc.put_rows((params, state), stepped, index)
    np.testing.assert_array_equal(written[0]['W'], [[0, 1], [-2, -3], [4, 5], [6, 7], [-8, -9]])
    np.testing.assert_array_equal(written[0]['backbone']['Dense_0']['kernel'],
                                  -params['backbone']['Dense_0']['kernel'])
    for (path, full), (_, new) in zip(jax.tree_util.tree_flatten_with_path(state)[0],
                                      jax.tree_util.tree_flatten_with_path(written[1])[0]):
      if path[-1] == jax.tree_util.DictKey('W'):
        np.testing.assert_array_equal(np.delete(new, index, 0), np.delete(full, index, 0))
        np.testing.assert_array_equal(new[index], -full[index])
      else:
        np.testing.assert_array_equal(new, -full)


@pytest.mark.parametrize('config_name, changes, message', [
    ('fedgc', {'head.sample_rate': 0.1},
     "config.head.sample_rate=0.1 with algorithm='fedgc': FedGC's server regularizer needs every "
     'class center each round; expected head.sample_rate=1.0.'),
    ('fedgc/fedpe', {'head.sample_rate': 0.1},
     "config.head.sample_rate=0.1 with algorithm='fedpe': Partial FC samples the centers of one "
     "head over every class, which only 'centralized' trains (a client head holds its own "
     'classes); expected head.sample_rate=1.0.'),
    ('pretrain', {'head.sample_rate': 0.1, 'head.loss': 'positive_cosine'},
     "config.head.sample_rate=0.1 with head.loss='positive_cosine': a positive-only loss has no "
     'negative centers to sample; expected head.sample_rate=1.0.'),
    ('pretrain', {'head.sample_rate': 0.0},
     'config.head.sample_rate=0.0; expected a fraction in (0, 1].'),
    ('pretrain', {'head.sample_rate': 1.5},
     'config.head.sample_rate=1.5; expected a fraction in (0, 1].'),
])
def test_refusals_name_the_fields_in_one_line(config_name, changes, message):
  config = config_files.load_config(config_name)
  for field, value in changes.items():
    config_files.set_field(config, field, value)
  with pytest.raises(ValueError) as raised:
    heads.check_config(config)
  assert str(raised.value) == message
  if 'fedgc' in config_name:
    assert isinstance(raised.value, UsageError)
    with pytest.raises(UsageError, match='^config.head.sample_rate=0.1 with algorithm='):
      config_lib.validate(config)   # refused when the config is checked, before any file


@pytest.mark.parametrize('changes, message', [
    ({'centralized.class_shards': -1},
     'config.centralized.class_shards=-1; expected a non-negative integer (0 = W whole on one '
     'device).'),
    ({'engine.backend': 'vmap'},
     "config.centralized.class_shards=4 with engine.backend='vmap': the one client's program "
     "spans the classes mesh; expected engine.backend='loop'."),
])
def test_class_shard_refusals_name_the_fields_in_one_line(changes, message):
  config = config_files.load_config('pretrain', 'runlocal,class_shards=4')
  for field, value in changes.items():
    config_files.set_field(config, field, value)
  with pytest.raises(UsageError) as raised:
    setup.validate(config)
  assert str(raised.value) == message


def test_shards_that_do_not_split_and_a_float16_model_are_refused_in_one_line_before_any_file(
    tmp_path):
  with pytest.raises(UsageError) as raised:
    sharded_classes.class_mesh(4, 3)   # this process sees one device
  assert str(raised.value) == ('config.centralized.class_shards=4 over engine.num_devices=3 '
                               '(1 visible); expected a device count dividing 4, at most 1.')
  with pytest.raises(UsageError) as raised:
    sharded_classes.sharded_trainer(
        types.SimpleNamespace(dtype=jnp.float16), head_kwargs=HEAD, optimizer=OPTIMIZER,
        step_mode='unroll', mesh=sharded_classes.class_mesh(4), num_classes=8, num_shards=4,
        sample_rate=1.0, batch_size=4)
  assert str(raised.value) == (
      "config.centralized.class_shards=4 with model.dtype='float16': the sharded step has no "
      "dynamic loss scaling (core/loss_scale.py); expected model.dtype 'float32' or 'bfloat16'.")
  # runlocal's 8 public classes in 16 shards (all 16 on this process's one device).
  config = config_files.load_config('pretrain', 'runlocal,class_shards=16')
  with pytest.raises(UsageError) as raised:
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert str(raised.value) == ('config.centralized.class_shards=16 but the training view has 8 '
                               'classes; expected a shard count dividing 8 (equal shards of W).')
  assert not (tmp_path / 'run').exists()


def test_default_configs_keep_the_full_head():
  assert config_lib.base_config().head.sample_rate == 1.0
  assert config_files.load_config('pretrain').head.sample_rate == 1.0
  assert config_files.load_config('pretrain', 'runlocal,partial_fc=0.1').head.sample_rate == 0.1
  assert 'centralized' not in config_files.load_config('pretrain')   # W whole, as before
  sharded = config_files.load_config('pretrain', 'partial_fc=0.1,class_shards=8')
  assert (sharded.centralized.class_shards, sharded.engine.backend) == (8, 'loop')


@pytest.mark.full   # the sharded run below is the default suite's Partial FC run end to end
def test_pretraining_with_partial_fc_runs_end_to_end(tmp_path):
  # runlocal: 8 public classes, batch 4, so rate 0.5 keeps 4 centers a step (0.1 would keep 4
  # too: raised to the batch); one round of 2 steps.
  config = config_files.load_config('pretrain', 'runlocal,partial_fc=0.5')
  config.num_rounds = 1
  config.evals = ml_collections.ConfigDict()   # the training path alone (~10 s of CPU as it is)
  assert partial_fc.sample_sizes(8, 0.5, config.federated.batch_size) == [4]
  results = experiment.train_and_evaluate(config, str(tmp_path / 'pfc'))
  assert results['rounds'] == 1
  state = saved_checkpoints.restore(str(tmp_path / 'pfc'), config.num_rounds)
  assert np.asarray(state['server']['W']).shape == (8, config.model.embedding_dim)
  assert np.all(np.isfinite(np.asarray(state['server']['W'])))


_SHARDED = """
import functools, os, sys
import jax, jax.numpy as jnp, ml_collections, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from fedjax_face import experiment
from fedjax_face.algorithms import common, sharded_classes
from fedjax_face.io import checkpoint
from fedjax_face.models import partial_fc
from fedjax_face.run import setup
from tests import config_files, saved_checkpoints
from tests.models.test_partial_fc import HEAD, OPTIMIZER, TinyBackbone, _tiny_params

# 1. The sharded local step (algorithms/sharded_classes.py), one step of S = 4 shards of W on 4
# devices, against the one-device Partial FC step (common.local_step) drawing the same centers
# (its sampler given arcface_torch's 4-rank split): the same model to float32 rounding (the
# softmax's sums over shards and the features' gradient are all-reduced across devices instead
# of summed on one: not bit for bit); each shard trains exactly its sampled rows, the others and
# their momentum bit for bit as they were; a checkpoint of the sharded state reads back onto the
# mesh (run/setup.placed_like) and trains on bit for bit.
C, S, B, RATE = 64, 4, 8, 0.25   # 16 rows a shard, 8 sampled (int(0.25 * 16) < batch 8)
rng = np.random.default_rng(0)
data = jax.tree.map(jnp.asarray, {
    'images': rng.integers(0, 256, (1, B, 2, 2, 3), dtype=np.uint8),
    'labels': rng.integers(0, C, (1, B)).astype(np.int32),
    'mask': np.arange(B)[None] < B - 1, 'class_mask': np.ones(C, bool)})
start = _tiny_params(rng, C)
variables, w = {'params': start['backbone']}, start['W']
key = jax.random.PRNGKey(7)
mesh = Mesh(np.array(jax.devices()[:S]), ('classes',))
train = sharded_classes.sharded_trainer(
    TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER, step_mode='unroll', mesh=mesh,
    num_classes=C, num_shards=S, sample_rate=RATE, batch_size=B)
step = jax.jit(lambda s: dict(zip(('model', 'W', 'opt_state'),
                                  train(s['model'], s['W'], data, key, s['opt_state']))))
server = {'model': variables, 'W': w, 'opt_state': train.init_opt_state(variables, w)}
sharded = step(sharded_classes.place(server, mesh))
partial_fc.sample_classes = functools.partial(partial_fc.sample_classes, num_shards=S)
one_device = common.local_trainer(TinyBackbone(), head_kwargs=HEAD, optimizer=OPTIMIZER,
                                  step_mode='unroll', sample_rate=RATE)
expected = jax.jit(lambda s: dict(zip(('model', 'W', 'opt_state'), one_device(
    s['model'], s['W'], data, key, s['opt_state']))))(server)
assert sharded['W'].sharding.spec == P('classes') and len(sharded['W'].sharding.device_set) == 4
jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6), sharded,
             expected)
moved = np.any(np.asarray(sharded['W']) != w, axis=1)
momentum = np.asarray(sharded['opt_state'][1][0].trace['W'])
assert moved.reshape(S, C // S).sum(axis=1).tolist() == [8] * S, moved
np.testing.assert_array_equal(np.any(momentum != 0.0, axis=1), moved)   # 0 before the step
ckpt = checkpoint.Checkpointer(sys.argv[1])
ckpt.save(1, {'server': sharded})
ckpt.wait()
restored = setup.placed_like({'server': sharded}, ckpt.restore({'server': sharded}))['server']
ckpt.close()
assert restored['W'].sharding == sharded['W'].sharding
assert restored['model']['params']['Dense_0']['kernel'].sharding.spec == P()
jax.tree.map(np.testing.assert_array_equal, restored, sharded)
jax.tree.map(np.testing.assert_array_equal, step(restored), step(sharded))
print('steps ok')

# 2. The run: configs/fedfr/pretrain.py:partial_fc=0.5,class_shards=4, 32 public classes over 4
# devices (8 rows a shard, 4 sampled), one round of one step through the driver; its CNN one
# stage of width 2, not runlocal's three of 4 (what is checked is the sharded head's path through
# the driver: the run's CPU about 5 -> 3 s).
config = config_files.load_config('pretrain', 'runlocal,partial_fc=0.5,class_shards=4')
config.data.public_identities, config.data.synthetic.num_identities = 32, 40
config.num_rounds, config.federated.local_steps = 1, 1
config.model.num_stages, config.model.width, config.model.embedding_dim = 1, 2, 8
config.evals = ml_collections.ConfigDict()   # the training path alone
assert partial_fc.sample_sizes(32, 0.5, config.federated.batch_size, 4) == [4] * 4
workdir = os.path.join(sys.argv[1], 'run')
assert experiment.train_and_evaluate(config, workdir)['rounds'] == 1
saved = saved_checkpoints.restore(workdir, 1)['server']
assert np.asarray(saved['W']).shape == (32, config.model.embedding_dim)
assert np.all(np.isfinite(np.asarray(saved['W'])))
print('run ok')
"""


def test_the_sharded_head_is_the_one_device_head_and_a_sharded_run_trains(tmp_path):
  # One process of four forced CPU devices: the sharded step and a run (the script).
  out = forced_devices.run(_SHARDED, num_devices=4, args=(str(tmp_path),))
  assert [line for line in out.splitlines() if line.endswith(' ok')] == ['steps ok', 'run ok']


_SHARDED_RUNS = """
import os, sys
import jax, ml_collections, numpy as np
from fedjax_face import experiment
from tests import config_files, saved_checkpoints

def run(name, rounds, num_devices):
  config = config_files.load_config('pretrain', 'runlocal,partial_fc=0.5,class_shards=4')
  config.data.public_identities, config.data.synthetic.num_identities = 32, 40
  config.num_rounds, config.engine.num_devices = rounds, num_devices
  config.evals = ml_collections.ConfigDict()
  workdir = os.path.join(sys.argv[1], name)
  experiment.train_and_evaluate(config, workdir)
  return saved_checkpoints.restore(workdir, rounds)

whole = run('whole', 2, 4)
run('resumed', 1, 4)
resumed = run('resumed', 2, 4)   # the same workdir extended: restored from round 1's checkpoint
one_device = run('one_device', 2, 1)
jax.tree.map(np.testing.assert_array_equal, resumed, whole)
# Four rounds of steps on one device (4 shards there) against four devices: float32 rounding.
jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4), one_device,
             whole)
assert not np.array_equal(one_device['server']['W'], whole['server']['W'])
print('runs ok')
"""


@pytest.mark.full   # the runs behind the sharded step's and checkpoint's properties above
def test_a_resumed_sharded_run_is_the_whole_run_and_one_device_is_four_to_rounding(tmp_path):
  # Two rounds of two steps; the resumed run bit for bit, one device to a tolerance (the order
  # of the all-reduced sums: test_the_sharded_head_is_the_one_device_head...).
  out = forced_devices.run(_SHARDED_RUNS, num_devices=4, args=(str(tmp_path),))
  assert [line for line in out.splitlines() if line.endswith(' ok')] == ['runs ok']


_SHARDED_LOSS = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from fedjax_face.models import heads, partial_fc
# The loss: W's 400 rows over 4 devices as arcface_torch splits them over 4 ranks.
C, S, B, D = 400, 4, 8, 8
rng = np.random.default_rng(4)
features = jnp.asarray(rng.normal(size=(B, D)).astype(np.float32))
w = jnp.asarray(rng.normal(size=(C, D)).astype(np.float32))
labels = jnp.asarray(rng.integers(0, C, B))
mask = jnp.asarray(np.arange(B) < B - 1)
key = jax.random.PRNGKey(5)
mesh = Mesh(np.array(jax.devices()[:S]), ('classes',))
head = heads.head_kwargs_from_config({'loss': 'arcface'})   # the margin on the owner shard only
sharded = jax.shard_map(
    lambda f, w, y, m, k: partial_fc.sharded_loss(f, w, y, m, k, num_classes=C, sample_rate=0.1,
                                                  axis_name='classes', **head),
    mesh=mesh, in_specs=(P(), P('classes'), P(), P(), P()), out_specs=P())
value, (df, dw) = jax.jit(jax.value_and_grad(sharded, (0, 1)))(features, w, labels, mask, key)
# One device: the same sample (shard r draws from fold_in(key, r)), one dense softmax over it.
index = jax.jit(lambda k: partial_fc.sample_classes(k, labels, mask, C, 0.1, num_shards=S))(key)
assert index.shape == (40,), index.shape   # int(0.1 * 100) = 10 a shard
expected, (ef, ew) = jax.jit(jax.value_and_grad(
    lambda f, w: partial_fc.sampled_loss(f, w, labels, None, mask, index, **head),
    (0, 1)))(features, w)
np.testing.assert_allclose(value, expected, rtol=1e-5)
np.testing.assert_allclose(df, ef, rtol=1e-4, atol=2e-5)   # s = 64 amplifies float32 sums
np.testing.assert_allclose(dw, ew, rtol=1e-4, atol=2e-5)
np.testing.assert_array_equal(np.asarray(dw)[np.setdiff1d(np.arange(C), np.asarray(index))], 0.0)
print('loss ok')
"""


@pytest.mark.full   # the loss and gradients of the sharded step the default test checks whole
def test_the_sharded_loss_is_the_one_device_loss_over_the_same_per_shard_sample():
  out = forced_devices.run(_SHARDED_LOSS, num_devices=4)
  assert [line for line in out.splitlines() if line.endswith(' ok')] == ['loss ok']
