"""float16 training in the methods' local steps (core/loss_scale.py's `scaled_optimizer`,
`value_and_grad_of`, `undo_if_skipped`), on FedPE's local trainer (`common.local_trainer`, the
step of FedPE, FedGC, FedFV, FedAwS, FedFace, FedUV, centralized):

- under float32 and bfloat16 the trainer's program is today's: its jaxpr equals the one traced
  with the three loss-scaling calls replaced by `jax.value_and_grad`, the optimizer and the
  identity;
- an overflow injected by an initial scale of 2**20 is skipped step after step, each leaving the
  parameters, BatchNorm statistics and optimizer state bit for bit, the scale halving and the
  metrics counting the steps; training then recovers: the run equals, bit for bit, the run whose
  skipped steps were padding steps and whose scale started where the first run's settled;
- what crosses under float16: the update and its shapes as under float32, two metrics more. The
  loss scale stays on the client: in its kept optimizer state under FedPE's
  `client_optimizer_state='keep'`, and in `RoundState.clients['loss_scale']` where the optimizer
  starts afresh each round (FedPE's 'reset'; Ditto: one for each model; FedRep, FedPer, FedFV,
  FedAwS; FedFace, FedUV and FedGPAD in the full tier; FedMA, whose broadcast differs per client,
  end to end in tests/test_experiment_float16.py);
- FedRep's head and body phases share one scale: the body phase starts where the head phase's
  overflows left it (a hand-computed float16 quadratic).
The float16 runs through the driver: tests/test_experiment_float16.py."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import common, fedrep
from fedjax_face.core import loss_scale
from fedjax_face.data import federated
from tests import engine_cases

_STEPS = 24
_INJECTED_SCALE = 2.0**20   # this float16 model and head overflow from 2**12 up


def _model(dtype: str):
  return models.build_backbone(ml_collections.ConfigDict(dict(
      name='small_cnn', width=4, embedding_dim=8, num_stages=1, dtype=dtype)))


def _trainer(model):
  optimizer = optax.chain(optax.add_decayed_weights(5e-4), optax.sgd(0.1, momentum=0.9))
  return common.local_trainer(model, head_kwargs={'kind': 'cosface', 'scale': 64.0,
                                                  'margin': 0.35},
                              optimizer=optimizer, step_mode='scan')


def _problem(model, steps: int = _STEPS, init=common.init_backbone):
  """(variables, class embeddings [C, d], a client's round data with `steps` steps); the
  variables `init(model, rng, image_shape, train=True)`."""
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 4, size=(steps, 4)).astype(np.int32)
  data = {'images': rng.integers(0, 256, size=(steps, 4, 8, 8, 3), dtype=np.uint8),
          'labels': labels, 'mask': np.ones((steps, 4), bool), 'class_mask': np.ones(4, bool)}
  variables = init(model, jax.random.PRNGKey(0), (8, 8, 3), train=True)
  w = jax.random.normal(jax.random.PRNGKey(1), (4, 8), jnp.float32)
  return variables, w, data


def _init_shapes(*args, **kwargs):
  """`common.init_backbone`'s variables as shapes and dtypes: nothing compiled or run."""
  return jax.eval_shape(lambda: common.init_backbone(*args, **kwargs))


def _bits(tree):
  return [np.asarray(leaf).tobytes() for leaf in jax.tree.leaves(tree)]


def _at_scale(opt_state, scale: float):
  return opt_state.replace(loss_scale=loss_scale.init(scale))


@pytest.mark.parametrize('dtype', ['float32', pytest.param('bfloat16', marks=pytest.mark.full)])
def test_the_program_without_float16_is_todays(dtype, monkeypatch):
  model = _model(dtype)
  # A program's jaxpr needs its inputs' shapes only: the backbone is not initialized.
  variables, w, data = _problem(model, steps=2, init=_init_shapes)
  train = _trainer(model)
  args = (variables, w, data, jax.random.PRNGKey(2))
  traced = str(jax.make_jaxpr(train)(*args))
  monkeypatch.setattr(loss_scale, 'scaled_optimizer', lambda optimizer, enabled: optimizer)
  monkeypatch.setattr(loss_scale, 'value_and_grad_of', lambda f, has_aux=False: (
      lambda opt_state, params, *a: jax.value_and_grad(f, has_aux=has_aux)(params, *a)))
  monkeypatch.setattr(loss_scale, 'undo_if_skipped', lambda new_opt, old_opt, new, old: new)
  monkeypatch.setattr(loss_scale, 'round_metrics', lambda start, end: {})
  assert str(jax.make_jaxpr(_trainer(model))(*args)) == traced


@pytest.fixture(scope='module')
def float16_runs():
  """FedPE's local trainer in float16 from the injected scale (run A), then from the scale A
  settled at with A's skipped steps as padding (run B), and A's first step alone."""
  model = _model('float16')
  variables, w, data = _problem(model)
  trainer = _trainer(model)
  train = jax.jit(trainer)
  rng = jax.random.PRNGKey(2)
  start = _at_scale(trainer.init_opt_state(variables, w), _INJECTED_SCALE)
  run_a = train(variables, w, data, rng, start)
  skipped = int(run_a[3]['loss_scale/skipped_steps'])
  padded = dict(data, mask=data['mask'] & (np.arange(_STEPS) >= skipped)[:, None])
  run_b = train(variables, w, padded, rng, _at_scale(start, _INJECTED_SCALE / 2**skipped))
  only_first = dict(data, mask=data['mask'] & (np.arange(_STEPS) == 0)[:, None])
  first = train(variables, w, only_first, rng, start)   # the others padding: one compile
  return (variables, w, start), run_a, run_b, first, skipped


def test_an_injected_overflow_is_skipped_bit_for_bit(float16_runs):
  (variables, w, start), _, _, (new_vars, new_w, opt_state, metrics), _ = float16_runs
  assert _bits((new_vars, new_w, opt_state.inner)) == _bits((variables, w, start.inner))
  assert float(opt_state.loss_scale.scale) == _INJECTED_SCALE / 2
  assert int(opt_state.skipped_steps) == 1
  assert (float(metrics['loss_scale/skipped_steps']), float(metrics['loss_scale/scale'])) == (
      1.0, _INJECTED_SCALE / 2)


def test_training_recovers_as_if_the_skipped_steps_were_never_taken(float16_runs):
  (variables, w, _), run_a, run_b, _, skipped = float16_runs
  assert 1 <= skipped <= _STEPS - 4   # the injected overflow, then steps that train
  (vars_a, w_a, opt_a, metrics_a), (vars_b, w_b, opt_b, metrics_b) = run_a, run_b
  assert _bits((vars_a, w_a, opt_a.inner, opt_a.loss_scale)) == _bits(
      (vars_b, w_b, opt_b.inner, opt_b.loss_scale))
  assert float(metrics_a['loss_scale/scale']) == _INJECTED_SCALE / 2**skipped
  assert float(metrics_b['loss_scale/skipped_steps']) == 0.0
  assert _bits(vars_a['params']) != _bits(variables['params'])
  assert np.isfinite(float(metrics_a['train_loss']))


def _client_update(dtype: str, client_optimizer_state: str):
  config = engine_cases.tiny_config('fedpe')
  config.model.dtype = dtype
  config.federated.client_optimizer_state = client_optimizer_state
  fed = engine_cases.tiny_problem()
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedpe').build(config, model, fed, step_mode='scan')
  data = {'images': jax.ShapeDtypeStruct((2, 4, 8, 8, 3), jnp.uint8),
          'labels': jax.ShapeDtypeStruct((2, 4), jnp.int32),
          'mask': jax.ShapeDtypeStruct((2, 4), jnp.bool_),
          'class_mask': jax.ShapeDtypeStruct((fed.max_classes,), jnp.bool_)}
  return engine_cases.traced_client_update(algorithm, data)


def _shapes(tree):
  return jax.tree.map(lambda x: (x.shape, x.dtype), tree)


@pytest.mark.parametrize('client_optimizer_state', [
    'reset', pytest.param('keep', marks=pytest.mark.full)])
def test_what_crosses_under_float16(client_optimizer_state):
  state32, result32 = _client_update('float32', client_optimizer_state)
  state16, result16 = _client_update('float16', client_optimizer_state)
  # The update, what reaches the server, is float32's: nothing about the scale crosses.
  assert _shapes(result16.update) == _shapes(result32.update)
  assert set(result16.metrics) == set(result32.metrics) | {'loss_scale/skipped_steps',
                                                           'loss_scale/scale'}
  if client_optimizer_state == 'reset':   # the client keeps its scale apart from its momentum
    assert set(result16.private) == set(result32.private) | {'loss_scale'}
    assert _is_scale(result16.private['loss_scale'])
    assert jax.tree.leaves(state16.clients['loss_scale'])[0].shape == (5,)
    return
  # 'keep': the client's own optimizer state holds it, beside its momentum, never sent.
  kept = result16.private['opt_state']
  assert isinstance(kept, loss_scale.ScaledOptState)
  assert _shapes(kept.inner) == _shapes(result32.private['opt_state'])
  assert _shapes((kept.loss_scale, kept.skipped_steps)) == (
      loss_scale.LossScaleState(((), jnp.float32), ((), jnp.int32)), ((), jnp.int32))
  assert isinstance(state16.clients['opt_state'], loss_scale.ScaledOptState)


def _one_identity_each(num_clients: int):
  """`engine_cases.tiny_problem`'s images, one identity per client (FedFV's and FedUV's
  partition)."""
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(num_clients), 4).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  return federated.build(images, labels, [np.array([i], np.int32) for i in range(num_clients)])


