"""The FedGPAD network (Table II): output shapes, the parts as separate subtrees, RGB + HSV."""

import colorsys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
  out = np.asarray(pad.rgb_hsv(jnp.asarray(pixels, jnp.uint8)))
  for p, o in zip(pixels, out):
    rgb = p / 255.0
    np.testing.assert_allclose(o[:3], rgb * 2 - 1, atol=1e-6)
    np.testing.assert_allclose(o[3:], np.array(colorsys.rgb_to_hsv(*rgb)) * 2 - 1, atol=1e-5)


def test_canonical_conv_gradient_gives_xla_s_gradients():
  """`conv_gradient='canonical'` (fast in scanned steps on CPU): the same parameters and gradients."""
  x = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, pad.PAD_CHANNELS)),
                  jnp.float32)
  nets = {g: pad.PadNet(width=2, image_size=32, conv_gradient=g) for g in ('xla', 'canonical')}
  variables = nets['xla'].init(jax.random.PRNGKey(0), x, train=True)
  assert jax.tree.structure(nets['canonical'].init(jax.random.PRNGKey(0), x, train=True)) == (
      jax.tree.structure(variables))

  def grads(net):
    def loss(params):
      out, _ = net.apply({**variables, 'params': params}, x, train=True, mutable=['batch_stats'])
      return jnp.sum(jnp.sin(out['logit'])) + jnp.sum(out['depth'] ** 2) + jnp.sum(
          jnp.tanh(out['reconstruction']))
    return jax.jit(jax.grad(loss))(variables['params'])

  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
               grads(nets['canonical']), grads(nets['xla']))
