"""Client-level differential privacy (DP-FedAvg style) for every federated method, and its ledger.

What is protected. The unit is a client: all of its data. Two runs are neighbours when one
client's data is replaced by anything else (the client count K is public). Each round the engine
draws a cohort of exactly m = round(C·K) clients uniformly without replacement, independently of
earlier rounds (`data.federated.select_clients`). Every client clips its update: the difference
between what it sends (`ClientResult.update`) and what it received (`Algorithm.update_origin`),
over everything it sends at once (the backbone, and class embeddings when the method sends them),
to L2 norm `dp.clip_norm` = S (`clip_update`). The server adds Gaussian noise of standard
deviation σ·S (σ = `dp.noise_multiplier`) to the cohort's sum of clipped differences, drawn from
the round's server key inside the jitted server step, and averages with the fixed denominator m
(`noisy_updates`); weights by client size are replaced by that uniform mean, since n_k / Σn would
make one client's share data-dependent.

The accountant (`epsilon`) is dp-accounting's RDP accountant with the replace-one relation. Under
replace-one the L2 sensitivity of the sum of clipped differences is 2S (one client's S-ball point
swapped for another's), so the Gaussian event it composes has noise multiplier σ/2. Sampling a
fixed-size cohort without replacement amplifies it (`SampledWithoutReplacementDpEvent`, Wang,
Balle and Kasiviswanathan 2019). That holds for `federated.sampling='uniform'` alone: an
'availability' cohort is drawn independently of the data but not as a fixed-size uniform sample,
so ε is composed without amplification (`amplified`; results.json says which), and cohorts chosen
by data size ('weighted', stragglers) are refused with DP (data/participation.py).

Adaptive clipping (`dp.clip_rule='adaptive'`; Andrew et al. 2021, docs/references.md,
adaptive-clipping). The clip C_t of round t lives in the server state (`CLIP_KEY`, in the
'blocks' of core/blocks.py's `adaptive_clip`; C_0 = `dp.clip_norm`). Each client clips to C_t
and sends b_i = 1[‖Δ_i‖ ≤ C_t] beside its update (`COUNT_KEY`); the server adds N(0, σ_b²) to
their sum and steps C_{t+1} = C_t · exp(-η_C (b̃ - γ)) with b̃ the noised sum over m (`next_clip`).
Under replace-one one client moves that count by at most 1, so the count is a Gaussian event of
noise multiplier σ_b (`dp.count_noise_multiplier`), composed with the update sum's in every
round on the same cohort (`dp_event`). `dp.noise_multiplier` σ is then the pair's total z: the
update sum's std is z_Δ·C_t with z_Δ = (z^-2 - (2σ_b)^-2)^-1/2 (`update_noise_multiplier`), so
that the two together are one Gaussian of noise multiplier z, and a resumed or target-ε run
plans with z as it does with a fixed clip.

Adaptive clipping under secure aggregation: the server must see the bits only as a sum and never
without their noise, so each client draws a share of the count's noise as it does of the update
sum's, n_k ~ N(0, σ_b²·s_k) with s_k = 1/m, and masks s_k·(b_k + n_k) in the same ring vector
as its update (`count_share`); the masks cancel, and the server decodes
Σ_k s_k (b_k + n_k) = (Σ b + N(0, σ_b²)) / m, the b̃ it would have drawn itself. The update
sum's shares are N(0, (z_Δ C_t)²·s_k) at the round's clip. The accountant is unchanged: the same
two Gaussian events. The engine has no dropout within a round (the cohort is fixed before it
starts; secure aggregation here has no dropout recovery, and stragglers are refused with DP). In
a deployment with recovery, d clients dropped after drawing would leave a sum carrying only
(m-d)/m of each variance, below what the accountant assumes; its clients would draw variance
σ²/(m-t) each to tolerate t drops (more noise than needed when fewer drop).

A second accountant (`history_epsilon_pld`): dp-accounting's PLD, on the same events, where it
has them. It has no sampling without replacement, so for an amplified cohort results.json says
"n/a" and why; elsewhere (every client every round, or no amplification claimed) its ε is
reported beside RDP's (`epsilon_pld`). Both are replace-one, unit a client.

Under secure aggregation (core/secure_aggregation.py) the noise of the averaged keys is drawn by
the clients, each N(0, (σS)²·s_k) on its clipped difference before masking (s_k = 1/m, its share
of the uniform mean: `noise_share`), so the sum carries the same N(0, (σS)²) and the server never
sees it without; the accountant is unchanged.

The noise keys follow the round keys of `config.seed`, which config.json records, so ε holds only
while the seed is secret (results.json's `noise_seed` says so); `dp.noise_seed='os'` XORs a
secret from the operating system into each of them (`noise_secret`, `engine.noise_key`), at the
price of bit-identical resume.

Class-embedding rows that a client sends for its own identities (FedGC's W_k, FedFV's, FedAwS's
and FedFace's w_i: `Algorithm.client_rows`) are not averaged with anyone's: the server writes them
into its class matrix. `dp.class_rows` says what happens to them:
  'private' (default): clipped together with the backbone, and noised row by row with the same
    σ·S (the sum over the cohort has only that client's term on those coordinates). Their release
    tells who took part in a round, so no amplification by sampling is claimed: ε composes the
    unsampled Gaussian over every round (an upper bound: a client's rows leave it only in the
    rounds it is drawn).
  'unprotected': sent as they are, neither clipped nor noised; ε then covers the averaged parts
    only, and the report says the class rows are outside it, with what the server derives from
    them and sends to other clients (FedGC's regularized W_k, FedFV's equivalent embeddings).
What ε never covers: the training metrics each client reports for the log (its loss, its update's
norm before clipping, whether it was clipped) are averaged without noise; they are for the
researcher's eyes, and a deployment that releases them would have to privatize them too.
What costs no ε: the server's own computations on what it received are post-processing, so the
server-side regularizer that reads every class row (FedGC, FedAwS, FedFace) and FedFV's equivalent
embeddings are free under 'private'; the client's own state (FedPE's W_k, FedUV's codeword,
FedGPAD's private parts) never leaves it; evaluation data is not training data.
"""

