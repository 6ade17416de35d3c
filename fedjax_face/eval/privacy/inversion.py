"""Gradient inversion: images recovered from what a client sends (docs/references.md,
gradient-inversion).

Three attacks, each a pure function over pytrees:

- `analytic_linear_input`: a dense layer with bias, one example. For y = x W + b (flax's kernel
  `[in, out]`) and any loss L, ∂L/∂W = x ⊗ ∂L/∂y and ∂L/∂b = ∂L/∂y, so column i of ∂L/∂W divided
  by (∂L/∂b)_i is x itself for every i with (∂L/∂b)_i ≠ 0 (the known-answer case of issue 59).
- `idlg_label`: iDLG's label (Zhao et al. 2020). A linear classifier head without bias on one
  example's features f has row gradients ∂L/∂w_c = (p_c − y_c) f under cross-entropy: all rows
  parallel to f, the true class's coefficient the only negative one. The true row is therefore the
  one whose inner product with every other row is negative (with non-negative features, as after a
  ReLU, simply the row whose entries are ≤ 0; this form needs no sign assumption on f). Two classes
  leave both rows with one negative product each: ambiguous, and the function says so.
- `label_from_feature_gradient`: the same reading where the head's rows never cross (FedPE's
  W_k stays on the client) but the gradient at the features does. For a head on features f with
  rows w_c, ∂L/∂f = Σ_c (p_c − y_c) ∂z_c/∂f with ∂z_c/∂f = w_c for a linear head (along ŵ_c, less
  a part along f, for a cosine head), so the coefficients a of ∂L/∂f on the rows, by least
  squares, have one negative entry, the true class's. Exact for a linear head with at most d
  classes; with a cosine head the part along f blurs it (on random 16-d features and 5 of 6
  rows: 150 of 150 labels right under CosFace, 147 of 150 under ArcFace, s = 64). A final
  BatchNorm's shift β receives Σ_i ∂L/∂f_i, one example's ∂L/∂f at batch 1 (the small CNN's
  'features' BN).
- `row_gradients`: the class rows' gradient read from rows sent back (FedGC's W_k): the step
  (received − sent) / lr less the coupled weight decay of the rows received (exact for one SGD
  step; the first momentum step is the gradient itself).
- `invert`: gradient matching by optimising dummy images with Adam. `distance='cosine'` with a
  total-variation prior is Inverting Gradients (Geiping et al., NeurIPS 2020: images boxed to the
  input range, the rate decayed by 10 at 3/8, 5/8, 7/8 of the iterations, the restart with the
  lowest matching loss kept; `signed` feeds Adam the gradient's sign, an option of the authors'
  code: on a runlocal FedPE update of one step of 2 images, 1,000 steps reached a distance of 0.69
  signed against 0.96 unsigned). `distance='l2'` without the prior is DLG (Zhu et al., NeurIPS
  2019, which optimises with L-BFGS; here Adam), with the labels given (or recovered by
  `idlg_label` at batch 1) rather than optimised.

A client that takes several local steps sends no gradient: `pseudo_gradient` reads
(sent − received) / lr as one; the evaluator's model of it unrolls the client's steps on the dummy
images (Geiping et al. Sec. 5), since a single gradient misreads even the true images
(evaluators.py's docstring has the figure). Under cosine matching the rate's scale drops out.

Metrics: `psnr` and `ssim` (Wang et al., IEEE TIP 2004: Gaussian window 11, σ 1.5,
K1 = 0.01, K2 = 0.03, L = 255, the window's valid positions as in the authors' ssim_index.m, the
mean over positions and channels).
"""

from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

DISTANCES = ('cosine', 'l2')
SSIM_WINDOW, SSIM_SIGMA, SSIM_K1, SSIM_K2 = 11, 1.5, 0.01, 0.03


