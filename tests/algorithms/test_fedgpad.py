"""FedGPAD and FedPAD: exactly what crosses to the server (Eq. 10), the data centers' own ES and
Dec, the uniform mean of Eq. 3 / 10, and config errors."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.data import sources
from tests.config_files import load_config


@pytest.fixture(scope='module')
def data():
  config = load_config('pad/fedgpad')
  fed, _ = sources.training_views(config, sources.load(config), one_client=False)
  return fed   # the same frames for both methods (the data section is shared)


def _built(name, arg, data, shapes_only=False):
  """The runlocal config, algorithm and start of `name`; with `shapes_only`, the start's shapes
  alone (`jax.eval_shape`: traced, nothing compiled or run)."""
  config = load_config(f'pad/{name}', ','.join(filter(None, (arg, 'runlocal'))))
  model = models.build_backbone(config.model)
  algorithm = algorithms.get(config.algorithm).build(config, model, data, step_mode='scan')
  init = jax.eval_shape if shapes_only else lambda f, *args: f(*args)
  return config, algorithm, init(algorithm.init, jax.random.PRNGKey(0))


@pytest.fixture(scope='module')
def fedgpad_start(data):
  """FedGPAD's runlocal config, algorithm and start (its ES drawn on its own: the default)."""
  return _built('fedgpad', '', data)


# FedGPAD; FedPAD on its default ResNet-18 and on the Table II network without ES and Dec. FedPAD's
# tests below need its start's structure alone: its shapes (no init compiled, ~8 s of the suite for
# the ResNet-18).
@pytest.fixture(scope='module', params=['fedgpad', 'fedpad', 'fedpad,backbone=pad_net'])
def setup(request, data):
  name, _, arg = request.param.partition(',')
  config, algorithm, state = (request.getfixturevalue('fedgpad_start') if name == 'fedgpad'
                              else _built(name, arg, data, shapes_only=True))
  return request.param, config, data, algorithm, state


def _client(algorithm, state, fed, config, k, trace_only=False):
  """Data center k's batch, its private state and its client update; with `trace_only`, the
  update's shapes alone (`jax.eval_shape`: traced, nothing runs)."""
  from fedjax_face.data import federated
  shapes = jax.eval_shape if trace_only else lambda f, *args: f(*args)
  client_input = shapes(algorithm.broadcast, state.server, jnp.array([k]), state.round,
                        jax.random.PRNGKey(1))
  data = federated.sample_round(fed, np.array([k]), round_index=0, seed=0,
                                steps=config.federated.local_steps,
                                batch_size=config.federated.batch_size, balanced=True)
  data = jax.tree.map(lambda x: x[0], data)
  private = jax.tree.map(lambda x: x[k], state.clients)
  # Run, one program (op by op, each of the update's operations outside its scan compiled alone).
  update = jax.eval_shape if trace_only else lambda f, *args: jax.jit(f)(*args)
  return data, private, update(algorithm.client_update, client_input, private, data,
                               jax.random.PRNGKey(2))


