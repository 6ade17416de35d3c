"""core/arrays.py: the one copy of each small array helper."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.core import arrays


@pytest.mark.parametrize('a,b,want', [(0, 4, 0), (1, 4, 1), (8, 4, 2), (9, 4, 3),
                                      (10**18 + 1, 10**9, 10**9 + 1)])
def test_ceil_div_is_exact(a, b, want):
  assert arrays.ceil_div(a, b) == want


def test_round_up():
  assert [arrays.round_up(n, 4) for n in (0, 1, 4, 5)] == [0, 4, 4, 8]


def test_l2_normalize_numpy_keeps_dtype_and_zero_rows():
  x = np.array([[3.0, 4.0], [0.0, 0.0], [1e-30, 0.0]], np.float64)
  out = arrays.l2_normalize(x)
  assert isinstance(out, np.ndarray) and out.dtype == np.float64
  np.testing.assert_array_equal(out, [[0.6, 0.8], [0.0, 0.0], [1.0, 0.0]])


def test_l2_normalize_jax_has_a_finite_gradient_at_zero():
  x = jnp.array([[3.0, 4.0], [0.0, 0.0]])
  out = arrays.l2_normalize(x)
  assert isinstance(out, jax.Array)
  np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]], rtol=1e-6)
  grad = jax.grad(lambda v: arrays.l2_normalize(v).sum())(x)
  assert np.isfinite(np.asarray(grad)).all()
  # d/dx of x/|x| summed, at (3, 4): (I - u u^T) 1 / |x| with u = (0.6, 0.8).
  np.testing.assert_allclose(grad[0], [(1 - 0.6 * 1.4) / 5, (1 - 0.8 * 1.4) / 5], rtol=1e-5)
  np.testing.assert_allclose(arrays.l2_normalize(x.T, axis=0), out.T, rtol=1e-6)


def test_tree_bytes_counts_shapes_and_dtypes():
  tree = {'a': np.zeros((3, 4), np.float32), 'b': [jax.ShapeDtypeStruct((5,), jnp.int8)],
          'c': jnp.zeros((), jnp.bfloat16)}
  assert arrays.tree_bytes(tree) == 3 * 4 * 4 + 5 + 2


# JAX's default RNG (partitionable threefry, which the library never changes) in the suite; the
# older implementation is the same equality on other bits (the full tier).
@pytest.mark.parametrize('partitionable', [True, pytest.param(False, marks=pytest.mark.full)])
@pytest.mark.parametrize('draw,kwargs', [
    (jax.random.normal, {}), (jax.random.uniform, {'minval': -1.0, 'maxval': 1.0}),
    (jax.random.truncated_normal, {'lower': -2, 'upper': 2}), (jax.random.bernoulli, {'p': 0.5}),
    (jax.random.gumbel, {})])
def test_a_flat_draw_is_the_draw_to_the_last_bit(draw, kwargs, partitionable):
  key = jax.random.PRNGKey(7)
  with jax.threefry_partitionable(partitionable):
    for shape in [(3, 3, 2, 2), (8, 1, 1, 1), (5, 7), (2, 0, 3)]:
      want = draw(key, shape=shape, **kwargs)
      got = arrays.drawn_flat(draw, key, shape, **kwargs)
      assert got.shape == want.shape == tuple(shape) and got.dtype == want.dtype
      np.testing.assert_array_equal(got, want)
    # Inside a traced program (per-leaf DP noise, the flip of each image) as well.
    jitted = jax.jit(lambda k: arrays.drawn_flat(draw, k, (3, 3, 2, 2), **kwargs))(key)
    np.testing.assert_array_equal(jitted, draw(key, shape=(3, 3, 2, 2), **kwargs))
