"""DP-SGD with a unit larger than one example (Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar,
Zhang, "Deep Learning with Differential Privacy", CCS 2016, Algorithm 1), and its accountant.

The unit is a *group* of examples: a subject and all of its frames in a face anti-spoofing data
center (algorithms/pad_dp_sgd.py), or one frame. One step of Algorithm 1, group by group:

  Take a random sample   each group is kept with probability q, independently of the others
                         and of every other step (Poisson sampling: Abadi et al. §3.1, "lots";
                         the mask is `poisson_mask`).
  Compute gradient       g_s = ∇θ L(θ, x_s) for each group s, its loss computed on its own
                         examples only (`group_grads`: jax.vmap over the groups), so that g_s is a
                         function of group s's data alone.
  Clip gradient          ḡ_s = g_s / max(1, ‖g_s‖₂ / C)  (`clip_each`; the norm over every
                         parameter at once).
  Add noise              g̃ = (Σ_s kept_s ḡ_s + N(0, σ² Δ² I)) / L  (`noised_mean`), Δ the L2
                         sensitivity of the sum to one unit (C when the unit is the clipped group)
                         and L the *expected* number of units kept, q·n with n the number of
                         units the sampler offers (a public constant from the config, never the
                         number actually kept, which would depend on the data).
  Descend                θ ← the optimizer's step on g̃ (post-processing: Adam as well as SGD).

Neighbouring relation: add or remove one unit (with all of its examples). Under it the sum moves
by at most Δ, so the step is the Poisson-subsampled Gaussian mechanism of noise multiplier σ, and
T steps compose as dp-accounting's SelfComposedDpEvent(PoissonSampledDpEvent(q,
GaussianDpEvent(σ)), T) (`dp_event`). `epsilon` reads it with the RDP accountant (Mironov,
Talwar and Zhang 2019's Poisson-subsampled Gaussian), `epsilon_pld` with the PLD accountant
beside it; both with NeighboringRelation.ADD_OR_REMOVE_ONE. `noise_for_epsilon` solves σ for a
target ε, and refuses one that no σ up to `MAX_NOISE_MULTIPLIER` meets.
"""

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from fedjax_face.core import checks

PyTree = Any

# The largest noise multiplier `noise_for_epsilon` will plan: beyond it the noise on the mean
# gradient (σC / qn) is a hundred times the clipped gradient of a whole lot, and training learns
# nothing, so a target that needs more is refused as unmeetable rather than run.
MAX_NOISE_MULTIPLIER = 100.0
# The PLD accountant's grid (as core/privacy.py's PLD_DISCRETIZATION): pessimistic, an upper bound.
PLD_DISCRETIZATION = 1e-3
NEIGHBOURS = 'add or remove one unit with all of its examples'


def group_indices(group_ids: jax.Array, num_groups: int) -> jax.Array:
  """`[num_groups, size]` positions of a batch's examples by group: row s lists the examples of
  group s (`group_ids` `[B]` in 0..num_groups-1, each id exactly B / num_groups times, as the
  subject draw lays them out). A stable sort, so the examples keep their batch order."""
  size = group_ids.shape[0] // num_groups
  return jnp.argsort(group_ids, stable=True).reshape(num_groups, size)


def group_grads(loss_fn: Callable, params: PyTree, batch: dict, groups: jax.Array,
                chunk: int = 0):
  """(per-group gradients, per-group aux): `loss_fn(params, examples) -> (loss, aux)` evaluated
  on each row of `groups` (`group_indices`) as its own batch, and differentiated there (Alg. 1,
  "compute gradient", one group at a time under jax.vmap). Every leaf gains a leading
  `[num_groups]` axis. `chunk` > 0 vmaps that many groups at a time inside a `lax.map` (the same
  values): XLA CPU compiles a vmap of a conv net's gradient over every group very slowly."""
  def one(rows):
    examples = jax.tree.map(lambda x: x[rows], batch)
    return jax.grad(loss_fn, has_aux=True)(params, examples)
  if chunk:
    return jax.lax.map(one, groups, batch_size=chunk)
  return jax.vmap(one)(groups)


def global_norms(grads: PyTree) -> jax.Array:
  """`[G]`: each group's gradient's L2 norm over every leaf together."""
  squares = [jnp.sum(jnp.square(g.reshape(g.shape[0], -1)), axis=1) for g in jax.tree.leaves(grads)]
  return jnp.sqrt(sum(squares))


