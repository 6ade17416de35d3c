"""The FedGPAD losses (Eq. 4-8) against hand computations."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.algorithms import pad_losses


def test_cls_loss_is_the_binary_cross_entropy_of_the_live_logit():
  logits = jnp.array([0.0, 2.0, -1.0, 5.0])
  live = jnp.array([1, 0, 0, 1])
  mask = jnp.array([True, True, True, False])
  # -log sigmoid(0), -log(1 - sigmoid(2)) = log(1 + e^2), -log(1 - sigmoid(-1)) = log(1 + e^-1).
  expected = (np.log(2.0) + np.log1p(np.exp(2.0)) + np.log1p(np.exp(-1.0))) / 3
  np.testing.assert_allclose(pad_losses.cls_loss(logits, live, mask), expected, rtol=1e-6)
  # Its gradient is sigmoid(z) - y per valid sample, over the valid count.
  grad = jax.grad(lambda z: pad_losses.cls_loss(z, live, mask))(logits)
  sig = 1 / (1 + np.exp(-np.array([0.0, 2.0, -1.0])))
  np.testing.assert_allclose(grad, np.r_[(sig - [1, 0, 0]) / 3, 0.0], rtol=1e-5, atol=1e-7)


def test_depth_loss_is_the_pixel_mean_squared_error():
  depth = jnp.zeros((2, 2, 2)).at[0, 0, 0].set(2.0)
  target = jnp.ones((2, 2, 2))
  # sample 0: (1 + 0 + 0 + 0)... (2-1)^2 + 3 x (0-1)^2 = 4 over 4 pixels = 1; sample 1: 1.
  np.testing.assert_allclose(pad_losses.depth_loss(depth, target, jnp.array([True, True])), 1.0)
  np.testing.assert_allclose(pad_losses.depth_loss(depth, target * 0, jnp.array([True, False])),
                             1.0)   # 2^2 / 4


def test_depth_target_is_resized_to_the_estimate():
  target = jnp.full((1, 8, 8), 0.5)
  np.testing.assert_allclose(pad_losses.depth_loss(jnp.full((1, 2, 2), 0.5), target,
                                                   jnp.array([True])), 0.0, atol=1e-7)


def test_rec_loss_is_the_mean_squared_reconstruction_error():
  x = jnp.zeros((1, 2, 2, 6))
  rec = x.at[0, 1, 1, 5].set(3.0)
  np.testing.assert_allclose(pad_losses.rec_loss(rec, x, jnp.array([True])), 9.0 / 24)


def test_diff_loss_is_zero_for_uncorrelated_features_and_counts_shared_directions():
  # Z_I^T Z_S = sum_b zi_b zs_b^T over unit rows: zero when, over the batch, no invariant
  # dimension correlates with a specific one; here e0 e1^T - e0 e1^T.
  zi = jnp.array([[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
  zs = jnp.array([[0.0, 5.0, 0.0], [0.0, -1.0, 0.0]])
  mask = jnp.array([True, True])
  np.testing.assert_allclose(pad_losses.diff_loss(zi, zs, mask), 0.0, atol=1e-7)
  # e0 e1^T + e0 e2^T: two unit entries -> 2 / 9.
  other = jnp.array([[0.0, 5.0, 0.0], [0.0, 0.0, 1.0]])
  np.testing.assert_allclose(pad_losses.diff_loss(zi, other, mask), 2.0 / 9, rtol=1e-6)
  # The same direction in both: Z_I^T Z_S has a single entry 1 + 1 = 2 (unit rows) -> 4 / 9.
  same = jnp.array([[3.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
  np.testing.assert_allclose(pad_losses.diff_loss(zi, same, mask), 4.0 / 9, rtol=1e-6)
  # A padding row does not count.
  np.testing.assert_allclose(pad_losses.diff_loss(zi, same, jnp.array([True, False])), 1.0 / 9,
                             rtol=1e-6)


def test_total_is_eq8_with_the_authors_weights():
  batch = {'inputs': jnp.zeros((2, 4, 4, 6)), 'depth': jnp.zeros((2, 2, 2)),
           'live': jnp.array([1, 0]), 'mask': jnp.array([True, True])}
  outputs = {'logit': jnp.array([0.0, 0.0]), 'depth': jnp.ones((2, 2, 2)),
             'reconstruction': jnp.ones((2, 4, 4, 6)),
             'z_invariant': jnp.array([[1.0, 0.0], [1.0, 0.0]]),
             'z_specific': jnp.array([[1.0, 0.0], [0.0, 1.0]])}
  total, terms = pad_losses.total_loss(outputs, batch)
  # Z_I^T Z_S = [1, 0]^T [1, 0] + [1, 0]^T [0, 1] = [[1, 1], [0, 0]]: mean square 2 / 4.
  expected = {'cls': np.log(2.0), 'depth': 1.0, 'rec': 1.0, 'diff': 0.5}
  for k, v in expected.items():
    np.testing.assert_allclose(terms[k], v, rtol=1e-6)
  np.testing.assert_allclose(total, np.log(2.0) + 10.0 + 0.1 + 0.5, rtol=1e-6)
  # FedPAD's net has no disentangled outputs: cls and depth only.
  plain = {'logit': outputs['logit'], 'depth': outputs['depth']}
  total, terms = pad_losses.total_loss(plain, batch)
  assert set(terms) == {'cls', 'depth'}
  np.testing.assert_allclose(total, np.log(2.0) + 10.0, rtol=1e-6)