import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.core import arrays

PyTree = Any

CLASS_ROWS = ('private', 'unprotected')
CLIP_RULES = ('fixed', 'adaptive')
# Folded into the round's server key so that the noise stream is the server's own (clients fold
# their ids into the round key; methods may use the server key for their own draws).
NOISE_STREAM = 0x44500
# The count's noise (adaptive clipping): a stream of its own beside the update's.
COUNT_STREAM = 0x44501
# Where the adaptive clip C_t lives: a key of the server state's 'blocks' dict (core/blocks.py's
# `adaptive_clip`), so that it is checkpointed with the round it belongs to.
CLIP_KEY = 'dp_clip_norm'
# The key a client's bit b_i = 1[‖Δ_i‖ ≤ C_t] crosses under, beside its update; the engine takes
# it out before the method's server step sees the update.
COUNT_KEY = 'dp_under_clip'


class DpSpec(NamedTuple):
  """What the engine needs: the clip S, the noise standard deviation σ·S, the per-client keys of
  `update`, and whether those are clipped and noised ('private') or passed through; and σ."""
  clip_norm: float
  noise_std: float
  client_rows: tuple[str, ...] = ()
  class_rows: str = 'private'
  noise_multiplier: float = 0.0
  sampling: str = 'uniform'   # config.federated.sampling: only 'uniform' is amplified
  secure: bool = False        # secure aggregation: the averaged keys' noise drawn by the clients
  clip_rule: str = 'fixed'    # 'adaptive': the clip follows a quantile (Andrew et al. 2021)
  target_quantile: float = 0.5       # γ
  clip_learning_rate: float = 0.2    # η_C
  count_noise_multiplier: float = 0.0   # σ_b: std of the noise on the count of clients under
                                        # the clip (its replace-one sensitivity is 1)

  @property
  def adaptive(self) -> bool:
    return self.clip_rule == 'adaptive'

  @property
  def count_noise(self) -> float:
    """σ_b of the round's second Gaussian event (0: there is none, the clip is fixed)."""
    return self.count_noise_multiplier if self.adaptive else 0.0

  @property
  def update_noise_multiplier(self) -> float:
    """z_Δ: the update sum's noise std over the clip (σ for a fixed clip; under 'adaptive' the
    share of σ left once the count has taken its own, `update_noise_multiplier`)."""
    return update_noise_multiplier(self.noise_multiplier, self.count_noise)

  def noise_std_at(self, clip) -> Any:
    """The update sum's noise std at clip `clip` (the round's C_t under 'adaptive')."""
    return self.noise_std if not self.adaptive else self.update_noise_multiplier * clip

  def covered(self, update: dict) -> tuple[dict, dict]:
    """(the keys of `update` clipped and noised, the keys passed as they are)."""
    if self.class_rows == 'private':
      return dict(update), {}
    inside = {k: v for k, v in update.items() if k not in self.client_rows}
    return inside, {k: v for k, v in update.items() if k in self.client_rows}


def spec_from_config(config, client_rows: tuple[str, ...], num_clients: int = 0,
                     cohort_size: int = 0, history: tuple = (), planned: dict | None = None
                     ) -> DpSpec | None:
  """The DpSpec of `config.dp`, or None when it is off. With `dp.target_epsilon` > 0 the noise
  multiplier is the one that makes the run's whole history reach it after `num_rounds`
  (`target_noise`): `history` holds the (rounds, noise multiplier) segments already run (a resumed
  or extended run), `planned` the plan they were run under (`plan_record`)."""
  dp = config.dp
  if not dp.enabled:
    return None
  spec = DpSpec(clip_norm=float(dp.clip_norm), noise_std=0.0, client_rows=tuple(client_rows),
                class_rows=dp.class_rows, sampling=config.federated.sampling,
                secure=bool(config.secure_aggregation.enabled),
                clip_rule=dp.get('clip_rule', 'fixed'),
                target_quantile=float(dp.get('target_quantile', 0.5)),
                clip_learning_rate=float(dp.get('clip_learning_rate', 0.2)),
                count_noise_multiplier=float(dp.get('count_noise_multiplier', 0.0)))
  sigma = float(dp.noise_multiplier)
  if dp.target_epsilon:
    sigma = target_noise(dp.target_epsilon, num_clients, cohort_size, config.num_rounds,
                         dp.target_delta, amplified(spec), history, planned)
  spec = spec._replace(noise_multiplier=sigma)
  # The update's share of sigma (a ValueError naming dp.count_noise_multiplier when the count
  # would take all of it); under 'fixed' it is sigma itself.
  return spec._replace(noise_std=spec.update_noise_multiplier * spec.clip_norm)


