"""Server optimizers: Reddi et al.'s Algorithm 2 steps by hand, and on a real round."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.core import blocks, server_optimizers
from tests import engine_cases

B1, B2, TAU, ETA = 0.9, 0.99, 1e-3, 0.05


def _two_steps(name, x, means, **kwargs):
  opt = server_optimizers.make(name, learning_rate=ETA, b1=B1, b2=B2, tau=TAU, **kwargs)
  state = opt.init(x)
  out = []
  for mean in means:
    x, state = server_optimizers.step(opt, x, mean, state)
    out.append(np.asarray(x))
  return out


def test_fedadam_two_steps_by_hand():
  x0 = np.array([0.5, -1.0, 2.0], np.float32)
  means = [np.array([0.6, -1.2, 2.0], np.float32), np.array([0.2, -0.9, 2.5], np.float32)]
  got = _two_steps('fedadam', jnp.asarray(x0), [jnp.asarray(m) for m in means])
  x, m, v = x0.astype(np.float64), 0.0, TAU**2   # v_{-1} = τ², m_{-1} = 0, no bias correction
  for mean, g in zip(means, got):
    delta = mean - x
    m = B1 * m + (1 - B1) * delta
    v = B2 * v + (1 - B2) * delta**2
    x = x + ETA * m / (np.sqrt(v) + TAU)
    np.testing.assert_allclose(g, x, rtol=1e-6, atol=1e-7)


def test_fedyogi_two_steps_by_hand():
  x0 = np.array([0.5, -1.0, 2.0], np.float32)
  means = [np.array([0.6, -1.2, 2.0], np.float32), np.array([0.7, -1.0, 1.9], np.float32)]
  got = _two_steps('fedyogi', jnp.asarray(x0), [jnp.asarray(m) for m in means])
  x, m, v = x0.astype(np.float64), 0.0, np.full(3, TAU**2)
  for mean, g in zip(means, got):
    delta = mean - x
    m = B1 * m + (1 - B1) * delta
    v = v - (1 - B2) * delta**2 * np.sign(v - delta**2)
    x = x + ETA * m / (np.sqrt(v) + TAU)
    np.testing.assert_allclose(g, x, rtol=1e-6, atol=1e-7)


def test_fedavgm_is_server_momentum_on_the_pseudo_gradient():
  x0 = np.array([1.0, 2.0], np.float32)
  means = [np.array([1.5, 1.0], np.float32), np.array([1.0, 1.5], np.float32)]
  got = _two_steps('fedavgm', jnp.asarray(x0), [jnp.asarray(m) for m in means], momentum=0.7)
  x, v = x0.astype(np.float64), 0.0
  for mean, g in zip(means, got):
    v = 0.7 * v + (mean - x)   # Hsu et al.: v ← βv + Δ, x ← x + ηv
    x = x + ETA * v
    np.testing.assert_allclose(g, x, rtol=1e-6)


def test_fedavg_at_rate_one_is_the_mean_and_is_not_wrapped():
  x0, mean = jnp.array([0.1, 0.2]), jnp.array([0.3, -0.4])
  opt = server_optimizers.make('fedavg')
  x, _ = server_optimizers.step(opt, x0, mean, opt.init(x0))
  np.testing.assert_allclose(x, mean, rtol=1e-7)
  config = engine_cases.tiny_config('fedpe')
  assert not blocks.from_config(config).active   # the default run is today's, unwrapped


def test_unknown_optimizer_is_refused():
  with pytest.raises(ValueError, match="'fedsgd'"):
    server_optimizers.make('fedsgd')



def test_fedadam_on_a_round_steps_from_the_fedavg_mean_and_leaves_batch_stats_to_it():
  cohorts = ((0, 1, 2, 3, 4),)
  plain, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=cohorts)
  x0, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=())
  adam, _ = engine_cases.run_rounds(
      'fedpe', 'loop', cohorts=cohorts,
      configure=engine_cases.set_fields(server_optimizer__name='fedadam',
                                        server_optimizer__learning_rate=ETA))
  before = blocks.chosen_leaves(x0.server['model'])
  mean = blocks.chosen_leaves(plain.server['model'])
  after = blocks.chosen_leaves(adam.server['method']['model'])
  assert set(after) == set(mean) and all('batch_stats' not in p for p in after)
  for path, x in before.items():
    delta = mean[path].astype(np.float64) - x
    v = B2 * TAU**2 + (1 - B2) * delta**2
    expected = x + ETA * (1 - B1) * delta / (np.sqrt(v) + TAU)
    np.testing.assert_allclose(after[path], expected, rtol=2e-5, atol=1e-6, err_msg=path)
  # BatchNorm statistics: the method's own mean, bit for bit; the clients' W_k as without it.
  jax.tree.map(np.testing.assert_array_equal, adam.server['method']['model']['batch_stats'],
               plain.server['model']['batch_stats'])
  jax.tree.map(np.testing.assert_array_equal, adam.clients['method'], plain.clients)
