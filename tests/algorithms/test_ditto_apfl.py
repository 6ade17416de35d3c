"""Ditto and APFL: Ditto's personal step and APFL's mixing gradients by hand on quadratics, the
server step by hand, exactly what crosses to the server (the global model's update alone, never
v_k or alpha), each client's personalized model, and the config checks' one-line errors.

The client rounds run on a two-layer model (Dense + BatchNorm): the methods are the same for any
backbone, and it compiles in a fraction of the small CNN's time."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_face import algorithms, config_lib
from fedjax_face.algorithms import apfl, ditto
from fedjax_face.core import aggregation
from fedjax_face.core.algorithm import RoundState
from fedjax_face.data import federated, sources
from tests import engine_cases


# -- by hand on quadratics -----------------------------------------------------------------------

def test_ditto_personal_step_by_hand_on_a_quadratic():
  # F_k(v) = 3/2 (v - 0.5)^2, lambda = 0.5, eta = 0.1, w^t = 1, v = 2 (Alg. 1's personal update):
  #   step 1: grad F = 3 (2 - 0.5) = 4.5, lambda (v - w) = 0.5 -> v = 2 - 0.1 (4.5 + 0.5) = 1.5
  #   step 2: grad F = 3 (1.5 - 0.5) = 3, lambda (v - w) = 0.25 -> v = 1.5 - 0.1 (3.25) = 1.175
  # (the anchor stays w^t = 1 through the round). The second leaf: F = 0, v = -1, w = 3:
  #   -1 - 0.1 (0.5 (-1 - 3)) = -0.8, then -0.8 - 0.1 (0.5 (-0.8 - 3)) = -0.61.
  grad_f = lambda v: {'a': 3.0 * (v['a'] - 0.5), 'b': jnp.zeros_like(v['b'])}
  w = {'a': jnp.array(1.0), 'b': jnp.array(3.0)}
  v = {'a': jnp.array(2.0), 'b': jnp.array(-1.0)}
  optimizer = ditto.personal_optimizer(0.5, optax.sgd(0.1))
  state = optimizer.init(w)   # the anchor: the model received
  seen = []
  for _ in range(2):
    updates, state = optimizer.update(grad_f(v), state, v)
    v = optax.apply_updates(v, updates)
    seen.append((float(v['a']), float(v['b'])))
  np.testing.assert_allclose(seen, [(1.5, -0.8), (1.175, -0.61)], rtol=1e-6)


def _quadratic(a, c):
  """f(u) = a/2 ||u - c||^2 as an APFL `loss_fn` (no state)."""
  return lambda params, state, batch: (0.5 * a * jnp.sum((params - c) ** 2), state)


def test_apfl_mixing_gradients_by_hand_on_a_quadratic():
  # f(u) = 1/2 ||u||^2, v = (3, -1), w = (1, 1), alpha = 0.5: v_bar = (2, 0), grad f = (2, 0);
  # grad_v = alpha grad f = (1, 0); grad_alpha = <v - w, grad f> = <(2, -2), (2, 0)> = 4.
  (loss, _), (grad_v, grad_alpha) = apfl.mixing_gradients(
      _quadratic(1.0, 0.0), jnp.array([3.0, -1.0]), jnp.array([1.0, 1.0]), jnp.array(0.5), {},
      None)
  assert float(loss) == 2.0
  np.testing.assert_array_equal(grad_v, [1.0, 0.0])
  assert float(grad_alpha) == 4.0


@pytest.mark.parametrize('alpha_lr, adaptive, alpha_after', [
    (0.01, True, 0.19),    # 0.25 - 0.01 * 6
    (0.1, True, 0.0),      # 0.25 - 0.1 * 6 < 0: projected onto [0, 1]
    (0.01, False, 0.25)])  # a fixed alpha
def test_apfl_step_by_hand_on_a_quadratic(alpha_lr, adaptive, alpha_after):
  # f(u) = (u - 0)^2 (a = 2), w = 1, v = 3, alpha = 0.25, eta = 0.1:
  #   w: grad f(1) = 2 -> w = 1 - 0.1 * 2 = 0.8                                    (w step)
  #   v_bar = 0.25 * 3 + 0.75 * 1 = 1.5, grad f(1.5) = 3: grad_v = 0.25 * 3 = 0.75
  #      -> v = 3 - 0.1 * 0.75 = 2.925                                            (v step)
  #   grad_alpha = (3 - 1) * 3 = 6 -> alpha as parametrized; the losses f(1) = 1, f(1.5) = 2.25.
  step = apfl.local_step(_quadratic(2.0, 0.0), optax.sgd(0.1), optax.sgd(0.1), alpha_lr, adaptive)
  w, v = jnp.array(1.0), jnp.array(3.0)
  carry = (w, {}, optax.sgd(0.1).init(w), v, {}, optax.sgd(0.1).init(v), jnp.array(0.25))
  (w, _, _, v, _, _, alpha), (loss_w, loss_v) = step(carry, {'lr_scale': jnp.array(1.0)})
  np.testing.assert_allclose([w, v, alpha, loss_w, loss_v], [0.8, 2.925, alpha_after, 1.0, 2.25],
                             rtol=1e-6, atol=1e-7)


# -- the methods on a two-layer model ------------------------------------------------------------

class _Tiny(nn.Module):
  """Dense + BatchNorm: parameters and running statistics, as the backbones have."""

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Dense(8)(x.reshape(x.shape[0], -1))
    return nn.BatchNorm(use_running_average=not train, name='features')(x)


@pytest.fixture(scope='module', params=['ditto', 'apfl'])
def method(request):
  """(name, algorithm, its initial state, fed) of Ditto / APFL on engine_cases' tiny problem."""
  name = request.param
  config = engine_cases.tiny_config(name)
  config.optimizer.learning_rate = 0.05
  fed = engine_cases.tiny_problem()
  algorithm = algorithms.get(name).build(config, _Tiny(), fed, step_mode='scan')
  return name, algorithm, algorithm.init(jax.random.PRNGKey(0)), fed