def _kept_client_update(name: str, dtype: str):
  """A data center of a PAD config (`pad/<method>`), or a client of the tiny recognition problem
  (`engine_cases`: `name` a method, 'fedper' FedRep's joint steps), traced by shapes."""
  one_each = name in ('fedfv', 'feduv')
  fed = _one_identity_each(3) if one_each else engine_cases.tiny_problem(3)
  if name.startswith('pad/'):
    from tests import config_files
    config = config_files.load_config(name)
    steps, batch, size = 1, 4, config.data.image_size
    data = {'images': jax.ShapeDtypeStruct((steps, batch, size, size, 3), jnp.uint8),
            'labels': jax.ShapeDtypeStruct((steps, batch), jnp.int32),
            'mask': jax.ShapeDtypeStruct((steps, batch), jnp.bool_),
            'targets': {'depth': jax.ShapeDtypeStruct((steps, batch, size, size), jnp.float32)}}
  else:
    config = engine_cases.tiny_config('fedrep' if name == 'fedper' else name)
    if name == 'fedper':
      config.fedrep.alternate = False
    data = {'images': jax.ShapeDtypeStruct((2, 4, 8, 8, 3), jnp.uint8),
            'labels': jax.ShapeDtypeStruct((2, 4), jnp.int32),
            'mask': jax.ShapeDtypeStruct((2, 4), jnp.bool_),
            'class_mask': jax.ShapeDtypeStruct((fed.max_classes,), jnp.bool_)}
  config.model.dtype = dtype
  algorithm = algorithms.get(config.algorithm).build(config, models.build_backbone(config.model),
                                                     fed, step_mode='scan')
  return _traced_client_update(algorithm, data)


