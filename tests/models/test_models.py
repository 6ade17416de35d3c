"""Tests for the backbones and their registry (fedjax_face.models)."""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_face import models
from fedjax_face.models import iresnet


def _num_params(variables):
  return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(variables['params']))


def _images(shape, seed=0):
  return jnp.asarray(np.random.default_rng(seed).uniform(-1.0, 1.0, shape), jnp.float32)


@functools.lru_cache(maxsize=None)
def _init(model, image_size):
  """Initial variables (batch-independent), cached across tests.

  Uses an 'rbg' key: on CPU, XLA compiles the default partitionable threefry init of a network
  4-5x more slowly, and that compile would dominate these tests.
  """
  x = jnp.zeros((1, image_size, image_size, 3), jnp.float32)
  rng = jax.random.key(0, impl='rbg')
  return jax.jit(lambda rng, x: model.init(rng, x, train=False))(rng, x)


def _check_backbone(model, image_size, embedding_dim, batch=2):
  """Init + train/eval apply: shapes, dtypes, batch_stats updated only in train mode."""
  x = _images((batch, image_size, image_size, 3))
  variables = _init(model, image_size)

  @jax.jit
  def run(variables, x):
    train_out = model.apply(variables, x, train=True, mutable=['batch_stats'])
    # Eval mode: running averages are used and left untouched even when declared mutable.
    eval_out = model.apply(variables, x, train=False, mutable=['batch_stats'])
    return train_out, eval_out

  (out, updates), (out_eval, same) = run(variables, x)
  assert set(variables) == {'params', 'batch_stats'}
  assert out.shape == (batch, embedding_dim) and out.dtype == jnp.float32
  assert np.all(np.isfinite(out))
  old = jax.tree.leaves(variables['batch_stats'])
  new = jax.tree.leaves(updates['batch_stats'])
  assert len(old) == len(new)
  # Every running variance moves off its init of 1. (Some running means legitimately stay ~0: a
  # BN fed by the sum of two zero-bias BNs sees a batch mean of exactly 0.)
  paths = [jax.tree_util.keystr(p) for p, _ in
           jax.tree_util.tree_leaves_with_path(variables['batch_stats'])]
  for path, a, b in zip(paths, old, new):
    if path.endswith("['var']"):
      assert not np.allclose(a, b), path
  assert any(not np.allclose(a, b) for a, b in zip(old, new))

  assert out_eval.shape == (batch, embedding_dim) and out_eval.dtype == jnp.float32
  for a, b in zip(old, jax.tree.leaves(same['batch_stats'])):
    np.testing.assert_array_equal(a, b)
  return variables


# 64 px is the same network code at another size (the full tier); the suite keeps [32].
@pytest.mark.parametrize('image_size', [32, pytest.param(64, marks=pytest.mark.full)])
def test_small_cnn_shapes_and_batch_stats(image_size):
  _check_backbone(models.SmallCNN(width=4, embedding_dim=8), image_size, 8)


def test_small_cnn_param_count():
  # eval_shape: shapes only, nothing is compiled or run.
  variables = jax.eval_shape(lambda r, x: models.SmallCNN().init(r, x, train=False),
                             jax.random.key(0), jnp.zeros((1, 32, 32, 3)))
  # convs 3*3*(3*16 + 16*32 + 32*64) + BN 2*(16+32+64) + fc (4*4*64)*128 + features BN bias 128.
  assert _num_params(variables) == 9 * (48 + 512 + 2048) + 224 + 1024 * 128 + 128


def test_small_cnn_bfloat16_compute():
  model = models.SmallCNN(width=8, embedding_dim=16, dtype=jnp.bfloat16)
  x = jnp.zeros((2, 32, 32, 3))
  variables = jax.eval_shape(lambda r, x: model.init(r, x, train=False), jax.random.key(0), x)
  assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(variables))
  out = jax.eval_shape(lambda v, x: model.apply(v, x, train=False), variables, x)
  assert out.dtype == jnp.float32 and out.shape == (2, 16)


def _assert_iresnet18_layout(variables):
  # insightface iresnet18 has ~24.0M parameters, half of them in the 7*7*512 -> 512 fc (with
  # its bias, arcface_torch's layout).
  assert 23_500_000 < _num_params(variables) < 24_500_000
  assert variables['params']['fc']['bias'].shape == (512,)
  assert variables['params']['prelu']['negative_slope'].shape == (64,)