def analytic_linear_input(grad_kernel: jax.Array, grad_bias: jax.Array) -> jax.Array:
  """The one example `x` `[in]` a dense layer was given, from its gradients: kernel `[in, out]`
  (flax's layout; PyTorch's weight is its transpose, whose row i this column is) and bias `[out]`.
  Divides by the output with the largest |∂L/∂b_i|, the best-conditioned choice."""
  i = jnp.argmax(jnp.abs(grad_bias))
  return grad_kernel[:, i] / grad_bias[i]


def idlg_label(row_grads: jax.Array) -> int:
  """The label of one example from a bias-free linear head's row gradients `[C, d]` (module
  docstring); ValueError when it is not determined (fewer than 3 classes, or no single row
  whose products with all others are negative)."""
  g = np.asarray(row_grads, np.float64)
  if g.shape[0] < 3:
    raise ValueError(f'idlg_label: {g.shape[0]} classes; the sign rule needs at least 3 (with 2, '
                     'both rows have one negative product).')
  gram = g @ g.T
  negative = (gram < 0) | np.eye(len(g), dtype=bool)
  rows = np.flatnonzero(negative.all(axis=1))
  if len(rows) != 1:
    raise ValueError(f'idlg_label: {len(rows)} rows have negative products with every other row; '
                     'expected exactly one (one example, a cross-entropy head without bias).')
  return int(rows[0])


def label_from_feature_gradient(feature_grad: jax.Array, rows: jax.Array,
                                valid: np.ndarray | None = None) -> int:
  """The label of one example from ∂L/∂f `[d]` and the head's rows `[C, d]` (module docstring):
  the row, among `valid` (`[C]` bool; default all), whose least-squares coefficient in ∂L/∂f is
  the lowest."""
  w = np.asarray(rows, np.float64)
  index = np.flatnonzero(np.ones(len(w), bool) if valid is None else np.asarray(valid, bool))
  coefficients = np.linalg.lstsq(w[index].T, np.asarray(feature_grad, np.float64), rcond=None)[0]
  return int(index[np.argmin(coefficients)])


def row_gradients(received: jax.Array, sent: jax.Array, learning_rate: float,
                  weight_decay: float) -> np.ndarray:
  """Class rows' gradient `[C, d]` from the rows a client received and sent back (module
  docstring): (received − sent) / lr − weight_decay · received."""
  received = np.asarray(received, np.float64)
  return (received - np.asarray(sent, np.float64)) / learning_rate - weight_decay * received


def pseudo_gradient(sent, received, learning_rate: float):
  """(sent − received) / lr over matching pytrees: the gradient one SGD step would have taken."""
  return jax.tree.map(lambda s, r: (s - r) / learning_rate, sent, received)


def total_variation(images: jax.Array) -> jax.Array:
  """Mean absolute difference of neighbouring pixels, down and across (`[..., H, W, C]`)."""
  dy = jnp.abs(images[..., 1:, :, :] - images[..., :-1, :, :])
  dx = jnp.abs(images[..., :, 1:, :] - images[..., :, :-1, :])
  return jnp.mean(dy) + jnp.mean(dx)


def gradient_distance(grads, target, distance: str) -> jax.Array:
  """1 − cos(grads, target) over all leaves as one vector ('cosine'), or the squared L2 norm of
  their difference ('l2')."""
  pairs = list(zip(jax.tree.leaves(grads), jax.tree.leaves(target)))
  if distance == 'cosine':
    dot = sum(jnp.sum(g * t) for g, t in pairs)
    norm_g = jnp.sqrt(sum(jnp.sum(g * g) for g, _ in pairs))
    norm_t = jnp.sqrt(sum(jnp.sum(t * t) for _, t in pairs))
    return 1.0 - dot / jnp.maximum(norm_g * norm_t, 1e-30)
  if distance == 'l2':
    return sum(jnp.sum(jnp.square(g - t)) for g, t in pairs)
  raise ValueError(f'distance={distance!r}; expected one of {DISTANCES}.')


