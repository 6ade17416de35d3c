"""Weighted aggregation over the clients axis (FedGC Alg. 1 line 11: theta = sum_k n_k/n theta_k)."""

import jax
import jax.numpy as jnp


# Cohorts up to this size are summed as a chain of adds (below); larger ones as one contraction,
# whose program does not grow with the cohort.
CHAIN_MAX_CLIENTS = 64


def weighted_mean(tree, weights: jax.Array):
  """Weighted mean over the leading (clients) axis of every leaf.

  Args:
    tree: pytree whose leaves are stacked `[m, ...]`.
    weights: `[m]` non-negative weights (n_k for real clients, 0 for padding clients).

  Returns:
    The pytree of `sum_k w_k x_k / sum_k w_k`. Integer leaves (e.g. step counters) are averaged in
    float32 and cast back.

  Not `sum(w * x, axis=0)`: XLA CPU reduces over a leading axis many times slower than either form
  here (BUILD_NOTES.md, "Client step on XLA CPU"). Up to `CHAIN_MAX_CLIENTS` the sum is
  w_0 x_0 + w_1 x_1 + ... in client order, one fused element-wise pass that reads each client's
  leaf where it lies: when the clients' results are stacked in the same program (the loop
  backend), the stacked copy is never made. Beyond, a contraction at HIGHEST precision (float32
  on every platform; a TPU's default would round the operands to bfloat16).
  """
  weights = weights.astype(jnp.float32)
  total = jnp.maximum(weights.sum(), jnp.finfo(jnp.float32).tiny)

  def weighted_sum(x):
    x = x.astype(jnp.float32)
    if x.shape[0] > CHAIN_MAX_CLIENTS:
      return jnp.tensordot(weights, x, axes=1, precision=jax.lax.Precision.HIGHEST)
    out = weights[0] * x[0]
    for k in range(1, x.shape[0]):
      out = out + weights[k] * x[k]
    return out

  return jax.tree.map(lambda x: (weighted_sum(x) / total).astype(x.dtype), tree)


def gather_clients(tree, client_ids: jax.Array):
  """Rows `client_ids` of every stacked leaf; ids out of range (padding) read the last row."""
  return jax.tree.map(lambda x: jnp.take(x, client_ids, axis=0, mode='clip'), tree)


def scatter_clients(tree, client_ids: jax.Array, rows):
  """Writes `rows` at `client_ids`; rows of out-of-range ids (padding clients) are dropped."""
  return jax.tree.map(lambda x, r: x.at[client_ids].set(r, mode='drop'), tree, rows)
