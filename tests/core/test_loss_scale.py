"""core/loss_scale.py: PyTorch GradScaler's update rule on a hand-written sequence of steps; an
overflow injected into a float16 linear model's step is skipped (parameters and the momentum
state bit for bit unchanged, the scale halved, the metrics saying so) and training recovers, the
scale growing back after the interval; float16's overflow of the 2**16 initial scale itself (by hand);
scaled gradients equal to unscaled ones where nothing overflows; and the state saved and
restored by io/checkpoint.py's Checkpointer bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_face.core import loss_scale
from fedjax_face.io import checkpoint


def _state(scale, good_steps):
  return loss_scale.LossScaleState(jnp.float32(scale), jnp.int32(good_steps))


def _as_tuple(state):
  return float(state.scale), int(state.good_steps)


def test_next_state_grows_after_the_interval_and_halves_on_overflow():
  state = _state(8.0, 0)
  seen = []
  for finite in (True, True, True, False, True, False, False, False, False):
    state = loss_scale.next_state(state, jnp.asarray(finite), growth_interval=3)
    seen.append(_as_tuple(state))
  # Three finite steps double 8 -> 16; an overflow halves and restarts the count; the floor at 1.
  assert seen == [(8.0, 1), (8.0, 2), (16.0, 0), (8.0, 0), (8.0, 1), (4.0, 0), (2.0, 0),
                  (1.0, 0), (1.0, 0)]
  assert state.scale.dtype == jnp.float32 and state.good_steps.dtype == jnp.int32


def test_next_state_keeps_the_scale_where_growing_it_would_be_inf():
  state = loss_scale.next_state(_state(2.0**127, 1), jnp.asarray(True), growth_interval=2)
  assert _as_tuple(state) == (2.0**127, 0)


def test_defaults_are_pytorch_gradscalers():
  assert (loss_scale.INITIAL_SCALE, loss_scale.GROWTH_FACTOR, loss_scale.BACKOFF_FACTOR,
          loss_scale.GROWTH_INTERVAL) == (65536.0, 2.0, 0.5, 2000)
  assert _as_tuple(loss_scale.init()) == (65536.0, 0)


def _float16_loss(params, x, y):
  """A linear model computing in float16 from float32 master weights."""
  prediction = x.astype(jnp.float16) @ params['w'].astype(jnp.float16)
  return jnp.mean(jnp.square(prediction - y.astype(jnp.float16)))


_X = jnp.asarray([[1.0, 2.0], [0.5, -1.0], [-1.5, 0.25]], jnp.float32)
_Y = jnp.asarray([1.0, -0.5, 0.75], jnp.float32)
_OPTIMIZER = optax.sgd(0.05, momentum=0.9)


@jax.jit
def _step(params, opt_state, ls_state, x):
  loss, grads, finite = loss_scale.value_and_grad(_float16_loss)(ls_state, params, x, _Y)
  params, opt_state, ls_state = loss_scale.apply_if_finite(
      _OPTIMIZER, grads, finite, params, opt_state, ls_state, growth_interval=3)
  return params, opt_state, ls_state, loss, loss_scale.metrics(ls_state, finite)


def _bits(tree):
  return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def test_an_injected_overflow_is_skipped_and_training_recovers():
  params = {'w': jnp.asarray([0.1, -0.2], jnp.float32)}
  opt_state = _OPTIMIZER.init(params)
  ls_state = loss_scale.init(2.0**8)
  for _ in range(2):
    params, opt_state, ls_state, first_loss, metrics = _step(params, opt_state, ls_state, _X)
    assert float(metrics['skipped_steps']) == 0.0
  assert _as_tuple(ls_state) == (256.0, 2)
  before = _bits((params, opt_state))

  # Inputs of 1e4 overflow float16's products (max 65504): the loss and gradients are inf / NaN.
  params, opt_state, ls_state, _, metrics = _step(params, opt_state, ls_state, _X * 1e4)
  assert _bits((params, opt_state)) == before
  assert _as_tuple(ls_state) == (128.0, 0)
  assert (float(metrics['skipped_steps']), float(metrics['loss_scale'])) == (1.0, 128.0)

  scales = []
  for _ in range(3):
    params, opt_state, ls_state, loss, metrics = _step(params, opt_state, ls_state, _X)
    assert float(metrics['skipped_steps']) == 0.0
    scales.append(float(ls_state.scale))
  assert _bits((params, opt_state)) != before
  assert scales == [128.0, 128.0, 256.0]   # grown back after growth_interval=3 finite steps
  assert float(loss) < float(first_loss)


def test_float16_overflows_at_the_initial_scale_and_trains_once_halved_twice():
  # By hand, residuals r = x @ w - y = (-1.3, 0.75, -0.95), d(S * mean r^2)/dr = 2 r S / 3:
  # S = 2**16 itself is above float16's largest finite value, 65504, so the cotangent is inf;
  # at S = 2**15 the w[1] gradient sum_i x_i1 * 2 r_i S / 3 = -78368 overflows; S = 2**14 is
  # finite (-39184) and from there the unscaled gradients do not depend on S.
  params = {'w': jnp.asarray([0.1, -0.2], jnp.float32)}
  state, finites, grads = loss_scale.init(), [], []
  for _ in range(4):
    _, step_grads, finite = loss_scale.value_and_grad(_float16_loss)(state, params, _X, _Y)
    finites.append(bool(finite))
    grads.append(step_grads)
    state = loss_scale.next_state(state, finite)
  assert finites == [False, False, True, True]
  assert _as_tuple(state) == (2.0**14, 2)
  assert grads[2]['w'].dtype == jnp.float32 and _bits(grads[2]) == _bits(grads[3])


def test_scaled_gradients_equal_plain_ones_where_nothing_overflows():
  def loss(params, x):
    return jnp.sum(jnp.tanh(x @ params['w']) ** 2), {'n': x.shape[0]}

  params = {'w': jnp.asarray([[0.3], [-0.7]], jnp.float32)}
  (value, aux), grads, finite = loss_scale.value_and_grad(loss, has_aux=True)(
      loss_scale.init(2.0**12), params, _X)
  (plain_value, plain_aux), plain_grads = jax.value_and_grad(loss, has_aux=True)(params, _X)
  # Multiplying and dividing by a power of two is exact in float32.
  assert _bits((value, grads)) == _bits((plain_value, plain_grads))
  assert aux == plain_aux and bool(finite)


def test_the_state_round_trips_through_the_checkpointer_bit_for_bit(tmp_path):
  state = {'params': {'w': jnp.asarray([0.25, -1.5], jnp.float32)},
           'loss_scale': loss_scale.LossScaleState(jnp.float32(2.0**13), jnp.int32(1234))}
  ckpt = checkpoint.Checkpointer(str(tmp_path))
  ckpt.save(7, state, {'done': 7})
  ckpt.close()
  template = jax.tree.map(jnp.zeros_like, state)
  restored = checkpoint.Checkpointer(str(tmp_path)).restore(template)
  assert isinstance(restored['loss_scale'], loss_scale.LossScaleState)
  assert _bits(restored) == _bits(state)
  assert [np.asarray(x).dtype for x in jax.tree.leaves(restored['loss_scale'])] == [
      np.float32, np.int32]
