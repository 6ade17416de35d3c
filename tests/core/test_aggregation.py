"""Aggregation over the clients axis: exact weighted means, padding rows are inert."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.core import aggregation


def test_weighted_mean_equals_hand_computed():
  tree = {'a': jnp.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), 'b': jnp.array([10.0, 20.0, 30.0])}
  weights = jnp.array([1.0, 2.0, 0.0])   # the third client is padding
  out = aggregation.weighted_mean(tree, weights)
  np.testing.assert_allclose(out['a'], [(1 + 2 * 3) / 3, (2 + 2 * 4) / 3], rtol=1e-6)
  np.testing.assert_allclose(out['b'], (10 + 2 * 20) / 3, rtol=1e-6)


def test_weighted_mean_of_n_k_matches_fedavg_formula():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(5, 3, 2)).astype(np.float32)
  n = np.array([3, 1, 7, 2, 5], np.float32)
  expected = sum(n[k] / n.sum() * x[k] for k in range(5))   # FedGC Alg. 1 line 11
  np.testing.assert_allclose(aggregation.weighted_mean(jnp.asarray(x), jnp.asarray(n)), expected,
                             rtol=1e-5)


@pytest.mark.parametrize('m', [1, 5, aggregation.CHAIN_MAX_CLIENTS + 3])
def test_chain_and_contraction_both_give_the_fedavg_formula(m):
  """Up to CHAIN_MAX_CLIENTS clients the sum is a chain of adds, beyond it a contraction."""
  rng = np.random.default_rng(m)
  x = rng.normal(size=(m, 4, 3)).astype(np.float32)
  n = rng.integers(1, 9, m).astype(np.float32)
  expected = (n[:, None, None] * x.astype(np.float64)).sum(0) / n.sum()
  out = jax.jit(aggregation.weighted_mean)({'x': jnp.asarray(x), 'step': jnp.full(m, 4)},
                                           jnp.asarray(n))
  np.testing.assert_allclose(out['x'], expected, rtol=2e-6, atol=1e-6)
  assert out['step'].dtype == jnp.int32 and int(out['step']) == 4


def test_padding_rows_do_not_change_the_mean():
  x = jnp.array([[1.0], [4.0]])
  padded = jnp.array([[1.0], [4.0], [1e6], [-1e6]])
  w, w_padded = jnp.array([2.0, 1.0]), jnp.array([2.0, 1.0, 0.0, 0.0])
  np.testing.assert_array_equal(aggregation.weighted_mean(x, w),
                                aggregation.weighted_mean(padded, w_padded))


def test_gather_and_scatter_drop_padding_ids():
  table = jnp.arange(12.0).reshape(4, 3)
  ids = jnp.array([2, 0, 4])   # 4 == num_clients: a padding client
  rows = aggregation.gather_clients(table, ids)
  np.testing.assert_array_equal(rows[:2], [[6, 7, 8], [0, 1, 2]])
  updated = aggregation.scatter_clients(table, ids, -rows)
  expected = np.arange(12.0).reshape(4, 3)
  expected[2], expected[0] = [-6, -7, -8], [0, -1, -2]
  np.testing.assert_array_equal(updated, expected)   # row 3 untouched by the padding client
