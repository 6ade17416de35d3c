"""Dynamic loss scaling for float16 training, as pure functions over a small pytree state.

float16's smallest normal number is 6.1e-5, so many gradients of a face model's loss would flush
to zero. The loss is multiplied by a scale S before differentiation and the gradients divided by
S after, so the backward pass runs on values S times larger. When a step's gradients overflow
(any inf or NaN) the step is skipped, parameters and optimizer state unchanged, and S is
halved; after `growth_interval` finite steps in a row S doubles. That is PyTorch's GradScaler
rule (torch/amp/grad_scaler.py, `update` and the `_amp_update_scale_` kernel it calls), with
its defaults:

  INITIAL_SCALE = 2**16, GROWTH_FACTOR = 2, BACKOFF_FACTOR = 0.5, GROWTH_INTERVAL = 2000.

arcface_torch trains with `GradScaler(growth_interval=100)` (recognition/arcface_torch/
train_v2.py, deepinsight/insightface): pass `growth_interval=100` for its setting. One addition:
S never falls below MIN_SCALE = 1 (DeepSpeed's `min_loss_scale` default,
deepspeed/runtime/fp16/loss_scaler.py), so a run whose gradients are non-finite for a reason
scaling cannot fix (a diverged model) keeps a usable scale for the divergence guard to report,
instead of halving towards zero.

The state is `LossScaleState(scale, good_steps)`: float32 and int32 scalars, a pytree that
`io/checkpoint.Checkpointer` saves and restores bit for bit like any other part of a round's
state, so a resumed run continues from the same scale. Powers of two scale and unscale float
values exactly (barring overflow and underflow), so scaling alone changes no finite gradient.

Wiring into a local step (`value_and_grad`, then `apply_if_finite`):

  loss, grads, finite = loss_scale.value_and_grad(loss_fn)(ls_state, params, batch)
  params, opt_state, ls_state = loss_scale.apply_if_finite(
      optimizer, grads, finite, params, opt_state, ls_state)
  metrics.update(loss_scale.metrics(ls_state, finite))
"""

from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax

INITIAL_SCALE = 2.0**16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000
MIN_SCALE = 1.0


@flax.struct.dataclass
class LossScaleState:
  """`scale`: the current loss scale S (float32 scalar); `good_steps`: finite steps since S last
  changed (int32 scalar; PyTorch's `_growth_tracker`)."""
  scale: jax.Array
  good_steps: jax.Array


def init(initial_scale: float = INITIAL_SCALE) -> LossScaleState:
  """The state before the first step."""
  return LossScaleState(scale=jnp.asarray(initial_scale, jnp.float32),
                        good_steps=jnp.zeros((), jnp.int32))


def scale_loss(loss: jax.Array, state: LossScaleState) -> jax.Array:
  """loss * S, in float32 (the loss of a float16 model is cast up first, so S itself cannot
  overflow it)."""
  return loss.astype(jnp.float32) * state.scale


def unscale(grads: Any, state: LossScaleState) -> Any:
  """Every gradient divided by S, in float32 (the master weights' dtype)."""
  return jax.tree.map(lambda g: g.astype(jnp.float32) / state.scale, grads)


def all_finite(tree: Any) -> jax.Array:
  """Whether every element of every leaf is finite (no inf, no NaN): a bool scalar."""
  leaves = [jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]
  return jnp.stack(leaves).all() if leaves else jnp.asarray(True)


def next_state(state: LossScaleState, finite: jax.Array, *,
               growth_interval: int = GROWTH_INTERVAL, growth_factor: float = GROWTH_FACTOR,
               backoff_factor: float = BACKOFF_FACTOR,
               min_scale: float = MIN_SCALE) -> LossScaleState:
  """The state after a step whose gradients were `finite` (PyTorch's update rule): on overflow
  S times `backoff_factor` (not below `min_scale`) and the count restarts; otherwise the count
  grows, and on reaching `growth_interval` S times `growth_factor` (unless that is inf) and
  the count restarts."""
  counted = state.good_steps + 1
  grow = counted >= growth_interval
  grown = state.scale * growth_factor
  # PyTorch keeps S where the grown scale would be inf; the count restarts either way.
  finite_scale = jnp.where(grow & jnp.isfinite(grown), grown, state.scale)
  overflow_scale = jnp.maximum(state.scale * backoff_factor, jnp.float32(min_scale))
  return LossScaleState(
      scale=jnp.where(finite, finite_scale, overflow_scale).astype(jnp.float32),
      good_steps=jnp.where(finite & ~grow, counted, 0).astype(jnp.int32))


def keep_if_finite(finite: jax.Array, new: Any, old: Any) -> Any:
  """`new` where `finite`, else `old`, leaf by leaf: an overflowed step leaves `old` bit for bit."""
  return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)


def value_and_grad(loss_fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
  """`loss_fn(params, *args)` -> `f(state, params, *args)` returning `(value, grads, finite)`:
  value as `jax.value_and_grad(loss_fn, has_aux)` gives it (the loss unscaled), the gradients
  of the loss scaled by S, divided by S, in float32, and whether they are all finite."""

  def scaled(params, state, *args):
    out = loss_fn(params, *args)
    loss, aux = out if has_aux else (out, None)
    return scale_loss(loss, state), (loss, aux)

  def wrapped(state: LossScaleState, params, *args):
    (_, (loss, aux)), grads = jax.value_and_grad(scaled, has_aux=True)(params, state, *args)
    grads = unscale(grads, state)
    value = (loss, aux) if has_aux else loss
    return value, grads, all_finite(grads)

  return wrapped


def apply_if_finite(optimizer: optax.GradientTransformation, grads: Any, finite: jax.Array,
                    params: Any, opt_state: Any, state: LossScaleState,
                    **next_state_kwargs: Any) -> tuple[Any, Any, LossScaleState]:
  """One optimizer step taken only when `finite`: (params, opt_state, the next loss-scale
  state). On overflow params and opt_state come back bit for bit as they were."""
  updates, new_opt_state = optimizer.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  params, opt_state = keep_if_finite(finite, (new_params, new_opt_state), (params, opt_state))
  return params, opt_state, next_state(state, finite, **next_state_kwargs)


def metrics(state: LossScaleState, finite: jax.Array) -> dict[str, jax.Array]:
  """A step's loss-scaling metrics: 'skipped_steps' (1 when the step overflowed and was skipped;
  summed over a client's steps it counts them) and 'loss_scale' (S after the step)."""
  return {'skipped_steps': 1.0 - finite.astype(jnp.float32), 'loss_scale': state.scale}
