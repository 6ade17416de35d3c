"""Compressed client updates: what a client sends is its update minus what it received, encoded.

Two codecs, each an encoder to the payload that crosses (its arrays are what the byte count
reads) and a decoder the server applies:

  'quantize'  unbiased stochastic quantization with a per-tensor scale (QSGD-style with the
              tensor's own range, as FLSim's and TFF's uniform quantizers do): b bits per
              coordinate on the 2^b levels spanning [min, max] of the tensor, each coordinate
              rounded up with probability equal to its distance past the lower level, so the
              decoded value's expectation is the coordinate itself. Payload: the codes packed
              8 / b to a byte, and the tensor's min and step (float32).
  'topk'      top-k sparsification with error feedback (Stich et al. 2018; Karimireddy et al.
              2019): the client adds the residual it kept from earlier rounds, sends the k
              largest-magnitude coordinates of each tensor (k = ceil(fraction · size)) as float32
              values and int32 indices, and keeps what it did not send as its new residual.

Both work tensor by tensor on the float leaves of the difference; integer leaves are sent as
they are. Quantization draws its rounding from the client's own key.

BatchNorm's running statistics (any leaf under a 'batch_stats' key) are not coded either: the
client sends its own statistics, float32 as they are, and keeps no residual for them. They are
not a gradient. The server sets them to the weighted mean of the clients' statistics, and a
codec's error would move that mean. Top-k with error feedback once drove the running variance
below zero (docs/blocks.md, Table 1): a client's held-back fall in variance was added again
after other clients' rounds had already lowered it. Sent as they are, the statistics average
exactly as in an uncompressed round, and their bytes count at float32 size in the ledger.
`is_coded` is the rule; `encode`, `decode`, `residual_like` and `core/blocks.py` share it.
"""

import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

CODECS = ('none', 'quantize', 'topk')
BITS = (1, 2, 4, 8)


class Spec(NamedTuple):
  """`compression` config: codec, bits (quantize), fraction (topk)."""
  codec: str = 'none'
  bits: int = 8
  fraction: float = 0.01


# The flax collection of BatchNorm's running mean and variance.
STATISTICS = 'batch_stats'


def is_float(x) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def is_statistic(path) -> bool:
  """Whether a key path (of `jax.tree_util`) lies under BatchNorm's running statistics."""
  return any(getattr(p, 'key', None) == STATISTICS for p in path)


def is_coded(path, x) -> bool:
  """Whether a codec acts on the leaf `x` at `path`: float leaves outside the running
  statistics. Every other leaf crosses as it is, and the client sends its value, not a
  difference (see the module docstring)."""
  return is_float(x) and not is_statistic(path)


def topk_count(size: int, fraction: float) -> int:
  """k of a tensor of `size` coordinates: ceil(fraction · size), at least 1."""
  return max(1, min(size, math.ceil(fraction * size)))


# -- quantization -------------------------------------------------------------------------------

def _pack(codes: jax.Array, bits: int) -> jax.Array:
  """uint8 codes < 2^bits, 8 / bits of them to a byte (the last byte zero-padded)."""
  per_byte = 8 // bits
  flat = codes.reshape(-1)
  flat = jnp.pad(flat, (0, -flat.size % per_byte)).reshape(-1, per_byte).astype(jnp.uint32)
  shifts = jnp.arange(per_byte, dtype=jnp.uint32) * bits
  return jnp.sum(flat << shifts, axis=1).astype(jnp.uint8)


def _unpack(packed: jax.Array, bits: int, size: int) -> jax.Array:
  per_byte = 8 // bits
  shifts = jnp.arange(per_byte, dtype=jnp.uint32) * bits
  codes = (packed.astype(jnp.uint32)[:, None] >> shifts) & ((1 << bits) - 1)
  return codes.reshape(-1)[:size]


