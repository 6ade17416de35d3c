"""FedBN and FedRep / FedPer: FedRep's alternation by hand on a quadratic (the head steps leave the
body bit for bit, the body steps use the new head), FedPer's joint step by hand, FedBN's local
BatchNorm (a client trains from its own BatchNorm layers and keeps exactly what it trained),
exactly what crosses to the server, each client's personalized model, the server step, and the
config checks' one-line errors.

The client rounds run on a small model with the small CNN's layer names (a Dense 'conv0' and its
BatchNorm 'bn0', then the embedding's 'fc' and 'features' BatchNorm): the methods split the
variables by layer name, and it compiles in a fraction of the small CNN's time."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_face import algorithms, config_lib
from fedjax_face.algorithms import fedrep, partial_sharing
from fedjax_face.core import aggregation
from fedjax_face.data import federated
from tests import engine_cases


class TwoLayers(nn.Module):
  """Dense + BatchNorm, then the embedding: Dense 'fc' + the shift-only 'features' BatchNorm."""

  @nn.compact
  def __call__(self, x, train: bool):
    x = x.reshape((x.shape[0], -1))
    x = nn.Dense(4, use_bias=False, name='conv0')(x)
    x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, name='bn0')(x))
    x = nn.Dense(8, use_bias=False, name='fc')(x)
    return nn.BatchNorm(use_running_average=not train, momentum=0.9, use_scale=False,
                        name='features')(x)


def layers(tree) -> set:
  """The (collection, layer) pairs of a variables tree."""
  return {path[:2] for path in _flat(tree)}


def _flat(tree):
  from flax import traverse_util
  return traverse_util.flatten_dict(tree) if tree else {}


@pytest.fixture(scope='module')
def problem():
  return engine_cases.tiny_problem()


@pytest.fixture(scope='module')
def fedbn_start(problem):
  """(FedBN, its round state) with clients 1 and 2 holding BatchNorm layers of their own (the
  start's + 0.5 and + 0.25), built once for the module."""
  _, algorithm = _build('fedbn', problem)
  state = algorithm.init(jax.random.PRNGKey(0))
  own_bn = jax.tree.map(lambda x: x.at[1].add(0.5).at[2].add(0.25), state.clients['bn'])
  return algorithm, state.replace(clients={**state.clients, 'bn': own_bn})


def _build(name, fed, **section):
  config = engine_cases.tiny_config(name)
  for key, value in section.items():
    config[name][key] = value
  config.optimizer.momentum = 0.0   # plain SGD: the hand checks' steps
  return config, algorithms.get(name).build(config, TwoLayers(), fed, step_mode='scan')


def _client_inputs(algorithm, fed, state, client):
  """(the client's ClientInput, its private state, its round's data)."""
  ids = np.array([client], np.int32)
  data = federated.sample_round(fed, ids, round_index=0, seed=0, steps=2, batch_size=4)
  client_input = algorithm.broadcast(state.server, jnp.asarray(ids), state.round,
                                     jax.random.PRNGKey(1))
  take = lambda x: x[0]
  private = jax.tree.map(take, aggregation.gather_clients(state.clients, jnp.asarray(ids)))
  return client_input, private, jax.tree.map(take, data)


# -- by hand on a quadratic ----------------------------------------------------------------------

def quadratic(trained, frozen, batch):
  """f(h, b) = 1/2 (h b - y)^2: h is the head's, b the body's."""
  p = {**frozen['params'], **trained['params']}
  return 0.5 * (p['h'] * p['b'] - batch['y']) ** 2, trained['stats']


def test_fedrep_head_steps_keep_the_body_and_the_body_step_uses_the_new_head():
  # h = 1, b = 2, y = 5, eta = 1/8 (every number below exact in float32); df/dh = (hb - y) b,
  # df/db = (hb - y) h:
  #   head step 1: r = 2 - 5 = -3,       h = 1 + 3·2/8 = 1.75
  #   head step 2: r = 3.5 - 5 = -1.5,   h = 1.75 + 1.5·2/8 = 2.125
  #   body step:   r = 4.25 - 5 = -0.75 (b still exactly 2, with the new h),
  #                b = 2 + 0.75·2.125/8 = 2.19921875
  # Losses 1/2 r^2 before each step: 4.5, 1.125, 0.28125.
  head = {'params': {'h': jnp.float32(1.0)}, 'stats': {}}
  body = {'params': {'b': jnp.float32(2.0)}, 'stats': {}}
  xs = {'y': jnp.full(3, 5.0), 'mask': jnp.ones((3, 1), bool)}
  new_head, new_body, losses = fedrep.alternate(quadratic, optax.sgd(0.125), head, body, xs, 1,
                                                step_mode='scan')
  assert float(new_head['params']['h']) == 2.125
  assert float(new_body['params']['b']) == 2.19921875
  assert np.asarray(losses).tolist() == [4.5, 1.125, 0.28125]
  # A client whose last step is empty (fewer images than steps): its last step with a sample
  # updates the body. Head step: h = 1.75; body step: r = -1.5, b = 2 + 1.5·1.75/8 = 2.328125.
  xs['mask'] = jnp.array([[True], [True], [False]])
  new_head, new_body, losses = fedrep.alternate(quadratic, optax.sgd(0.125), head, body, xs, 1,
                                                step_mode='scan')
  assert float(new_head['params']['h']) == 1.75
  assert float(new_body['params']['b']) == 2.328125
  assert np.asarray(losses)[:2].tolist() == [4.5, 1.125]   # in the steps' order


def test_fedper_steps_head_and_body_together():
  # One joint step from h = 1, b = 2 (r = -3): h = 1 + 0.1·3·2 = 1.6, b = 2 + 0.1·3·1 = 2.3.
  head = {'params': {'h': jnp.float32(1.0)}, 'stats': {}}
  body = {'params': {'b': jnp.float32(2.0)}, 'stats': {}}
  xs = {'y': jnp.full(1, 5.0), 'mask': jnp.ones((1, 1), bool)}
  new_head, new_body, _ = fedrep.jointly(quadratic, optax.sgd(0.1), head, body, xs,
                                         step_mode='scan')
  np.testing.assert_allclose(new_head['params']['h'], 1.6, rtol=1e-6)
  np.testing.assert_allclose(new_body['params']['b'], 2.3, rtol=1e-6)


# -- what crosses, and what a client keeps -------------------------------------------------------

def test_fedbn_sends_no_batch_norm_and_keeps_its_own(problem, fedbn_start):
  algorithm, state = fedbn_start   # client 1's BatchNorm differs from the start's
  client_input, private, data = _client_inputs(algorithm, problem, state, client=1)
  update = jax.jit(algorithm.client_update)   # compiled once, called twice
  result = update(client_input, private, data, jax.random.PRNGKey(0))
  assert layers(client_input.shared['model']) == {('params', 'conv0'), ('params', 'fc')}
  assert set(result.update) == {'model'}
  assert layers(result.update['model']) == {('params', 'conv0'), ('params', 'fc')}
  assert set(result.private) == {'W', 'bn'}
  assert layers(result.private['bn']) == {('params', 'bn0'), ('params', 'features'),
                                          ('batch_stats', 'bn0'), ('batch_stats', 'features')}
  assert not np.array_equal(result.private['bn']['batch_stats']['bn0']['mean'],
                            private['bn']['batch_stats']['bn0']['mean'])   # trained
  # A round without a sample: the client keeps exactly its own BatchNorm (not the start's) and
  # sends back exactly what it received.
  idle = update(client_input, private, {**data, 'mask': jnp.zeros_like(data['mask'])},
                jax.random.PRNGKey(0))
  jax.tree.map(np.testing.assert_array_equal, idle.private['bn'], private['bn'])
  jax.tree.map(np.testing.assert_array_equal, idle.update['model'], client_input.shared['model'])
  assert not np.array_equal(private['bn']['params']['bn0']['scale'],
                            state.server['start_bn']['params']['bn0']['scale'])
  # The server averages what arrives and keeps its starting BatchNorm for the shared model.
  updates = jax.tree.map(lambda x: jnp.stack([x, x + 4.0]), result.update)
  server = algorithm.server_update(state.server, updates, jnp.array([3.0, 1.0]),
                                   jnp.array([1, 2]), state.round, jax.random.PRNGKey(2))
  jax.tree.map(lambda o, x: np.testing.assert_allclose(o, x + 1.0, rtol=1e-6),
               server['model'], result.update['model'])
  assert server['start_bn'] is state.server['start_bn']
  assert layers(algorithm.eval_variables(server)) == layers(
      partial_sharing.merge(result.update['model'], result.private['bn']))


def test_fedbn_personalized_model_has_the_clients_own_batch_norm(problem, fedbn_start):
  algorithm, state = fedbn_start   # client 2's BatchNorm differs from the start's, client 0's not
  images = jnp.asarray(problem.images[:3], jnp.float32) / 127.5 - 1.0
  by_client = [np.asarray(algorithm.personalized(state)(k)(images)) for k in (0, 2)]
  shared = TwoLayers().apply(algorithm.eval_variables(state.server), images, train=False)
  np.testing.assert_array_equal(by_client[0], shared)   # client 0's BatchNorm is the start's
  assert not np.allclose(by_client[1], shared)


def test_fedrep_sends_the_body_alone(problem):
  # The structures only (jax.eval_shape: traced, not compiled); the steps: the quadratic above.
  for head, sent, kept in (
      ('last_layers', {('params', 'conv0'), ('params', 'bn0'), ('batch_stats', 'bn0')},
       {('params', 'fc'), ('params', 'features'), ('batch_stats', 'features')}),
      ('class_embeddings', {('params', 'conv0'), ('params', 'bn0'), ('batch_stats', 'bn0'),
                            ('params', 'fc'), ('params', 'features'),
                            ('batch_stats', 'features')}, set())):
    _, algorithm = _build('fedrep', problem, head=head)
    state = algorithm.init(jax.random.PRNGKey(0))
    client_input, private, data = _client_inputs(algorithm, problem, state, client=1)
    result = jax.eval_shape(algorithm.client_update, client_input, private, data,
                            jax.random.PRNGKey(0))
    assert set(result.update) == {'model'}
    assert layers(result.update['model']) == sent
    assert set(result.private) == {'W', 'head'}
    assert layers(result.private['head']) == kept
    assert result.private['W'].shape == private['W'].shape
    assert (algorithm.personalized is None) == (head == 'class_embeddings')


# -- config checks -------------------------------------------------------------------------------

def test_config_errors_are_one_line():
  config = engine_cases.tiny_config('fedrep')
  config.federated.local_steps = 2
  config.fedrep.body_steps = 2
  with pytest.raises(ValueError) as err:
    algorithms.check_config(config)
  assert str(err.value) == ('config.fedrep.body_steps=2 with federated.local_steps=2; FedRep '
                            'updates the head first: expected fewer body steps than local steps.')
  config = engine_cases.tiny_config('fedbn')
  config.model.name = 'gn_cnn'
  with pytest.raises(ValueError) as err:
    algorithms.check_config(config)
  assert str(err.value) == ("config.model.name='gn_cnn' has no BatchNorm (GroupNorm); FedBN "
                            "keeps each client's BatchNorm layers: expected a backbone with "
                            "BatchNorm ('small_cnn', an 'iresnet').")
  config = config_lib.base_config('anti_spoofing')
  config.algorithm = 'fedbn'
  with pytest.raises(ValueError) as err:
    algorithms.check_config(config)
  assert str(err.value) == ("config.model.name='small_cnn' with fedbn on anti-spoofing; expected "
                            "one of ('pad_resnet18', 'pad_net') (FedPAD's detector, "
                            "models/pad.py).")
  config.algorithm = 'fedrep'
  config.fedrep = fedrep.config_section()
  config.fedrep.head = 'class_embeddings'
  config.model.name = 'pad_resnet18'
  config.model.image_size = config.data.image_size
  with pytest.raises(ValueError) as err:
    algorithms.check_config(config)
  assert str(err.value) == ("config.fedrep.head='class_embeddings' on anti-spoofing: a detector "
                            "has no class embeddings; expected 'last_layers' (its classifier).")


def test_merge_refuses_a_variable_in_two_parts():
  with pytest.raises(ValueError) as err:
    partial_sharing.merge({'params': {'fc': {'kernel': 1}}}, {'params': {'fc': {'kernel': 2}}})
  assert str(err.value) == 'variable params/fc/kernel is in two parts; expected disjoint parts.'


def test_on_anti_spoofing_a_data_center_sends_no_batch_norm_or_no_classifier():
  # FedPAD's Table II network at runlocal size; the structures only (jax.eval_shape: traced, not
  # compiled). The end-to-end runs: tests/test_experiment_pad_personal.py (full tier).
  from fedjax_face import models
  from tests import config_files
  fed = engine_cases.tiny_problem(3)
  steps, batch, size = 2, 4, 32
  data = {'images': jax.ShapeDtypeStruct((steps, batch, size, size, 3), jnp.uint8),
          'labels': jax.ShapeDtypeStruct((steps, batch), jnp.int32),
          'mask': jax.ShapeDtypeStruct((steps, batch), jnp.bool_),
          'targets': {'depth': jax.ShapeDtypeStruct((steps, batch, 32, 32), jnp.float32)}}
  kept_by = {'fedbn': ('bn', lambda path: path[-2] == 'BatchNorm_0' or path[0] == 'batch_stats'),
             'fedrep': ('head', lambda path: path[1] == 'classifier')}
  for name, (kept, is_kept) in kept_by.items():
    config = config_files.load_config(f'pad/{name}', 'backbone=pad_net,runlocal')
    assert config.data.image_size == size
    algorithm = algorithms.get(name).build(config, models.build_backbone(config.model), fed,
                                           step_mode='scan')
    state, result = engine_cases.traced_client_update(algorithm, data)
    assert set(result.update) == {'model'} and set(result.private) == {kept}
    sent, own = _flat(result.update['model']), _flat(result.private[kept])
    assert sent and own and not any(is_kept(p) for p in sent) and all(is_kept(p) for p in own)
    assert set(sent) | set(own) == set(_flat(algorithm.eval_variables(state.server)))
