"""Spreadout (FedFV paper Eq. 3): value and gradient by hand, dense = streamed, the server step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.algorithms import spreadout

SQRT2 = float(np.sqrt(2.0))


def hand_value_and_grad(w, valid, distance, margin):
  """Eq. 3 and its gradient written out pair by pair (numpy, float64)."""
  w = np.asarray(w, np.float64)
  norms = np.linalg.norm(w, axis=1)
  unit = w / norms[:, None]
  value, grad = 0.0, np.zeros_like(w)
  for i in range(len(w)):
    for j in range(len(w)):
      if i == j or not (valid[i] and valid[j]):
        continue
      cos = unit[i] @ unit[j]
      if distance == 'euclidean':
        diff = unit[i] - unit[j]
        d = np.linalg.norm(diff)
        dd_dunit_i = diff / d                        # d ||u_i - u_j|| / d u_i
      else:
        d = 1.0 - cos
        dd_dunit_i = -unit[j]                        # d (1 - u_i . u_j) / d u_i
      gap = max(0.0, margin - d)
      value += gap**2
      # (nu - d)^2 -> -2 (nu - d) dd/du_i, then through u_i = w_i / |w_i|; the term is in the
      # sum as (i, j) and as (j, i), hence the 2.
      projector = (np.eye(w.shape[1]) - np.outer(unit[i], unit[i])) / norms[i]
      grad[i] += 2 * (-2.0 * gap * projector @ dd_dunit_i)
  return value, grad


def test_value_by_hand_on_three_unit_rows():
  w = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  # d(a, b) = sqrt 2 (no penalty at nu = sqrt 2); d(a, c) = d(b, c) = sqrt(2 - sqrt 2);
  # 2 unordered pairs x 2 orders x (sqrt 2 - sqrt(2 - sqrt 2))^2.
  expected = 4 * (SQRT2 - np.sqrt(2 - SQRT2))**2
  value = spreadout.spreadout(w, jnp.ones(3, bool), distance='euclidean', margin=SQRT2)
  np.testing.assert_allclose(value, expected, rtol=1e-6)
  np.testing.assert_allclose(expected, 1.6840, rtol=1e-4)


@pytest.mark.parametrize('distance, margin', [('euclidean', SQRT2), ('euclidean', 1.9),
                                              ('cosine', 0.7), ('cosine', 1.2)])
def test_value_and_gradient_match_the_hand_computation(distance, margin):
  w = jax.random.normal(jax.random.PRNGKey(0), (6, 5)) * jnp.arange(1.0, 7.0)[:, None]
  valid = np.array([True, True, False, True, True, True])
  value, grad = jax.value_and_grad(spreadout.spreadout)(w, jnp.asarray(valid), distance=distance,
                                                        margin=margin)
  expected_value, expected_grad = hand_value_and_grad(w, valid, distance, margin)
  assert expected_value > 0
  np.testing.assert_allclose(value, expected_value, rtol=1e-5)
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal(grad[2], 0.0)       # a padding row feels nothing


def test_cosine_form_is_fedfaces_relu_cos_minus_point_three_squared():
  w = jax.random.normal(jax.random.PRNGKey(1), (9, 4))
  unit = np.asarray(w) / np.linalg.norm(w, axis=1, keepdims=True)
  cos = unit @ unit.T
  off_diagonal = ~np.eye(9, dtype=bool)
  expected = np.sum(np.maximum(cos - 0.3, 0.0)[off_diagonal] ** 2)
  value = spreadout.spreadout(w, jnp.ones(9, bool), distance='cosine', margin=0.7)
  np.testing.assert_allclose(value, expected, rtol=1e-5)


def test_the_mean_divides_by_the_ordered_pairs_of_valid_rows():
  # FedFace's public code: the penalties averaged over the n(n-1) ordered pairs of the n valid
  # rows (7 of 9 here: 42 pairs); padding rows neither count nor feel a gradient.
  w = jax.random.normal(jax.random.PRNGKey(1), (9, 4))
  valid = np.arange(9) % 4 != 1
  unit = np.asarray(w) / np.linalg.norm(w, axis=1, keepdims=True)
  pairs = np.outer(valid, valid) & ~np.eye(9, dtype=bool)
  penalties = np.maximum(unit @ unit.T - 0.3, 0.0)[pairs] ** 2
  assert penalties.size == 7 * 6
  for impl in ('dense', 'blockwise'):
    fn = lambda w, reduction: spreadout.spreadout(w, jnp.asarray(valid), distance='cosine',
                                                  margin=0.7, reduction=reduction,
                                                  implementation=impl, block_size=4)
    np.testing.assert_allclose(fn(w, 'mean'), np.mean(penalties), rtol=1e-5)
    np.testing.assert_allclose(jax.grad(fn)(w, 'mean'), jax.grad(fn)(w, 'sum') / 42,
                               rtol=1e-5, atol=1e-9)


def test_fedface_averages_as_its_code_and_fedaws_sums_as_eq_3():
  from fedjax_face.algorithms import fedaws, fedface  # pylint: disable=g-import-not-at-top
  assert fedface.config_section().reduction == 'mean'
  assert fedaws.config_section().reduction == 'sum'


def test_dense_equals_streamed_value_and_gradient():
  w = jax.random.normal(jax.random.PRNGKey(2), (37, 6))
  valid = jnp.arange(37) % 5 != 3
  for distance, margin in (('euclidean', SQRT2), ('cosine', 0.7)):
    fn = lambda w, impl: spreadout.spreadout(w, valid, distance=distance, margin=margin,
                                             implementation=impl, block_size=8)
    dense_v, dense_g = jax.value_and_grad(fn)(w, 'dense')
    stream_v, stream_g = jax.value_and_grad(fn)(w, 'blockwise')
    np.testing.assert_allclose(stream_v, dense_v, rtol=1e-5)
    np.testing.assert_allclose(stream_g, dense_g, rtol=1e-4, atol=1e-6)


def test_server_step_is_w_minus_step_size_times_the_gradient():
  w = jax.random.normal(jax.random.PRNGKey(3), (5, 3))
  valid = np.array([True, True, True, False, True])
  out = spreadout.spreadout_step(w, jnp.asarray(valid), step_size=0.25, distance='euclidean',
                                 margin=SQRT2)
  _, grad = hand_value_and_grad(w, valid, 'euclidean', SQRT2)
  np.testing.assert_allclose(out, np.asarray(w) - 0.25 * grad, rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out[3], w[3])
  # Two steps are two of them.
  once = spreadout.spreadout_step(w, jnp.asarray(valid), step_size=0.25, distance='euclidean',
                                  margin=SQRT2)
  twice = spreadout.spreadout_step(w, jnp.asarray(valid), step_size=0.25, steps=2,
                                   distance='euclidean', margin=SQRT2)
  np.testing.assert_allclose(twice, spreadout.spreadout_step(
      once, jnp.asarray(valid), step_size=0.25, distance='euclidean', margin=SQRT2), rtol=1e-6)


def test_coinciding_rows_have_a_finite_gradient():
  w = jnp.array([[1.0, 2.0], [1.0, 2.0], [2.0, -1.0]])
  grad = jax.grad(spreadout.spreadout)(w, jnp.ones(3, bool), distance='euclidean', margin=SQRT2)
  assert np.all(np.isfinite(grad))