def test_iresnet18_layout_at_112_and_an_iresnet_s_batch_stats():
  """IResNet-18 at 112 px by shapes (eval_shape: nothing compiles), and IResNet's every layer
  kind (the stem, basic blocks, the stride-2 projection, PReLU, the fc) run in train and eval
  mode at widths that compile in seconds: the same code, IResNet-18 differing in depth and width
  only. IResNet-18 itself through the same checks is the full tier (~11 s of CPU: its init and
  forward at 112 px)."""
  model = models.iresnet18()
  variables = jax.eval_shape(lambda r: model.init(r, jnp.zeros((1, 112, 112, 3)), train=False),
                             jax.random.key(0))
  _assert_iresnet18_layout(variables)
  out = jax.eval_shape(lambda v: model.apply(v, jnp.zeros((2, 112, 112, 3)), train=False),
                       variables)
  assert out.shape == (2, 512) and out.dtype == jnp.float32
  narrow = iresnet.IResNet(stage_sizes=(2, 1), stage_widths=(8, 16), stem_width=8,
                           embedding_dim=16)
  variables = _check_backbone(narrow, 32, 16)
  slopes = variables['params']['prelu']['negative_slope']
  np.testing.assert_array_equal(slopes, np.full((8,), 0.25, np.float32))


# The full tier: test_iresnet18_layout_at_112_and_an_iresnet_s_batch_stats keeps IResNet-18's
# layout (by shapes) and IResNet's forward, batch statistics and PReLU init (a narrow IResNet).
@pytest.mark.full
def test_iresnet18_at_112():
  variables = _check_backbone(models.iresnet18(), 112, 512)
  _assert_iresnet18_layout(variables)
  slopes = variables['params']['prelu']['negative_slope']
  np.testing.assert_array_equal(slopes, np.full((64,), 0.25, np.float32))


def test_prelu_per_channel():
  layer = iresnet.PReLU()
  x = jnp.array([[-2.0, 3.0], [4.0, -1.0]])
  variables = layer.init(jax.random.key(0), x)
  assert variables['params']['negative_slope'].shape == (2,)
  np.testing.assert_allclose(layer.apply(variables, x), [[-0.5, 3.0], [4.0, -0.25]])
  variables = {'params': {'negative_slope': jnp.array([0.1, 0.5])}}
  np.testing.assert_allclose(layer.apply(variables, x), [[-0.2, 3.0], [4.0, -0.5]])


def test_vmap_over_clients_matches_loop():
  model = models.SmallCNN(width=4, embedding_dim=8)
  num_clients = 3
  xs = _images((num_clients, 4, 32, 32, 3))
  # Distinct per-client params and running statistics (numpy noise on one init, to avoid
  # compiling more RNG code), so that both train and eval mode are real tests.
  base = _init(model, 32)
  noise = np.random.default_rng(0)
  per_client = [
      jax.tree.map(lambda a: a + 0.1 * noise.standard_normal(a.shape).astype(a.dtype), base)
      for _ in range(num_clients)]
  stacked = jax.tree.map(lambda *a: jnp.stack(a), *per_client)

  def apply(v, x):
    train_out, updates = model.apply(v, x, train=True, mutable=['batch_stats'])
    return train_out, updates, model.apply(v, x, train=False)

  vmapped = jax.jit(jax.vmap(apply))(stacked, xs)
  assert vmapped[0].shape == (num_clients, 4, 8)
  apply_one = jax.jit(apply)  # Compiled once, reused for every client of the loop.
  for i in range(num_clients):
    looped = apply_one(per_client[i], xs[i])
    for a, b in zip(jax.tree.leaves(vmapped), jax.tree.leaves(looped)):
      np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-5)


def test_build_backbone():
  cfg = ml_collections.ConfigDict(
      {'name': 'small_cnn', 'embedding_dim': 64, 'width': 8, 'dtype': 'float32'})
  model = models.build_backbone(cfg)
  assert isinstance(model, models.SmallCNN)
  assert (model.width, model.embedding_dim, model.dtype) == (8, 64, jnp.float32)

  cfg.name, cfg.dtype = 'iresnet34', 'bfloat16'
  model = models.build_backbone(cfg)  # `width` is ignored by IResNets.
  assert isinstance(model, models.IResNet)
  assert tuple(model.stage_sizes) == (3, 4, 6, 3)
  assert (model.embedding_dim, model.dtype) == (64, jnp.bfloat16)
  cfg.name = 'iresnet18'
  assert tuple(models.build_backbone(cfg).stage_sizes) == (2, 2, 2, 2)
  cfg.name = 'iresnet50'
  assert tuple(models.build_backbone(cfg).stage_sizes) == (3, 4, 14, 3)
  cfg.name = 'iresnet100'
  assert tuple(models.build_backbone(cfg).stage_sizes) == (3, 13, 30, 3)
  assert set(models.BACKBONES) == {'small_cnn', 'gn_cnn', 'iresnet18', 'iresnet34', 'iresnet50',
                                   'iresnet100'}


def test_build_backbone_errors():
  cfg = ml_collections.ConfigDict(
      {'name': 'resnet50', 'embedding_dim': 64, 'width': 8, 'dtype': 'float32'})
  with pytest.raises(ValueError, match=r"'resnet50'.*iresnet18.*iresnet34.*small_cnn"):
    models.build_backbone(cfg)
  cfg.name, cfg.dtype = 'small_cnn', 'float64'
  with pytest.raises(ValueError, match='bfloat16'):
    models.build_backbone(cfg)