def test_only_the_global_models_update_crosses(method):
  # Ditto sends w_k^t alone (Alg. 1's Delta_k), APFL w_i alone (its synchronisation): the
  # personal model and alpha stay, and what is sent does not depend on them at all (bit for bit).
  name, algorithm, state, fed = method
  update = jax.jit(algorithm.client_update)   # compiled once, run twice
  ids = jnp.asarray([1], jnp.int32)
  data = jax.tree.map(lambda x: x[0], federated.sample_round(
      fed, np.asarray(ids), round_index=0, seed=0, steps=2, batch_size=4))
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(1))
  private = jax.tree.map(lambda x: x[0], aggregation.gather_clients(state.clients, ids))
  result = update(client_input, private, data, jax.random.PRNGKey(0))
  assert set(result.update) == {'model'}
  assert set(result.update['model']) == {'params', 'batch_stats'}
  expected_private = {'ditto': {'W', 'personal'}, 'apfl': {'W', 'personal', 'alpha'}}[name]
  assert set(result.private) == expected_private
  # Another personal model (and alpha): the same update, a different personal model.
  moved = dict(private, personal=jax.tree.map(lambda x: x + 0.5, private['personal']))
  if name == 'apfl':
    moved['alpha'] = jnp.asarray(0.9, jnp.float32)
  other = update(client_input, moved, data, jax.random.PRNGKey(0))
  jax.tree.map(np.testing.assert_array_equal, other.update, result.update)
  assert not np.array_equal(other.private['personal']['W'], result.private['personal']['W'])
  # The personal model trained, and is not the model sent.
  sent = result.update['model']['params']['Dense_0']['kernel']
  personal = result.private['personal']
  kept = (personal['model']['params'] if name == 'ditto' else personal['params'])
  before = private['personal']['model'] if name == 'ditto' else private['personal']
  assert not np.array_equal(kept['Dense_0']['kernel'], sent)
  assert not np.array_equal(kept['Dense_0']['kernel'], before['params']['Dense_0']['kernel'])


