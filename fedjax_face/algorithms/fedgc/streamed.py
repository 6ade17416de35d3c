"""FedGC's regularizers (Eq. 5 and FedCos) without the R x R matrix: streamed and sharded.

Same functions, same value and gradient as the dense `regularizer.flat_regularizer` (read its
module docstring for the paper reading: Eq. 5, the Eq. 11 gradient and the self term, the
CosFace / ArcFace forms, the general-case mask over `holders`, the reductions, FedCos), computed
with memory O(R·d + block^2) instead of O(R^2):

Softmax regularizer (Eq. 5). Each row r needs lse_r = log sum_{c allowed} e^{logit_rc}. The rows
are cut into blocks of `block_size`, and for each row block the column blocks are streamed with an
online log-sum-exp (running max m and sum s, rescaled by e^{m_old - m_new}), so only one
[block, block] tile of logits exists at a time. Reg = sum_r (lse_r - logit_rr) (Eq. 5, one term a
row). The backward pass (a `jax.custom_vjp`) recomputes the tiles from the saved lse_r: with
p_rc = e^{logit_rc - lse_r} and row cotangent g_r (1, or 1/N for 'mean'),

    dReg/dx_c = scale · sum_{r != c, allowed} g_r p_rc x'_r        (Eq. 11: anchors weighted by p)
    dReg/dlogit_cc = g_c (p_cc - 1)                                 (the self term)

where x is W (softmax form, scale 1) or W / ||W|| (CosFace / ArcFace forms, scale s; autodiff
then goes through the normalisation). The self logit is a separate input of the streamed kernel,
W_c^T W'_c (differentiable: `self_gradient=True`), its stop-gradient (`False`, Eq. 12's reading),
or the margined s·cos of the normalised forms (no gradient, as in the dense code).

Masking per tile: entry (r, c) is allowed iff both rows are valid and r == c or no client holds
both (`holders_r @ holders_c^T == 0`, or owner_r != owner_c for `[R]` int owners). Padding rows
(valid False) contribute nothing and get zero gradient. R is padded internally to whole blocks
(per device when sharded); `tiling` evens the blocks out so the padding stays small.

Sharded (`mesh` given): anchor rows are split over the 1-D mesh axis `axis_name`; each device
all-gathers the columns, computes its rows' lse, and in the backward pass the gradient of every
column from its own rows; the partial column gradients are summed and scattered back to the
row-sharded layout with `psum_scatter`.

FedCos (kind='cosine'). dReg_cos/dx_c = sum_{r allowed vs c, r != c} g_r x'_r needs no tile at all:
it is T - (the anchors co-held with c), T = sum_r g_r x'_r. With per-client sums S_k = sum_{r held
by k} g_r x'_r, sum_k holders_ck S_k counts each co-held row n_rc = |holders_r ∩ holders_c| times;
n_rc >= 2 only between rows held by two or more clients each, so that overcount is removed by a
streamed pass over those shared rows alone (moved to the front; a loop with a dynamic trip count).
Cost O(R·d + R·K·d + R_shared^2·(K + d)); with `[R]` int owners, O(R·d + R log R).
"""

import functools

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from fedjax_face.algorithms import pairwise
from fedjax_face.algorithms.fedgc import regularizer
from fedjax_face.core import arrays

# A [1024, 1024] float32 tile is 4 MiB (a few live at once). On CPU 4096 ran slightly faster
# (BUILD_NOTES "FedGC server step at scale"); on accelerators larger tiles also use the matrix units better.
DEFAULT_BLOCK = 1024


def _tile(a_i, self_i, valid_i, hold_i, rows_i, x_j, valid_j, hold_j, cols_j, scale):
  """One [block, block] tile of Eq. 5: logits (self logit on the diagonal), mask, diagonal."""
  diag = rows_i[:, None] == cols_j[None, :]
  logits = jnp.where(diag, self_i[:, None], scale * (a_i @ x_j.T))
  allowed = (valid_i[:, None] & valid_j[None, :]
             & (diag | ~pairwise.co_held(hold_i, hold_j)))
  return logits, allowed, diag