def rounds_of(history) -> int:
  """Rounds covered by a noise history [(rounds, noise multiplier), ...]."""
  return sum(int(n) for n, _ in history)


def extended(history, rounds: int, noise_multiplier: float) -> list[list]:
  """`history` followed by `rounds` rounds at `noise_multiplier`, as [[rounds, sigma], ...] (the
  JSON a checkpoint records), a segment at the same sigma as the last one joined to it so that a
  run resumed many times keeps a short record. Empty segments are dropped."""
  out = [[int(n), float(s)] for n, s in history if int(n) > 0]
  if rounds > 0:
    if out and out[-1][1] == float(noise_multiplier):
      out[-1][0] += int(rounds)
    else:
      out.append([int(rounds), float(noise_multiplier)])
  return out


def plan_record(config, noise_multiplier: float) -> dict:
  """What a checkpoint records of the plan its rounds ran under: a resume with the same
  `num_rounds` and `dp.target_epsilon` keeps this noise multiplier (bit for bit the uninterrupted
  run; recalibrating over the remaining rounds would reach the same target only to 0.1 %)."""
  return {'num_rounds': int(config.num_rounds),
          'target_epsilon': float(config.dp.target_epsilon),
          'noise_multiplier': float(noise_multiplier)}


def check_budget(target: float, spent: float, rounds_done: int, delta: float) -> None:
  """ValueError when `target` (dp.target_epsilon) is not above the epsilon the `rounds_done`
  rounds already run have spent: no noise on the rounds left can bring it back."""
  if target and spent >= target:
    raise ValueError(f'config.dp.target_epsilon={target:g} cannot be met: the {rounds_done} '
                     f'rounds already run spent epsilon={spent:.4g} (delta={delta:g}); expected a '
                     'target above it, or a new --workdir.')


def target_noise(target: float, num_clients: int, cohort_size: int, num_rounds: int,
                 delta: float, amplified_: bool = True, history=(), planned: dict | None = None
                 ) -> float:
  """The noise multiplier for rounds `rounds_of(history)`+1..`num_rounds` that makes the whole
  history reach `target`: the planned one when `planned` was made for this `num_rounds` and
  `target`, else solved over the remaining rounds only (the rounds run keep the sigma each used).
  Refuses a target the history has already spent (`check_budget`)."""
  done = rounds_of(history)
  if planned and (planned.get('num_rounds') == num_rounds and
                  planned.get('target_epsilon') == float(target)):
    return float(planned['noise_multiplier'])
  spent = history_epsilon(num_clients, cohort_size, history, delta, amplified_)
  check_budget(target, spent, done, delta)
  if num_rounds <= done:   # nothing left to train: the last sigma, for the report
    return float(history[-1][1])
  return noise_for_epsilon(target, num_clients, cohort_size, num_rounds - done, delta,
                           amplified_, history)


def _inexact(x) -> bool:
  return jnp.issubdtype(jnp.result_type(x), jnp.inexact)


def global_norm(tree) -> jax.Array:
  """L2 norm over every floating-point leaf of a pytree, in float32."""
  squares = [jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)
             if _inexact(x)]
  return jnp.sqrt(sum(squares, jnp.float32(0.0)))


def clip_update(update: PyTree, origin: PyTree, clip_norm: float) -> tuple[PyTree, jax.Array]:
  """(origin + the difference update - origin scaled to L2 norm at most `clip_norm`, the
  difference's norm before clipping). Integer leaves (counts, flags) pass unchanged."""
  delta = jax.tree.map(lambda u, o: u - o if _inexact(u) else u, update, origin)
  norm = global_norm(delta)
  scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norm, 1e-12))
  clipped = jax.tree.map(
      lambda u, o, d: (o + (d * scale).astype(u.dtype)) if _inexact(u) else u,
      update, origin, delta)
  return clipped, norm