@pytest.mark.parametrize('name', ['ditto', 'apfl'])
def test_server_update_is_the_weighted_mean_by_hand(name):
  # Ditto's and APFL's averaging: (1 * 2 + 3 * 6) / 4 = 5; the padding client
  # (weight 0) counts for nothing.
  server_update = algorithms.get(name).build(
      engine_cases.tiny_config(name), _Tiny(), engine_cases.tiny_problem(),
      step_mode='scan').server_update
  updates = {'model': {'params': {'k': jnp.array([[2.0], [6.0], [100.0]])}}}
  out = server_update({'model': None}, updates, jnp.array([1.0, 3.0, 0.0]),
                      jnp.array([0, 1, 5]), jnp.array(0), jax.random.PRNGKey(0))
  np.testing.assert_allclose(out['model']['params']['k'], [5.0])


def test_personalized_models_by_hand():
  # The evaluator's model of client k: Ditto's v_k itself; APFL's
  # alpha_k theta_v + (1 - alpha_k) theta with client 1: 0.25 * 3 + 0.75 * 1 = 1.5, its own BN
  # statistics. `apply` here returns the variables it is given.
  echo = lambda variables, images: variables
  personal = {'model': {'params': {'k': jnp.array([[1.0], [7.0]])}}}
  ditto_state = RoundState(server={'model': {'params': {'k': jnp.array([0.0])}}},
                           clients={'personal': personal}, round=jnp.array(1))
  assert ditto._personalized(echo, ditto_state)(1)(None) == {'params': {'k': 7.0}}
  apfl_state = RoundState(
      server={'model': {'params': {'k': jnp.array([1.0])}, 'batch_stats': {'m': jnp.array(9.)}}},
      clients={'alpha': jnp.array([0.5, 0.25]),
               'personal': {'params': {'k': jnp.array([[0.0], [3.0]])},
                            'batch_stats': {'m': jnp.array([2.0, 4.0])}}},
      round=jnp.array(1))
  mixed = apfl._personalized(echo, apfl_state)(1)(None)
  np.testing.assert_allclose(mixed['params']['k'], [1.5])
  assert float(mixed['batch_stats']['m']) == 4.0


@pytest.mark.parametrize('name, field, value, message', [
    ('ditto', 'lam', -1.0, 'config.ditto.lam=-1.0; expected a finite non-negative number.'),
    ('apfl', 'alpha_init', 1.5, 'config.apfl.alpha_init=1.5; expected a fraction in [0, 1].'),
    ('apfl', 'alpha_init', -0.1, 'config.apfl.alpha_init=-0.1; expected a fraction in [0, 1].'),
    ('apfl', 'alpha_learning_rate', float('nan'),
     'config.apfl.alpha_learning_rate=nan; expected a finite non-negative number.')])
def test_check_config_names_the_field(name, field, value, message):
  config = engine_cases.tiny_config(name)
  config[name][field] = value
  with pytest.raises(ValueError) as raised:
    algorithms.get(name).check_config(config)
  assert str(raised.value) == message


@pytest.mark.parametrize('name', ['ditto', 'apfl'])
def test_a_config_without_the_section_is_refused_in_one_line(name):
  config = engine_cases.tiny_config(name)
  del config[name]
  with pytest.raises(ValueError) as raised:
    algorithms.get(name).check_config(config)
  assert str(raised.value) == (f'config.{name} is missing; {name}.config_section() '
                               f'(configs/fedfr/{name}.py) adds it (start from a file in '
                               'configs/).')


@pytest.mark.parametrize('name', ['ditto', 'apfl'])
def test_an_anti_spoofing_config_is_refused_in_one_line(name):
  # Both train with the face-recognition heads' losses here; the PAD data centers are not offered.
  config = config_lib.base_config('anti_spoofing')
  config.algorithm = name
  config[name] = algorithms.get(name).config_section()
  with pytest.raises(ValueError) as raised:
    algorithms.get(name).check_config(config)
  assert str(raised.value) == (f"config.data.source='pad'; {name} trains a face recognition "
                               'backbone here: expected a recognition source '
                               f"{sources.of_task('recognition')}.")
