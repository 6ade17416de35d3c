"""models/pooling.max_pool: the values and gradients of nn.max_pool, bit for bit, ties included."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.models import pooling


def _reference(x, size):
  return nn.max_pool(x, (size, size), strides=(size, size))


@pytest.mark.parametrize('shape,size', [((2, 8, 8, 3), 2), ((1, 7, 5, 2), 2), ((2, 9, 9, 1), 3)])
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16])
def test_values_and_gradients_equal_reduce_window(shape, size, dtype):
  rng = np.random.default_rng(0)
  # Few distinct values, so most windows hold tied maxima: the gradient must go to the first.
  x = jnp.asarray(rng.integers(-2, 3, shape), dtype)
  g = jnp.asarray(rng.normal(size=_reference(x, size).shape), dtype)
  ours, ours_vjp = jax.vjp(lambda x: pooling.max_pool(x, size), x)
  ref, ref_vjp = jax.vjp(lambda x: _reference(x, size), x)
  assert ours.dtype == ref.dtype and ours.shape == ref.shape
  np.testing.assert_array_equal(np.asarray(ours, np.float32), np.asarray(ref, np.float32))
  (dx,), (dx_ref,) = ours_vjp(g), ref_vjp(g)
  # Bit-equal, signed zeros included.
  np.testing.assert_array_equal(np.asarray(dx, np.float32).view(np.uint32),
                                np.asarray(dx_ref, np.float32).view(np.uint32))


def test_gradient_goes_to_the_first_maximum_of_each_window():
  x = jnp.array([[1., 3.], [3., 0.]]).reshape(1, 2, 2, 1)
  dx = jax.grad(lambda x: pooling.max_pool(x).sum())(x)
  np.testing.assert_array_equal(dx.reshape(2, 2), [[0., 1.], [0., 0.]])


def test_jit_and_vmap_match_reduce_window():
  x = jax.random.normal(jax.random.PRNGKey(0), (3, 2, 6, 6, 4))   # clients x batch
  loss = lambda pool: lambda x: (pool(x) ** 2).sum()
  ours = jax.jit(jax.vmap(jax.grad(loss(pooling.max_pool))))(x)
  ref = jax.jit(jax.vmap(jax.grad(loss(lambda x: _reference(x, 2)))))(x)
  np.testing.assert_array_equal(ours, ref)