def noisy_updates(updates: dict, weights: jax.Array, spec: DpSpec, rng: jax.Array,
                  noise_std=None) -> tuple[dict, jax.Array]:
  """The cohort's clipped updates `[m, ...]` with the server's noise added, and the uniform
  weights (1 per real client, 0 for padding) that the method's own mean must then use.
  `noise_std`: the round's std (z_Δ·C_t under adaptive clipping; None: the spec's σ·S).

  Averaged parts: one draw z ~ N(0, (σS)²) per coordinate is added to the sum, as z/m on each
  real row, so that the method's uniform mean gives (Σ_k u_k + z) / m exactly. Client rows under
  'private': each real row gets its own draw of N(0, (σS)²). Padding rows (weight 0) are left
  alone.
  """
  real = (weights > 0).astype(jnp.float32)
  m = jnp.maximum(jnp.sum(real), 1.0)
  std = spec.noise_std if noise_std is None else noise_std
  covered, passed = spec.covered(updates)
  keys = dict(zip(sorted(covered), jax.random.split(rng, max(len(covered), 1))))
  noisy = {}
  for name, tree in covered.items():
    leaves, treedef = jax.tree.flatten(tree)
    leaf_keys = jax.random.split(keys[name], max(len(leaves), 1))
    out = []
    for leaf, key in zip(leaves, leaf_keys):
      if not _inexact(leaf):
        out.append(leaf)
        continue
      mask = real.reshape((-1,) + (1,) * (leaf.ndim - 1))
      if name in spec.client_rows:      # each client's own rows: a draw per row
        noise = std * arrays.drawn_flat(jax.random.normal, key, leaf.shape, dtype=jnp.float32)
      else:                             # the sum's one draw, shared as z / m by the real rows
        noise = std * arrays.drawn_flat(jax.random.normal, key, leaf.shape[1:],
                                        dtype=jnp.float32)[None] / m
      out.append(leaf + (mask * noise).astype(leaf.dtype))
    noisy[name] = jax.tree.unflatten(treedef, out)
  return {**noisy, **passed}, real


def update_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
  """z_Δ = (z^-2 - (2σ_b)^-2)^-1/2, the update's noise multiplier when the count takes σ_b
  (Andrew et al. 2021; docs/references.md, adaptive-clipping): the update's and the count's
  Gaussians together are the one Gaussian of noise multiplier z = `noise_multiplier`. The 2 is
  the ratio of the two sensitivities: 2C under replace-one for the update sum against 1 for the
  count (the paper's add/remove reading, C against the 1/2 of a bit centred at 1/2, has the same
  ratio, so the same formula). σ_b = 0 (a fixed clip) gives z itself; z = 0 gives 0."""
  if not count_noise or noise_multiplier <= 0:
    return float(noise_multiplier)
  if 2.0 * count_noise <= noise_multiplier:
    raise ValueError(f'config.dp.count_noise_multiplier={count_noise:g} with noise multiplier '
                     f'{noise_multiplier:.4g}: the count alone would spend the whole budget; '
                     f'expected a count_noise_multiplier above {noise_multiplier / 2:.4g} '
                     '(half the noise multiplier; Andrew et al. suggest cohort size / 20).')
  return float((noise_multiplier ** -2 - (2.0 * count_noise) ** -2) ** -0.5)


def clip_of(server) -> jax.Array:
  """The adaptive clip C_t held in the server state (`CLIP_KEY`)."""
  return server['blocks'][CLIP_KEY]


def with_clip(server, clip) -> dict:
  """`server` holding the clip `clip` (float32) for the next round."""
  return {**server, 'blocks': {**server['blocks'], CLIP_KEY: jnp.asarray(clip, jnp.float32)}}


def under_clip(norm, clip) -> jax.Array:
  """b_i = 1[‖Δ_i‖ ≤ C_t] (Andrew et al. 2021, the client's step), as float32."""
  return (norm <= clip).astype(jnp.float32)


def noised_fraction(bits: jax.Array, weights: jax.Array, noise) -> jax.Array:
  """b̃_t = (Σ_i b_i + noise) / m over the cohort's m real rows (weight > 0; padding rows are
  not clients): Andrew et al. 2021's noised fraction under the clip, `noise` the count's
  N(0, σ_b²) draw (the server's, or the sum of the clients' shares under secure aggregation)."""
  real = (weights > 0).astype(jnp.float32)
  m = jnp.maximum(jnp.sum(real), 1.0)
  return (jnp.sum(bits.astype(jnp.float32) * real) + noise) / m


def clip_step(clip, fraction, spec: DpSpec) -> jax.Array:
  """C_{t+1} = C_t · exp(-η_C (b̃_t - γ)): Andrew et al. 2021, the geometric update. As the
  paper writes it, b̃ is not clamped to [0, 1] (TF Privacy's estimator clamps it; a clamp is
  post-processing either way)."""
  return clip * jnp.exp(-spec.clip_learning_rate * (fraction - spec.target_quantile))


def next_clip(clip, bits: jax.Array, weights: jax.Array, spec: DpSpec, rng: jax.Array
              ) -> tuple[jax.Array, jax.Array]:
  """(C_{t+1}, b̃_t): Andrew et al. 2021, the server's step when it sees the bits: it draws the
  count's N(0, σ_b²) itself (`noised_fraction`, then `clip_step`)."""
  noise = spec.count_noise_multiplier * jax.random.normal(rng, (), jnp.float32)
  fraction = noised_fraction(bits, weights, noise)
  return clip_step(clip, fraction, spec), fraction


