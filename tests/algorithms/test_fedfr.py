"""FedFR: hard negatives, Eq. 5, g and Eq. 6 by hand, the DFC branch's identity start, the epoch
over local and public images, exactly what crosses to and from a client, the server step, and the
config errors."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, experiment, models
from fedjax_face.algorithms import fedfr
from fedjax_face.data import federated
from tests.config_files import load_config

DIM = 4
NUM_CLIENTS = 3
NUM_PUBLIC = 4


def test_hard_negatives_by_hand():
  local = np.array([[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
  mask = np.array([True, True, False])   # the third local image is padding
  public = np.array([[1.0, 0.1], [-1.0, 0.0], [1.0, 1.0], [-1.0, -3.0], [0.0, -1.0]])
  # Largest cosine to the two valid local images: 0.995, 0, 0.707, -0.316, 0 (the padding image
  # would make the fourth -0.894 and does not count).
  got = fedfr.hard_negative_mask(jnp.asarray(local), jnp.asarray(mask), jnp.asarray(public), 0.4)
  np.testing.assert_array_equal(got, [True, False, True, False, False])
  everything = fedfr.hard_negative_mask(jnp.asarray(local), jnp.asarray(mask),
                                        jnp.asarray(public), -1.0)
  assert everything.all()


def test_contrastive_loss_value_and_gradient_by_hand():
  f = np.array([[3.0, 4.0], [1.0, 0.0]])
  f_glob = np.array([[4.0, 3.0], [0.0, 1.0]])
  f_prev = np.array([[0.0, 1.0], [1.0, 1.0]])
  tau = 0.5
  # Sample 1: sim_g = 24/25, sim_p = 4/5; sample 2: sim_g = 0, sim_p = 1/sqrt 2.
  def by_hand(sg, sp):
    return -np.log(np.exp(sg / tau) / (np.exp(sg / tau) + np.exp(sp / tau)))
  expected = (by_hand(0.96, 0.8) + by_hand(0.0, 1 / np.sqrt(2))) / 2
  mask = jnp.array([True, True])
  loss = lambda f: fedfr.contrastive_loss(f, jnp.asarray(f_glob), jnp.asarray(f_prev), tau, mask)
  value, grad = jax.value_and_grad(loss)(jnp.asarray(f))
  np.testing.assert_allclose(value, expected, rtol=1e-6)
  # d/df of -(sg - logaddexp(sg, sp)) with sg = f_hat.g_hat/tau: -(1 - p_g) dsg + p_p dsp, where
  # d(f_hat.u)/df = (u - (f_hat.u) f_hat)/|f|; averaged over the two samples.
  def hand_grad(f, g, p):
    f_hat, g_hat, p_hat = f / np.linalg.norm(f), g / np.linalg.norm(g), p / np.linalg.norm(p)
    sg, sp = f_hat @ g_hat / tau, f_hat @ p_hat / tau
    pg = np.exp(sg) / (np.exp(sg) + np.exp(sp))
    d = lambda u: (u - (f_hat @ u) * f_hat) / np.linalg.norm(f) / tau
    return (-(1 - pg) * d(g_hat) + (1 - pg) * d(p_hat)) / 2
  expected_grad = np.stack([hand_grad(f[i], f_glob[i], f_prev[i]) for i in range(2)])
  np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
  # Before a client's first round f_prev = f_glob: log 2, and no gradient.
  same = lambda f: fedfr.contrastive_loss(f, jnp.asarray(f_glob), jnp.asarray(f_glob), tau, mask)
  value, grad = jax.value_and_grad(same)(jnp.asarray(f))
  np.testing.assert_allclose(value, np.log(2.0), rtol=1e-6)
  np.testing.assert_allclose(grad, 0.0, atol=1e-7)


def test_dynamic_range_g():
  z = jnp.array([-1.0, 0.0, 0.5, 1.0])
  np.testing.assert_allclose(fedfr.dynamic_range(z, 3.0),
                             [-1.0, 2 * 0.5**3 - 1, 2 * 0.75**3 - 1, 1.0], rtol=1e-6)


def test_dfc_loss_by_hand():
  cos = np.array([[0.8, 0.1, -0.3], [0.2, 0.5, 0.9], [0.0, 0.0, 0.0]])
  bias = np.array([0.5, -0.2, 1.0])
  labels = np.array([0, 1, 0])
  is_local = np.array([True, False, True])    # the second sample is a public image
  class_mask = np.array([True, True, False])  # two local classes, one padding slot
  sample_mask = np.array([True, True, False])
  s, m, lam, t = 30.0, 0.4, 0.7, 3.0
  g = lambda z: 2 * ((z + 1) / 2)**t - 1
  softplus = lambda x: np.log1p(np.exp(x))
  pos = lambda c, b: lam / s * softplus(-(s * (g(c) - m) + b))
  neg = lambda c, b: (1 - lam) / s * softplus(s * (g(c) + m) + b)
  first = pos(0.8, 0.5) + neg(0.1, -0.2)            # class 0 positive, class 1 negative
  second = neg(0.2, 0.5) + neg(0.5, -0.2)           # public: negative of both local classes
  got = fedfr.dfc_loss(jnp.asarray(cos), jnp.asarray(bias), jnp.asarray(labels),
                       jnp.asarray(is_local), jnp.asarray(class_mask), jnp.asarray(sample_mask),
                       scale=s, margin=m, balance=lam, power=t)
  np.testing.assert_allclose(got, (first + second) / 2, rtol=1e-5)


def test_dfc_branch_starts_as_the_class_embedding_cosines():
  rng = np.random.default_rng(0)
  f, w = rng.normal(size=(5, DIM)), rng.normal(size=(3, DIM))
  identity = {'kernel': jnp.eye(DIM), 'bias': jnp.zeros(DIM)}
  expected = (f / np.linalg.norm(f, axis=1, keepdims=True)) @ (
      w / np.linalg.norm(w, axis=1, keepdims=True)).T
  np.testing.assert_allclose(fedfr.dfc_cosines(jnp.asarray(f), identity, jnp.asarray(w)),
                             expected, rtol=1e-5, atol=1e-6)


def test_epoch_order_puts_every_valid_sample_once_and_first():
  local_mask = jnp.array([True] * 5 + [False] * 3)
  public_valid = jnp.array([True, True, False])
  positions, valid = fedfr.epoch_order(jax.random.PRNGKey(0), local_mask, public_valid,
                                       copies=2, batch_size=4)
  assert positions.shape == valid.shape == (4, 4)   # 8 local + 2 x 3 public = 14 -> 16 slots
  flat, ok = np.asarray(positions).reshape(-1), np.asarray(valid).reshape(-1)
  assert ok.sum() == 5 + 2 * 2 and ok[:9].all() and not ok[9:].any()
  # Local 0-4 once each, public slots 0 and 1 (positions 8, 9 and 11, 12) once per copy.
  assert sorted(flat[ok].tolist()) == [0, 1, 2, 3, 4, 8, 9, 11, 12]


def test_kept_public_takes_hard_ones_up_to_the_capacity():
  hard = jnp.array([False, True, True, False, True])
  chosen, valid = fedfr.kept_public(jax.random.PRNGKey(0), hard, 4)
  assert sorted(np.asarray(chosen)[np.asarray(valid)].tolist()) == [1, 2, 4]
  assert np.asarray(valid).sum() == 3
  chosen, valid = fedfr.kept_public(jax.random.PRNGKey(0), hard, 2)
  assert np.asarray(valid).all() and set(np.asarray(chosen).tolist()) <= {1, 2, 4}


def _setup(arg='runlocal', **overrides):
  """FedFR over 4 public identities and 3 clients of 2 private identities (8x8 images)."""
  config = load_config('fedfr', arg)
  config.data.image_size = 8
  config.model.width = 2
  config.model.embedding_dim = DIM
  config.federated.num_clients = NUM_CLIENTS
  config.data.public_identities = NUM_PUBLIC
  for field, value in overrides.items():
    section, name = field.split('.')
    config[section][name] = value
  rng = np.random.default_rng(0)
  num_identities = NUM_PUBLIC + 2 * NUM_CLIENTS
  labels = np.repeat(np.arange(num_identities), 3).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  public = np.flatnonzero(labels < NUM_PUBLIC)
  clients = [np.array([NUM_PUBLIC + 2 * k, NUM_PUBLIC + 2 * k + 1]) for k in range(NUM_CLIENTS)]
  fed = federated.build(images, np.where(labels < NUM_PUBLIC, -1, labels), clients)
  fed = dataclasses.replace(fed, public_indices=public, public_labels=labels[public])
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedfr').build(config, model, fed, step_mode='scan')
  return config, fed, algorithm, algorithm.init(jax.random.PRNGKey(0))


def _one_client(algorithm, state, fed, client):
  ids = jnp.array([client])
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(1))
  private = jax.tree.map(lambda x: x[client], state.clients)
  data = federated.sample_round(fed, ids, round_index=0, seed=0, steps=2, batch_size=4,
                                local_epochs=1.0)
  data = jax.tree.map(lambda x: x[0], data)
  return client_input, algorithm.client_update(client_input, private, data,
                                               jax.random.PRNGKey(0))


def test_what_crosses_between_client_and_server():
  config, fed, algorithm, state = _setup()
  client_input, result = _one_client(algorithm, state, fed, client=1)
  # To the client: the global model, the public class matrix, the public images with their
  # labels and the global model's features of them -- public things only.
  assert set(client_input.shared) == {'model', 'Phi', 'public_images', 'public_labels',
                                      'public_features'}
  assert client_input.per_client == {}
  # From the client: the backbone and the public class matrix, nothing else (no DFC parameter,
  # no private class embedding, no feature).
  assert set(result.update) == {'model', 'Phi'}
  assert (jax.tree.structure(result.update['model'])
          == jax.tree.structure(state.server['model']))
  assert jax.tree.map(jnp.shape, result.update['model']) == jax.tree.map(
      jnp.shape, state.server['model'])
  assert result.update['Phi'].shape == (NUM_PUBLIC, DIM)
  # Kept on the client: W_l, the DFC branch, its local model (next round's f_prev).
  assert set(result.private) == {'W', 'dfc', 'prev_model', 'started'}
  assert set(result.private['dfc']) == {'projection', 'omega', 'bias'}
  assert bool(result.private['started'])
  assert np.isfinite(float(result.metrics['train_loss']))
  # The client really trained the public rows it sends.
  assert not np.allclose(result.update['Phi'], state.server['Phi'])


def test_first_round_starts_w_and_omega_from_mean_features_and_f_prev_from_the_global_model():
  config, fed, algorithm, state = _setup(**{'optimizer.learning_rate': 1e-9})
  _, result = _one_client(algorithm, state, fed, client=0)
  w, omega = result.private['W'], result.private['dfc']['omega']
  np.testing.assert_allclose(np.linalg.norm(w, axis=1), 1.0, rtol=1e-4)   # unit mean features
  np.testing.assert_allclose(omega, w, atol=1e-6)
  # f_prev = theta_g in a client's first round: Eq. 5 is log 2.
  np.testing.assert_allclose(result.metrics['loss_contrastive'], np.log(2.0), rtol=1e-4)


def test_server_update_is_the_weighted_mean_of_theta_and_phi():
  config, fed, algorithm, state = _setup()
  updates = {'model': jax.tree.map(lambda x: jnp.stack([x, x + 1.0, x + 3.0]),
                                   state.server['model']),
             'Phi': jnp.stack([jnp.zeros((NUM_PUBLIC, DIM)), jnp.ones((NUM_PUBLIC, DIM)),
                               3 * jnp.ones((NUM_PUBLIC, DIM))])}
  weights = jnp.array([1.0, 1.0, 2.0])   # Eq. 2 / 4: N_l(i) / N
  new = algorithm.server_update(state.server, updates, weights, jnp.arange(3), 0, None)
  np.testing.assert_allclose(new['Phi'], 1.75)
  jax.tree.map(lambda new_leaf, old: np.testing.assert_allclose(new_leaf, old + 1.75, rtol=1e-5),
               new['model'], state.server['model'])
  np.testing.assert_array_equal(new['public_images'], state.server['public_images'])


def test_local_data_only_row_sends_the_backbone_alone():
  config, fed, algorithm, state = _setup('row=fedavg,runlocal')
  assert config.fedfr.public_data is False and fedfr.variant_name(config) == 'fedavg'
  client_input, result = _one_client(algorithm, state, fed, client=2)
  assert set(client_input.shared) == {'model'}
  assert set(result.update) == {'model'}
  assert set(result.private) == {'W', 'prev_model', 'started'}


@pytest.mark.parametrize('field,value,match', [
    ('head.loss', 'arcface', r"head.loss='arcface'; FedFR trains CosFace"),
    ('federated.local_epochs', 1.5, r'local_epochs=1.5; FedFR with public data runs E whole'),
    ('data.public_identities', 0, r'fedfr.public_data=True needs public identities'),
    ('fedfr.hn_threshold', 1.5, r'hn_threshold=1.5; expected a cosine in \[-1, 1\]'),
    ('fedfr.dfc_loss', 'softmax', r"dfc_loss='softmax'; expected one of \('bce', 'cosface'\)"),
    ('fedfr.dfc_balance', 0.0, r'dfc_balance=0.0; expected a fraction in \(0, 1\]'),
    ('fedfr.adaptation', 'kd', r"adaptation='kd' with fedfr.dfc=True: the two-stage baselines"),
    ('data.centralized_on', 'public', r"centralized_on='public' with fedfr: it chooses what a "
     r'centralized run trains on'),
])
def test_config_errors_name_the_field(field, value, match):
  config = load_config('fedfr')
  section, name = field.split('.')
  config[section][name] = value
  with pytest.raises(ValueError, match=match):
    experiment.validate(config)


def test_personalized_model_is_the_clients_backbone_then_its_projection():
  config, fed, algorithm, state = _setup()
  model = models.build_backbone(config.model)
  kernel = state.clients['dfc']['projection']['kernel'].at[1].set(2.0 * jnp.eye(DIM))
  bias = state.clients['dfc']['projection']['bias'].at[1].set(jnp.arange(DIM, dtype=jnp.float32))
  prev = jax.tree.map(lambda x: x.at[1].multiply(1.5), state.clients['prev_model'])
  clients = {**state.clients, 'prev_model': prev,
             'dfc': {**state.clients['dfc'], 'projection': {'kernel': kernel, 'bias': bias}}}
  state = state.replace(clients=clients)
  images = jnp.asarray(np.random.default_rng(1).uniform(-1, 1, size=(2, 8, 8, 3)), jnp.float32)
  client_one = jax.tree.map(lambda x: x[1], prev)
  expected = 2.0 * model.apply(client_one, images, train=False) + jnp.arange(DIM)
  np.testing.assert_allclose(algorithm.personalized(state)(1)(images), expected, rtol=1e-5,
                             atol=1e-6)
  # Without the DFC branch a client's personalized model is its local backbone.
  config, fed, algorithm, state = _setup('row=hn_con,runlocal')
  local = jax.tree.map(lambda x: x[2], state.clients['prev_model'])
  np.testing.assert_allclose(algorithm.personalized(state)(2)(images),
                             model.apply(local, images, train=False), rtol=1e-5, atol=1e-6)


def test_distillation_loss_by_hand():
  student = np.array([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
  teacher = np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]])
  t = 2.0
  p = np.exp(teacher[0] / t) / np.exp(teacher[0] / t).sum()
  q = np.exp(student[0] / t) / np.exp(student[0] / t).sum()
  expected = t**2 * np.sum(p * np.log(p / q)) / 2   # the second sample agrees: KL 0
  got = fedfr.distillation_loss(jnp.asarray(student), jnp.asarray(teacher), t,
                                jnp.array([True, True]))
  np.testing.assert_allclose(got, expected, rtol=1e-5)


@pytest.mark.parametrize('row', ['finetune', 'kd'])
def test_adaptation_round_trains_locally_and_keeps_the_global_model(row):
  config, fed, algorithm, state = _setup(f'row={row},runlocal')
  assert config.num_rounds == 3 and fedfr.variant_name(config) == f'hn+con+{row}'
  last = state.replace(round=jnp.array(config.num_rounds - 1, jnp.int32))
  client_input, result = _one_client(algorithm, last, fed, client=0)
  assert bool(client_input.shared['adapting'])
  assert ('loss_kd' in result.metrics) == (row == 'kd')
  # The client adapted its own model; the server keeps the global one.
  changed = jax.tree.map(lambda a, b: not np.allclose(a, b), result.private['prev_model'],
                         state.server['model'])
  assert any(jax.tree.leaves(changed))
  updates = jax.tree.map(lambda x: x[None], result.update)
  new = algorithm.server_update(state.server, updates, jnp.ones(1), jnp.arange(1),
                                last.round, None)
  jax.tree.map(np.testing.assert_array_equal, new, state.server)
  # Before the last round it is an ordinary federated round: the server moves.
  first_input, first = _one_client(algorithm, state, fed, client=0)
  assert not bool(first_input.shared['adapting'])
  moved = algorithm.server_update(state.server, jax.tree.map(lambda x: x[None], first.update),
                                  jnp.ones(1), jnp.arange(1), state.round, None)
  assert not np.allclose(moved['Phi'], state.server['Phi'])


def test_memory_report_counts_the_state_init_builds():
  from fedjax_face.proj.fedfr import memory
  config, fed, algorithm, state = _setup()
  config.data.synthetic.num_identities = NUM_PUBLIC + 2 * NUM_CLIENTS
  config.data.synthetic.images_per_identity = 3
  got = memory.state_bytes(config)
  nbytes = lambda tree: sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))
  assert got['all clients'] == nbytes(state.clients)
  cohort = federated.cohort_size(config.federated.num_clients, config.federated.participation)
  assert got["a round's cohort (on the device with client_state='host')"] == (
      nbytes(state.clients) // config.federated.num_clients * cohort)
  assert got['server: total'] == nbytes(state.server)