def quantize(x: jax.Array, bits: int, rng: jax.Array) -> dict:
  """x's payload: {'codes': uint8 [ceil(size·bits/8)], 'low': f32, 'step': f32}."""
  levels = (1 << bits) - 1
  flat = x.reshape(-1).astype(jnp.float32)
  low, high = jnp.min(flat), jnp.max(flat)
  step = (high - low) / levels
  position = jnp.where(step > 0, (flat - low) / jnp.where(step > 0, step, 1.0), 0.0)
  lower = jnp.floor(position)
  up = jax.random.uniform(rng, flat.shape) < (position - lower)   # P(up) = distance past lower
  codes = jnp.clip(lower + up, 0, levels).astype(jnp.uint8)
  return {'codes': _pack(codes, bits), 'low': low, 'step': step}


def dequantize(payload: dict, bits: int, shape: tuple, dtype) -> jax.Array:
  size = math.prod(shape)
  codes = _unpack(payload['codes'], bits, size).astype(jnp.float32)
  return (payload['low'] + codes * payload['step']).reshape(shape).astype(dtype)


# -- top-k --------------------------------------------------------------------------------------

def topk(x: jax.Array, fraction: float) -> dict:
  """x's k largest-magnitude coordinates: {'values': f32 [k], 'indices': int32 [k]}."""
  flat = x.reshape(-1).astype(jnp.float32)
  _, indices = jax.lax.top_k(jnp.abs(flat), topk_count(flat.size, fraction))
  return {'values': flat[indices], 'indices': indices.astype(jnp.int32)}


def untopk(payload: dict, shape: tuple, dtype) -> jax.Array:
  dense = jnp.zeros(math.prod(shape), jnp.float32).at[payload['indices']].set(payload['values'])
  return dense.reshape(shape).astype(dtype)


# -- one update ---------------------------------------------------------------------------------

def encode(spec: Spec, delta, residual, rng: jax.Array) -> tuple[Any, Any]:
  """(payload, new residual) of a client's difference `delta` (a pytree). `residual` (top-k's
  error feedback, shaped like the coded leaves of `delta`, `residual_like`; None otherwise) is
  added first and what is not sent becomes the new one. Leaves that are not coded (`is_coded`)
  pass into the payload as they are."""
  leaves, tree = jax.tree_util.tree_flatten_with_path(delta)
  keys = jax.random.split(rng, max(1, len(leaves)))
  residuals = jax.tree.leaves(residual) if residual is not None else [None] * len(leaves)
  payload, kept, r = [], [], 0
  for i, (path, x) in enumerate(leaves):
    if not is_coded(path, x):
      payload.append(x)
      continue
    if spec.codec == 'quantize':
      payload.append(quantize(x, spec.bits, keys[i]))
      continue
    v = x.astype(jnp.float32) + residuals[r]
    r += 1
    sent = topk(v, spec.fraction)
    payload.append(sent)
    kept.append(v - untopk(sent, v.shape, jnp.float32))
  new_residual = None if residual is None else jax.tree.unflatten(
      jax.tree.structure(residual), kept)
  return jax.tree.unflatten(tree, payload), new_residual


def decode(spec: Spec, payload, like):
  """The difference the server reconstructs from `payload`, shaped and typed like `like`; a
  leaf that is not coded is the payload's own (`is_coded`)."""
  def one(path, x, p):
    if not is_coded(path, x):
      return p
    if spec.codec == 'quantize':
      return dequantize(p, spec.bits, x.shape, x.dtype)
    return untopk(p, x.shape, x.dtype)
  # payload: a dict where `like` has a coded leaf
  return jax.tree_util.tree_map_with_path(one, like, payload)


def residual_like(delta) -> dict:
  """Zero error-feedback residuals for the coded leaves of `delta` (top-k), in leaf order."""
  coded = [x for path, x in jax.tree_util.tree_flatten_with_path(delta)[0] if is_coded(path, x)]
  return {f'{i:04d}': jnp.zeros(x.shape, jnp.float32) for i, x in enumerate(coded)}