def count_share(bit, share, spec: DpSpec, rng: jax.Array) -> jax.Array:
  """One client's bit b_i plus its share of the count's noise, N(0, σ_b² · s_k), under secure
  aggregation: masked as s_k · (b_i + n_i) beside its update, the cohort's decoded sum is
  Σ_k s_k (b_k + n_k) = (Σ_k b_k + Σ_k n_k) / m with s_k = 1/m, and Σ_k n_k ~ N(0, σ_b²): the
  server's b̃_t (`noised_fraction`) with the noise drawn by the clients, never seen without it."""
  noise = jnp.sqrt(jnp.asarray(share, jnp.float32)) * jax.random.normal(rng, (), jnp.float32)
  return jnp.asarray(bit, jnp.float32) + spec.count_noise_multiplier * noise


def noise_share(delta: PyTree, std, rng: jax.Array) -> PyTree:
  """`delta` (float leaves) plus N(0, std²) per coordinate: one client's share of the sum's
  noise under secure aggregation (distributed DP: the shares of the cohort add up to the
  central draw's distribution, and the server never sees the sum without it)."""
  leaves, treedef = jax.tree.flatten(delta)
  keys = jax.random.split(rng, max(len(leaves), 1))
  return jax.tree.unflatten(treedef, [
      x + std * arrays.drawn_flat(jax.random.normal, key, x.shape, dtype=jnp.float32)
      for x, key in zip(leaves, keys)])


def valid_statistics(server: PyTree) -> PyTree:
  """The server state with every BatchNorm running variance ('batch_stats' ... 'var') raised to at
  least 0: noise on the averaged statistics can make one negative, and a negative variance turns
  evaluation into nan. A function of the noisy aggregate alone, so post-processing: it costs no
  privacy."""
  def fix(path, x):
    keys = [getattr(p, 'key', None) for p in path]
    return jnp.maximum(x, 0) if 'batch_stats' in keys and keys[-1] == 'var' else x
  return jax.tree_util.tree_map_with_path(fix, server)


def dp_event(num_clients: int, cohort_size: int, noise_multiplier: float, rounds: int,
             amplified: bool, count_noise: float = 0.0):
  """The dp-accounting event of `rounds` rounds (see the module docstring for σ/2). With
  `count_noise` σ_b (adaptive clipping) a round is two Gaussian events on the same cohort,
  composed: the update sum's, noise multiplier z_Δ/2 (its replace-one sensitivity is 2C_t, its
  std z_Δ·C_t), and the count's, noise multiplier σ_b (a client's bit moves the count by at most
  1 under replace-one, its std is σ_b). dp-accounting samples that composition as the one
  Gaussian of noise multiplier (Σ σ_i^-2)^-1/2 = z/2: the two are one Gaussian mechanism on the
  stacked vector (Andrew et al. 2021's joint analysis; docs/privacy.md)."""
  import dp_accounting  # pylint: disable=g-import-not-at-top  (only runs with dp on import it)
  if count_noise:
    mechanism = dp_accounting.ComposedDpEvent([
        dp_accounting.GaussianDpEvent(update_noise_multiplier(noise_multiplier, count_noise) / 2),
        dp_accounting.GaussianDpEvent(count_noise)])
  else:
    mechanism = dp_accounting.GaussianDpEvent(noise_multiplier / 2.0)
  one_round = (dp_accounting.SampledWithoutReplacementDpEvent(num_clients, cohort_size, mechanism)
               if amplified and cohort_size < num_clients else mechanism)
  return dp_accounting.SelfComposedDpEvent(one_round, rounds)


def _default_orders() -> np.ndarray:
  """dp-accounting's default RDP orders as its accountant holds them (float64)."""
  from dp_accounting import rdp  # pylint: disable=g-import-not-at-top
  return np.array(rdp.RdpAccountant().orders)


