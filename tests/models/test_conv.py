"""`models.conv`: XLA's convolution with its gradients restated as plain convs ('canonical'), and
with few input channels padded (`channel_padded`).

The value and both gradients must equal `lax.conv_general_dilated`'s own, for every stride and
padding the backbones use, under `lax.scan` and `vmap`, and for whole backbones.
"""

import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax import lax

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.models import conv, iresnet

NHWC = ('NHWC', 'HWIO', 'NHWC')


def value_and_grads(conv_fn, x, kernel, strides, padding):
  """Value and (dx, dkernel) of a non-linear scalar of the conv, so the cotangent is not uniform."""
  def loss(x, kernel):
    y = conv_fn(x, kernel, strides, padding, dimension_numbers=NHWC)
    return jnp.sum(jnp.sin(y) * y), y
  (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(x, kernel)
  return y, grads


# One compiled program per conv and shape: run op by op, each primitive of the value and both
# gradients compiled a program of its own (~15-30 per case). The chunked kernel gradient's exact
# equalities below stay op by op, as the reference sums they are checked against are.
compiled_value_and_grads = jax.jit(value_and_grads, static_argnums=(0, 3, 4))

RESTATED = [conv.canonical_gradient_conv]


@pytest.mark.parametrize('conv_fn', RESTATED + [conv.channel_padded(lax.conv_general_dilated),
                                                conv.channel_padded(conv.canonical_gradient_conv)])
@pytest.mark.parametrize('size,kernel_size,strides,padding', [
    (8, 3, (1, 1), ((1, 1), (1, 1))),     # the backbones' 3x3 convs
    (8, 3, (2, 2), ((1, 1), (1, 1))),     # IResNet's stride-2 3x3, even size
    (7, 3, (2, 2), ((1, 1), (1, 1))),     # odd size: the last row/column is not reached
    (8, 1, (2, 2), ((0, 0), (0, 0))),     # IResNet's 1x1 stride-2 projection
    (9, 3, (1, 2), ((0, 2), (1, 0))),     # uneven strides and asymmetric padding
    (8, 3, (2, 2), 'SAME'),
    (8, 3, (1, 1), 'VALID'),
])
def test_gradients_equal_xla(conv_fn, size, kernel_size, strides, padding):
  rng = np.random.RandomState(0)
  x = jnp.asarray(rng.randn(3, size, size, 3), jnp.float32)   # 3 channels: channel_padded pads
  kernel = jnp.asarray(rng.randn(kernel_size, kernel_size, 3, 5), jnp.float32)
  y_ref, (dx_ref, dk_ref) = compiled_value_and_grads(lax.conv_general_dilated, x, kernel, strides,
                                                     padding)
  y, (dx, dk) = compiled_value_and_grads(conv_fn, x, kernel, strides, padding)
  np.testing.assert_allclose(y, y_ref, rtol=1e-6, atol=1e-6)
  assert dx.shape == x.shape and dk.shape == kernel.shape
  np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(dk, dk_ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize('size,kernel_size,strides,padding,by_phase', [
    (8, 3, (1, 1), ((1, 1), (1, 1)), False),
    (8, 3, (2, 2), ((1, 1), (1, 1)), True),     # IResNet's stride-2 3x3
    (7, 3, (2, 2), ((1, 1), (1, 1)), False),    # odd size: XLA's own input gradient
    (8, 1, (2, 2), ((0, 0), (0, 0)), True),     # IResNet's 1x1 downsample
    (9, 3, (1, 2), ((0, 2), (1, 0)), False),
])
def test_chunked_kernel_gradient_equals_xla(size, kernel_size, strides, padding, by_phase):
  # Two and a half chunks of images, so an uneven last chunk is summed too.
  chunk = conv.KERNEL_GRADIENT_CHUNK
  rng = np.random.RandomState(4)
  x = jnp.asarray(rng.randn(chunk * 5 // 2, size, size, 4), jnp.float32)
  kernel = jnp.asarray(rng.randn(kernel_size, kernel_size, 4, 6), jnp.float32)
  y_ref, (dx_ref, dk_ref) = value_and_grads(lax.conv_general_dilated, x, kernel, strides, padding)
  y, (dx, dk) = value_and_grads(conv.chunked_gradient_conv, x, kernel, strides, padding)
  np.testing.assert_array_equal(y, y_ref)      # the forward pass is XLA's own
  if by_phase:   # a strided conv's input gradient is taken per output phase
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-5, atol=1e-4)
    cotangent = jnp.cos(y) * y + jnp.sin(y)    # of value_and_grads' sum(sin(y) * y)
    np.testing.assert_array_equal(dx, conv.phase_input_gradient(cotangent, kernel, x.shape,
                                                                strides, padding))
  else:          # XLA's own input gradient
    np.testing.assert_array_equal(dx, dx_ref)
  np.testing.assert_allclose(dk, dk_ref, rtol=1e-5, atol=1e-3)   # summed in another order
  # Exactly the sum of XLA's kernel gradients of the three chunks, in order.
  g = jnp.asarray(rng.randn(*y.shape), jnp.float32)
  plain = lambda x, k: lax.conv_general_dilated(x, k, strides, padding, dimension_numbers=NHWC)
  chunked = lambda x, k: conv.chunked_gradient_conv(x, k, strides, padding, dimension_numbers=NHWC)
  by_chunk = [jax.vjp(lambda k: plain(x[i:i + chunk], k), kernel)[1](g[i:i + chunk])[0]
              for i in (0, chunk, 2 * chunk)]
  np.testing.assert_array_equal(jax.vjp(chunked, x, kernel)[1](g)[1],
                                by_chunk[0] + by_chunk[1] + by_chunk[2])


@pytest.mark.parametrize('size,kernel_size,strides,padding', [
    (8, 3, (2, 2), ((1, 1), (1, 1))),
    (8, 3, (2, 2), ((0, 1), (2, 0))),     # uneven padding: some phases read past g's edges
    (6, 3, (3, 3), ((0, 0), (0, 0))),     # one tap a phase
    (8, 1, (2, 2), ((0, 0), (0, 0))),     # phases no tap reaches: zero
    (10, 5, (2, 2), ((2, 2), (2, 2))),
    (8, 3, (1, 2), ((1, 1), (1, 1))),
])
def test_the_input_gradient_per_phase_equals_xla_s(size, kernel_size, strides, padding):
  rng = np.random.RandomState(7)
  x = jnp.asarray(rng.randn(3, size, size, 5), jnp.float32)
  kernel = jnp.asarray(rng.randn(kernel_size, kernel_size, 5, 6), jnp.float32)
  xla_conv = lambda x: lax.conv_general_dilated(x, kernel, strides, padding,
                                                dimension_numbers=NHWC)
  g = jnp.asarray(rng.randn(*jax.eval_shape(xla_conv, x).shape), jnp.float32)
  # Both gradients in one compiled program (op by op, ~10-35 programs a case).
  got, ref = jax.jit(lambda g: (conv.phase_input_gradient(g, kernel, x.shape, strides, padding),
                                jax.vjp(xla_conv, x)[1](g)[0]))(g)
  assert got.shape == ref.shape and not np.array_equal(got, np.zeros_like(got))
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_a_batch_of_one_chunk_keeps_xla_s_own_kernel_gradient():
  rng = np.random.RandomState(5)
  x = jnp.asarray(rng.randn(conv.KERNEL_GRADIENT_CHUNK, 8, 8, 4), jnp.float32)
  kernel = jnp.asarray(rng.randn(3, 3, 4, 6), jnp.float32)
  got = value_and_grads(conv.chunked_gradient_conv, x, kernel, (1, 1), 'SAME')[1]
  ref = value_and_grads(lax.conv_general_dilated, x, kernel, (1, 1), 'SAME')[1]
  jax.tree.map(np.testing.assert_array_equal, got, ref)


@pytest.mark.parametrize('conv_fn', RESTATED)
def test_gradients_equal_xla_inside_scan_and_vmap(conv_fn):
  """Per-client kernels under vmap (the engine's vmap backend) and steps under lax.scan."""
  rng = np.random.RandomState(1)
  xs = jnp.asarray(rng.randn(2, 3, 2, 6, 6, 4), jnp.float32)      # [clients, steps, B, H, W, C]
  kernels = jnp.asarray(rng.randn(2, 3, 3, 4, 4), jnp.float32)     # one kernel per client

  def train(conv_fn):
    def client(kernel, x_steps):
      def step(k, x):
        g = jax.grad(lambda k: jnp.sum(jnp.tanh(
            conv_fn(x, k, (1, 1), ((1, 1), (1, 1)), dimension_numbers=NHWC))))(k)
        return k - 0.1 * g, None
      return lax.scan(step, kernel, x_steps)[0]
    return jax.jit(jax.vmap(client))(kernels, xs)

  np.testing.assert_allclose(train(conv_fn), train(lax.conv_general_dilated), rtol=1e-5,
                             atol=1e-5)


@pytest.mark.parametrize('conv_fn', RESTATED + [conv.channel_padded(lax.conv_general_dilated)])
def test_unsupported_convs_fall_back_to_xla(conv_fn):
  rng = np.random.RandomState(2)
  x = jnp.asarray(rng.randn(2, 8, 8, 4), jnp.float32)
  grouped = jnp.asarray(rng.randn(3, 3, 2, 4), jnp.float32)
  for kwargs in ({'feature_group_count': 2}, {'rhs_dilation': (2, 2)}):
    k = grouped if 'feature_group_count' in kwargs else grouped.reshape(3, 3, 4, 2)
    f = lambda fn, x: jnp.sum(fn(x, k, (1, 1), 'SAME', dimension_numbers=NHWC, **kwargs) ** 2)
    np.testing.assert_allclose(jax.grad(lambda x: f(conv_fn, x))(x),
                               jax.grad(lambda x: f(lax.conv_general_dilated, x))(x), rtol=1e-6)


def test_channel_padded_pads_only_few_channel_inputs():
  """The forward pass sees channels padded to a multiple of 4 (one extra zero channel for RGB),
  inputs already a multiple of 4 go through untouched, and the kernel keeps its shape."""
  seen = []
  def spy(lhs, rhs, *args, **kwargs):
    seen.append((lhs.shape[-1], rhs.shape[2]))
    return lax.conv_general_dilated(lhs, rhs, *args, **kwargs)
  padded = conv.channel_padded(spy)
  for channels in (3, 4):
    x = jnp.ones((1, 4, 4, channels))
    k = jnp.ones((3, 3, channels, 2))
    dk = jax.grad(lambda k: padded(x, k, (1, 1), 'SAME', dimension_numbers=NHWC).sum())(k)
    assert dk.shape == k.shape
  assert seen[0] == (4, 4) and seen[-1] == (4, 4)
  assert (3, 3) in seen   # the gradient is the unpadded conv's own


def _narrow_iresnet(conv_gradient):
  """IResNet's every conv kind (3x3 stride 1 and 2 with padding 1, the 1x1 stride-2 projection)
  at widths that compile in seconds; IResNet-18 itself differs in depth and width only."""
  return iresnet.IResNet(stage_sizes=(2, 1), stage_widths=(8, 16), stem_width=8,
                         embedding_dim=16, conv_gradient=conv_gradient)


@pytest.mark.parametrize('name', ['small_cnn', 'iresnet'])
def test_backbone_gradients_equal_xla(name):
  cfg = ml_collections.ConfigDict(dict(name=name, embedding_dim=16, width=8))
  build = (_narrow_iresnet if name == 'iresnet' else
           lambda conv_gradient: models.build_backbone(cfg, conv_gradient=conv_gradient))
  # 20 images: several chunks for the chunked kernel gradient.
  x = jnp.asarray(np.random.RandomState(3).uniform(-1, 1, (20, 32, 32, 3)), jnp.float32)
  xla_model = build('xla')
  # One compiled init (common.init_backbone: the eager init's values to the last bit); run op
  # by op on the 20 images it took ~2 s more of CPU over both networks.
  variables = common.init_backbone(xla_model, jax.random.PRNGKey(0), x.shape[1:])

  def grads(model):
    def loss(params):
      emb, _ = model.apply({**variables, 'params': params}, x, train=True,
                           mutable=['batch_stats'])
      return jnp.sum(jnp.sin(emb))
    return jax.jit(jax.grad(loss))(variables['params'])

  ref = grads(xla_model)
  for gradient in ('canonical', 'chunked'):
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                 grads(build(gradient)), ref)


def test_unknown_conv_gradient_is_refused():
  cfg = ml_collections.ConfigDict(dict(name='small_cnn', embedding_dim=16))
  with pytest.raises(ValueError, match="conv gradient 'fast'.*'xla', 'canonical', 'chunked'"):
    models.build_backbone(cfg, conv_gradient='fast')


def test_engine_picks_the_canonical_gradient_only_inside_cpu_loops():
  from fedjax_face import config_lib  # pylint: disable=g-import-not-at-top
  from fedjax_face.core import policy  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config()
  config.federated.local_steps = 2
  backend, mode, _, gradient = policy.resolve_engine(config, 'cpu')
  assert (backend, mode, gradient) == ('loop', 'unroll', 'xla')
  config.federated.local_steps = policy.UNROLL_MAX_STEPS + 1
  assert policy.resolve_engine(config, 'cpu')[1::2] == ('scan', 'canonical')
  assert policy.conv_gradient_for(config, 'map', 'unroll', 'cpu') == 'canonical'
  backend, mode, _, gradient = policy.resolve_engine(config, 'gpu')
  assert (backend, mode, gradient) == ('vmap', 'scan', 'xla')
  config.engine.conv_gradient = 'canonical'   # an explicit choice is kept everywhere
  assert policy.resolve_engine(config, 'gpu')[3] == 'canonical'
  # The IResNets: the chunked kernel gradient on CPU outside loops.
  config.engine.conv_gradient = 'auto'
  config.model.name = 'iresnet50'
  assert policy.conv_gradient_for(config, 'loop', 'unroll', 'cpu') == 'chunked'
  assert policy.conv_gradient_for(config, 'loop', 'scan', 'cpu') == 'canonical'
  assert policy.conv_gradient_for(config, 'map', 'unroll', 'cpu') == 'canonical'
  assert policy.conv_gradient_for(config, 'loop', 'unroll', 'gpu') == 'xla'


def test_cpu_convolutions_are_eigen_for_the_iresnets_only_unless_named():
  from fedjax_face import config_lib  # pylint: disable=g-import-not-at-top
  from fedjax_face.core import policy  # pylint: disable=g-import-not-at-top
  config = config_lib.base_config()
  assert config.model.name == 'small_cnn' and config.engine.cpu_convolutions == 'auto'
  assert policy.cpu_convolutions_for(config) == 'ynnpack'
  for name in ('iresnet18', 'iresnet34', 'iresnet50', 'iresnet100'):
    config.model.name = name
    assert policy.cpu_convolutions_for(config) == 'eigen'
  config.engine.cpu_convolutions = 'ynnpack'   # an explicit choice is kept
  assert policy.cpu_convolutions_for(config) == 'ynnpack'
  config.engine.cpu_convolutions = 'onednn'
  with pytest.raises(ValueError, match=re.escape(
      "config.engine.cpu_convolutions='onednn'; expected one of ('auto', 'ynnpack', 'eigen').")):
    policy.cpu_convolutions_for(config)