def test_privacy_only_ei_c_and_dep_cross_to_the_server(setup):
  name, config, fed, algorithm, state = setup
  # What crosses is the update's structure; only FedGPAD's check that ES and Dec trained needs
  # values. FedPAD's client update runs in the runs of tests/test_experiment_pad.py (ResNet-18,
  # 'all') and tests/data/test_pad_lists.py (Table II) and in test_kept_optimizer_... below; run
  # here as well, it took ~12 s of the suite.
  data, private, result = _client(algorithm, state, fed, config, 1, trace_only=name != 'fedgpad')
  assert set(result.update) == {'params', 'batch_stats'}
  if name == 'fedpad':
    # FedPAD's ResNet-18: its trunk and its live logit, every parameter (Eq. 3); Eq. 1 alone.
    assert set(result.update['params']) == set(state.server['params']) == {'invariant',
                                                                           'classifier'}
    assert set(result.update['batch_stats']) == {'invariant'}
    assert result.private == {} and state.clients == {}
    assert {k for k in result.metrics if k.startswith('loss_')} == {'loss_cls'}
    return
  # Eq. 10: the domain-invariant extractor, the classifier and the depth estimator, nothing else.
  assert set(result.update['params']) == {'invariant', 'classifier', 'depth'}
  assert set(result.update['batch_stats']) == {'invariant', 'depth'}
  assert set(state.server['params']) == {'invariant', 'classifier', 'depth'}
  if name == 'fedgpad':
    # ES and Dec stay with the data center, trained.
    assert set(result.private['params']) == {'specific', 'decoder'}
    assert set(result.private['batch_stats']) == {'specific'}
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), result.private['params'],
                         private['params'])
    assert all(jax.tree.leaves(moved))
    assert set(result.metrics) >= {'loss_cls', 'loss_depth', 'loss_rec', 'loss_diff'}
  else:
    assert result.private == {} and state.clients == {}
    assert set(result.metrics) >= {'loss_cls', 'loss_depth'}
  # The round's batch is balanced: as many live (class 1) as attack frames.
  assert int((data['labels'] == 1).sum()) == int((data['labels'] == 0).sum())


# The server step is one function for both methods (fedgpad.build's server_update); FedPAD's
# ResNet-18 tree is a third case of the same mean (FEDJAX_FACE_TESTS=full; the suite keeps
# `[fedgpad]` and FedPAD's Table II network, `[fedpad,backbone=pad_net]`).
@pytest.mark.parametrize('setup', ['fedgpad', pytest.param('fedpad', marks=pytest.mark.full),
                                   'fedpad,backbone=pad_net'], indirect=True)
def test_server_takes_the_data_centers_plain_mean(setup):
  _, config, _, algorithm, state = setup
  # FedPAD's start is its shapes: any values serve (each leaf a ramp, so no two entries agree).
  ramp = lambda s: np.linspace(-1.0, 1.0, int(np.prod(s.shape))).reshape(s.shape).astype(s.dtype)
  start = jax.tree.map(lambda x: ramp(x) if isinstance(x, jax.ShapeDtypeStruct) else x,
                       state.server)

  @jax.jit   # one program: op by op, every leaf shape compiled its own (~2 s of the test)
  def server_step(server):
    stacked = jax.tree.map(lambda x: jnp.stack([x, x + 3.0, x + 30.0]), server)
    return algorithm.server_update(server, stacked, jnp.array([10.0, 50.0, 0.0]),
                                   jnp.array([0, 1, 3]), jnp.int32(0), jax.random.PRNGKey(0))
  out = server_step(start)
  # Two real data centers (the third is padding): (x + x + 3) / 2, whatever their frame counts.
  jax.tree.map(lambda o, x: np.testing.assert_allclose(o, x + 1.5, rtol=1e-6, atol=1e-6),
               out, start)


@pytest.mark.parametrize('field, value, match', [
    ('fedgpad.weighting', 'size', r"fedgpad.weighting='size'; expected one of"),
    ('fedgpad.specific_init', 'copy', r"fedgpad.specific_init='copy'; expected one of"),
    ('model.disentangle', None, r'model.disentangle=.* expected'),
    ('model.image_size', 48, r'model.image_size=48 but data.image_size=32'),
    ('data.source', 'synthetic', r"data.source='synthetic'; .* expected an anti-spoofing source "
                                 r"\('pad', 'pad_lists'\)"),
])
def test_config_errors_name_the_field(field, value, match):
  for name, arg in (('fedgpad', 'runlocal'), ('fedpad', 'backbone=pad_net,runlocal')):
    config = load_config(f'pad/{name}', arg)
    section, key = field.split('.')
    config[section][key] = (not config[section][key]) if value is None else value
    with pytest.raises(ValueError, match=match):
      algorithms.check_config(config)


