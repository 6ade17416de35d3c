"""Pairwise sums over class-embedding rows: by hand, streamed == dense, memory, sharded."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.algorithms import pairwise
from tests import forced_devices


def spreadout(a, b, margin=2.0):
  """FedAwS-style hinge max(0, margin - ||a - b||)^2 (Eq. 3 of the FedFV paper), with a distance
  whose gradient stays finite at 0 (the diagonal). Exact differences: [Ra, Rb, d] in memory."""
  sq = jnp.sum((a[:, None, :] - b[None, :, :]) ** 2, -1)
  return jnp.maximum(0.0, margin - jnp.sqrt(jnp.maximum(sq, 1e-12))) ** 2


def spreadout_gram(a, b, margin=1.0):
  """The same hinge from ||a||² + ||b||² - 2 a·b: only [Ra, Rb] matrices (the large-R form)."""
  sq = jnp.sum(a * a, -1)[:, None] + jnp.sum(b * b, -1)[None, :] - 2.0 * a @ b.T
  return jnp.maximum(0.0, margin - jnp.sqrt(jnp.maximum(sq, 1e-12))) ** 2


# Rows (0,0), (1,0), (0,3): distances 1 (rows 0-1), 3 (0-2), sqrt(10) ~ 3.162 (1-2).
X = jnp.array([[0.0, 0.0], [1.0, 0.0], [0.0, 3.0]])


def test_spreadout_sum_by_hand():
  valid = jnp.array([True, True, True])
  # Margin 2: only the pair at distance 1 is inside it: (2 - 1)^2 = 1, counted as (0,1) and (1,0).
  assert float(pairwise.dense_pairwise_sum(spreadout, X, valid)) == 2.0
  # Margin 4: (4-1)^2 + (4-3)^2 + (4-3.1623)^2 = 9 + 1 + 0.70178, twice.
  value = pairwise.dense_pairwise_sum(functools.partial(spreadout, margin=4.0), X, valid)
  np.testing.assert_allclose(value, 2 * (9.0 + 1.0 + (4.0 - np.sqrt(10.0)) ** 2), rtol=1e-6)
  # The diagonal: distance 0 -> margin^2 each = 3 x 16 more.
  with_diag = pairwise.dense_pairwise_sum(functools.partial(spreadout, margin=4.0), X, valid,
                                          include_diagonal=True)
  np.testing.assert_allclose(with_diag - value, 48.0, rtol=1e-6)


def test_invalid_rows_and_co_held_pairs_do_not_count():
  hinge = functools.partial(spreadout, margin=4.0)
  # Row 2 padding: only the pair (0, 1) is left: 2 x 9.
  assert float(pairwise.dense_pairwise_sum(hinge, X, jnp.array([True, True, False]))) == 18.0
  # Rows 0 and 1 owned by client 5: they meet in its own softmax, so only pairs with row 2 count.
  owners = jnp.array([5, 5, 7])
  np.testing.assert_allclose(
      pairwise.dense_pairwise_sum(hinge, X, jnp.ones(3, bool), owners),
      2 * (1.0 + (4.0 - np.sqrt(10.0)) ** 2), rtol=1e-6)
  holders = jnp.array([[True, False], [True, True], [False, True]])   # 0-1 and 1-2 co-held
  np.testing.assert_allclose(pairwise.dense_pairwise_sum(hinge, X, jnp.ones(3, bool), holders),
                             2 * 1.0, rtol=1e-6)


def _problem(num_rows, dim=5, seed=0, holders_kind='none'):
  rng = np.random.default_rng(seed)
  x = jnp.asarray(rng.normal(size=(num_rows, dim)), jnp.float32)
  valid = jnp.asarray(rng.random(num_rows) > 0.1)
  holders = {'none': None,
             'owners': jnp.asarray(rng.integers(0, 4, num_rows), jnp.int32),
             'matrix': jnp.asarray(rng.random((num_rows, 4)) > 0.6)}[holders_kind]
  return x, valid, holders


def compiled_value_and_grad(fn, x):
  """`fn`'s value and gradient as one compiled program. The dense reference run op by op compiled
  each of its ~50 primitives alone for every new shape (about 2-3 s of a case's CPU); the
  streamed sum's value under autodiff is its custom VJP's forward, the same `total_fn` its plain
  call runs (test_a_term_in_another_precision_than_the_rows runs that call)."""
  return jax.jit(jax.value_and_grad(fn))(x)


@pytest.mark.parametrize('num_rows, block, holders_kind, diagonal', [
    (37, 8, 'none', False), (37, 8, 'owners', False), (50, 16, 'matrix', False),
    (23, 64, 'owners', True), (9, 2, 'matrix', True)])
def test_streamed_equals_dense_value_and_gradient(num_rows, block, holders_kind, diagonal):
  x, valid, holders = _problem(num_rows, holders_kind=holders_kind)
  hinge = functools.partial(spreadout, margin=3.0)
  dense = lambda x: pairwise.dense_pairwise_sum(hinge, x, valid, holders, diagonal)
  streamed = lambda x: pairwise.streamed_pairwise_sum(hinge, x, valid, holders, diagonal,
                                                      block_size=block)
  value, grad = compiled_value_and_grad(streamed, x)
  dense_value, dense_grad = compiled_value_and_grad(dense, x)
  np.testing.assert_allclose(value, dense_value, rtol=1e-5)
  np.testing.assert_allclose(grad, dense_grad, rtol=1e-4, atol=1e-5)


def test_a_non_symmetric_term_gets_both_roles_of_each_row_right():
  x, valid, holders = _problem(21, holders_kind='owners', seed=3)
  term = lambda a, b: jnp.tanh(a @ (b * jnp.arange(1.0, 6.0)).T) + a[:, :1] ** 2
  dense = lambda x: pairwise.dense_pairwise_sum(term, x, valid, holders)
  streamed = lambda x: pairwise.streamed_pairwise_sum(term, x, valid, holders, block_size=4)
  np.testing.assert_allclose(jax.jit(jax.grad(streamed))(x), compiled_value_and_grad(dense, x)[1],
                             rtol=1e-4, atol=1e-5)


def test_a_term_in_another_precision_than_the_rows():
  # bfloat16 rows, float32 terms: the streamed total is float32 like the dense one (a loop carry
  # of the rows' type would not even trace).
  x, valid, holders = _problem(19, holders_kind='matrix', seed=4)
  term = lambda a, b: spreadout(a.astype(jnp.float32), b.astype(jnp.float32), margin=3.0)
  x16 = x.astype(jnp.bfloat16)
  dense = lambda x: pairwise.dense_pairwise_sum(term, x, valid, holders)
  streamed = lambda x: pairwise.streamed_pairwise_sum(term, x, valid, holders, block_size=4)
  dense_value, dense_grad = compiled_value_and_grad(dense, x16)
  value = jax.jit(streamed)(x16)
  assert value.dtype == jnp.float32
  np.testing.assert_allclose(value, dense_value, rtol=1e-5)
  grad = jax.jit(jax.grad(streamed))(x16)
  assert grad.dtype == jnp.bfloat16
  # Each row's gradient is a bfloat16 sum of float32 tile gradients: rounding differs by tiles.
  np.testing.assert_allclose(grad.astype(jnp.float32), dense_grad.astype(jnp.float32),
                             rtol=2e-2, atol=2e-2)


def _temp_bytes(fn, x, valid, holders):
  compiled = jax.jit(jax.grad(fn)).lower(x, valid, holders).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_the_gradient_never_holds_an_r_by_r_matrix():
  num_rows, dim = 8192, 64
  x = jax.ShapeDtypeStruct((num_rows, dim), jnp.float32)
  valid = jax.ShapeDtypeStruct((num_rows,), jnp.bool_)
  owners = jax.ShapeDtypeStruct((num_rows,), jnp.int32)
  hinge = spreadout_gram
  r_by_r = num_rows * num_rows * 4     # one float32 R x R matrix: 256 MiB
  streamed = _temp_bytes(lambda x, v, h: pairwise.streamed_pairwise_sum(
      hinge, x, v, h, block_size=512), x, valid, owners)
  dense = _temp_bytes(lambda x, v, h: pairwise.dense_pairwise_sum(hinge, x, v, h), x, valid,
                      owners)
  assert dense > r_by_r                 # the dense form does hold R x R matrices
  assert streamed < r_by_r / 16         # tiles of 512 x 512 and O(R d): ~1/16 of one matrix at most


_EIGHT_DEVICES = r'''
import functools
import jax, jax.numpy as jnp, numpy as np
from fedjax_face.algorithms import pairwise
from fedjax_face.core import engine
assert jax.device_count() == 8
mesh = engine.make_mesh(8)
rng = np.random.default_rng(1)
x = jnp.asarray(rng.normal(size=(101, 6)), jnp.float32)
valid = jnp.asarray(rng.random(101) > 0.1)
for holders in (None, jnp.asarray(rng.integers(0, 5, 101), jnp.int32),
                jnp.asarray(rng.random((101, 5)) > 0.7)):
  term = lambda a, b: jnp.maximum(0.0, 2.5 - jnp.sqrt(jnp.maximum(
      jnp.sum((a[:, None] - b[None]) ** 2, -1), 1e-12))) ** 2
  dense = lambda x: pairwise.dense_pairwise_sum(term, x, valid, holders)
  sharded = lambda x: pairwise.streamed_pairwise_sum(term, x, valid, holders, block_size=4,
                                                     mesh=mesh, axis_name='clients')
  # Each side one program (test_pairwise.compiled_value_and_grad says why).
  value, grad = jax.jit(jax.value_and_grad(sharded))(x)
  dense_value, dense_grad = jax.jit(jax.value_and_grad(dense))(x)
  np.testing.assert_allclose(value, dense_value, rtol=1e-5)
  np.testing.assert_allclose(grad, dense_grad, rtol=1e-4, atol=1e-5)
print('OK 8 devices')
'''


def test_sharded_over_eight_devices_equals_dense():
  assert 'OK 8 devices' in forced_devices.run(_EIGHT_DEVICES)
