"""The FedGPAD network (Table II): output shapes, the parts as separate subtrees, RGB + HSV."""

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.data import preprocess
from fedjax_face.models import pad


@pytest.mark.parametrize('disentangle', [True, False])
def test_outputs_and_parameter_subtrees(disentangle):
  net = pad.PadNet(width=4, image_size=32, disentangle=disentangle)
  x = jnp.zeros((2, 32, 32, pad.PAD_CHANNELS))
  # Shapes only (eval_shape): the forward's numbers are tested through the losses and methods.
  variables = jax.eval_shape(lambda: net.init(jax.random.PRNGKey(0), x, train=True))  # ES, Dec
  out, _ = jax.eval_shape(lambda v: net.apply(v, x, train=True, mutable=['batch_stats']),
                          variables)
  assert out['logit'].shape == (2,) and out['depth'].shape == (2, 4, 4)
  parts = {'invariant', 'classifier', 'depth'}
  if disentangle:
    parts |= {'specific', 'decoder'}
    assert out['z_invariant'].shape == out['z_specific'].shape == (2, 32)
    assert out['reconstruction'].shape == (2, 32, 32, pad.PAD_CHANNELS)
  else:
    assert 'reconstruction' not in out
  assert set(variables['params']) == parts


def test_wrong_input_is_named():
  net = pad.PadNet(width=4, image_size=32)
  with pytest.raises(ValueError, match=r'expects \[B, 32, 32, 6\] \(RGB \+ HSV'):
    net.init(jax.random.PRNGKey(0), jnp.zeros((1, 32, 32, 3)), train=False)


def test_rgb_hsv_matches_colorsys():
  rng = np.random.default_rng(0)
  pixels = np.concatenate([rng.integers(0, 256, (60, 3)),
                           [[0, 0, 0], [255, 255, 255], [90, 90, 90], [255, 0, 0], [0, 0, 255]]])
  out = np.asarray(preprocess.rgb_hsv(jnp.asarray(pixels, jnp.uint8)))
  for p, o in zip(pixels, out):
    rgb = p / 255.0
    np.testing.assert_allclose(o[:3], rgb * 2 - 1, atol=1e-6)
    np.testing.assert_allclose(o[3:], np.array(colorsys.rgb_to_hsv(*rgb)) * 2 - 1, atol=1e-5)


# The suite checks the network without its domain-specific half (its extractor is a second
# `Extractor`, the class the invariant features use, and its decoder's transposed convs take no
# `conv_gradient`): every conv kind of PadNet, at half the compile (~12 s of CPU less). The whole
# disentangled network is the full tier; test_conv's `test_backbone_gradients_equal_xla` keeps
# the canonical gradient through whole backbones and `test_gradients_equal_xla` per conv.
@pytest.mark.parametrize('disentangle', [False, pytest.param(True, marks=pytest.mark.full)])
def test_canonical_conv_gradient_gives_xla_s_gradients(disentangle):
  """`conv_gradient='canonical'` (fast in scanned steps on CPU): the same parameters and gradients."""
  x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, pad.PAD_CHANNELS)),
                  jnp.float32)
  nets = {g: pad.PadNet(width=2, image_size=32, conv_gradient=g, disentangle=disentangle)
          for g in ('xla', 'canonical')}
  shapes = {g: jax.eval_shape(lambda net=net: net.init(jax.random.PRNGKey(0), x, train=True))
            for g, net in nets.items()}
  assert jax.tree.structure(shapes['canonical']) == jax.tree.structure(shapes['xla'])
  # The gradients are compared at any point, so the variables are drawn here on the host at the
  # init's shapes, kernels at He's scale and BatchNorm as Flax starts it: run op by op, Flax's
  # init of this net took ~10 s of the suite, and compiled ~5 s.
  rng = np.random.default_rng(0)

  def draw(path, s):
    name = jax.tree_util.keystr(path)
    if name.endswith("['kernel']"):
      return jnp.asarray(rng.normal(0, np.sqrt(2 / np.prod(s.shape[:-1])), s.shape), s.dtype)
    return jnp.full(s.shape, 1.0 if name.endswith(("['scale']", "['var']")) else 0.0, s.dtype)
  variables = jax.tree_util.tree_map_with_path(draw, shapes['xla'])

  def grads(net):
    def loss(params):
      out, _ = net.apply({**variables, 'params': params}, x, train=True, mutable=['batch_stats'])
      reconstruction = jnp.sum(jnp.tanh(out['reconstruction'])) if disentangle else 0.0
      return jnp.sum(jnp.sin(out['logit'])) + jnp.sum(out['depth'] ** 2) + reconstruction
    return jax.jit(jax.grad(loss))(variables['params'])

  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
               grads(nets['canonical']), grads(nets['xla']))