def learning_rate_schedule(learning_rate: float, iterations: int) -> optax.Schedule:
  """Inverting Gradients' step decay: /10 at 3/8, 5/8 and 7/8 of the iterations."""
  return optax.piecewise_constant_schedule(
      learning_rate, {int(iterations * f): 0.1 for f in (3 / 8, 5 / 8, 7 / 8)})


def make_attack(grad_fn: Callable, *, iterations: int, learning_rate: float, tv_weight: float,
                distance: str, signed: bool = False,
                bounds: tuple[float, float] = (-1.0, 1.0)) -> Callable:
  """`attack(images0, target, *args) -> (images, matching distance)`: Adam on the images so that
  `grad_fn(images, *args)` matches `target` by `distance`, plus `tv_weight` times their total
  variation (with `signed`, Adam is fed the sign of the images' gradient), images clipped to
  `bounds` after every step; the distance is the last step's (before
  its update: no second program is compiled for it). Jitted once per shape; the iterations
  run as a Python loop over a jitted step (a convolution's gradient inside a `lax` loop is XLA
  CPU's slow path: docs/references.md, xla-cpu-loops)."""
  if distance not in DISTANCES:
    raise ValueError(f'distance={distance!r}; expected one of {DISTANCES}.')
  optimizer = optax.adam(learning_rate_schedule(learning_rate, iterations))

  def objective(images, target, *args):
    match = gradient_distance(grad_fn(images, *args), target, distance)
    return match + tv_weight * total_variation(images), match

  @jax.jit
  def step(images, opt_state, target, *args):
    (_, match), grad = jax.value_and_grad(objective, has_aux=True)(images, target, *args)
    if signed:
      grad = jnp.sign(grad)
    updates, opt_state = optimizer.update(grad, opt_state, images)
    images = jnp.clip(optax.apply_updates(images, updates), *bounds)
    return images, opt_state, match

  def attack(images, target, *args):
    opt_state = optimizer.init(images)
    for _ in range(iterations):
      images, opt_state, match = step(images, opt_state, target, *args)
    return images, match

  return attack


def make_sum_attack(grad_fn: Callable, num_shared: int, *, iterations: int,
                    learning_rate: float, tv_weight: float, distance: str, signed: bool = False,
                    bounds: tuple[float, float] = (-1.0, 1.0)) -> Callable:
  """`make_attack` for a weighted sum of clients' updates, as secure aggregation reveals it:
  `attack(images [m, ...], target, *shared, *per_client, shares [m])` matches
  Σ_k s_k grad_fn(images[k], *shared, *(a[k] for a in per_client)) to `target` (`num_shared`
  arguments common to all clients first, then those with a leading client axis). The same
  objective as one program over the clients (a `vmap`), but run client by client: each client's
  forward pass returns its VJP, the sum's cotangent is sent back through each. Under `vmap` the
  per-client parameter gradients inside the model become grouped convolutions, XLA CPU's slow
  path (on the grid's cell of 8 clients x 2 steps of 4 images at 32 x 32: 7.3 s an iteration
  against about 1 s client by client, at load 14 on 2 cores)."""
  if distance not in DISTANCES:
    raise ValueError(f'distance={distance!r}; expected one of {DISTANCES}.')
  optimizer = optax.adam(learning_rate_schedule(learning_rate, iterations))
  forward = jax.jit(lambda image, *args: jax.vjp(lambda x: grad_fn(x, *args), image))
  backward = jax.jit(lambda vjp, cotangent: vjp(cotangent)[0])

  @jax.jit
  def match(grads, shares, target):
    def distance_of(parts):
      total = jax.tree.map(lambda *g: sum(s * x for s, x in zip(shares, g)), *parts)
      return gradient_distance(total, target, distance)
    return jax.value_and_grad(distance_of)(grads)

  @jax.jit
  def step(images, image_grads, opt_state):
    grad = image_grads + tv_weight * jax.grad(total_variation)(images)
    if signed:
      grad = jnp.sign(grad)
    updates, opt_state = optimizer.update(grad, opt_state, images)
    return jnp.clip(optax.apply_updates(images, updates), *bounds), opt_state

  def attack(images, target, *args):
    shared, per_client, shares = args[:num_shared], args[num_shared:-1], args[-1]
    opt_state = optimizer.init(images)
    for _ in range(iterations):
      outs = [forward(images[k], *shared, *(a[k] for a in per_client))
              for k in range(len(images))]
      distance_now, cotangents = match([g for g, _ in outs], shares, target)
      image_grads = jnp.stack([backward(vjp, c) for (_, vjp), c in zip(outs, cotangents)])
      images, opt_state = step(images, image_grads, opt_state)
    return images, distance_now

  return attack