@functools.lru_cache(maxsize=1 << 15)
def _one_order_rdp(num_clients: int, cohort_size: int, noise_multiplier: float,
                   amplified: bool, count_noise: float, order: float) -> float:
  """One round's RDP at one order, from dp-accounting's accountant built on that order alone. Its
  RDP of a sampled Gaussian is a separate computation per order (rdp_privacy_accountant.py,
  `_compute_rdp_sample_wor_gaussian`: one scalar function per order; an accountant's RDP is 0 +
  count x those values), so this is the same float as that order's entry of an accountant over
  every order (tests/core/test_privacy.py checks it bit for bit). Kept per (sigma, order):
  dp-accounting's RDP of sampling without replacement is slow (~0.5 s of CPU for all its orders;
  BUILD_NOTES.md, "The test suite"), and `noise_for_epsilon` reads only the orders it needs."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import rdp  # pylint: disable=g-import-not-at-top
  accountant = rdp.RdpAccountant(
      orders=[order], neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  accountant.compose(dp_event(num_clients, cohort_size, noise_multiplier, 1, amplified,
                              count_noise))
  return float(accountant.rdp[0])


@functools.lru_cache(maxsize=256)
def _one_round_rdp(num_clients: int, cohort_size: int, noise_multiplier: float,
                   amplified: bool, count_noise: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
  """(orders, RDP at each order) of one round, dp-accounting's default orders, each from
  `_one_order_rdp`; rounds compose by adding it (RDP is additive). Kept per sigma, as the
  bisection of `noise_for_epsilon` and each round's TensorBoard value read the same rounds again.
  Read-only."""
  orders = _default_orders()
  one_round = np.array([_one_order_rdp(num_clients, cohort_size, float(noise_multiplier),
                                       bool(amplified), float(count_noise), float(order))
                        for order in orders])
  orders.setflags(write=False)
  one_round.setflags(write=False)
  return orders, one_round


def epsilon_curve(num_clients: int, cohort_size: int, noise_multiplier: float, rounds: int,
                  delta: float, amplified: bool = True, count_noise: float = 0.0) -> list[float]:
  """ε at `delta` after each of rounds 1..`rounds` at one noise multiplier; inf throughout
  without noise."""
  return history_epsilon_curve(num_clients, cohort_size, [(rounds, noise_multiplier)], delta,
                               amplified, count_noise)


def history_epsilon_curve(num_clients: int, cohort_size: int, history, delta: float,
                          amplified: bool = True, count_noise: float = 0.0) -> list[float]:
  """ε at `delta` after each round of a noise history [(rounds, sigma), ...] (TensorBoard's
  dp/epsilon). The RDP of t rounds into a segment is the segments before it plus t times one
  round's, added in the order the accountant adds them, so each value is exactly
  `history_epsilon` of the history cut there. From a noiseless round on, inf."""
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  out, before, noiseless = [], None, False
  for rounds, sigma in history:
    rounds = int(rounds)
    noiseless = noiseless or sigma <= 0
    if noiseless:
      out += [float('inf')] * rounds
      continue
    orders, one_round = _one_round_rdp(num_clients, cohort_size, sigma, amplified, count_noise)
    base = np.zeros_like(one_round) if before is None else before
    out += [float(rdp_privacy_accountant.compute_epsilon(orders, base + t * one_round, delta)[0])
            for t in range(1, rounds + 1)]
    before = base + rounds * one_round
  return out


def epsilon(num_clients: int, cohort_size: int, noise_multiplier: float, rounds: int,
            delta: float, amplified: bool = True, count_noise: float = 0.0) -> float:
  """ε at `delta` after `rounds` rounds at one noise multiplier (RDP accountant, replace-one
  neighbours); inf without noise, 0 before the first round."""
  return history_epsilon(num_clients, cohort_size, [(rounds, noise_multiplier)], delta, amplified,
                         count_noise)


def history_epsilon(num_clients: int, cohort_size: int, history, delta: float,
                    amplified: bool = True, count_noise: float = 0.0) -> float:
  """ε at `delta` after a noise history [(rounds, sigma), ...]: the accountant composes each
  segment's rounds with the sigma they ran at (a run resumed or extended with another noise
  multiplier). 0 for no rounds, inf when any round ran without noise."""
  history = [(int(n), float(s)) for n, s in history if int(n) > 0]
  if not history:
    return 0.0
  if any(s <= 0 for _, s in history):
    return float('inf')
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  # What the accountant does when it composes the segments in order (its RDP starts at 0 and
  # adds rounds x one round's RDP per segment), with each sigma's one-round RDP kept: the same
  # float64 operations, so the same epsilon to the last bit (tests/core/test_privacy.py).
  total = None
  for rounds, sigma in history:
    orders, one_round = _one_round_rdp(num_clients, cohort_size, sigma, amplified, count_noise)
    total = (np.zeros_like(one_round) if total is None else total) + rounds * one_round
  return float(rdp_privacy_accountant.compute_epsilon(orders, total, delta)[0])


# The PLD accountant's grid of privacy-loss values: pessimistic (an upper bound at any grid),
# 10x dp-accounting's default 1e-4, which took 4-15 s per results.json on the histories of the
# tests; at 1e-3 epsilon moved by < 1e-7 relative on them (docs/privacy.md).
PLD_DISCRETIZATION = 1e-3
PLD_NO_SAMPLING = ("n/a: dp-accounting's PLD has no sampling without replacement (the cohort is "
                   'drawn without replacement, a fixed {m} of {k}); the RDP epsilon uses it')


def pld_mechanism(noise_multiplier: float, count_noise: float = 0.0):
  """One unsampled round as dp-accounting's PLD accountant reads events under REPLACE_ONE. It
  follows GaussianDpEvent's definition, noise multiplier = std / the bound on one record's norm,
  and doubles that bound itself for a replacement: so the update sum (records of norm <= C, std
  σC) is GaussianDpEvent(σ), where the RDP accountant, whose Gaussian ignores the relation, is
  given std / the replace-one sensitivity, σ/2 (`dp_event`); the same mechanism, sensitivity 2C
  and std σC (tests/core/test_adaptive_clipping.py checks the two readings agree). The count
  (adaptive clipping) is a sum of bits centred at 1/2, records of norm 1/2 (the centring is
  m/2 with m public, so post-processing): GaussianDpEvent(2σ_b), its replace-one sensitivity 1."""
  import dp_accounting  # pylint: disable=g-import-not-at-top
  if not count_noise:
    return dp_accounting.GaussianDpEvent(noise_multiplier)
  return dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(update_noise_multiplier(noise_multiplier, count_noise)),
      dp_accounting.GaussianDpEvent(2.0 * count_noise)])


def history_epsilon_pld(num_clients: int, cohort_size: int, history, delta: float,
                        amplified: bool = True, count_noise: float = 0.0) -> float | str:
  """ε at `delta` of a noise history from dp-accounting's PLD accountant (replace-one,
  pessimistic, `PLD_DISCRETIZATION`), on each round's events unsampled (`pld_mechanism`),
  which is what the RDP ε composes too wherever the cohort is not amplified by sampling; where
  it is, `PLD_NO_SAMPLING` (that accountant has no sampling without replacement). 0 for no
  rounds, inf when any round ran without noise."""
  if amplified and cohort_size < num_clients:
    return PLD_NO_SAMPLING.format(m=cohort_size, k=num_clients)
  history = [(int(n), float(s)) for n, s in history if int(n) > 0]
  if not history:
    return 0.0
  if any(s <= 0 for _, s in history):
    return float('inf')
  import dp_accounting  # pylint: disable=g-import-not-at-top
  from dp_accounting import pld  # pylint: disable=g-import-not-at-top
  accountant = pld.PLDAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE,
      value_discretization_interval=PLD_DISCRETIZATION)
  accountant.compose(dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(pld_mechanism(sigma, count_noise), rounds)
      for rounds, sigma in history]))
  return float(accountant.get_epsilon(delta))


def _order_epsilon(num_clients: int, cohort_size: int, segments, delta: float, amplified: bool,
                   order: np.float64) -> float:
  """ε at `delta` of the noise history `segments` [(rounds, sigma > 0), ...] at one RDP order:
  dp-accounting's `compute_epsilon` on that order alone, max(0, ε_order). Its RDP is added up
  segment by segment with the float64 operations `history_epsilon` applies to each entry of its
  arrays, so it is the same float as that order's term there."""
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  total = np.float64(0.0)
  for rounds, sigma in segments:
    total = total + rounds * np.float64(
        _one_order_rdp(num_clients, cohort_size, sigma, bool(amplified), 0.0, float(order)))
  return float(rdp_privacy_accountant.compute_epsilon([order], [total], delta)[0])


