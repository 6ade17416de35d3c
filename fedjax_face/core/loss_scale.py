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

A step that holds its own loss-scale state (tools/bench/precision.py) calls `value_and_grad`,
then `apply_if_finite`:

  loss, grads, finite = loss_scale.value_and_grad(loss_fn)(ls_state, params, batch)
  params, opt_state, ls_state = loss_scale.apply_if_finite(
      optimizer, grads, finite, params, opt_state, ls_state)

The methods' local steps hold it in the optimizer's state instead (`scaled_optimizer`, below).

Where the scale lives across rounds: it is each client's private state, as its class rows are.
A client's scale says how large its own gradients run; PyTorch keeps a GradScaler for the life of
a training loop and saves its `state_dict` beside the optimizer's. Here it rides in the
optimizer's state (`ScaledOptState`) during a round and, where the optimizer starts afresh each
round (`federated.client_optimizer_state='reset'`, the default), the client keeps it in
`RoundState.clients['loss_scale']` between rounds and starts the next round's optimizer from it
(`with_scale`). Under 'keep' (and FedGPAD's kept Adam state) it stays inside the kept optimizer
state; in centralized training it is the server's optimizer state. Either way it is checkpointed
with the round state, so a resumed run continues bit for bit, and it never crosses: a client
never sampled starts at INITIAL_SCALE. Only the round's training metrics say anything about it
('loss_scale/skipped_steps', 'loss_scale/scale': averaged over the cohort like the loss, outside
any DP accounting like it). The two other readings, and why not:
  * a server-held scale each client sends back would cost one scalar per client (whether it
    overflowed), and under secure aggregation the server could not take a minimum of masked
    values;
  * a fresh scale every round skips each round's first steps until the scale fits: measured in
    float16 runlocal runs, FedFR's clients skipped 5.5 of 12 steps in round 1 and 5.0 of 9.25 in
    round 2, and FedPAD / FedGPAD, which take one local step a round (the authors' code), skipped
    every round's only step, so nothing trained.
Kept by every federated method: FedPE, FedGC, FedFR, FedFV, FedAwS, FedFace, FedUV, FedBN,
FedRep / FedPer, FedGPAD / FedPAD, FedMA, Ditto and APFL (`algorithms.common.initial_loss_scales`
in the round state, `loss_scale_state=` to `common.local_trainer` or
`partial_sharing.train_part`, `common.kept_loss_scale` in what the client keeps). FedRep keeps one
scale for its head and body phases (algorithms/fedrep.py: one GradScaler serves both optimizers).

Wiring into a method's local step, three calls around the optimizer it already has:

  optimizer = loss_scale.scaled_optimizer(optimizer, precision.model_needs_loss_scaling(model))
  (loss, aux), grads = loss_scale.value_and_grad_of(loss_fn, has_aux=True)(opt_state, params, x)
  updates, new_opt_state = optimizer.update(grads, opt_state, params)
  new_params = optax.apply_updates(params, updates)
  new_params, new_aux = loss_scale.undo_if_skipped(new_opt_state, opt_state,
                                                   (new_params, new_aux), (params, aux))

Without loss scaling (float32, bfloat16) `scaled_optimizer` returns the optimizer itself and the
other two are `jax.value_and_grad` and the identity: the traced program is today's, op for op.
An overflowed step is undone whole: parameters, optimizer state and the BatchNorm statistics of
its forward pass (PyTorch's GradScaler skips `optimizer.step()` only, keeping the statistics; a
forward pass that overflowed would leave inf in them here), as `core.local.skip_if_empty` undoes
a padding step. A skipped step's loss still counts in the round's 'train_loss', as PyTorch logs
it: an overflow is ordinarily in the backward pass, and a forward pass that overflows is a
diverged model, which the divergence guard is there to report.
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


@flax.struct.dataclass
class ScaledOptState:
  """An optimizer's state under loss scaling (`scaled_optimizer`): `inner` the optimizer's own,
  `loss_scale` the scale's, `skipped_steps` the overflowed steps this state has seen (int32; a
  round's count is the difference over the round, `round_metrics`)."""
  inner: Any
  loss_scale: LossScaleState
  skipped_steps: jax.Array


def scaled_optimizer(optimizer: optax.GradientTransformation, enabled: bool,
                     initial_scale: float = INITIAL_SCALE,
                     **next_state_kwargs: Any) -> optax.GradientTransformation:
  """`optimizer` with the loss scale in its state (`ScaledOptState`), or `optimizer` itself when
  not `enabled`. Its `update` takes gradients already divided by S (`value_and_grad_of`): where
  any is not finite, the updates are zero, the inner state is kept bit for bit and S backs off;
  otherwise it is `optimizer.update`'s, and S follows `next_state`."""
  if not enabled:
    return optimizer

  def init_fn(params):
    return ScaledOptState(inner=optimizer.init(params), loss_scale=init(initial_scale),
                          skipped_steps=jnp.zeros((), jnp.int32))

  def update_fn(grads, state, params=None):
    finite = all_finite(grads)
    updates, inner = optimizer.update(grads, state.inner, params)
    updates = jax.tree.map(lambda u: jnp.where(finite, u, jnp.zeros_like(u)), updates)
    return updates, ScaledOptState(
        inner=keep_if_finite(finite, inner, state.inner),
        loss_scale=next_state(state.loss_scale, finite, **next_state_kwargs),
        skipped_steps=state.skipped_steps + (~finite).astype(jnp.int32))

  return optax.GradientTransformation(init_fn, update_fn)


def with_scale(opt_state: Any, state: LossScaleState | None) -> Any:
  """`opt_state` (a fresh one, say) carrying the loss scale `state` (a client's kept one); itself
  when `state` is None or `opt_state` is not scaled."""
  if state is None or not is_scaled(opt_state):
    return opt_state
  return opt_state.replace(loss_scale=state)


def client_states(num_clients: int) -> LossScaleState:
  """Every client's loss-scale state before its first round (`init`), stacked on a leading
  clients axis: the private state of a method whose optimizer starts afresh each round."""
  return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_clients,) + x.shape), init())


