"""The inversion attack library: the linear layer's exact inversion, iDLG's label, the gradient
distances and TV prior, PSNR and SSIM on hand cases, and gradient matching recovering one input."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.eval.privacy import inversion
from fedjax_face.models import heads


def _dense_grads(x, label, classes=5):
  """Cross-entropy gradients of a dense layer with bias, y = x W + b (flax's layout)."""
  k1, k2 = jax.random.split(jax.random.PRNGKey(1))
  params = {'kernel': jax.random.normal(k1, (x.shape[1], classes)) / 3,
            'bias': 0.1 * jax.random.normal(k2, (classes,))}
  loss = lambda p: -jax.nn.log_softmax(x @ p['kernel'] + p['bias'])[0, label]
  return jax.grad(loss)(params)


def test_a_dense_layers_one_example_gradient_gives_its_input_exactly():
  x = jax.random.normal(jax.random.PRNGKey(0), (1, 7))
  g = _dense_grads(x, label=3)
  recovered = inversion.analytic_linear_input(g['kernel'], g['bias'])
  np.testing.assert_allclose(recovered, x[0], rtol=1e-6, atol=0)
  # Every output with a non-zero bias gradient gives it: column i / (dL/db)_i == x.
  for i in range(5):
    np.testing.assert_allclose(g['kernel'][:, i] / g['bias'][i], x[0], rtol=1e-6)


# A bias-free linear head's row gradients for features f and label y, compiled once.
_head_row_grads = jax.jit(jax.grad(lambda w, f, y: -jax.nn.log_softmax(f @ w.T)[0, y]))


@pytest.mark.parametrize('label', [0, 2, 5])
def test_idlg_label_is_the_row_opposed_to_all_others(label):
  f = jax.random.normal(jax.random.PRNGKey(label), (1, 8))   # features of either sign
  w = 0.1 * jax.random.normal(jax.random.PRNGKey(9), (6, 8))
  assert inversion.idlg_label(_head_row_grads(w, f, label)) == label


def test_idlg_label_refuses_two_classes():
  with pytest.raises(ValueError, match='2 classes; the sign rule needs at least 3'):
    inversion.idlg_label(np.array([[1.0, 2.0], [-1.0, -2.0]]))


@pytest.mark.parametrize('kind', ['softmax', 'cosface'])
def test_the_label_is_the_rows_one_negative_coefficient_in_the_feature_gradient(kind):
  """FedPE's reading: ∂L/∂f of one example on the head's rows, the padded class skipped."""
  f = jax.random.normal(jax.random.PRNGKey(4), (1, 8))
  w = jax.random.normal(jax.random.PRNGKey(5), (6, 8))
  class_mask = jnp.array([True] * 5 + [False])
  head = heads.head_kwargs_from_config({'loss': kind})
  for label in range(5):
    loss = lambda f, y=label: heads.loss(f, w, jnp.array([y]), class_mask, None, **head)
    g = jax.grad(loss)(f)[0]
    assert inversion.label_from_feature_gradient(g, w, class_mask) == label
  # A linear head: the coefficients are p - onehot exactly.
  p = jnp.array([0.1, 0.2, 0.3, 0.4, 0.0, 0.0])
  g = (p - jax.nn.one_hot(2, 6)) @ w
  assert inversion.label_from_feature_gradient(g, w) == 2


def test_row_gradients_undo_one_sgd_step_with_weight_decay():
  w = jax.random.normal(jax.random.PRNGKey(6), (4, 3))
  g = jax.random.normal(jax.random.PRNGKey(7), (4, 3))
  sent = w - 0.5 * (g + 0.01 * w)   # one coupled-weight-decay SGD step at lr 0.5
  np.testing.assert_allclose(inversion.row_gradients(w, sent, 0.5, 0.01), g, atol=1e-6)


def test_pseudo_gradient_is_the_step_divided_by_the_rate():
  sent, received = {'a': jnp.array([1.0, 2.0])}, {'a': jnp.array([0.5, 2.5])}
  np.testing.assert_allclose(inversion.pseudo_gradient(sent, received, 0.5)['a'], [1.0, -1.0])


def test_gradient_distances_by_hand():
  a = {'x': jnp.array([1.0, 0.0]), 'y': jnp.array([[2.0]])}
  assert float(inversion.gradient_distance(a, jax.tree.map(lambda v: 3 * v, a), 'cosine')) == \
      pytest.approx(0.0, abs=1e-7)
  assert float(inversion.gradient_distance(a, jax.tree.map(lambda v: -v, a), 'cosine')) == \
      pytest.approx(2.0)
  b = {'x': jnp.array([0.0, 1.0]), 'y': jnp.array([[0.0]])}
  assert float(inversion.gradient_distance(a, b, 'cosine')) == pytest.approx(1.0)
  assert float(inversion.gradient_distance(a, b, 'l2')) == pytest.approx(1 + 1 + 4)
  with pytest.raises(ValueError, match="distance='l1'; expected one of"):
    inversion.gradient_distance(a, b, 'l1')


def test_total_variation_by_hand():
  image = jnp.array([[0.0, 1.0], [2.0, 4.0]])[None, :, :, None]   # [1, 2, 2, 1]
  # down: |2-0|, |4-1| -> mean 2.5; across: |1-0|, |4-2| -> mean 1.5
  assert float(inversion.total_variation(image)) == pytest.approx(4.0)


def test_psnr_by_hand():
  true = np.zeros((2, 4, 4, 3), np.uint8)
  off = true.copy()
  off[0] += 1   # mse 1
  off[1, 0, 0, 0] = 48   # mse 48^2 / 48
  np.testing.assert_allclose(inversion.psnr(off, true),
                             [20 * np.log10(255), 10 * np.log10(255 ** 2 / 48)])
  assert inversion.psnr(true, true)[0] == np.inf


def test_ssim_window_is_the_standard_gaussian():
  w = inversion.gaussian_window()
  assert w.shape == (11, 11) and w.sum() == pytest.approx(1.0)
  g = np.exp(-np.arange(-5, 6) ** 2 / (2 * 1.5 ** 2))
  np.testing.assert_allclose(w, np.outer(g, g) / np.outer(g, g).sum())


def test_ssim_by_hand():
  c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
  # Two flat images: no variance, so SSIM is the luminance term alone.
  a, b = np.full((1, 12, 12, 3), 100.0), np.full((1, 12, 12, 3), 60.0)
  assert inversion.ssim(a, b)[0] == pytest.approx((2 * 100 * 60 + c1) / (100 ** 2 + 60 ** 2 + c1))
  assert inversion.ssim(a, a)[0] == pytest.approx(1.0)
  # A textured 11 x 11 image and the same shifted by 40: one window position, variances and
  # covariance equal, so SSIM is the luminance term of the window's weighted means.
  x = np.random.default_rng(0).uniform(0, 200, (1, 11, 11, 1))
  w = inversion.gaussian_window()
  mu = float(np.sum(w * x[0, :, :, 0]))
  expected = (2 * mu * (mu + 40) + c1) / (mu ** 2 + (mu + 40) ** 2 + c1)
  assert inversion.ssim(x, x + 40)[0] == pytest.approx(expected, rel=1e-12)
  # A sign flip about the mean: structure term -1 (the contrast term 1).
  y = 2 * mu - x
  var = float(np.sum(w * x[0, :, :, 0] ** 2)) - mu ** 2
  lum = (2 * mu * mu + c1) / (2 * mu ** 2 + c1)
  assert inversion.ssim(x, y)[0] == pytest.approx(lum * (-2 * var + c2) / (2 * var + c2),
                                                  rel=1e-9)
  with pytest.raises(ValueError, match='expected two equal'):
    inversion.ssim(x, x[:, :10])


def test_inverting_gradients_recovers_one_input_of_a_dense_softmax():
  x = jax.random.uniform(jax.random.PRNGKey(0), (1, 2, 3, 1), minval=-1, maxval=1)   # an image
  params = {'kernel': jax.random.normal(jax.random.PRNGKey(1), (6, 4)) / 2,
            'bias': jnp.zeros(4)}

  def grad_fn(images, label):
    logits = lambda p: images.reshape(1, -1) @ p['kernel'] + p['bias']
    loss = lambda p: -jax.nn.log_softmax(logits(p))[0, label]
    return jax.grad(loss)(params)

  target = grad_fn(x, 2)
  attack = inversion.make_attack(grad_fn, iterations=200, learning_rate=0.1, tv_weight=0.0,
                                 distance='cosine')
  images, loss = inversion.invert(attack, target, x.shape, jax.random.PRNGKey(3), 2)
  assert loss < 1e-4
  np.testing.assert_allclose(images, x, atol=2e-2)
