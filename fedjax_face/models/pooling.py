"""Non-overlapping max pooling whose gradient XLA CPU runs as plain element-wise code.

`nn.max_pool` is `lax.reduce_window`, whose gradient is a select-and-scatter. XLA CPU runs that
as a slow loop: in a client's update of a small conv net it took about as long as every
convolution's gradient together (BUILD_NOTES.md, "Client step on XLA CPU", has the profile).

For windows that do not overlap (window = stride, VALID padding: the 2x2 pools of every model
here) the same operation is a reshape and a max over the window axis, and its gradient is the
output gradient written at the window's first maximum (row-major order) and zero elsewhere.
That is exactly what the select-and-scatter computes (its selection keeps the earlier element on
ties), so results are bit-identical to `nn.max_pool`'s; `tests/models/test_pooling.py` checks
values and gradients, ties included. Rows and columns past the last whole window are dropped, as
VALID padding does, and get zero gradient.
"""

import functools

import jax
import jax.numpy as jnp


def _phases(x: jax.Array, size: int) -> list[jax.Array]:
  """The window's elements as `size*size` strided views `[B, H//size, W//size, C]`, in row-major
  order of their place in the window (rows and columns past the last whole window dropped)."""
  ho, wo = x.shape[1] // size, x.shape[2] // size
  return [x[:, i:ho * size:size, j:wo * size:size] for i in range(size) for j in range(size)]


def max_pool(x: jax.Array, size: int = 2) -> jax.Array:
  """Max over non-overlapping `size` x `size` windows of NHWC `x` (stride `size`, VALID)."""
  if isinstance(x, jax.core.Tracer):
    return _max_pool(x, size)
  # Called eagerly (a model's `init`): one compiled program, not one per slice and maximum. A
  # max is exact, so the values are the same either way.
  return _max_pool_compiled(x, size)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _max_pool(x: jax.Array, size: int) -> jax.Array:
  return functools.reduce(jnp.maximum, _phases(x, size))


def _max_pool_fwd(x, size):
  out = _max_pool(x, size)
  return out, (x, out)


def _max_pool_bwd(size, residuals, g):
  x, out = residuals
  zero = jnp.zeros((), g.dtype)
  taken = jnp.zeros(out.shape, bool)
  grads = []
  for phase in _phases(x, size):
    # The first maximum of each window, as select-and-scatter picks it. `where`, not a product:
    # the other positions get +0.0 exactly, as the scatter leaves them.
    chosen = (phase == out) & ~taken
    taken = taken | chosen
    grads.append(jnp.where(chosen, g, zero))
  b, ho, wo, c = g.shape
  # Interleave the phases back: [B, ho, size(i), wo, size(j), C] -> [B, ho*size, wo*size, C].
  rows = [jnp.stack(grads[i * size:(i + 1) * size], axis=3) for i in range(size)]
  dx = jnp.stack(rows, axis=2).reshape(b, ho * size, wo * size, c)
  h, w = x.shape[1:3]
  return (jnp.pad(dx, ((0, 0), (0, h - ho * size), (0, w - wo * size), (0, 0))),)


_max_pool.defvjp(_max_pool_fwd, _max_pool_bwd)
_max_pool_compiled = jax.jit(_max_pool, static_argnums=1)