def is_scaled(opt_state: Any) -> bool:
  """Whether `opt_state` is a `scaled_optimizer`'s (decided when tracing: a Python bool)."""
  return isinstance(opt_state, ScaledOptState)


def value_and_grad_of(loss_fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
  """`f(opt_state, params, *args) -> (value, grads)`: `jax.value_and_grad(loss_fn, has_aux)(params,
  *args)` itself when `opt_state` is not scaled; otherwise `value_and_grad` at the state's S (the
  gradients divided by S, float32; a non-finite one is left for the optimizer to find)."""

  def wrapped(opt_state, params, *args):
    if not is_scaled(opt_state):
      return jax.value_and_grad(loss_fn, has_aux=has_aux)(params, *args)
    value, grads, _ = value_and_grad(loss_fn, has_aux)(opt_state.loss_scale, params, *args)
    return value, grads

  return wrapped


def step_skipped(new_opt_state: Any, old_opt_state: Any) -> jax.Array:
  """Whether the step from `old_opt_state` to `new_opt_state` overflowed (a bool scalar)."""
  return new_opt_state.skipped_steps != old_opt_state.skipped_steps


def undo_if_skipped(new_opt_state: Any, old_opt_state: Any, new: Any, old: Any) -> Any:
  """`old` where the step overflowed, else `new` (the step's parameters, BatchNorm statistics:
  whatever the step moved besides the optimizer state); `new` itself when not scaled."""
  if not is_scaled(new_opt_state):
    return new
  return keep_if_finite(~step_skipped(new_opt_state, old_opt_state), new, old)


def round_metrics(start_opt_state: Any, end_opt_state: Any) -> dict[str, jax.Array]:
  """A client's round under loss scaling: 'loss_scale/skipped_steps' (its overflowed steps since
  `start_opt_state`; None: since a fresh state) and 'loss_scale/scale' (S at the end); {} when
  not scaled."""
  if not is_scaled(end_opt_state):
    return {}
  skipped = end_opt_state.skipped_steps
  if start_opt_state is not None:
    skipped = skipped - start_opt_state.skipped_steps
  return {'loss_scale/skipped_steps': skipped.astype(jnp.float32),
          'loss_scale/scale': end_opt_state.loss_scale.scale}
