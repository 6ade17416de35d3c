"""FedAwS and FedFace: the positive-only loss by hand, the spreadout server step, FedFace's
initialisation, and exactly what crosses to and from each client."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import fedaws
from fedjax_face.data import federated, preprocess
from fedjax_face.models import heads
from tests.algorithms.test_spreadout import hand_value_and_grad
from tests.config_files import load_config

NUM_CLIENTS = 6
DIM = 4


def _setup(name, learning_rate=0.1):
  config = load_config(f'fedfv/{name}')
  config.data.image_size = 8
  config.model.width = 2
  config.model.num_stages = 2
  config.model.embedding_dim = DIM
  config.federated.num_clients = NUM_CLIENTS
  config.optimizer.learning_rate = learning_rate
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(NUM_CLIENTS), 4).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  fed = federated.build(images, labels, [np.array([i], np.int32) for i in range(NUM_CLIENTS)])
  model = models.build_backbone(config.model)
  algorithm = algorithms.get(name).build(config, model, fed, step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  w = jax.random.normal(jax.random.PRNGKey(5), state.server['W'].shape)
  state = state.replace(server={**state.server, 'W': w})
  return config, fed, model, algorithm, state


def _one_client(algorithm, state, fed, client, round_index=0):
  ids = jnp.array([client])
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(1))
  one = client_input._replace(per_client=jax.tree.map(lambda x: x[0], client_input.per_client))
  data = federated.sample_round(fed, ids, round_index=round_index, seed=0, steps=2, batch_size=3)
  data = jax.tree.map(lambda x: x[0], data)
  return one, data, algorithm.client_update(one, {}, data, jax.random.PRNGKey(0))


def test_positive_cosine_loss_and_gradient_by_hand():
  f = np.array([[3.0, 4.0], [1.0, 0.0], [0.0, -2.0]])
  w = np.array([[1.0, 1.0]])
  mask = np.array([True, True, False])
  # cos = 7/(5 sqrt 2) = 0.98995 (no loss), 1/sqrt 2 = 0.70711; the third is padding.
  expected = (0.9 - 1 / np.sqrt(2))**2 / 2
  loss_fn = lambda f: heads.loss(jnp.asarray(f), jnp.asarray(w), jnp.zeros(3, jnp.int32), None,
                                 jnp.asarray(mask), kind='positive_cosine', scale=1.0, margin=0.9)
  value, grad = jax.value_and_grad(loss_fn)(f)
  np.testing.assert_allclose(value, expected, rtol=1e-6)
  # d/df (0.9 - cos)^2 / 2 = -(0.9 - cos) (w_hat - cos f_hat) / |f| for the second sample only.
  w_hat, cos = w[0] / np.sqrt(2), 1 / np.sqrt(2)
  expected_grad = np.zeros_like(f)
  expected_grad[1] = -(0.9 - cos) * (w_hat - cos * f[1]) / 1.0
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)


def test_positive_dot_loss_by_hand():
  f = jnp.array([[0.5, 0.0], [2.0, 1.0]])
  w = jnp.array([[1.0, -1.0]])
  # f . w = 0.5, 1.0 -> hinge 0.5, 0.
  value = heads.loss(f, w, jnp.zeros(2, jnp.int32), None, None, kind='positive_dot', scale=1.0,
                     margin=1.0)
  np.testing.assert_allclose(value, 0.25, rtol=1e-6)
  with pytest.raises(ValueError, match="head 'positive_dot' is positive-only"):
    heads.logits(f, w, None, None, kind='positive_dot')


def pair_count(section, n: int) -> int:
  """What the section's spreadout divides Eq. 3's sum by: 1, or the n(n-1) ordered pairs."""
  return n * (n - 1) if section.reduction == 'mean' else 1


@pytest.mark.parametrize('name', ['fedaws', 'fedface'])
def test_privacy_a_client_receives_its_own_w_and_sends_theta_and_w_only(name):
  _, fed, _, algorithm, state = _setup(name)
  ids = jnp.array([1, 4, NUM_CLIENTS])     # two real clients and a padding client
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(9))
  assert set(client_input.shared) == {'model', 'lr_scale'}
  expected = {'W', 'initialised'} if name == 'fedface' else {'W'}
  assert set(client_input.per_client) == expected
  assert client_input.per_client['W'].shape == (3, 1, DIM)
  for i, client in enumerate((1, 4)):
    np.testing.assert_array_equal(client_input.per_client['W'][i], state.server['W'][client])
  _, _, result = _one_client(algorithm, state, fed, 2)
  assert set(result.update) == {'model', 'W'}
  assert result.update['W'].shape == (1, DIM)
  assert result.private == {}
  assert not np.allclose(result.update['W'], state.server['W'][2])   # w_i trained
  assert float(result.metrics['train_loss']) > 0.0


@pytest.mark.parametrize('name', ['fedaws', 'fedface'])
def test_server_update_averages_then_spreads_every_class_embedding(name):
  config, _, _, algorithm, state = _setup(name)
  models_stacked = jax.tree.map(lambda x: jnp.stack([x, x + 2.0, x + 9.0]), state.server['model'])
  new_w = jax.random.normal(jax.random.PRNGKey(7), (3, 1, DIM))
  ids = jnp.array([0, 5, NUM_CLIENTS])
  round_index = jnp.int32(config.num_rounds * 9 // 10)   # past both decays: eta = 0.1 / 100
  out = algorithm.server_update(state.server, {'model': models_stacked, 'W': new_w},
                                jnp.array([1.0, 1.0, 0.0]), ids, round_index,
                                jax.random.PRNGKey(0))
  jax.tree.map(lambda o, x: np.testing.assert_allclose(o, x + 1.0, rtol=1e-6, atol=1e-6),
               out['model'], state.server['model'])
  stored = np.asarray(state.server['W'][:, 0]).copy()
  stored[[0, 5]] = np.asarray(new_w[:2, 0])
  section = config[name]
  _, grad = hand_value_and_grad(stored, np.ones(NUM_CLIENTS, bool), section.distance,
                                section.margin)
  grad = grad / pair_count(section, NUM_CLIENTS)
  eta = config.optimizer.learning_rate * 0.01
  np.testing.assert_allclose(out['W'][:, 0], stored - section.reg_lambda * eta * grad,
                             rtol=1e-5, atol=1e-6)
  if name == 'fedface':
    np.testing.assert_array_equal(out['initialised'],
                                  [True, False, False, False, False, True])


def test_fedface_starts_a_new_client_from_its_mean_feature_once():
  # A zero learning rate leaves w_i where the client put it before training.
  _, fed, model, algorithm, state = _setup('fedface', learning_rate=0.0)
  one, data, result = _one_client(algorithm, state, fed, 3)
  images = np.asarray(data['images']).reshape((-1, 8, 8, 3))[np.asarray(data['mask']).ravel()]
  features = np.asarray(model.apply(state.server['model'], preprocess.normalize(images),
                                    train=False), np.float64)
  mean = np.mean(features / np.linalg.norm(features, axis=1, keepdims=True), axis=0)
  # Components of a unit vector: the jitted client and this eager model round differently (XLA
  # fuses the pooling into the GroupNorm), by float32 steps of the norm, not of each component.
  np.testing.assert_allclose(result.update['W'][0], mean / np.linalg.norm(mean), rtol=1e-5,
                             atol=1e-6)
  assert not one.per_client['initialised']
  # Once initialised, the server's w_i is what it trains from.
  server = {**state.server, 'initialised': state.server['initialised'].at[3].set(True)}
  _, _, again = _one_client(algorithm, state.replace(server=server), fed, 3)
  np.testing.assert_array_equal(again.update['W'], state.server['W'][3])


def test_fedaws_has_no_initialisation_step():
  _, fed, _, algorithm, state = _setup('fedaws', learning_rate=0.0)
  _, _, result = _one_client(algorithm, state, fed, 3)
  np.testing.assert_array_equal(result.update['W'], state.server['W'][3])


def test_mean_feature_ignores_padding_samples():
  _, fed, model, _, state = _setup('fedface')
  data = federated.sample_round(fed, np.array([0]), round_index=0, seed=0, steps=2, batch_size=3)
  data = jax.tree.map(lambda x: x[0], data)
  poisoned = {**data, 'images': np.where(data['mask'][..., None, None, None], data['images'],
                                         255).astype(np.uint8)}
  np.testing.assert_allclose(fedaws.mean_features(model, state.server["model"], poisoned, 1),
                             fedaws.mean_features(model, state.server["model"], data, 1), rtol=1e-6)


@pytest.mark.parametrize('name, field, value, match', [
    ('fedaws', 'fedaws.distance', 'angular', r"fedaws.distance='angular'; expected one of"),
    ('fedaws', 'fedaws.margin', 2.5, r'fedaws.margin=2.5 with distance euclidean; expected at '
                                     r'most 2'),
    ('fedaws', 'fedaws.server_steps', 0, r'fedaws.server_steps=0; expected a positive integer'),
    ('fedaws', 'head.loss', 'cosface', r"head.loss='cosface'; FedAwS's clients train the "
                                       r"positive-only loss"),
    ('fedface', 'federated.partition', 'balanced', r"head.loss='positive_cosine' with "
                                                   r"federated.partition='balanced'; clients of "
                                                   r"several identities train a classification"),
    ('fedface', 'head.loss', 'cosface', r"head.loss='cosface' with federated.partition="
                                        r"'one_per_client'; FedFace's one-identity clients"),
    ('fedface', 'fedface.embedding_init', 'zeros', r"fedface.embedding_init='zeros'; expected"),
    ('fedface', 'fedface.reg_implementation', 'tiles', r"reg_implementation='tiles'; expected"),
])
def test_config_errors_name_the_field(name, field, value, match):
  config = load_config(f'fedfv/{name}')
  section, key = field.split('.')
  config[section][key] = value
  with pytest.raises(ValueError, match=match):
    algorithms.check_config(config)


# -- FedFace with several identities per client (the FedFR paper's Fig. 4 re-implementation) --

def _setup_several(learning_rate=0.0, classes=(2, 3, 1)):
  """Three clients holding `classes` identities of 4 images each, CosFace clients."""
  config = load_config('fedfv/fedface')
  config.federated.partition = 'balanced'
  config.head.loss, config.head.scale, config.head.margin = 'cosface', 30.0, 0.4
  config.data.image_size = 8
  config.model.width = 2
  config.model.num_stages = 2
  config.model.embedding_dim = DIM
  config.federated.num_clients = len(classes)
  config.optimizer.learning_rate = learning_rate
  num_ids = sum(classes)
  labels = np.repeat(np.arange(num_ids), 4).astype(np.int32)
  images = np.random.default_rng(0).integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  bounds = np.cumsum((0,) + classes)
  fed = federated.build(images, labels, [np.arange(a, b, dtype=np.int32)
                                         for a, b in zip(bounds[:-1], bounds[1:])])
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedface').build(config, model, fed, step_mode='scan')
  return config, fed, model, algorithm, algorithm.init(jax.random.PRNGKey(0))


def test_fedface_several_identities_starts_each_class_from_its_own_mean_feature():
  _, fed, model, algorithm, state = _setup_several(learning_rate=0.0)
  _, data, result = _one_client(algorithm, state, fed, 1)   # identities 2, 3, 4
  assert result.update['W'].shape == (3, DIM)
  images = np.asarray(data['images']).reshape((-1, 8, 8, 3))
  labels = np.asarray(data['labels']).ravel()
  mask = np.asarray(data['mask']).ravel()
  features = np.asarray(model.apply(state.server['model'], preprocess.normalize(images),
                                    train=False), np.float64)
  unit = features / np.linalg.norm(features, axis=1, keepdims=True)
  for c in range(3):
    mean = unit[mask & (labels == c)].mean(axis=0)
    np.testing.assert_allclose(result.update['W'][c], mean / np.linalg.norm(mean), rtol=1e-5,
                               atol=1e-6)


def test_fedface_several_identities_sends_theta_and_its_class_embeddings_only():
  _, fed, _, algorithm, state = _setup_several(learning_rate=0.1)
  client_input = algorithm.broadcast(state.server, jnp.array([0, 2]), state.round,
                                     jax.random.PRNGKey(9))
  assert set(client_input.shared) == {'model', 'lr_scale'}
  assert set(client_input.per_client) == {'W', 'initialised'}
  np.testing.assert_array_equal(client_input.per_client['W'], state.server['W'][np.array([0, 2])])
  _, _, result = _one_client(algorithm, state, fed, 0)
  assert set(result.update) == {'model', 'W'}
  assert result.update['W'].shape == (3, DIM)     # C_max rows; client 0's third is padding
  assert result.private == {}


def test_fedface_several_identities_spreads_only_the_real_rows():
  config, fed, _, algorithm, state = _setup_several()
  w = jax.random.normal(jax.random.PRNGKey(3), state.server['W'].shape)
  w = w * jnp.asarray(fed.class_mask)[..., None]
  server = {**state.server, 'W': w}
  config.optimizer.learning_rate = 0.1
  ids = jnp.array([0, 1, 2])
  out = algorithm.server_update(server, {'model': jax.tree.map(lambda x: jnp.stack([x] * 3),
                                                               server['model']), 'W': w},
                                jnp.ones(3), ids, jnp.int32(0), jax.random.PRNGKey(0))
  rows = np.asarray(w).reshape(-1, DIM)
  valid = np.asarray(fed.class_mask).reshape(-1)
  section = config.fedface
  _, grad = hand_value_and_grad(rows[valid], np.ones(valid.sum(), bool), section.distance,
                                section.margin)
  grad = grad / pair_count(section, valid.sum())
  expected = rows.copy()
  expected[valid] -= section.reg_lambda * 0.1 * grad
  np.testing.assert_allclose(np.asarray(out['W']).reshape(-1, DIM), expected, rtol=1e-5,
                             atol=1e-6)
  assert np.all(np.asarray(out['W'])[~np.asarray(fed.class_mask)] == 0)   # padding untouched


@pytest.mark.parametrize('loss, classes, match', [
    ('positive_cosine', (2, 3, 1), r"positive-only head 'positive_cosine' trains one identity "
                                   r'per client; the partition gives up to 3'),
    ('cosface', (1, 1, 1), r"classification head 'cosface' over one identity per client trains "
                           r'a constant loss'),
])
def test_fedface_client_loss_must_fit_the_identities_per_client(loss, classes, match):
  config = load_config('fedfv/fedface')
  config.head.loss = loss
  labels = np.repeat(np.arange(sum(classes)), 2).astype(np.int32)
  images = np.zeros((len(labels), 8, 8, 3), np.uint8)
  bounds = np.cumsum((0,) + classes)
  fed = federated.build(images, labels, [np.arange(a, b, dtype=np.int32)
                                         for a, b in zip(bounds[:-1], bounds[1:])])
  with pytest.raises(ValueError, match=match):
    algorithms.get('fedface').build(config, None, fed, step_mode='scan')