def invert(attack: Callable, target, shape: tuple[int, ...], rng: jax.Array, *args,
           restarts: int = 1, bounds: tuple[float, float] = (-1.0, 1.0)
           ) -> tuple[jax.Array, float]:
  """Runs `attack` (`make_attack`) from `restarts` uniform draws of `shape` in `bounds`; returns
  the images with the lowest matching distance, and that distance."""
  best, best_loss = None, np.inf
  for key in jax.random.split(rng, restarts):
    images, loss = attack(jax.random.uniform(key, shape, jnp.float32, *bounds), target, *args)
    if best is None or float(loss) < best_loss:
      best, best_loss = images, float(loss)
  return best, best_loss


def psnr(reconstructed: np.ndarray, true: np.ndarray, data_range: float = 255.0) -> np.ndarray:
  """PSNR in dB of each image `[N, H, W, C]` (inf where identical)."""
  diff = np.asarray(reconstructed, np.float64) - np.asarray(true, np.float64)
  mse = np.mean(np.square(diff).reshape(len(diff), -1), axis=1)
  with np.errstate(divide='ignore'):
    return 10.0 * np.log10(data_range ** 2 / mse)


def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> np.ndarray:
  """`[size, size]` Gaussian weights summing to 1."""
  x = np.arange(size, dtype=np.float64) - (size - 1) / 2
  g = np.exp(-x ** 2 / (2 * sigma ** 2))
  w = np.outer(g, g)
  return w / w.sum()


def _filter_valid(images: np.ndarray, window: np.ndarray) -> np.ndarray:
  """`[N, H, W, C]` correlated with `window` at its valid positions -> `[N, H-k+1, W-k+1, C]`."""
  k = window.shape[0]
  patches = np.lib.stride_tricks.sliding_window_view(images, (k, k), axis=(1, 2))
  return np.einsum('nhwcij,ij->nhwc', patches, window)


def ssim(reconstructed: np.ndarray, true: np.ndarray, data_range: float = 255.0) -> np.ndarray:
  """SSIM of each image `[N, H, W, C]` (module docstring); images smaller than the window use a
  window as large as they are (the same σ)."""
  x = np.asarray(reconstructed, np.float64)
  y = np.asarray(true, np.float64)
  if x.shape != y.shape or x.ndim != 4:
    raise ValueError(f'ssim: shapes {x.shape} and {y.shape}; expected two equal [N, H, W, C].')
  size = min(SSIM_WINDOW, x.shape[1], x.shape[2])
  window = gaussian_window(size)
  c1, c2 = (SSIM_K1 * data_range) ** 2, (SSIM_K2 * data_range) ** 2
  mu_x, mu_y = _filter_valid(x, window), _filter_valid(y, window)
  var_x = _filter_valid(x * x, window) - mu_x ** 2
  var_y = _filter_valid(y * y, window) - mu_y ** 2
  cov = _filter_valid(x * y, window) - mu_x * mu_y
  s = ((2 * mu_x * mu_y + c1) * (2 * cov + c2) /
       ((mu_x ** 2 + mu_y ** 2 + c1) * (var_x + var_y + c2)))
  return s.reshape(len(s), -1).mean(axis=1)
