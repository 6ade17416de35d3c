"""Shared pieces of the algorithms: the learning-rate schedule by round and fixed extra classes."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_face import algorithms, config_lib, models
from fedjax_face.algorithms import common
from tests import engine_cases


def _step_config(num_rounds=15):
  c = engine_cases.tiny_config('fedpe')
  c.num_rounds = num_rounds
  c.optimizer.schedule = 'step'
  return c


def test_step_schedule_divides_by_ten_at_two_thirds_and_thirteen_fifteenths():
  # FedFV Sec. 4.2: 15,000 rounds, lr / 10 at rounds 10,000 and 13,000. Scaled to 15 rounds.
  schedule = common.lr_scale_schedule(_step_config(15))
  scales = [float(schedule(r)) for r in range(15)]
  np.testing.assert_allclose(scales, [1.0] * 10 + [0.1] * 3 + [0.01] * 2, rtol=1e-6)
  paper = common.lr_scale_schedule(_step_config(15000))
  np.testing.assert_allclose([float(paper(r)) for r in (9999, 10000, 12999, 13000)],
                             [1.0, 0.1, 0.1, 0.01], rtol=1e-6)


def test_constant_schedule_adds_nothing_to_the_broadcast():
  config = engine_cases.tiny_config('fedpe')
  assert common.lr_scale_schedule(config) is None
  assert common.with_lr_scale({'model': 1}, None, 7) == {'model': 1}


def _one_step(lr, lr_scale):
  model = models.build_backbone(engine_cases.tiny_config().model)
  optimizer = common.make_optimizer(_optimizer_config(lr))
  # Compiled: the step run op by op took ~8 s of the suite, each op compiled on its own.
  step = jax.jit(common.local_step(model, head_kwargs={'kind': 'softmax'}, optimizer=optimizer))
  variables = common.init_backbone(model, jax.random.PRNGKey(0), (8, 8, 3))
  w = jax.random.normal(jax.random.PRNGKey(1), (3, 8))
  params = {'backbone': variables['params'], 'W': w}
  rng = np.random.default_rng(0)
  batch = {'images': jnp.asarray(rng.integers(0, 256, (4, 8, 8, 3), dtype=np.uint8)),
           'labels': jnp.array([0, 1, 2, 0]), 'mask': jnp.ones(4, bool),
           'rng': jax.random.PRNGKey(2)}
  carry = (params, variables['batch_stats'], optimizer.init(params))
  for _ in range(3):   # momentum carries across steps: the scale must act after it
    carry, _ = step(carry, batch, jnp.ones(3, bool), None, None,
                    None if lr_scale is None else jnp.float32(lr_scale))
  return carry[0]


def _optimizer_config(lr):
  c = config_lib.base_config().optimizer
  c.learning_rate = lr
  return c


def test_scaled_update_is_sgd_at_the_scaled_rate():
  scaled = _one_step(0.1, 0.25)
  direct = _one_step(0.025, None)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7), scaled,
               direct)
  unscaled = _one_step(0.1, None)
  assert not np.allclose(unscaled['W'], scaled['W'])


def test_clients_receive_the_rounds_factor():
  config = _step_config(15)
  fed = engine_cases.tiny_problem()
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedpe').build(config, model, fed, step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  ids = jnp.array([0, 1])
  for round_index, expected in ((0, 1.0), (9, 1.0), (10, 0.1), (13, 0.01)):
    shared = algorithm.broadcast(state.server, ids, jnp.int32(round_index),
                                 jax.random.PRNGKey(0)).shared
    np.testing.assert_allclose(shared['lr_scale'], expected, rtol=1e-6)
    assert set(shared) == {'model', 'lr_scale'}


def test_fixed_classes_join_the_softmax_without_gradient():
  model = models.build_backbone(engine_cases.tiny_config().model)
  optimizer = optax.sgd(0.1)
  # Compiled, as in a round: run op by op, the two steps took ~9 s of the suite.
  step = jax.jit(common.local_step(model, head_kwargs={'kind': 'cosface', 'scale': 4.0,
                                                       'margin': 0.0}, optimizer=optimizer))
  variables = common.init_backbone(model, jax.random.PRNGKey(0), (8, 8, 3))
  own = jax.random.normal(jax.random.PRNGKey(1), (1, 8))
  fixed = jax.random.normal(jax.random.PRNGKey(3), (5, 8))
  params = {'backbone': variables['params'], 'W': own}
  images = np.random.default_rng(0).integers(0, 256, (2, 8, 8, 3), dtype=np.uint8)
  batch = {'images': jnp.asarray(images), 'labels': jnp.array([0, 0]),
           'mask': jnp.ones(2, bool), 'rng': jax.random.PRNGKey(2)}
  carry = (params, variables['batch_stats'], optimizer.init(params))
  (new_params, _, _), loss = step(carry, batch, jnp.ones(1, bool), None, fixed)
  # One class alone: the softmax is exactly 0 (FedFV Sec. 2.1); with the fixed classes it is not.
  (_, _, _), alone = step(carry, batch, jnp.ones(1, bool))
  assert float(alone) == 0.0 and float(loss) > 0.1
  assert new_params['W'].shape == (1, 8)          # the fixed rows are not parameters
  assert not np.allclose(new_params['W'], own)    # the own class moved away from them


def test_schedule_fields_are_checked():
  for field, value, match in (
      ('schedule', 'cosine', r"optimizer.schedule='cosine'; expected one of \('constant', 'step'\)"),
      ('decay_at', (0.9, 0.5), r'optimizer.decay_at=\(0.9, 0.5\); expected increasing fractions'),
      ('decay_at', (0.5, 1.0), r'optimizer.decay_at=\(0.5, 1.0\); expected increasing fractions'),
      ('decay_factor', 0.0, r'optimizer.decay_factor=0.0; expected a fraction in \(0, 1\]')):
    config = engine_cases.tiny_config('fedpe')
    config.optimizer[field] = value
    with pytest.raises(ValueError, match=match):
      config_lib.validate(config)
