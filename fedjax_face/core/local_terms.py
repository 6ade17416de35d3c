"""FedProx's proximal term and SCAFFOLD's control variates in every method's local optimizer.

Both change a client's local steps, not its loss code: FedProx (Li et al. 2020) adds
μ/2·‖θ − θ_global‖² to the local objective, whose gradient is μ·(θ − θ_global); SCAFFOLD
(Karimireddy et al. 2020) corrects every local gradient by c − c_i. Both are therefore a term
added to the gradient before the client's optimizer (`transform`, chained first by
`algorithms.common.make_optimizer`), so weight decay, momentum and the round's learning-rate
scale act on the corrected gradient as they would on the plain one.

Which parameters: those the client received from the server and sends back to be averaged (the
model), not what it keeps (FedPE's W_k, FedGPAD's ES / Dec) nor its own class rows. A method's
optimizer sees its parameters in its own structure, so the link is made by identity while the
client's update is traced: `core/blocks.py` names the arrays the client received for its
update's averaged keys (`Algorithm.update_origin`), and when the method initialises its
optimizer from them (`optimizer.init(params)` with those very arrays among `params`, as every
method here does at the start of its round), `transform` ties each such parameter to its received
value and its correction. `applied` is that naming; `matched` says afterwards which were tied, so
that a method whose optimizer trains something else is refused rather than run uncorrected.

The received value is the anchor of FedProx's term: θ_global of the round. SCAFFOLD's correction
c − c_i is constant within the round.
"""

import contextlib
import contextvars
import dataclasses
import flax
import jax
import jax.numpy as jnp
import optax

KINDS = ('none', 'fedprox', 'scaffold')


@dataclasses.dataclass
class _Naming:
  """What `applied` names for one client's trace: received arrays by id -> their slot."""
  slot_of: dict[int, int]
  anchors: list            # slot -> the received array (θ_global of the round)
  corrections: list        # slot -> c − c_i, or None without SCAFFOLD
  mu: float
  matched: set = dataclasses.field(default_factory=set)


_NAMING: contextvars.ContextVar[_Naming | None] = contextvars.ContextVar('local_terms',
                                                                         default=None)


@contextlib.contextmanager
def applied(received: list, corrections: list | None, mu: float):
  """While a client's update is traced: `received[s]` (the arrays it got for its averaged
  parameters) gets FedProx's term with `mu` and, with `corrections`, `corrections[s]` added to
  its gradient. Yields the set of slots `s` the optimizer tied (filled when it initialises)."""
  naming = _Naming(slot_of={id(x): s for s, x in enumerate(received)}, anchors=list(received),
                   corrections=corrections, mu=float(mu))
  token = _NAMING.set(naming)
  try:
    yield naming.matched
  finally:
    _NAMING.reset(token)


@flax.struct.dataclass
class TermsState:
  """Per tied parameter leaf (by its index among the optimizer's parameter leaves, static):
  its received value and its SCAFFOLD correction (zeros without SCAFFOLD are not stored)."""
  anchors: tuple
  corrections: tuple
  leaves: tuple = flax.struct.field(pytree_node=False)
  mu: float = flax.struct.field(pytree_node=False)


def transform() -> optax.GradientTransformation:
  """g ← g + μ·(θ − θ_received) + (c − c_i) on the parameters `applied` names; others as they
  are. Initialised outside `applied` it refuses: the received model is not known there (a
  client optimizer kept across rounds, `federated.client_optimizer_state='keep'`, is refused by
  the config check for that reason)."""

  def init(params):
    naming = _NAMING.get()
    if naming is None:
      raise ValueError('FedProx / SCAFFOLD: the client optimizer was initialised outside a '
                       'client update, so the model the client received is unknown '
                       '(local_correction needs a fresh optimizer each round).')
    leaves, anchors, corrections = [], [], []
    for i, leaf in enumerate(jax.tree.leaves(params)):
      slot = naming.slot_of.get(id(leaf))
      if slot is None:
        continue
      naming.matched.add(slot)
      leaves.append(i)
      anchors.append(naming.anchors[slot])
      if naming.corrections is not None:
        corrections.append(naming.corrections[slot])
    return TermsState(anchors=tuple(anchors), corrections=tuple(corrections),
                      leaves=tuple(leaves), mu=naming.mu)

  def update(grads, state: TermsState, params=None):
    if params is None:
      raise ValueError('FedProx needs the parameters in optimizer.update(grads, state, params).')
    flat, tree = jax.tree.flatten(grads)
    flat_params = jax.tree.leaves(params)
    for j, i in enumerate(state.leaves):
      g = flat[i]
      if state.mu:   # ∇ μ/2·‖θ − θ_global‖²
        g = g + (state.mu * (flat_params[i] - state.anchors[j])).astype(g.dtype)
      if state.corrections:   # SCAFFOLD: g − c_i + c
        g = g + state.corrections[j].astype(g.dtype)
      flat[i] = g
    return jax.tree.unflatten(tree, flat), state

  return optax.GradientTransformation(init, update)


def active_steps(mask: jax.Array) -> jax.Array:
  """K of SCAFFOLD's option II: the local steps a client took (steps with a valid sample;
  padding steps are skipped by `core.local.skip_if_empty`), from its `[steps, batch]` mask."""
  return jnp.sum(jnp.any(mask, axis=-1)).astype(jnp.float32)


def scaffold_control(c_i, c, received, sent, steps: jax.Array, learning_rate: jax.Array):
  """SCAFFOLD's option II (Karimireddy et al., Alg. 1 line 12):
  c_i⁺ = c_i − c + (x − y_i) / (K·η_l), with x what the client received and y_i what it sends.

  A client that took no step keeps c_i. With plain SGD this is the mean of the client's K
  local gradients along its path; with momentum or Adam the paper's formula is used as written.
  """
  took_steps = steps > 0
  scale = 1.0 / jnp.maximum(steps * learning_rate, 1e-30)
  def one(ci, cg, x, y):
    new = ci - cg + (x.astype(jnp.float32) - y.astype(jnp.float32)) * scale
    return jnp.where(took_steps, new, ci)
  return jax.tree.map(one, c_i, c, received, sent)