def test_grouped_batch_norm_normalizes_each_slice_and_averages_the_running_statistics():
  """`GroupedBatchNorm` (All's `batch_norm=per_center`): each data center's slice of the batch is
  normalized as `nn.BatchNorm` would normalize that slice alone; the running statistics move by
  the mean of the slices' statistics; the variables are `nn.BatchNorm`'s."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(2)
  # Three slices of 4 samples with different means and scales, as three domains would have.
  x = jnp.asarray(np.concatenate([rng.normal(m, s, (4, 3, 3, 5)) for m, s in
                                  ((0., 1.), (2., .5), (-1., 3.))]), jnp.float32)
  grouped = pad.GroupedBatchNorm(groups=3)
  plain = nn.BatchNorm(momentum=pad.BN_MOMENTUM, epsilon=pad.BN_EPSILON)
  variables = grouped.init(jax.random.PRNGKey(0), x, use_running_average=False)
  plain_vars = plain.init(jax.random.PRNGKey(0), x[:4], use_running_average=False)
  assert jax.tree.map(jnp.shape, variables) == jax.tree.map(jnp.shape, plain_vars)
  out, state = grouped.apply(variables, x, use_running_average=False, mutable=['batch_stats'])
  slices = [plain.apply(plain_vars, x[4 * g:4 * g + 4], use_running_average=False,
                        mutable=['batch_stats'])
            for g in range(3)]
  np.testing.assert_allclose(out, np.concatenate([o for o, _ in slices]), atol=2e-5)
  for name in ('mean', 'var'):
    np.testing.assert_allclose(
        state['batch_stats'][name],
        np.mean([s['batch_stats'][name] for _, s in slices], axis=0), rtol=1e-5, atol=1e-6)
  # Inference uses the running statistics, as nn.BatchNorm does.
  np.testing.assert_allclose(
      grouped.apply({**variables, **state}, x, use_running_average=True),
      plain.apply({**plain_vars, **state}, x, use_running_average=True), atol=1e-6)
  with pytest.raises(ValueError, match=r'a batch of 10 cannot be split into 3 equal'):
    grouped.apply(variables, x[:10], use_running_average=False, mutable=['batch_stats'])


@pytest.mark.parametrize('network', [pad.PadNet, pad.PadResNet18])
def test_per_center_batch_norm_keeps_the_network_s_variables(network):
  x = jnp.zeros((6, 32, 32, pad.PAD_CHANNELS))
  shapes = [jax.tree.map(jnp.shape, jax.eval_shape(
      lambda g=g: network(width=2, image_size=32, batch_norm_groups=g).init(
          jax.random.PRNGKey(0), x, train=True))) for g in (1, 3)]
  assert shapes[0] == shapes[1]


def test_resnet18_is_torchvision_s_on_six_channels_with_one_logit():
  """At width 64: torchvision's ResNet-18 has 11,689,512 parameters; less its 1000-way fc
  (513,000), plus conv1's three extra input channels (7*7*3*64 = 9,408) and a one-logit fc (513):
  11,186,433. Stages halve the size from the second: 7x7 features at 224."""
  net = pad.PadResNet18(width=64, image_size=224)
  x = jnp.zeros((2, 224, 224, pad.PAD_CHANNELS))
  variables = jax.eval_shape(lambda: net.init(jax.random.PRNGKey(0), x, train=False))
  assert sum(int(np.prod(p.shape)) for p in jax.tree.leaves(variables['params'])) == 11_186_433
  assert set(variables['params']) == {'invariant', 'classifier'}
  assert set(variables['batch_stats']) == {'invariant'}
  trunk = variables['params']['invariant']
  assert trunk['conv1']['kernel'].shape == (7, 7, 6, 64)
  assert trunk['layer4_0']['downsample_conv']['kernel'].shape == (1, 1, 256, 512)
  assert 'downsample_conv' not in trunk['layer1_0']
  features = jax.eval_shape(lambda v: pad.ResNet18Trunk(64).apply(
      {'params': v['params']['invariant'], 'batch_stats': v['batch_stats']['invariant']}, x,
      train=False), variables)
  assert features.shape == (2, 512)
  out = jax.eval_shape(lambda v: net.apply(v, x, train=False), variables)
  assert set(out) == {'logit'} and out['logit'].shape == (2,)
  with pytest.raises(ValueError, match=r'PadResNet18 expects \[B, 224, 224, 6\]'):
    jax.eval_shape(lambda v: net.apply(v, x[..., :3], train=False), variables)

