"""Pairwise terms over the rows of a class-embedding matrix: which pairs count, and the tiles.

Server steps on a class-embedding matrix (FedGC's Eq. 5 and FedCos, FedAwS's spreadout, FedFace's
server step) are sums over pairs of rows (r, c). Two things are shared by all of them:

* Which pairs count. Rows are identities; `holders` says which clients hold each one, either
  `[R, K]` bool (general case: identities shared between clients) or `[R]` int (the one owner of
  each row: identity-exclusive data, no R x K matrix). A pair is *co-held* when some client holds
  both rows; such a pair already meets in that client's local softmax.
* How a large R is cut into tiles (`tiling`, `pad_rows`, `blocks`): one [block, block] tile of
  a pairwise matrix at a time instead of all R x R entries.

And the generic server step on top of them: `dense_pairwise_sum` (small R) and
`streamed_pairwise_sum` (any R, sharded over a mesh axis), the same value and gradient of a sum of
any pairwise term over the counted pairs.
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from fedjax_face.core import arrays

NEG = -1e9   # a finite "minus infinity": masked logits never produce 0 * inf


IMPLEMENTATIONS = ('dense', 'blockwise', 'auto')   # a server step's `*.reg_implementation`
# Memory decides, not speed: a dense pairwise step holds a few R x R float32 temporaries (FedGC's
# ~2.25·R^2), while the streamed one recomputes its tiles in the backward pass (BUILD_NOTES "FedGC
# server step at scale").
AUTO_STREAMED_ROWS = 4096


def check_implementation(implementation: str) -> None:
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f'pairwise implementation {implementation!r}; expected one of '
                     f'{IMPLEMENTATIONS}.')


def uses_streamed(implementation: str, num_rows: int) -> bool:
  """Whether `implementation` streams a matrix of `num_rows` rows."""
  check_implementation(implementation)
  if implementation == 'auto':
    return num_rows > AUTO_STREAMED_ROWS
  return implementation == 'blockwise'


def owners(class_mask):
  """`[R]` owner client of each slot of a `[K, C_max]` layout (the identity-exclusive holders)."""
  num_clients, max_classes = class_mask.shape
  return jnp.repeat(jnp.arange(num_clients, dtype=jnp.int32), max_classes)


def co_held(holders_rows, holders_cols):
  """`[Rr, Rc]` bool: does some client hold both row r and column c?

  `holders_*` are `[R, K]` bool (general case) or `[R]` int owners (identity-exclusive case).
  The general case is a 0/1 matrix product, exact in any float precision (products are 0 or 1,
  sums are small integers).
  """
  if holders_rows.ndim == 1:
    return holders_rows[:, None] == holders_cols[None, :]
  shared = jnp.dot(holders_rows.astype(jnp.float32), holders_cols.astype(jnp.float32).T)
  return shared > 0.5


def allowed_mask(valid, holders):
  """`[R, R]` pairs of the general case: r == c, or no client holds both; both real rows."""
  eye = jnp.eye(valid.shape[0], dtype=bool)
  return valid[:, None] & valid[None, :] & (eye | ~co_held(holders, holders))


def tiling(num_rows: int, block_size: int, shards: int = 1) -> tuple[int, int]:
  """(block, padded rows): ceil(R / shards / block_size) equal blocks per shard, each at most
  `block_size`, so that padding is under one row per block (R = 5000 at 4096: 2 x 2500, not
  8192)."""
  per_shard = arrays.ceil_div(num_rows, shards)
  num_blocks = arrays.ceil_div(per_shard, block_size)
  block = arrays.ceil_div(per_shard, num_blocks)
  return block, block * num_blocks * shards


def pad_rows(x, num_rows: int):
  """`x` padded with zero (False) rows to `num_rows`: padding rows are invalid and held by nobody."""
  pad = [(0, num_rows - x.shape[0])] + [(0, 0)] * (x.ndim - 1)
  return jnp.pad(x, pad)


def blocks(x, block: int):
  """`[R, ...]` -> `[R / block, block, ...]`."""
  return x.reshape((x.shape[0] // block, block) + x.shape[1:])


def pair_mask(rows, cols, valid_rows, valid_cols, holders_rows, holders_cols,
              include_diagonal: bool):
  """`[Rr, Rc]` bool: the pairs (r, c) a pairwise sum counts.

  Both rows real; the diagonal (same global index) only with `include_diagonal`; off the diagonal,
  no client holds both (`holders` None: every row its own owner, so all pairs count).
  """
  diag = rows[:, None] == cols[None, :]
  apart = ~diag if holders_rows is None else ~co_held(holders_rows, holders_cols)
  return valid_rows[:, None] & valid_cols[None, :] & jnp.where(diag, include_diagonal, apart)


def dense_pairwise_sum(pair_fn, x, valid, holders=None, include_diagonal: bool = False):
  """sum over the counted pairs (r, c) of `pair_fn(x, x)[r, c]`, with the whole R x R matrix.

  `pair_fn(a [Rr, d], b [Rc, d]) -> [Rr, Rc]` is any pairwise term (FedAwS's spreadout hinge,
  FedFace's cosine penalty); ordered pairs, so a symmetric term counts each unordered pair twice,
  as Eq. 3 of the FedFV paper does (sum over i, sum over i' != i). `pair_fn` must be finite with
  finite gradients everywhere, the diagonal included (a masked entry still enters autodiff as
  0 · its gradient). The small-R form; `streamed_pairwise_sum` is the same value and gradient.
  """
  index = jnp.arange(x.shape[0])
  mask = pair_mask(index, index, valid, valid, holders, holders, include_diagonal)
  return jnp.sum(jnp.where(mask, pair_fn(x, x), 0.0))


def _tile_sum(pair_fn, include_diagonal, a, rows, valid_a, hold_a, b, cols, valid_b, hold_b):
  mask = pair_mask(rows, cols, valid_a, valid_b, hold_a, hold_b, include_diagonal)
  return jnp.sum(jnp.where(mask, pair_fn(a, b), 0.0))


def _tile_args(i, j, block, a, valid_a, hold_a, row0, b, valid_b, hold_b):
  """Row tile i of the rows `a` (global indices from `row0`), column tile j of the columns `b`."""
  take = lambda t, k: jax.lax.dynamic_slice_in_dim(t, k * block, block)
  rows = row0 + i * block + jnp.arange(block)
  cols = j * block + jnp.arange(block)
  hold = lambda h, k: None if h is None else take(h, k)
  return (take(a, i), rows, take(valid_a, i), hold(hold_a, i),
          take(b, j), cols, take(valid_b, j), hold(hold_b, j))


def _local_sum(pair_fn, include_diagonal, block, a, valid_a, hold_a, row0, b, valid_b, hold_b):
  """Sum over tiles (rows of `a`) x (columns of `b`), one [block, block] tile at a time."""
  num_i, num_j = a.shape[0] // block, b.shape[0] // block

  def body(k, total):
    args = _tile_args(k // num_j, k % num_j, block, a, valid_a, hold_a, row0, b, valid_b, hold_b)
    return total + _tile_sum(pair_fn, include_diagonal, *args)

  # The running total has the type of a tile's sum, not of `a`: pair_fn may compute in another
  # precision (bfloat16 rows, float32 terms), and a loop carry must keep one type.
  first = _tile_args(0, 0, block, a, valid_a, hold_a, row0, b, valid_b, hold_b)
  total = jax.eval_shape(functools.partial(_tile_sum, pair_fn, include_diagonal), *first)
  return jax.lax.fori_loop(0, num_i * num_j, body, jnp.zeros((), total.dtype))


def _local_grads(pair_fn, include_diagonal, block, ct, a, valid_a, hold_a, row0, b, valid_b,
                 hold_b):
  """(d/da, d/db) of `_local_sum` times `ct`, each tile recomputed and differentiated alone."""
  num_i, num_j = a.shape[0] // block, b.shape[0] // block

  def body(k, grads):
    i, j = k // num_j, k % num_j
    a_i, rows, va, ha, b_j, cols, vb, hb = _tile_args(i, j, block, a, valid_a, hold_a, row0, b,
                                                      valid_b, hold_b)
    tile = lambda a_i, b_j: _tile_sum(pair_fn, include_diagonal, a_i, rows, va, ha, b_j, cols,
                                      vb, hb)
    _, vjp = jax.vjp(tile, a_i, b_j)
    d_a, d_b = vjp(ct)
    add = lambda g, d, start: jax.lax.dynamic_update_slice_in_dim(
        g, jax.lax.dynamic_slice_in_dim(g, start, block) + d, start, 0)
    return add(grads[0], d_a, i * block), add(grads[1], d_b, j * block)

  return jax.lax.fori_loop(0, num_i * num_j, body, (jnp.zeros_like(a), jnp.zeros_like(b)))


def streamed_pairwise_sum(pair_fn, x, valid, holders=None, include_diagonal: bool = False, *,
                          block_size: int, mesh=None, axis_name: str = 'clients'):
  """`dense_pairwise_sum` without the R x R matrix: the same value and gradient, memory
  O(R·d + block²).

  Rows are padded to whole tiles (`tiling`; padding rows are invalid) and the sum runs over one
  [block, block] tile at a time. The gradient (a custom VJP) recomputes each tile in the backward
  pass and differentiates it alone, so no tile outlives its step (autodiff of the loop would keep
  every tile's intermediates for the backward pass: R² numbers again). The custom VJP gives
  reverse mode in `x` only: no `jax.jvp`, and no gradient of values `pair_fn` closes over (JAX
  raises); `dense_pairwise_sum` has both.

  Sharded (`mesh` given): row tiles are split over the mesh axis `axis_name`; each device
  all-gathers the columns, sums its rows' tiles (psum), and in the backward pass returns its rows'
  gradient plus its share of the columns' (psum_scatter).
  """
  shards = 1 if mesh is None else mesh.shape[axis_name]
  block, padded = tiling(x.shape[0], block_size, shards)
  x_p, valid_p = pad_rows(x, padded), pad_rows(valid, padded)
  hold_p = None if holders is None else pad_rows(holders, padded)
  kernel = (pair_fn, include_diagonal, block)

  if mesh is None:
    def total_fn(x, valid, hold):
      return _local_sum(*kernel, x, valid, hold, 0, x, valid, hold)

    def grad_fn(ct, x, valid, hold):
      d_rows, d_cols = _local_grads(*kernel, ct, x, valid, hold, 0, x, valid, hold)
      return d_rows + d_cols
  else:
    gather = lambda t: None if t is None else jax.lax.all_gather(t, axis_name, tiled=True)
    first_row = lambda x: jax.lax.axis_index(axis_name) * x.shape[0]

    def total_local(x, valid, hold):
      local = _local_sum(*kernel, x, valid, hold, first_row(x), gather(x), gather(valid),
                         gather(hold))
      return jax.lax.psum(local, axis_name)

    def grad_local(ct, x, valid, hold):
      d_rows, d_cols = _local_grads(*kernel, ct, x, valid, hold, first_row(x), gather(x),
                                    gather(valid), gather(hold))
      return d_rows + jax.lax.psum_scatter(d_cols, axis_name, scatter_dimension=0, tiled=True)

    rows = P(axis_name)
    hold_spec = None if hold_p is None else rows
    # check_vma=False: loop carries start device-invariant and become per-device; JAX does not
    # differentiate through these (the custom VJP below is the derivative).
    total_fn = jax.shard_map(total_local, mesh=mesh, in_specs=(rows, rows, hold_spec),
                             out_specs=P(), check_vma=False)
    grad_fn = jax.shard_map(grad_local, mesh=mesh, in_specs=(P(), rows, rows, hold_spec),
                            out_specs=rows, check_vma=False)

  @jax.custom_vjp
  def streamed(x, valid, hold):
    return total_fn(x, valid, hold)

  def fwd(x, valid, hold):
    return total_fn(x, valid, hold), (x, valid, hold)

  def bwd(res, ct):
    x, valid, hold = res
    return grad_fn(ct, x, valid, hold), None, None

  streamed.defvjp(fwd, bwd)
  return streamed(x_p, valid_p, hold_p)
