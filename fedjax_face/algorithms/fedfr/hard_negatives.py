"""FedFR's "Hard Negative Sampling" and the epoch it feeds (Liu et al., AAAI 2022, Sec. 3.2).

A client keeps the public images whose cosine to any of its local images, under the global
model, exceeds t_HN (`hard_negative_mask`); at most `fedfr.max_public` of them per epoch
(`kept_public`); and runs E epochs over its local and kept public images in a random order
(`epoch_order`). Their number varies by client and round, shapes do not: the valid samples come
first and the steps past them hold none (the algorithm skips those steps).
"""

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays


def hard_negative_mask(local_features: jax.Array, local_mask: jax.Array,
                       public_features: jax.Array, threshold: float) -> jax.Array:
  """bool `[P]`: public images whose cosine to any valid local image exceeds `threshold`
  (FedFR "Hard Negative Sampling"; features of the global model). Inputs need not be unit."""
  cos = arrays.l2_normalize(public_features) @ arrays.l2_normalize(local_features).T   # [P, L]
  cos = jnp.where(local_mask[None, :], cos, -jnp.inf)
  return jnp.max(cos, axis=1) > threshold


def kept_public(rng: jax.Array, hard: jax.Array, capacity: int) -> tuple[jax.Array, jax.Array]:
  """(`[capacity]` indices of public images, `[capacity]` valid): the hard ones in a random order
  (a random subset of them when there are more than `capacity`)."""
  keys = jnp.where(hard, jax.random.uniform(rng, hard.shape), 2.0)
  chosen = jnp.argsort(keys)[:capacity]
  return chosen, hard[chosen]


def epoch_order(rng: jax.Array, local_mask: jax.Array, public_valid: jax.Array, copies: int,
                batch_size: int) -> tuple[jax.Array, jax.Array]:
  """(`[T, B]` positions, `[T, B]` valid) of one round's samples in a random order, the valid
  ones first: positions < L are the round's local samples (`local_mask` `[L]`), L + j the j-th
  kept public slot of one of `copies` passes (`public_valid` `[P]`). T = ceil((L + copies·P)/B)."""
  valid = jnp.concatenate([local_mask, jnp.tile(public_valid, copies)])
  keys = jnp.where(valid, jax.random.uniform(rng, valid.shape), 2.0)
  order = jnp.argsort(keys)
  total = arrays.round_up(valid.shape[0], batch_size)
  order = jnp.pad(order, (0, total - valid.shape[0]))
  valid = jnp.pad(valid[order[:valid.shape[0]]], (0, total - valid.shape[0]))
  return order.reshape(-1, batch_size), valid.reshape(-1, batch_size)
