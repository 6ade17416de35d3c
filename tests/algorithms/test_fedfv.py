"""FedFV (Alg. 2, Eq. 5): equivalent class embeddings, what crosses to and from each client."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import fedfv
from fedjax_face.data import federated
from tests.config_files import load_config

NUM_CLIENTS = 7


def _setup(num_equivalent=5, group_size=2, draw='per_round'):
  config = load_config('fedfv')
  config.data.image_size = 8
  config.model.width = 2
  config.model.num_stages = 2
  config.model.embedding_dim = 4
  config.federated.num_clients = NUM_CLIENTS
  config.fedfv.num_equivalent = num_equivalent
  config.fedfv.group_size = group_size
  config.fedfv.draw = draw
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(NUM_CLIENTS), 4).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  fed = federated.build(images, labels, [np.array([i], np.int32) for i in range(NUM_CLIENTS)])
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedfv').build(config, model, fed, step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  # Distinct, non-degenerate class embeddings (the init is tiny and random).
  w = jax.random.normal(jax.random.PRNGKey(5), state.server['W'].shape)
  state = state.replace(server={**state.server, 'W': w})
  return config, fed, algorithm, state


def test_equivalent_embedding_by_hand():
  w = jnp.array([[3.0, 0.0], [0.0, 2.0], [-5.0, 0.0]])
  # Eq. 5, k = 2: (1, 0) and (0, 1) -> mean (0.5, 0.5) -> (1/sqrt 2, 1/sqrt 2).
  # k = 3 (Sec. 4.4): (1, 0), (0, 1), (-1, 0) -> mean (0, 1/3) -> (0, 1).
  out = fedfv.equivalent_embeddings(w, jnp.array([[0, 1], [1, 2]]))
  np.testing.assert_allclose(out, [[0.70710677, 0.70710677], [-0.70710677, 0.70710677]],
                             rtol=1e-6)
  np.testing.assert_allclose(fedfv.equivalent_embeddings(w, jnp.array([[0, 1, 2]])), [[0.0, 1.0]],
                             atol=1e-7)


def test_equivalent_embeddings_have_unit_norm_for_any_k():
  w = jax.random.normal(jax.random.PRNGKey(0), (50, 16)) * 7.0
  for k in (2, 3, 10, 50):
    groups = fedfv.draw_groups(jax.random.PRNGKey(k), jnp.ones(50, bool), 20, k)
    np.testing.assert_allclose(jnp.linalg.norm(fedfv.equivalent_embeddings(w, groups), axis=1),
                               1.0, rtol=1e-5)


def test_groups_are_distinct_eligible_clients_drawn_evenly():
  eligible = jnp.array([True, False, True, True, False, True, True, True])
  groups = np.asarray(fedfv.draw_groups(jax.random.PRNGKey(3), eligible, 3000, 3))
  assert groups.shape == (3000, 3)
  assert all(len(set(row)) == 3 for row in groups)                  # k distinct clients
  assert set(groups.ravel()) == {0, 2, 3, 5, 6, 7}                   # only eligible ones
  counts = np.bincount(groups.ravel(), minlength=8)[[0, 2, 3, 5, 6, 7]]
  expected = 3000 * 3 / 6
  assert np.all(np.abs(counts - expected) < 0.1 * expected), counts  # uniform draw


def _fused_by(row, unit, candidates, k):
  """The k-subsets of `candidates` whose Eq. 5 embedding equals `row`."""
  fused = lambda s: np.asarray(fedfv.equivalent_embeddings(jnp.asarray(unit), jnp.array([s])))[0]
  return [s for s in itertools.combinations(candidates, k) if np.allclose(fused(s), row, atol=1e-6)]


@pytest.mark.parametrize('draw', ['per_round', 'per_client'])
def test_privacy_what_a_client_receives(draw):
  _, _, algorithm, state = _setup(num_equivalent=6, draw=draw)
  ids = jnp.array([1, 4, NUM_CLIENTS])     # two real clients and a padding client
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(9))
  unit = np.asarray(state.server['W'][:, 0])
  unit = unit / np.linalg.norm(unit, axis=1, keepdims=True)
  if draw == 'per_round':
    # Exactly: the backbone, the round's rate factor (a scalar), the equivalent embeddings.
    assert set(client_input.shared) == {'model', 'lr_scale', 'W_eq'}
    assert set(client_input.per_client) == {'W'} and client_input.shared['lr_scale'].shape == ()
    received = [np.asarray(client_input.shared['W_eq'])] * 2
  else:
    assert set(client_input.shared) == {'model', 'lr_scale'}
    assert set(client_input.per_client) == {'W', 'W_eq'}
    received = [np.asarray(client_input.per_client['W_eq'][i]) for i in (0, 1)]
  for i, client in enumerate((1, 4)):
    # Its own class embedding, nobody else's.
    np.testing.assert_array_equal(client_input.per_client['W'][i], state.server['W'][client])
    rest = [c for c in range(NUM_CLIENTS) if c not in (1, 4)]
    for row in received[i]:
      assert len(_fused_by(row, unit, rest, 2)) == 1           # built from 2 non-selected clients
      everyone = _fused_by(row, unit, range(NUM_CLIENTS), 2)
      assert all(not {1, 4} & set(s) for s in everyone)        # never from itself or the cohort
      assert not np.any(np.all(np.isclose(unit, row, atol=1e-4), axis=1))   # no raw embedding


def test_privacy_what_a_client_sends():
  _, fed, algorithm, state = _setup()
  ids = jnp.array([2])
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(1))
  one = client_input._replace(per_client=jax.tree.map(lambda x: x[0], client_input.per_client))
  data = federated.sample_round(fed, np.array([2]), round_index=0, seed=0, steps=2, batch_size=2)
  result = algorithm.client_update(one, {}, jax.tree.map(lambda x: x[0], data),
                                   jax.random.PRNGKey(0))
  # Client line 6: theta_i and w_i only; the equivalent embeddings never go back.
  assert set(result.update) == {'model', 'W'}
  assert result.update['W'].shape == (1, 4)
  assert result.private == {}
  assert not np.allclose(result.update['W'], state.server['W'][2])   # w_i trained
  assert float(result.metrics['train_loss']) > 0.0                    # the softmax is not constant


def test_per_client_draws_follow_the_client_not_its_position():
  _, _, algorithm, state = _setup(draw='per_client')
  key = jax.random.PRNGKey(4)
  a = algorithm.broadcast(state.server, jnp.array([1, 4]), state.round, key).per_client['W_eq']
  b = algorithm.broadcast(state.server, jnp.array([4, 1]), state.round, key).per_client['W_eq']
  np.testing.assert_array_equal(a[0], b[1])
  np.testing.assert_array_equal(a[1], b[0])
  assert not np.allclose(a[0], a[1])


def test_server_update_averages_theta_and_stores_each_w_i():
  _, _, algorithm, state = _setup()
  models_stacked = jax.tree.map(lambda x: jnp.stack([x, x + 2.0, x + 9.0]), state.server['model'])
  new_w = jnp.ones((3, 1, 4)) * jnp.array([1.0, 2.0, 3.0])[:, None, None]
  out = algorithm.server_update(state.server, {'model': models_stacked, 'W': new_w},
                                jnp.array([1.0, 1.0, 0.0]), jnp.array([0, 5, NUM_CLIENTS]),
                                state.round, jax.random.PRNGKey(0))
  jax.tree.map(lambda o, x: np.testing.assert_allclose(o, x + 1.0, rtol=1e-6, atol=1e-6),
               out['model'], state.server['model'])                   # line 13 (padding: weight 0)
  np.testing.assert_array_equal(out['W'][0], new_w[0])
  np.testing.assert_array_equal(out['W'][5], new_w[1])
  untouched = np.array([c for c in range(NUM_CLIENTS) if c not in (0, 5)])
  np.testing.assert_array_equal(out['W'][untouched], state.server['W'][untouched])


@pytest.mark.parametrize('field, value, match', [
    ('fedfv.group_size', 1, r'group_size=1; expected at least 2: an equivalent embedding of one'),
    ('fedfv.group_size', 13, r'group_size=13 but only 12 clients are not selected in a round '
                             r'\(16 clients, 4 per round\)'),
    ('fedfv.draw', 'per_pair', r"fedfv.draw='per_pair'; expected one of \('per_round', "),
    ('federated.partition', 'balanced', r"partition='balanced'; FedFV is the one-identity-per-"),
])
def test_config_errors_name_the_field(field, value, match):
  config = load_config('fedfv')
  section, name = field.split('.')
  config[section][name] = value
  with pytest.raises(ValueError, match=match):
    algorithms.check_config(config)
