"""A client's local steps: `lax.scan` or unrolled, with masked (no-op) steps.

'scan' is a small program (compile time independent of the number of steps); 'unroll' is
straight-line code, which XLA can fuse across steps. XLA CPU runs XLA's own conv kernel gradient
far slower inside a while loop (BUILD_NOTES.md, "Known XLA quirks"); backbones built with
`conv_gradient='canonical'` (`models/conv.py`) do not have that problem, and
`core.policy.resolve_engine` picks the mode.
"""

from typing import Any, Callable

import jax
import jax.numpy as jnp

STEP_MODES = ('scan', 'unroll')


def run_steps(step_fn: Callable[[Any, Any], tuple[Any, Any]], carry, xs, *, mode: str):
  """Applies `step_fn(carry, x) -> (carry, y)` over the leading axis of `xs`.

  Returns `(carry, ys)` with `ys` stacked, like `lax.scan`, whichever the mode.
  """
  if mode == 'scan':
    return jax.lax.scan(step_fn, carry, xs)
  if mode != 'unroll':
    raise ValueError(f'local step mode {mode!r} is not one of {STEP_MODES}')
  num_steps = jax.tree.leaves(xs)[0].shape[0]
  ys = []
  for i in range(num_steps):
    carry, y = step_fn(carry, jax.tree.map(lambda x: x[i], xs))
    ys.append(y)
  return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


def skip_if_empty(step_fn):
  """Wraps a step so that a batch without valid samples leaves the carry unchanged.

  Padding steps (and every step of a padding client) must not move parameters through momentum or
  weight decay either, so the whole carry is kept, not just the gradient zeroed.
  """

  def masked_step(carry, batch):
    new_carry, y = step_fn(carry, batch)
    active = jnp.any(batch['mask'])
    keep = lambda new, old: jnp.where(active, new, old)
    return jax.tree.map(keep, new_carry, carry), y

  return masked_step