def clip_each(grads: PyTree, clip_norm: float) -> tuple[PyTree, jax.Array]:
  """(each group's gradient scaled to L2 norm at most C, the norms before): Alg. 1's
  ḡ = g / max(1, ‖g‖₂ / C)."""
  norms = global_norms(grads)
  scale = 1.0 / jnp.maximum(1.0, norms / clip_norm)
  return jax.tree.map(lambda g: g * scale.reshape((-1,) + (1,) * (g.ndim - 1)), grads), norms


def poisson_mask(rng: jax.Array, sampling_rate: float, num_groups: int) -> jax.Array:
  """bool `[num_groups]`: each group kept with probability q, independently (Alg. 1, "take a
  random sample", as Poisson sampling)."""
  return jax.random.bernoulli(rng, sampling_rate, (num_groups,))


def masked_sum(grads: PyTree, kept: jax.Array) -> PyTree:
  """Σ_s kept_s g_s over the leading axis."""
  w = kept.astype(jnp.float32)
  return jax.tree.map(lambda g: jnp.tensordot(w, g, axes=1), grads)


def noised_mean(total: PyTree, noise_std: float, denominator: float, rng: jax.Array) -> PyTree:
  """Alg. 1's g̃ = (Σ ḡ + N(0, noise_std² I)) / L, one independent draw per coordinate."""
  leaves, treedef = jax.tree.flatten(total)
  keys = jax.random.split(rng, len(leaves))
  noised = [(x + noise_std * jax.random.normal(k, x.shape, x.dtype)) / denominator
            for x, k in zip(leaves, keys)]
  return jax.tree.unflatten(treedef, noised)


def dp_event(sampling_rate: float, noise_multiplier: float, steps: int):
  """The dp-accounting event of `steps` DP-SGD steps: each a Gaussian of noise multiplier σ
  (std over the sensitivity) on a Poisson sample of rate q."""
  import dp_accounting  # pylint: disable=g-import-not-at-top  (only runs with DP-SGD import it)
  step = dp_accounting.GaussianDpEvent(noise_multiplier)
  if sampling_rate < 1.0:
    step = dp_accounting.PoissonSampledDpEvent(sampling_rate, step)
  return dp_accounting.SelfComposedDpEvent(step, steps)


def epsilon(sampling_rate: float, noise_multiplier: float, steps: int, delta: float) -> float:
  """ε at `delta` after `steps` steps (RDP accountant, add-or-remove-one); inf without noise, 0
  for no steps."""
  if steps <= 0:
    return 0.0
  if noise_multiplier <= 0:
    return float('inf')
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import rdp  # pylint: disable=g-import-not-at-top
  accountant = rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
  accountant.compose(dp_event(sampling_rate, noise_multiplier, steps))
  return float(accountant.get_epsilon(delta))


def epsilon_pld(sampling_rate: float, noise_multiplier: float, steps: int,
                delta: float) -> float:
  """ε at `delta` of the same events from dp-accounting's PLD accountant (add-or-remove-one,
  pessimistic, `PLD_DISCRETIZATION`), which has Poisson sampling; inf without noise."""
  if steps <= 0:
    return 0.0
  if noise_multiplier <= 0:
    return float('inf')
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import pld  # pylint: disable=g-import-not-at-top
  accountant = pld.PLDAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
      value_discretization_interval=PLD_DISCRETIZATION)
  accountant.compose(dp_event(sampling_rate, noise_multiplier, steps))
  return float(accountant.get_epsilon(delta))


@functools.lru_cache(maxsize=64)
def noise_for_epsilon(target: float, sampling_rate: float, steps: int, delta: float,
                      field: str = 'target_epsilon') -> float:
  """The smallest σ (to 0.1 %, bisection on `epsilon`, which falls as σ grows) whose `steps`
  steps stay within ε = `target` at `delta`. UsageError, one line naming `field`, when no σ up to
  `MAX_NOISE_MULTIPLIER` meets it."""
  if epsilon(sampling_rate, MAX_NOISE_MULTIPLIER, steps, delta) > target:
    raise checks.UsageError(
        f'config.{field}={target:g} cannot be met: {steps} steps at sampling rate '
        f'{sampling_rate:g} spend epsilon '
        f'{epsilon(sampling_rate, MAX_NOISE_MULTIPLIER, steps, delta):.4g} at delta {delta:g} even '
        f'with noise multiplier {MAX_NOISE_MULTIPLIER:g}; expected a larger epsilon, fewer steps '
        'or a smaller sampling rate.')
  low, high = 0.0, 1.0
  while epsilon(sampling_rate, high, steps, delta) > target:   # bracket: ends by the check above
    low, high = high, min(2 * high, MAX_NOISE_MULTIPLIER)
  while high - low > 1e-3 * high:
    mid = (low + high) / 2
    if epsilon(sampling_rate, mid, steps, delta) > target:
      low = mid
    else:
      high = mid
  return high
