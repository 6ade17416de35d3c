"""Spreadout: the server's step that keeps one-class clients' class embeddings apart.

A client that holds one identity can only pull its features and its class embedding w_i together
(a positive-only loss); nothing on the client pushes w_i away from anyone else's, so all class
embeddings would drift to one point. FedAwS (Yu et al., ICML 2020) moves that push to the server,
which holds every w_i: after averaging, one gradient step on the spreadout regularizer

    reg_sp(W) = sum_i sum_{i' != i} (max{0, nu - d(w_i, w_i')})^2            (FedFV paper, Eq. 3)

over all C class embeddings, `W <- W - lambda·eta·grad reg_sp(W)` (FedAwS's server update, with
the clients' learning rate eta of the round). FedFace (Aggarwal et al. 2021) uses the same step on
cosines. The sum runs over ordered pairs, as Eq. 3 writes it (each unordered pair twice);
`reduction='mean'` divides it by the number of ordered pairs C(C-1), as FedFace's public code
averages its off-diagonal penalties, so at equal lambda its step is C(C-1) times smaller.

Distances, on L2-normalised rows (`spreadout.distance`):
  'euclidean': d = ||w_i/|w_i| - w_i'/|w_i'||| = sqrt(2 - 2 cos), FedAwS's form; a margin nu = sqrt(2)
    asks every pair to be at least orthogonal (cos <= 0).
  'cosine': d = 1 - cos; a margin nu penalises cos > 1 - nu, so nu = 0.7 is FedFace's public
    code, relu(cos - 0.3)^2 per off-diagonal pair.
Small C uses the whole C x C matrix, large C the streamed tiles (`pairwise`, no C x C buffer):
`implementation` 'dense' | 'blockwise' | 'auto' (streamed above `pairwise.AUTO_STREAMED_ROWS`).
"""

import jax
import jax.numpy as jnp
import ml_collections

from fedjax_face.algorithms import pairwise
from fedjax_face.core import arrays, checks

DISTANCES = ('euclidean', 'cosine')
REDUCTIONS = ('sum', 'mean')   # over the ordered pairs i != i' of valid rows
DEFAULT_BLOCK = 1024
# The squared distance is floored here before its square root, so d and its gradient stay finite
# for coinciding rows (the diagonal, which the sum masks out, still enters autodiff).
_MIN_SQUARED_DISTANCE = 1e-12


def config_section(*, distance: str, margin: float, reg_lambda: float,
                   reduction: str) -> ml_collections.ConfigDict:
  """The fields FedAwS and FedFace share (their sections differ in defaults only)."""
  c = ml_collections.ConfigDict()
  c.distance = distance              # 'euclidean' | 'cosine' (module docstring)
  c.margin = margin                  # nu of Eq. 3
  c.reduction = reduction            # 'sum' (Eq. 3) | 'mean' over the ordered pairs
  c.reg_lambda = reg_lambda          # lambda: the step is lambda·eta_t·grad reg_sp
  c.server_steps = 1                 # gradient steps per round (FedAwS: 1)
  c.reg_implementation = 'auto'      # 'dense' | 'blockwise' (streamed) | 'auto' (by class count)
  c.reg_block_size = 0               # streamed rows per tile; 0 = DEFAULT_BLOCK
  return c


def check_config(config, name: str) -> None:
  """Checks `config.<name>` (a `config_section`), naming the wrong field."""
  c = checks.section(config, name, f'{name}.config_section() (configs/fedfv/{name}.py)')
  checks.check_choice(f'{name}.distance', c.distance, DISTANCES)
  checks.check_choice(f'{name}.reduction', c.reduction, REDUCTIONS)
  checks.check_number(f'{name}.margin', c.margin)
  checks.check_number(f'{name}.reg_lambda', c.reg_lambda, allow_zero=True)
  checks.check_int(f'{name}.server_steps', c.server_steps)
  checks.check_choice(f'{name}.reg_implementation', c.reg_implementation,
                          pairwise.IMPLEMENTATIONS)
  checks.check_int(f'{name}.reg_block_size', c.reg_block_size, allow_zero=True)
  if c.distance == 'cosine' and c.margin > 2:
    raise ValueError(f'config.{name}.margin={c.margin} with distance cosine; expected at most 2 '
                     '(1 - cos lies in [0, 2]: a larger margin penalises every pair equally).')
  if c.distance == 'euclidean' and c.margin > 2:
    raise ValueError(f'config.{name}.margin={c.margin} with distance euclidean; expected at most '
                     '2 (unit vectors are at most 2 apart).')


def pair_penalty(distance: str, margin: float):
  """`(a [Ra, d], b [Rb, d]) -> [Ra, Rb]`: (max{0, nu - d(a_r, b_c)})^2 per pair (Eq. 3's term)."""
  checks.check_choice('spreadout distance', distance, DISTANCES)

  def penalty(a, b):
    cos = arrays.l2_normalize(a) @ arrays.l2_normalize(b).T
    if distance == 'euclidean':
      d = jnp.sqrt(jnp.maximum(2.0 - 2.0 * cos, _MIN_SQUARED_DISTANCE))
    else:
      d = 1.0 - cos
    return jnp.square(jnp.maximum(0.0, margin - d))

  return penalty


def spreadout(w: jax.Array, valid: jax.Array, *, distance: str, margin: float,
              implementation: str = 'dense', block_size: int | None = None,
              reduction: str = 'sum') -> jax.Array:
  """reg_sp(W) of Eq. 3 over the valid rows of `w [C, d]` (ordered pairs i != i'), or its
  mean over those pairs (`reduction='mean'`)."""
  checks.check_choice('spreadout reduction', reduction, REDUCTIONS)
  penalty = pair_penalty(distance, margin)
  if pairwise.uses_streamed(implementation, w.shape[0]):
    total = pairwise.streamed_pairwise_sum(penalty, w, valid,
                                           block_size=block_size or DEFAULT_BLOCK)
  else:
    total = pairwise.dense_pairwise_sum(penalty, w, valid)
  if reduction == 'sum':
    return total
  n = jnp.sum(valid.astype(total.dtype))
  return total / jnp.maximum(n * (n - 1), 1)


def spreadout_step(w: jax.Array, valid: jax.Array, *, step_size, steps: int = 1,
                   **spreadout_kwargs) -> jax.Array:
  """`steps` times W <- W - step_size · grad reg_sp(W) (FedAwS's server update); padding rows
  (not `valid`) get no gradient and stay as they are."""
  grad = jax.grad(spreadout)
  for _ in range(steps):
    w = w - step_size * grad(w, valid, **spreadout_kwargs)
  return w


def kwargs_from_config(section) -> dict:
  """`spreadout` keywords from a FedAwS / FedFace section."""
  return {'distance': section.distance, 'margin': float(section.margin),
          'reduction': section.reduction, 'implementation': section.reg_implementation,
          'block_size': section.reg_block_size or None}