def _rows_lse(a, self_logit, valid, holders, row0, x, valid_c, holders_c, *, scale, block):
  """lse_r over the allowed columns for the rows `a` (global indices row0 + i), streamed.

  Columns: `x`, `valid_c`, `holders_c` (all of them). Invalid rows get lse 0.
  """
  rows = row0 + jnp.arange(a.shape[0])
  cols = (pairwise.blocks(x, block), pairwise.blocks(valid_c, block), pairwise.blocks(holders_c, block),
          pairwise.blocks(jnp.arange(x.shape[0]), block))

  def row_block(args):
    a_i, self_i, valid_i, hold_i, rows_i = args

    def column_block(carry, col):
      m, s = carry
      logits, allowed, _ = _tile(a_i, self_i, valid_i, hold_i, rows_i, *col, scale)
      logits = jnp.where(allowed, logits, pairwise.NEG)
      m_new = jnp.maximum(m, jnp.max(logits, axis=1))       # online log-sum-exp
      s = s * jnp.exp(m - m_new) + jnp.sum(jnp.exp(logits - m_new[:, None]), axis=1)
      return (m_new, s), None

    init = (jnp.full(a_i.shape[:1], pairwise.NEG, a.dtype), jnp.zeros(a_i.shape[:1], a.dtype))
    (m, s), _ = jax.lax.scan(column_block, init, cols)
    return jnp.where(valid_i, m + jnp.log(s), 0.0)

  rows_args = (a, self_logit, valid, holders, rows)
  return jax.lax.map(row_block, tuple(pairwise.blocks(t, block) for t in rows_args)).reshape(-1)


def _columns_grad(a, lse, ct, valid, holders, row0, x, valid_c, holders_c, *, scale, block):
  """scale · sum_{r != c allowed} ct_r p_rc a_r for every column c, from the rows `a` only.

  Recomputes each tile from the saved lse (p_rc = e^{logit_rc - lse_r}); the diagonal is left
  out (the self term's gradient goes to the self logit, see `_make_row_lse`).
  """
  rows = row0 + jnp.arange(a.shape[0])
  rows_args = tuple(pairwise.blocks(t, block) for t in (a, lse, ct, valid, holders, rows))

  def column_block(col):
    x_j, valid_j, hold_j, cols_j = col

    def row_block(acc, row):
      a_i, lse_i, ct_i, valid_i, hold_i, rows_i = row
      dummy_self = jnp.zeros_like(lse_i)        # the diagonal is masked out below
      logits, allowed, diag = _tile(a_i, dummy_self, valid_i, hold_i, rows_i, x_j, valid_j,
                                    hold_j, cols_j, scale)
      p = jnp.exp(jnp.where(allowed & ~diag, logits - lse_i[:, None], pairwise.NEG))
      return acc + (p * ct_i[:, None]).T @ a_i, None

    acc, _ = jax.lax.scan(row_block, jnp.zeros(x_j.shape, x.dtype), rows_args)
    return scale * acc

  cols = (pairwise.blocks(x, block), pairwise.blocks(valid_c, block), pairwise.blocks(holders_c, block),
          pairwise.blocks(jnp.arange(x.shape[0]), block))
  return jax.lax.map(column_block, cols).reshape(x.shape)