def test_kept_optimizer_makes_rounds_of_one_step_one_run_of_two(data):
  """`federated.client_optimizer_state='keep'`: the data center's optimizer state survives the
  round, so two rounds of one step each (the second from the first's model and state) are the same
  update as one round of both steps; with 'reset' (the default) no optimizer state is kept, so
  every round starts it afresh. Nothing of the state crosses to the server.

  The optimizer is SGD with momentum, not FedPAD's Adam: compiled, the one- and two-step programs
  fuse differently, and Adam's first steps (about the sign of each gradient coordinate) turn
  last-bit differences into whole steps. The kept state is the same code for every optimizer and
  network, so FedPAD trains its Table II network, and FedGPAD (the same client code with ES and
  Dec among the parameters, algorithms/fedgpad.py) is checked from the shapes below."""
  from fedjax_face.data import federated
  config = load_config('pad/fedpad', 'backbone=pad_net,runlocal')
  config.federated.local_steps = 2
  config.optimizer.name, config.optimizer.momentum = 'sgd', 0.9
  model = models.build_backbone(config.model)
  batches = federated.sample_round(data, np.array([0]), round_index=0, seed=0, steps=2,
                                   batch_size=config.federated.batch_size, balanced=True)
  batches = jax.tree.map(lambda x: x[0], batches)
  step = lambda s: jax.tree.map(lambda x: x[s:s + 1], batches)
  rng = jax.random.PRNGKey(2)

  config.federated.client_optimizer_state = 'keep'
  algorithm = algorithms.get('fedpad').build(config, model, data, step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  private = jax.tree.map(lambda x: x[0], state.clients)
  shared = algorithm.broadcast(state.server, jnp.array([0]), state.round, rng)
  both = jax.jit(algorithm.client_update)(shared, private, batches, rng)
  assert 'opt_state' in both.private and 'opt_state' not in both.update
  # The two step keys of the two-step run, one per one-step round.
  keys = jax.random.split(rng, 2)
  one_step = jax.jit(functools.partial(_one_step, algorithm))
  first = one_step(shared, private, step(0), keys[0])
  assert any(np.any(x != 0) for x in jax.tree.leaves(first.private['opt_state']))   # momentum
  second_input = shared._replace(shared={**shared.shared, 'model': first.update})
  second = one_step(second_input, first.private, step(1), keys[1])
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               second.update, both.update)

  # 'reset', in shapes (`jax.eval_shape` traces, nothing runs).
  config.federated.client_optimizer_state = 'reset'
  algorithm = algorithms.get('fedpad').build(config, model, data, step_mode='scan')
  state = jax.eval_shape(algorithm.init, jax.random.PRNGKey(0))
  private = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state.clients)
  shared = jax.eval_shape(algorithm.broadcast, state.server, jnp.array([0]), state.round, rng)
  reset = jax.eval_shape(algorithm.client_update, shared, private, batches, rng)
  assert 'opt_state' not in private and 'opt_state' not in reset.private


def test_es_starts_as_a_copy_of_ei_with_the_authors_init(data, fedgpad_start):
  """`fedgpad.specific_init='copy_of_invariant'` (the authors' code): every data center's ES
  starts equal to the server's EI, parameters and BatchNorm statistics; the default draws it on
  its own. Nothing else of the start changes."""
  config, _, own = fedgpad_start
  assert config.fedgpad.specific_init == 'independent'
  config = config.copy_and_resolve_references()
  config.fedgpad.specific_init = 'copy_of_invariant'
  copied = algorithms.get('fedgpad').build(config, models.build_backbone(config.model), data,
                                           step_mode='scan').init(jax.random.PRNGKey(0))
  assert set(copied.clients) == {'params', 'batch_stats'}
  for collection, clients in copied.clients.items():
    for k in range(data.num_clients):
      jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[k], clients['specific']),
                   copied.server[collection]['invariant'])
  assert not np.array_equal(jax.tree.leaves(own.clients['params']['specific'])[0],
                            jax.tree.leaves(own.server['params']['invariant'])[0])
  jax.tree.map(np.testing.assert_array_equal, copied.server, own.server)
  jax.tree.map(np.testing.assert_array_equal, copied.clients['params']['decoder'],
               own.clients['params']['decoder'])