def noise_for_epsilon(target: float, num_clients: int, cohort_size: int, rounds: int,
                      delta: float, amplified: bool = True, history=()) -> float:
  """The noise multiplier whose `rounds` rounds after `history` (the rounds already run, each
  at its own sigma) bring ε to `target` (to 0.1 %, by bisection on the accountant; ε falls as σ
  grows).

  Each step asks only whether ε(σ) = `history_epsilon` of the history and the new rounds is above
  `target`. dp-accounting's ε is the least over its orders of max(0, ε_order) (`compute_epsilon`),
  so one order at or below `target` answers no; yes needs every order. The order that was least
  at the last full answer is tried first, and it nearly always answers no by itself, which halves
  the accountant's work; every answer, hence the σ returned, is the one the whole accountant
  gives (tests/core/test_privacy.py checks both)."""
  before = [(int(n), float(s)) for n, s in history if int(n) > 0]
  orders = _default_orders()
  first = [0]   # the index of the order to try first: the least at the last full answer

  def above(sigma: float) -> bool:
    segments = before + ([(int(rounds), float(sigma))] if int(rounds) > 0 else [])
    if not segments or any(s <= 0 for _, s in segments) or delta <= 0:
      # history_epsilon's own cases (0, inf), and compute_epsilon's delta = 0 rule, which reads
      # every order together.
      return history_epsilon(num_clients, cohort_size, segments, delta, amplified) > target
    eps_at = lambda i: _order_epsilon(num_clients, cohort_size, segments, delta, amplified,
                                      orders[i])
    if eps_at(first[0]) <= target:
      return False
    eps = [eps_at(i) for i in range(len(orders))]
    first[0] = int(np.argmin(eps))
    return min(eps) > target

  low, high = 1e-3, 1.0
  while above(high):
    low, high = high, high * 2
    if high > 1e6:
      raise ValueError(f'dp.target_epsilon={target}: not reached with a noise multiplier up to '
                       '1e6; expected a larger epsilon.')
  while high - low > 1e-3 * high:
    mid = (low + high) / 2
    if above(mid):
      low = mid
    else:
      high = mid
  return high


# What the accountant may assume of each `federated.sampling` (data/participation.py).
SAMPLING_ASSUMED = {
    'uniform': '{m} of {k} clients a round, uniformly without replacement, fixed size',
    'availability': ('up to {m} of {k} clients a round, of those online (each with its own '
                     'data-independent probability): not a fixed-size uniform sample, so no '
                     'amplification is claimed'),
}