def _make_row_lse(*, scale: float, block: int, mesh, axis_name: str):
  """lse(x, self_logit, valid, holders) -> [R] with the streamed custom VJP (module docstring).

  Rows act as anchors (no gradient through them); the cotangent of x is the column gradient and
  that of self_logit is ct_r p_rr = ct_r e^{self_r - lse_r}.
  """
  kernel = dict(scale=scale, block=block)
  if mesh is None:
    def lse_fn(x, self_logit, valid, holders):
      return _rows_lse(x, self_logit, valid, holders, 0, x, valid, holders, **kernel)

    def grad_fn(x, lse, ct, valid, holders):
      return _columns_grad(x, lse, ct, valid, holders, 0, x, valid, holders, **kernel)
  else:
    def gather(*arrays):
      return [jax.lax.all_gather(t, axis_name, tiled=True) for t in arrays]

    def first_row(x):
      return jax.lax.axis_index(axis_name) * x.shape[0]

    def lse_local(x, self_logit, valid, holders):
      return _rows_lse(x, self_logit, valid, holders, first_row(x),
                       *gather(x, valid, holders), **kernel)

    def grad_local(x, lse, ct, valid, holders):
      partial = _columns_grad(x, lse, ct, valid, holders, first_row(x),
                              *gather(x, valid, holders), **kernel)
      return jax.lax.psum_scatter(partial, axis_name, scatter_dimension=0, tiled=True)

    # check_vma=False: the loop carries start as device-invariant zeros and become per-device;
    # nothing here is differentiated by JAX (the custom VJP below is the derivative).
    shard = functools.partial(jax.shard_map, mesh=mesh, out_specs=P(axis_name), check_vma=False)
    lse_fn = shard(lse_local, in_specs=(P(axis_name),) * 4)
    grad_fn = shard(grad_local, in_specs=(P(axis_name),) * 5)

  @jax.custom_vjp
  def row_lse(x, self_logit, valid, holders):
    return lse_fn(x, self_logit, valid, holders)

  def fwd(x, self_logit, valid, holders):
    lse = lse_fn(x, self_logit, valid, holders)
    return lse, (x, self_logit, valid, holders, lse)

  def bwd(res, ct):
    x, self_logit, valid, holders, lse = res
    ct = jnp.where(valid, ct, 0.0)
    d_self = jnp.where(valid, ct * jnp.exp(self_logit - lse), 0.0)   # ct_r p_rr
    return grad_fn(x, lse, ct, valid, holders), d_self, None, None

  row_lse.defvjp(fwd, bwd)
  return row_lse


def _softmax_streamed(w, valid, holders, *, form, scale, margin, self_gradient, block, mesh,
                       axis_name):
  """Per-row Eq. 5 terms lse_r - logit_rr, for padded rows (invalid rows: 0)."""
  if form == 'softmax':
    x, lse_scale = w, 1.0
    self_logit = jnp.sum(x * jax.lax.stop_gradient(x), -1)        # W_r^T W'_r
    if not self_gradient:
      self_logit = jax.lax.stop_gradient(self_logit)
  else:
    x, lse_scale = arrays.l2_normalize(w), scale
    self_logit = regularizer.self_logit(regularizer.self_cos(w), form=form, scale=scale,
                                        margin=margin)
  row_lse = _make_row_lse(scale=lse_scale, block=block, mesh=mesh, axis_name=axis_name)
  return row_lse(x, self_logit, valid, holders) - self_logit


def _dense_ids(owner):
  """Owner ids (any int values) relabelled 0..R-1, so `segment_sum` needs only R segments."""
  num_rows = owner.shape[0]
  order = jnp.argsort(owner, stable=True)
  sorted_key = owner[order]
  new = jnp.concatenate([jnp.ones((1,), bool), sorted_key[1:] != sorted_key[:-1]])
  ids_sorted = jnp.cumsum(new) - 1
  return jnp.zeros(num_rows, ids_sorted.dtype).at[order].set(ids_sorted)


def _shared_overcount(weighted, holders, *, block):
  """sum_r (n_rc - 1)_+ g_r x'_r for every row c, n_rc = |holders_r ∩ holders_c| (FedCos).

  Nonzero only between rows held by >= 2 clients, so those are moved to the front and only the
  leading ceil(R_shared / block)^2 tiles are visited (dynamic trip count).
  """
  num_rows = weighted.shape[0]
  hold = holders.astype(jnp.float32)
  shared = jnp.sum(hold, -1) >= 2
  order = jnp.argsort(~shared, stable=True)                 # shared rows first
  padded = arrays.round_up(num_rows, block)
  hold_s = pairwise.pad_rows(hold[order], padded)
  weighted_s = pairwise.pad_rows(weighted[order], padded)
  num_blocks = arrays.ceil_div(jnp.sum(shared), block)

  def column_block(j, out):
    hold_j = jax.lax.dynamic_slice_in_dim(hold_s, j * block, block)

    def row_block(i, acc):
      hold_i = jax.lax.dynamic_slice_in_dim(hold_s, i * block, block)
      weighted_i = jax.lax.dynamic_slice_in_dim(weighted_s, i * block, block)
      overcount = jnp.maximum(hold_j @ hold_i.T - 1.0, 0.0)    # [c, r]
      return acc + overcount @ weighted_i

    acc = jax.lax.fori_loop(0, num_blocks, row_block, jnp.zeros((block,) + weighted.shape[1:],
                                                                  weighted.dtype))
    return jax.lax.dynamic_update_slice_in_dim(out, acc, j * block, 0)

  out_s = jax.lax.fori_loop(0, num_blocks, column_block, jnp.zeros_like(weighted_s))
  return jnp.zeros_like(weighted).at[order].set(out_s[:num_rows])


