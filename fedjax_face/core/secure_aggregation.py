"""Simulated secure aggregation: pairwise additive masks (Bonawitz et al., CCS 2017).

What is simulated. Each client turns its share of the mean, s_k·(u_k − x_k) (s_k = its weight
over the cohort's total; u_k what it sends, x_k what it received), into fixed point in the ring
Z_{2^32}: round(v · 2^f) with f = `fraction_bits`, as a two's-complement int32 viewed as uint32.
It then adds, for each cohort position q it shares a pair secret with, +PRG(pair) if it is the
pair's first member and −PRG(pair) if the second, all modulo 2^32. The server sums the masked
vectors modulo 2^32: the masks cancel exactly (every pair's draw once with each sign), so the sum
is the sum of the clients' fixed-point values bit for bit, which the server decodes to the mean
difference. A single masked vector is uniformly distributed in the ring whatever the client sent.

Precision. A value is kept to 2^-f (f = 24: 6.0e-8) in the range [−2^(31−f), 2^(31−f)) = ±128;
the decoded mean differs from the float mean by at most m · 2^-(f+1) per coordinate (m clients'
rounding), 1.1e-6 for 36 clients. Intermediate sums may wrap; only the final mean must be in
range, and every client's own value must be (a client out of range is clamped and counted in the
`secagg/clamped` metric).

Pairs. `neighbors` 0 masks every pair of cohort positions (Bonawitz et al.): each client draws
2·⌊m/2⌋ vectors. k > 0 masks each position with the k after it and the k before it on a ring of
the cohort's positions (a 2k-regular graph, as SecAgg+ of Bell et al. 2020 does with random
graphs): 2k draws per client, secure against a server that does not collude with a client's
neighbours.

What is not built: key agreement (the pair secrets here derive from a key of the round that the
simulated server never reads; a deployment agrees them by Diffie–Hellman), and dropout recovery.
A client that drops after masking leaves its pairs' masks in the sum, so the sum is garbage; the
protocol's recovery has the survivors reveal Shamir shares of the dropped client's pair secrets
(t-of-n secret sharing of each secret at setup, a fourth round of messages), which would cost each
client O(m) shares. Padding rows of the cohort take part in the masking and send zeros.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# Folded into the round's key: the pair secrets' stream (clients fold their ids, the server its
# own stream, DP's noise another).
SECRET_STREAM = 0x5ECA66


class Spec(NamedTuple):
  """`secure_aggregation` config: fixed-point fraction bits and mask neighbours (0 = all)."""
  fraction_bits: int = 24
  neighbors: int = 0


def offsets(cohort: int, neighbors: int) -> tuple[int, ...]:
  """Pair offsets j: position p masks with p + j and p − j (mod cohort). Every pair at least
  once for neighbors 0 (1..⌊m/2⌋), else 1..k."""
  widest = cohort // 2
  return tuple(range(1, (widest if neighbors == 0 else min(neighbors, widest)) + 1))


def encode(values: jax.Array, fraction_bits: int) -> tuple[jax.Array, jax.Array]:
  """(values in fixed point as uint32 ring elements, the number of coordinates clamped)."""
  scaled = jnp.round(values.astype(jnp.float32) * (2.0 ** fraction_bits))
  limit = 2.0 ** 31
  clamped = jnp.sum((scaled < -limit) | (scaled > limit - 128)).astype(jnp.float32)
  # limit − 128: the largest float32 below 2^31, so the cast cannot overflow.
  fixed = jnp.clip(scaled, -limit, limit - 128).astype(jnp.int32)
  return jax.lax.bitcast_convert_type(fixed, jnp.uint32), clamped


def decode(ring: jax.Array, fraction_bits: int) -> jax.Array:
  """A ring element (uint32) read as two's complement, / 2^f, in float32."""
  return jax.lax.bitcast_convert_type(ring, jnp.int32).astype(jnp.float32) / (2.0 ** fraction_bits)


def pair_mask(secret: jax.Array, position: jax.Array, cohort: int, neighbors: int,
              size: int) -> jax.Array:
  """Position p's mask of `size` ring elements: Σ_j PRG(p, j) − PRG(p − j, j) mod 2^32, where
  PRG(p, j) is the draw of the pair (p, p + j) (known to both of its members)."""
  def draw(first, j):
    key = jax.random.fold_in(jax.random.fold_in(secret, first), j)
    return jax.random.bits(key, (size,), jnp.uint32)
  mask = jnp.zeros((size,), jnp.uint32)
  for j in offsets(cohort, neighbors):
    mask = mask + draw(position, j) - draw((position - j) % cohort, j)
  return mask


def mask_update(spec: Spec, delta, share: jax.Array, secret: jax.Array, position: jax.Array,
                cohort: int) -> tuple[dict, jax.Array]:
  """One client's masked ring vectors of share · delta (a pytree of float leaves), and how many
  coordinates were clamped to the ring's range. The leaves are masked as one vector: one draw
  per pair, not one per pair and tensor (each draw is a program XLA compiles)."""
  leaves, tree = jax.tree.flatten(delta)
  flat = jnp.concatenate([share * x.astype(jnp.float32).reshape(-1) for x in leaves])
  fixed, clamped = encode(flat, spec.fraction_bits)
  masked = fixed + pair_mask(secret, position, cohort, spec.neighbors, flat.size)
  ends = np.cumsum([x.size for x in leaves])[:-1]
  parts = jnp.split(masked, ends)
  return jax.tree.unflatten(tree, [p.reshape(x.shape) for p, x in zip(parts, leaves)]), clamped


def unmasked_sum(spec: Spec, masked) -> dict:
  """The server's sum over the cohort axis of masked ring vectors, decoded (the masks cancel)."""
  return jax.tree.map(lambda x: decode(jnp.sum(x, axis=0, dtype=jnp.uint32), spec.fraction_bits),
                      masked)