NOISE_SEEDS = ('config', 'os')
NOISE_SEED_CAVEAT = {
    'config': ('drawn from config.seed (recorded in config.json): epsilon holds only while the '
               'seed is kept secret'),
    'os': ('drawn from config.seed XOR a secret from the operating system, new at every start and '
           'never recorded: a resumed run continues with other noise than an uninterrupted one '
           'would have drawn (epsilon is the same)'),
}


def noise_secret(noise_seed: str) -> np.ndarray | None:
  """`dp.noise_seed`: None for 'config' (the noise follows the run's keys), else 64 bits from
  the operating system's entropy, the same on every process (process 0's). Read-only."""
  if noise_seed == 'config':
    return None
  secret = np.frombuffer(os.urandom(8), np.uint32).copy()
  if jax.process_count() > 1:   # every process draws the server's noise: one secret
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    secret = np.asarray(multihost_utils.broadcast_one_to_all(secret), np.uint32)
  secret.setflags(write=False)
  return secret


def amplified(spec: DpSpec) -> bool:
  """Whether sampling amplifies the run's guarantee: only a fixed-size uniform cohort
  (`federated.sampling='uniform'`; data/participation.py), and not when client rows leave
  under DP."""
  return spec.sampling == 'uniform' and not (spec.client_rows and spec.class_rows == 'private')


def ledger(config, spec: DpSpec, num_clients: int, cohort_size: int, rounds: int,
           history=None, final_clip: float | None = None) -> dict:
  """results.json['privacy']: ε and what it means. `history` [(rounds, sigma), ...] is what the
  run's rounds ran at (None: all `rounds` at the spec's sigma); ε composes it. `final_clip`: the
  adaptive clip after the last round (the state's `clip_of`)."""
  dp = config.dp
  amp = amplified(spec)
  history = extended([], rounds, spec.noise_multiplier) if history is None else history
  eps = history_epsilon(num_clients, cohort_size, history, dp.target_delta, amp,
                        spec.count_noise)
  out = {
      'epsilon': eps, 'delta': dp.target_delta, 'rounds': rounds,
      'epsilon_pld': history_epsilon_pld(num_clients, cohort_size, history, dp.target_delta, amp,
                                         spec.count_noise),
      'accountant_pld': (f'PLD (dp-accounting), replace-one neighbours, pessimistic, '
                         f'discretization {PLD_DISCRETIZATION:g}'),
      'target_epsilon': dp.target_epsilon or None,
      'clip_norm': dp.clip_norm, 'noise_multiplier': spec.noise_multiplier,
      'noise_history': [{'rounds': int(n), 'noise_multiplier': float(s)} for n, s in history],
      'noise_std': spec.noise_std, 'accountant': 'RDP (dp-accounting), replace-one neighbours',
      'unit': 'client (all of its data)',
      'sampling': SAMPLING_ASSUMED[spec.sampling].format(m=cohort_size, k=num_clients),
      'noise_drawn_by': ('the clients, a share each, under secure aggregation (distributed DP)'
                         if spec.secure else 'the server'),
      # The noise is a function of config.seed, which config.json records: whoever reads the
      # seed can subtract the noise, so epsilon holds only while the seed stays secret.
      'noise_seed': NOISE_SEED_CAVEAT[dp.get('noise_seed', 'config')],
      # Only a cohort smaller than the population is a sample (`dp_event`): with every client
      # in every round there is nothing to amplify, whatever the sampling rule.
      'amplified_by_sampling': amp and cohort_size < num_clients,
      'client_rows': list(spec.client_rows),
      'class_rows': spec.class_rows if spec.client_rows else None,
      'clip_rule': spec.clip_rule,
  }
  if spec.adaptive:
    out['adaptive_clip'] = {
        'initial_clip_norm': spec.clip_norm, 'final_clip_norm': final_clip,
        'target_quantile': spec.target_quantile, 'clip_learning_rate': spec.clip_learning_rate,
        'count_noise_multiplier': spec.count_noise,
        'update_noise_multiplier': spec.update_noise_multiplier,
        # What noise_multiplier means under this rule, and how the count is accounted.
        'accounting': ('each round composes two Gaussian events on the same cohort, replace-one: '
                       'the update sum (sensitivity 2 C_t, std update_noise_multiplier x C_t) '
                       'and the count of clients under C_t (sensitivity 1, std '
                       'count_noise_multiplier); together one Gaussian of noise_multiplier '
                       '(z^-2 = z_update^-2 + (2 sigma_count)^-2, Andrew et al. 2021)'),
    }
  if spec.client_rows and spec.class_rows == 'unprotected':
    out['not_covered'] = (f'the class rows {list(spec.client_rows)} each client sends for its own '
                          'identities (sent without clipping or noise), and what the server derives '
                          'from them and sends on (the regularized W_k, equivalent embeddings)')
  return out