def _traced_client_update(algorithm, data):
  """`engine_cases.traced_client_update`, client 0's `per_client` inputs (FedFV's own rows and
  W~) taken off the broadcast's clients axis, as the engine's map over clients takes them."""
  state = jax.eval_shape(algorithm.init, jax.random.PRNGKey(0))
  client_input = jax.eval_shape(lambda s: algorithm.broadcast(
      s, jnp.zeros(1, jnp.int32), jnp.zeros((), jnp.int32), jax.random.PRNGKey(1)), state.server)
  client_input = client_input._replace(per_client=jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), client_input.per_client))
  private = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state.clients)
  return state, jax.eval_shape(algorithm.client_update, client_input, private, data,
                               jax.random.PRNGKey(0))


def _is_scale(tree) -> bool:
  return isinstance(tree, loss_scale.LossScaleState) and _shapes(tree) == (
      loss_scale.LossScaleState(((), jnp.float32), ((), jnp.int32)))


@pytest.mark.parametrize('name,kept', [
    ('ditto', ('global', 'personal')),
    ('fedrep', None),   # one scale for its head and body phases (fedrep's docstring)
    ('fedper', None),
    ('fedfv', None),
    ('fedaws', None),
    pytest.param('fedface', None, marks=pytest.mark.full),
    pytest.param('feduv', None, marks=pytest.mark.full),
    pytest.param('pad/fedgpad', None, marks=pytest.mark.full),
    pytest.param('pad/ditto', ('global', 'personal'), marks=pytest.mark.full)])