def test_fedgpad_keeps_the_optimizer_state_of_its_own_es_and_dec(data):
  """With 'keep', FedGPAD's data-center state holds Adam's state over every trained parameter,
  the shared EI, classifier and depth estimator and its own ES and Dec, and the round hands it
  back as private, never in the update (shapes only: `jax.eval_shape` traces, nothing runs)."""
  from fedjax_face.data import federated
  config = load_config('pad/fedgpad')
  config.federated.client_optimizer_state = 'keep'
  config.federated.local_steps = 2
  # The module's frames: neither field changes the data section.
  algorithm = algorithms.get('fedgpad').build(config, models.build_backbone(config.model), data,
                                              step_mode='scan')
  state = jax.eval_shape(algorithm.init, jax.random.PRNGKey(0))
  trained = {'invariant', 'classifier', 'depth', 'specific', 'decoder'}
  adam_moments = [s for s in jax.tree.leaves(state.clients['opt_state'], is_leaf=lambda x: hasattr(
      x, 'mu')) if hasattr(s, 'mu')]
  assert adam_moments and all(set(s.mu) == trained and set(s.nu) == trained
                              for s in adam_moments)
  batches = federated.sample_round(data, np.array([0]), round_index=0, seed=0, steps=2,
                                   batch_size=config.federated.batch_size, balanced=True)
  private = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state.clients)
  shared = jax.eval_shape(algorithm.broadcast, state.server, jnp.array([0]), state.round,
                          jax.random.PRNGKey(1))
  result = jax.eval_shape(algorithm.client_update, shared, private,
                          jax.tree.map(lambda x: x[0], batches), jax.random.PRNGKey(2))
  assert 'opt_state' in result.private and 'opt_state' not in result.update
  assert jax.tree.structure(result.private['opt_state']) == jax.tree.structure(
      private['opt_state'])


def _one_step(algorithm, client_input, private, batch, key):
  """client_update on a one-step batch whose step key is `key` (the two-step run splits its rng
  into one key per step; a one-step run splits its rng into one key, so it is handed `key`
  through a wrapper that returns it)."""
  import unittest.mock  # pylint: disable=g-import-not-at-top
  with unittest.mock.patch.object(jax.random, 'split', lambda k, n: key[None]):
    return algorithm.client_update(client_input, private, batch, key)


def test_each_method_trains_its_own_networks():
  config = load_config('pad/fedgpad')
  config.model.name = 'pad_resnet18'
  with pytest.raises(ValueError, match=r"config.model.name='pad_resnet18' with fedgpad; expected "
                     r"one of \('pad_net',\)"):
    algorithms.check_config(config)
  config = load_config('pad/fedpad')
  config.model.name = 'small_cnn'
  with pytest.raises(ValueError, match=r"expected one of \('pad_resnet18', 'pad_net'\)"):
    algorithms.check_config(config)
  # FedPAD as the paper has it (§IV-A4): ResNet-18, 64 frames a data center; its named variant
  # is the Table II network at FedGPAD's 32.
  paper = load_config('pad/fedpad', 'paper')
  assert (paper.model.name, paper.model.width, paper.federated.batch_size,
          paper.data.image_size) == ('pad_resnet18', 64, 64, 256)
  variant = load_config('pad/fedpad', 'backbone=pad_net')
  assert (variant.model.name, variant.federated.batch_size) == ('pad_net', 32)
  assert load_config('pad/all', 'backbone=pad_net').model.name == 'pad_net'
  assert load_config('pad/single', None).model.name == 'pad_resnet18'
  with pytest.raises(ValueError, match='backbone'):
    load_config('pad/fedgpad', 'backbone=resnet18')