def cosine_anchor_sums(anchors, valid, holders, *, reduction: str = 'sum',
                       block_size: int = DEFAULT_BLOCK):
  """FedCos gradient: for every row c, sum_{r allowed vs c, r != c} g_r anchors_r (`[R, d]`).

  g_r = valid_r (sum) or valid_r / N (mean); zero for invalid c. No R x R matrix (module doc).
  """
  weight = valid.astype(anchors.dtype)
  if reduction == 'mean':
    weight = weight / jnp.maximum(jnp.sum(valid), 1)
  weighted = anchors * weight[:, None]
  total = jnp.sum(weighted, 0)
  if holders.ndim == 1:                                     # one owner each: group sums
    ids = _dense_ids(holders)                              # invalid rows: weight 0
    co_held = jax.ops.segment_sum(weighted, ids, num_segments=anchors.shape[0])[ids]
  else:                                                     # sum_k holders_ck S_k - overcount
    hold = holders.astype(anchors.dtype)
    co_held = hold @ (hold.T @ weighted)
    co_held = co_held - _shared_overcount(weighted, holders,
                                          block=min(block_size, anchors.shape[0]))
    # The self pair (r == c) is never summed; a row held by nobody is not in its own co-held
    # sum, so it is taken out here.
    co_held = co_held + jnp.where((jnp.sum(hold, -1) == 0)[:, None], weighted, 0.0)
  return jnp.where(valid[:, None], total - co_held, 0.0)


def streamed_regularizer(w, valid, holders, *, kind: str = 'softmax', form: str = 'softmax',
                         scale: float = 64.0, margin: float = 0.0, reduction: str = 'sum',
                         self_gradient: bool = True, block_size: int | None = None,
                         mesh=None, axis_name: str = 'clients'):
  """`regularizer.flat_regularizer` (Eq. 5 or FedCos) streamed; same arguments, same gradient.

  Args:
    w: `[R, d]` class embeddings, one row per identity.
    valid: `[R]` bool, False for padding rows.
    holders: `[R, K]` bool clients holding each row, or `[R]` int owner client.
    kind, form, scale, margin, reduction, self_gradient: as in `regularizer.flat_regularizer`.
    block_size: rows (and columns) per tile, default DEFAULT_BLOCK; R need not divide by it.
    mesh: a `jax.sharding.Mesh`; if given, rows are sharded over its axis `axis_name`
      (softmax kind; FedCos has no tiles and is left to jit's partitioner).
    axis_name: the mesh axis for the rows.
  """
  regularizer.check_options(kind=kind, form=form, reduction=reduction)
  num_rows = w.shape[0]
  if kind == 'cosine':
    x = w if form == 'softmax' else arrays.l2_normalize(w)
    sums = cosine_anchor_sums(jax.lax.stop_gradient(x), valid, holders, reduction=reduction,
                              block_size=block_size or DEFAULT_BLOCK)
    return jnp.sum(x * jax.lax.stop_gradient(sums))         # sum_c x_c . sum_r g_r x'_r
  shards = 1 if mesh is None else mesh.shape[axis_name]
  block, padded = pairwise.tiling(num_rows, block_size or DEFAULT_BLOCK, shards)
  valid_p = pairwise.pad_rows(valid, padded)
  per_row = _softmax_streamed(pairwise.pad_rows(w, padded), valid_p,
                              pairwise.pad_rows(holders, padded), form=form, scale=scale,
                              margin=margin, self_gradient=self_gradient, block=block,
                              mesh=mesh, axis_name=axis_name)
  return regularizer.reduce_rows(per_row, valid_p, reduction)
