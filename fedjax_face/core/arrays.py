"""The small array helpers every layer uses, once each."""

import math

import jax
import jax.numpy as jnp
import numpy as np

# Floor of the squared norm for JAX arrays: zero rows map to zero with a finite gradient.
_SQ_NORM_FLOOR = 1e-12


def ceil_div(a: int, b: int) -> int:
  """ceil(a / b) for integers, exactly (no float rounding)."""
  return -(-a // b)


def round_up(n: int, multiple: int) -> int:
  """The smallest multiple of `multiple` that is >= n."""
  return ceil_div(n, multiple) * multiple


def tree_bytes(tree) -> int:
  """Bytes of all leaves of a pytree (arrays or ShapeDtypeStructs: shapes and dtypes only)."""
  return int(sum(np.prod(x.shape, dtype=np.int64) * np.dtype(x.dtype).itemsize
                 for x in jax.tree.leaves(tree)))


def shape_structs(tree):
  """The ShapeDtypeStructs of a pytree's leaves (arrays, tracers or numpy arrays)."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), x.dtype), tree)


def l2_normalize(x, axis: int = -1):
  """`x / ||x||` along `axis`; all-zero vectors stay zero.

  NumPy arrays (evaluation, in their own dtype, often float64): `x / max(||x||, tiny)`, exact
  to the dtype's precision for every non-zero row.
  Anything else, JAX arrays and tracers (traced code, gradients): `x · rsqrt(max(||x||², 1e-12))`,
  with a finite gradient at 0.
  """
  if isinstance(x, np.ndarray):
    norms = np.linalg.norm(x, axis=axis, keepdims=True)
    return x / np.maximum(norms, np.finfo(x.dtype).tiny)
  sq_norm = jnp.sum(x * x, axis=axis, keepdims=True)
  return x * jax.lax.rsqrt(jnp.maximum(sq_norm, _SQ_NORM_FLOOR))


def drawn_flat(draw, key: jax.Array, shape, **kwargs) -> jax.Array:
  """`draw(key, shape=shape, **kwargs)` (a `jax.random` sampler) drawn as a vector and reshaped.

  The values are the same to the last bit: JAX numbers the random bits of an array in row-major
  order, in both threefry modes (tests/core/test_arrays.py). XLA's CPU compiler takes several
  times longer over a draw of a multi-dimensional shape (~1-2 s for a 3x3 conv kernel's), which
  every eager `init` and every program with per-leaf noise paid (BUILD_NOTES, "Known XLA quirks").
  """
  shape = tuple(shape)
  return draw(key, shape=(math.prod(shape),), **kwargs).reshape(shape)
