"""Server optimizers on the pseudo-gradient (Reddi et al., "Adaptive Federated Optimization", 2021).

Each round the method's own server step (FedAvg's weighted mean) gives a new model x̄; the
pseudo-gradient is Δ = x̄ − x, the mean client update minus the server's model. A server
optimizer replaces the step x ← x̄ = x + Δ by an optax step on the gradient −Δ:

  'fedavg'   x ← x + η·Δ                                  (η = 1 is FedAvg itself)
  'fedavgm'  v ← β·v + Δ;  x ← x + η·v                     (Hsu et al. 2019: server momentum)
  'fedadam'  m ← β1·m + (1−β1)·Δ;  v ← β2·v + (1−β2)·Δ²;   x ← x + η·m / (√v + τ)
  'fedyogi'  m as FedAdam;  v ← v − (1−β2)·Δ²·sign(v − Δ²); x ← x + η·m / (√v + τ)

as Reddi et al.'s Algorithm 2 writes them: no bias correction, v starts at τ² (their
"v_{-1} ≥ τ²"), m at 0. optax's own adam / yogi correct the bias (and optax's yogi starts v at
1e-6), so FedAdam and FedYogi are written here as transforms of their own.

Which parameters: the leaves of the server's model that the clients' updates are averaged into
(`core/blocks.py` picks them: the update's keys other than the client's own class rows), float
leaves outside the 'batch_stats' collection. BatchNorm statistics are averaged as the method does
(an optimizer step on a variance could make it negative); class rows the server writes per client
(FedGC's W_k) and the method's own server steps (FedGC's correction, FedAwS's spreadout) are left
to the method.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

OPTIMIZERS = ('fedavg', 'fedavgm', 'fedadam', 'fedyogi')
# Server learning rates used when `server_optimizer.learning_rate` is 0: 1 for the FedAvg forms
# (FedAvgM's is Hsu et al.'s); Reddi et al. tune η for FedAdam / FedYogi over 10^{-3}..10^{0.5}
# and report 10^{-2}..10^{-0.5} as best on their vision tasks; 10^{-1.5} is the middle of that.
DEFAULT_LEARNING_RATES = {'fedavg': 1.0, 'fedavgm': 1.0, 'fedadam': 10**-1.5, 'fedyogi': 10**-1.5}


class AdaptiveState(NamedTuple):
  """FedAdam / FedYogi's moments: m (first), v (second), shaped like the parameters."""
  m: Any
  v: Any


def scale_by_adaptive(variant: str, b1: float, b2: float, tau: float
                      ) -> optax.GradientTransformation:
  """Reddi et al.'s Algorithm 2 direction m / (√v + τ) for g = −Δ (returned with its sign, so
  that `optax.scale(-η)` after it gives x + η·m_Δ / (√v + τ))."""
  if variant not in ('adam', 'yogi'):
    raise ValueError(f'adaptive server optimizer variant {variant!r}; expected adam or yogi.')

  def init(params):
    zeros = jax.tree.map(jnp.zeros_like, params)
    return AdaptiveState(m=zeros, v=jax.tree.map(lambda p: jnp.full_like(p, tau**2), params))

  def update(grads, state, params=None):
    del params
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.m, grads)
    if variant == 'adam':
      v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, state.v, grads)
    else:   # Yogi: v moves toward g² by at most (1 − β2)·g² per step
      v = jax.tree.map(lambda v, g: v - (1 - b2) * g * g * jnp.sign(v - g * g), state.v, grads)
    direction = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + tau), m, v)
    return direction, AdaptiveState(m=m, v=v)

  return optax.GradientTransformation(init, update)


def make(name: str, *, learning_rate: float = 0.0, momentum: float = 0.9, b1: float = 0.9,
         b2: float = 0.99, tau: float = 1e-3) -> optax.GradientTransformation:
  """The server optimizer `name` (OPTIMIZERS) as an optax transform of the gradient −Δ.

  `learning_rate` 0 takes `DEFAULT_LEARNING_RATES[name]`; `momentum` is FedAvgM's β; `b1`, `b2`
  and `tau` are FedAdam / FedYogi's β1, β2 and τ (Reddi et al.'s defaults 0.9, 0.99, 1e-3).
  """
  if name not in OPTIMIZERS:
    raise ValueError(f'server optimizer {name!r}; expected one of {OPTIMIZERS}.')
  eta = learning_rate or DEFAULT_LEARNING_RATES[name]
  if name == 'fedavg':
    return optax.sgd(eta)
  if name == 'fedavgm':   # optax's trace: v ← g + β·v, then −η·v
    return optax.sgd(eta, momentum=momentum)
  return optax.chain(scale_by_adaptive(name[3:], b1, b2, tau), optax.scale(-eta))


def step(optimizer: optax.GradientTransformation, model, averaged, opt_state):
  """One server step: x ← x + optimizer(−Δ) with Δ = averaged − model; returns (x, opt_state).

  `model` and `averaged` hold the chosen leaves only (same structure)."""
  minus_delta = jax.tree.map(lambda x, a: x - a, model, averaged)
  updates, opt_state = optimizer.update(minus_delta, opt_state, model)
  return optax.apply_updates(model, updates), opt_state
