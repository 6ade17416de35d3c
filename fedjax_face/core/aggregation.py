"""Weighted aggregation over the clients axis (FedGC Alg. 1 line 11: theta = sum_k n_k/n theta_k)."""

import jax
import jax.numpy as jnp


def weighted_mean(tree, weights: jax.Array):
  """Weighted mean over the leading (clients) axis of every leaf.

  Args:
    tree: pytree whose leaves are stacked `[m, ...]`.
    weights: `[m]` non-negative weights (n_k for real clients, 0 for padding clients).

  Returns:
    The pytree of `sum_k w_k x_k / sum_k w_k`. Integer leaves (e.g. step counters) are averaged in
    float32 and cast back.
  """
  weights = weights.astype(jnp.float32)
  total = jnp.maximum(weights.sum(), jnp.finfo(jnp.float32).tiny)

  def mean(x):
    w = weights.reshape((-1,) + (1,) * (x.ndim - 1))
    return (jnp.sum(w * x.astype(jnp.float32), axis=0) / total).astype(x.dtype)

  return jax.tree.map(mean, tree)


def gather_clients(tree, client_ids: jax.Array):
  """Rows `client_ids` of every stacked leaf; ids out of range (padding) read the last row."""
  return jax.tree.map(lambda x: jnp.take(x, client_ids, axis=0, mode='clip'), tree)


def scatter_clients(tree, client_ids: jax.Array, rows):
  """Writes `rows` at `client_ids`; rows of out-of-range ids (padding clients) are dropped."""
  return jax.tree.map(lambda x, r: x.at[client_ids].set(r, mode='drop'), tree, rows)
