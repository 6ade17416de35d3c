"""Ditto and APFL: Ditto's personal step and APFL's mixing gradients by hand on quadratics, the
server step by hand, exactly what crosses to the server (the global model's update alone, never
v_k or alpha; on anti-spoofing the structures of a data center's detector), each client's
personalized model, and the config checks' one-line errors.

The client rounds run on a two-layer model (Dense + BatchNorm): the methods are the same for any
backbone, and it compiles in a fraction of the small CNN's time."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_face import algorithms, config_lib, models
from fedjax_face.algorithms import apfl, common, ditto, personal_training
from fedjax_face.core import aggregation, local_terms
from fedjax_face.core.algorithm import RoundState
from fedjax_face.data import federated
from tests import config_files, engine_cases


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


def test_a_blocks_fedprox_term_acts_on_the_global_model_alone():
  # Ditto's and APFL's pair of optimizers (`build`: common.make_optimizer for w,
  # ditto.uncorrected_optimizer for v) under a federated block's FedProx, mu = 1, on the first
  # leaf received (core/local_terms.applied), eta = 0.1, F = 3/2 (u - 0.5)^2, w^t = 1:
  #   w: step 1: 1 - 0.1 (1.5 + 1 (1 - 1)) = 0.85; step 2: 0.85 - 0.1 (1.05 + (0.85 - 1)) = 0.76
  #   v (Ditto, lambda = 0.5, from 2): 1.5, 1.175, as without the block: FedProx is not on it.
  config = ml_collections.ConfigDict({'optimizer': dict(
      name='sgd', learning_rate=0.1, momentum=0.0, weight_decay=0.0, correction='fedprox')})
  grad_f = lambda u: {'a': 3.0 * (u['a'] - 0.5), 'b': jnp.zeros_like(u['b'])}
  w = {'a': jnp.array(1.0), 'b': jnp.array(3.0)}
  v = {'a': jnp.array(2.0), 'b': jnp.array(-1.0)}
  with local_terms.applied([w['a']], None, mu=1.0) as tied:
    w_optimizer = common.make_optimizer(config.optimizer)
    v_optimizer = ditto.personal_optimizer(0.5, ditto.uncorrected_optimizer(config))
    w_state, v_state = w_optimizer.init(w), v_optimizer.init(w)
  assert tied == {0}
  seen = []
  for _ in range(2):
    updates, w_state = w_optimizer.update(grad_f(w), w_state, w)
    w = optax.apply_updates(w, updates)
    updates, v_state = v_optimizer.update(grad_f(v), v_state, v)
    v = optax.apply_updates(v, updates)
    seen.append((float(w['a']), float(w['b']), float(v['a'])))
  np.testing.assert_allclose(seen, [(0.85, 3.0, 1.5), (0.76, 3.0, 1.175)], rtol=1e-6)


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
  assert not np.array_equal(other.private['personal']['params']['W'],
                            result.private['personal']['params']['W'])
  # The personal model trained, and is not the model sent.
  sent = result.update['model']['params']['Dense_0']['kernel']
  kept = result.private['personal']['params']['backbone']['Dense_0']['kernel']
  before = private['personal']['params']['backbone']['Dense_0']['kernel']
  assert not np.array_equal(kept, sent)
  assert not np.array_equal(kept, before)


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
  # alpha_k v_k + (1 - alpha_k) w with client 1: 0.25 * 3 + 0.75 * 1 = 1.5. Both with the
  # client's own BatchNorm statistics. The task's `predict` here returns the variables given.
  task = personal_training.LocalModel(
      recognition=False, image_shape=(), pack=lambda variables, rows: variables['params'],
      variables=lambda params, stats: {'params': params, 'batch_stats': stats}, loss=None,
      step_inputs=None, predict=lambda variables, images: variables)
  personal = {'params': {'k': jnp.array([[0.0], [3.0]])},
              'batch_stats': {'m': jnp.array([2.0, 4.0])}}
  server = {'model': {'params': {'k': jnp.array([1.0])}, 'batch_stats': {'m': jnp.array(9.0)}}}
  ditto_state = RoundState(server=server, clients={'personal': personal}, round=jnp.array(1))
  own = ditto._personalized(task, ditto_state)(1)(None)
  assert jax.tree.map(np.ndarray.tolist, jax.tree.map(np.asarray, own)) == {
      'params': {'k': [3.0]}, 'batch_stats': {'m': 4.0}}
  apfl_state = RoundState(server=server, round=jnp.array(1),
                          clients={'alpha': jnp.array([0.5, 0.25]), 'personal': personal})
  mixed = apfl._personalized(task, apfl_state)(1)(None)
  assert jax.tree.map(np.ndarray.tolist, jax.tree.map(np.asarray, mixed)) == {
      'params': {'k': [1.5]}, 'batch_stats': {'m': 4.0}}


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
def test_an_anti_spoofing_config_needs_fedpads_detector(name):
  # On anti-spoofing both train FedPAD's detector (personal_training.detector_model).
  config = config_lib.base_config('anti_spoofing')
  config.algorithm = name
  config[name] = algorithms.get(name).config_section()
  with pytest.raises(ValueError) as raised:
    algorithms.get(name).check_config(config)
  assert str(raised.value) == (f"config.model.name='small_cnn' with {name} on anti-spoofing; "
                               "expected one of ('pad_resnet18', 'pad_net') (FedPAD's detector, "
                               'models/pad.py).')


def test_on_anti_spoofing_a_data_center_sends_the_shared_detector_alone():
  # FedPAD's Table II network at runlocal size; the structures only (jax.eval_shape: traced, not
  # compiled). The end-to-end runs: tests/test_experiment_pad_personal.py (full tier).
  steps, batch, size = 2, 4, 32
  data = {'images': jax.ShapeDtypeStruct((steps, batch, size, size, 3), jnp.uint8),
          'labels': jax.ShapeDtypeStruct((steps, batch), jnp.int32),
          'mask': jax.ShapeDtypeStruct((steps, batch), jnp.bool_),
          'targets': {'depth': jax.ShapeDtypeStruct((steps, batch, size, size), jnp.float32)}}
  shape_of = lambda tree: jax.tree.map(lambda x: (x.shape, x.dtype), tree)
  for name, kept in (('ditto', {'personal'}), ('apfl', {'personal', 'alpha'})):
    config = config_files.load_config(f'pad/{name}', 'backbone=pad_net,runlocal')
    assert config.data.image_size == size
    algorithm = algorithms.get(name).build(config, models.build_backbone(config.model),
                                           engine_cases.tiny_problem(3), step_mode='scan')
    state, result = engine_cases.traced_client_update(algorithm, data)
    # The whole detector crosses (FedAvg's), its personal copy and alpha stay, no class rows.
    assert set(result.update) == {'model'} and set(result.private) == kept
    assert shape_of(result.update['model']) == shape_of(state.server['model'])
    personal = result.private['personal']
    assert shape_of({'params': personal['params'], 'batch_stats': personal['batch_stats']}) == (
        shape_of(state.server['model']))
