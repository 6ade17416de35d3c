"""Pairwise terms over the rows of a class-embedding matrix: which pairs count, and the tiles.

Server steps on a class-embedding matrix (FedGC's Eq. 5 and FedCos, FedAwS's spreadout, FedFace's
server step) are sums over pairs of rows (r, c). Two things are shared by all of them:

* Which pairs count. Rows are identities; `holders` says which clients hold each one, either
  `[R, K]` bool (general case: identities shared between clients) or `[R]` int (the one owner of
  each row: identity-exclusive data, no R x K matrix). A pair is *co-held* when some client holds
  both rows; such a pair already meets in that client's local softmax.
* How a large R is cut into tiles (`tiling`, `pad_rows`, `blocks`): one [block, block] tile of
  a pairwise matrix at a time instead of all R x R entries.
"""

import jax.numpy as jnp

from fedjax_face.core import arrays

NEG = -1e9   # a finite "minus infinity": masked logits never produce 0 * inf


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