def test_a_client_keeps_its_loss_scale_between_rounds_and_sends_nothing_of_it(name, kept):
  # FedPAD / FedGPAD take one local step a round: a scale started afresh each round would
  # skip every round's only step until it fitted (core/loss_scale.py).
  state32, result32 = _kept_client_update(name, 'float32')
  state16, result16 = _kept_client_update(name, 'float16')
  assert _shapes(result16.update) == _shapes(result32.update)
  assert set(result16.private) == set(result32.private) | {'loss_scale'}
  # The round's metrics say so (Ditto's personal model: two more, 'loss_scale/personal_*').
  added = set(result16.metrics) - set(result32.metrics)
  assert set(result32.metrics) <= set(result16.metrics)
  assert {'loss_scale/skipped_steps', 'loss_scale/scale'} <= added
  assert all(name.startswith('loss_scale/') for name in added)
  scales = result16.private['loss_scale']
  assert _is_scale(scales) if kept is None else (
      set(scales) == set(kept) and all(_is_scale(scales[k]) for k in kept))
  num_clients = jax.tree.leaves(state16.clients['loss_scale'])[0].shape
  assert num_clients == (3,)


def _float16_quadratic(trained, frozen, batch):
  """FedRep's two-part quadratic 1/2 (h b - y)^2 with its residual in float16 (so `train_part`
  scales it): the backward pass carries S·r in float16, inf once |S·r| > 65504."""
  parts = {**trained['params'], **frozen['params']}
  residual = (parts['h'] * parts['b'] - batch['y']).astype(jnp.float16)
  return 0.5 * (residual * residual).astype(jnp.float32), trained['stats']


def test_fedrep_carries_one_loss_scale_from_its_head_steps_into_its_body_steps():
  head = {'params': {'h': jnp.float32(1.0)}, 'stats': {}}
  body = {'params': {'b': jnp.float32(2.0)}, 'stats': {}}
  xs = {'y': jnp.full(3, 5.0), 'mask': jnp.ones((3, 1), bool)}
  alternate = lambda scale: fedrep.alternate(_float16_quadratic, optax.sgd(0.125), head, body,
                                             xs, 1, step_mode='scan',
                                             loss_scale_state=loss_scale.init(scale))
  # From 2**14 (|S·r| = 3·2**14 fits) no step overflows: float32's numbers (test_fedbn_fedrep:
  # h = 2.125, b = 2.19921875), every value exact in float16.
  new_head, new_body, losses, end = alternate(2.0**14)
  assert (float(new_head['params']['h']), float(new_body['params']['b'])) == (2.125, 2.19921875)
  assert np.asarray(losses).tolist() == [4.5, 1.125, 0.28125]
  assert (float(end.loss_scale.scale), int(end.loss_scale.good_steps), int(end.skipped_steps)) == (
      2.0**14, 3, 0)
  # From 2**16: head step 1 (r = -3) overflows at 2**16 and head step 2 (h still 1, r = -3) at
  # 2**15; the body step takes the head phase's 2**14 (a fresh scale would overflow again):
  # b = 2 + 3·1/8 = 2.375.
  new_head, new_body, _, end = alternate(2.0**16)
  assert (float(new_head['params']['h']), float(new_body['params']['b'])) == (1.0, 2.375)
  assert (float(end.loss_scale.scale), int(end.loss_scale.good_steps), int(end.skipped_steps)) == (
      2.0**14, 1, 2)
  assert loss_scale.round_metrics(None, end) == {'loss_scale/skipped_steps': 2.0,
                                                 'loss_scale/scale': 2.0**14}
