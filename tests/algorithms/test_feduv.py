"""FedUV: real BCH codewords, Eq. 4 by hand, the per-user threshold, and codewords that never
leave their client."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import bch, feduv
from fedjax_face.data import federated
from fedjax_face.models import heads
from tests.config_files import load_config

NUM_CLIENTS = 6
DIM = 4


@pytest.mark.parametrize('n, k', [(15, 7), (31, 16), (63, 16)])
def test_minimum_distance_by_enumeration_equals_the_designed_distance(n, k):
  messages = np.array(list(itertools.product([0, 1], repeat=k)), np.uint8)
  bits = (feduv.codewords(n, k, messages) + 1) / 2
  # A linear code's minimum distance is its smallest non-zero codeword weight.
  weights = bits.sum(axis=1)
  assert weights.min() == 0 and np.count_nonzero(weights == 0) == 1
  assert int(weights[weights > 0].min()) == bch.code(n, k).d


def test_the_codes_and_codewords_are_galois_s_bit_for_bit():
  # The `galois` package (a test dependency) builds the same narrow-sense codes: the same
  # generator polynomial, designed distance and systematic codewords, for FedUV's three lengths.
  # Each code's GF(2^m) is the one galois.BCH builds by default (MATLAB's primitive polynomial),
  # with galois's pure-Python arithmetic: the same exact field, without the ~3 s of Numba kernels
  # galois compiles for each field by default.
  import galois  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  for n, k in feduv.DEFAULT_MESSAGE_BITS.items():
    m = n.bit_length()
    field = galois.GF(2**m, irreducible_poly=galois.matlab_primitive_poly(2, m),
                      compile='python-calculate')
    theirs, ours = galois.BCH(n, k, extension_field=field), bch.code(n, k)
    np.testing.assert_array_equal(np.asarray(theirs.generator_poly.coeffs), ours.generator)
    assert (theirs.n, theirs.k, theirs.d) == (ours.n, ours.k, ours.d)
    messages = rng.integers(0, 2, (20, k)).astype(np.uint8)
    np.testing.assert_array_equal(np.asarray(theirs.encode(theirs.field(messages))),
                                  bch.encode(ours, messages))
  with pytest.raises(ValueError):
    galois.BCH(127, 65)                      # galois agrees that 65 is not one


def test_message_lengths_from_cyclotomic_cosets():
  dims = bch.dimensions(127)
  assert dims == [1, 8, 15, 22, 29, 36, 43, 50, 57, 64, 71, 78, 85, 92, 99, 106, 113, 120]
  assert bch.dimensions(15) == [1, 5, 7, 11]
  for n, k in feduv.DEFAULT_MESSAGE_BITS.items():
    assert k in bch.dimensions(n) and bch.code(n, k).k == k
  # BCH(15, 7) by hand: GF(16) on x^4 + x + 1; the minimal polynomials of alpha (x^4 + x + 1) and
  # alpha^3 (x^4 + x^3 + x^2 + x + 1) multiply to x^8 + x^7 + x^6 + x^4 + 1.
  np.testing.assert_array_equal(bch.code(15, 7).generator, [1, 1, 1, 0, 1, 0, 0, 0, 1])
  with pytest.raises(ValueError, match=r'no binary BCH\(127, 65\) code; expected k in \[1, 8, '):
    bch.code(127, 65)
  with pytest.raises(ValueError, match=r'BCH code length n=100; expected 2\^m - 1'):
    bch.code(100, 50)
  with pytest.raises(ValueError, match=r'messages of shape \(2, 3\); expected \[num, 7\] bits'):
    bch.encode(bch.code(15, 7), np.zeros((2, 3)))


@pytest.mark.parametrize('n', [127, 255, 511])
def test_assigned_codewords_are_distinct_valid_and_far_apart(n):
  k = feduv.DEFAULT_MESSAGE_BITS[n]
  messages = feduv.random_messages(np.random.default_rng(0), 40, k)
  v = feduv.codewords(n, k, messages)
  assert v.shape == (40, n) and set(np.unique(v)) == {-1.0, 1.0}
  code = bch.code(n, k)
  bits = ((v + 1) / 2).astype(np.uint8)
  np.testing.assert_array_equal(bits[:, :k], messages)                  # systematic
  # Every one a codeword (a multiple of g(x)); with the systematic check above, each decodes to
  # its message. One flipped bit is not a codeword.
  assert bch.is_codeword(code, bits).all()
  flipped = bits.copy()
  flipped[:, 3] ^= 1
  assert not bch.is_codeword(code, flipped).any()
  hamming = (n - v @ v.T) / 2
  off = hamming[~np.eye(40, dtype=bool)]
  assert off.min() >= code.d                                            # designed distance
  assert {127: 21, 255: 37, 511: 61}[n] == code.d


def test_eq4_loss_and_gradient_by_hand():
  v = np.array([[1.0, -1.0, 1.0]])              # n = 3, ||v||^2 = 3
  projection = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])   # W' [n, d]
  g = np.array([[1.0, 1.0], [3.0, 0.0], [0.5, -1.0]])
  mask = np.array([True, True, True])
  # w = W'^T v / 3 = (2, -1) / 3; scores g . w = 1/3, 2, 2/3; hinge 2/3, 0, 1/3 -> mean 1/3.
  def loss(projection, g):
    w = feduv.class_rows(projection, jnp.asarray(v))
    return heads.loss(g, w, jnp.zeros(3, jnp.int32), None, jnp.asarray(mask),
                      kind='positive_dot', scale=1.0, margin=1.0)
  value, (d_proj, d_g) = jax.value_and_grad(loss, argnums=(0, 1))(jnp.asarray(projection),
                                                                  jnp.asarray(g))
  np.testing.assert_allclose(value, 1 / 3, rtol=1e-6)
  # Active samples 0 and 2: dL/dW' = -(1/N) sum v g^T / ||v||^2; dL/dg_i = -w / N.
  active = np.array([1.0, 0.0, 1.0])
  expected_proj = -(v.T @ (active[:, None] * g).sum(0, keepdims=True)) / 3 / 3
  np.testing.assert_allclose(d_proj, expected_proj, rtol=1e-6)
  w = np.array([2.0, -1.0]) / 3
  np.testing.assert_allclose(d_g, -active[:, None] * w / 3, rtol=1e-6)


def test_inverse_norm_switch_divides_by_the_norm_not_its_square():
  v = jnp.asarray([[1.0, -1.0, 1.0, 1.0]])      # ||v|| = 2
  projection = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [3.0, 0.0]])
  # W'^T v = (5, -1): Eq. 4 divides by 4, the switch by 2.
  np.testing.assert_allclose(feduv.class_rows(projection, v), [[1.25, -0.25]])
  np.testing.assert_allclose(
      feduv.class_rows(projection, v, feduv.CODEWORD_SCALES['inverse_norm']), [[2.5, -0.5]])


def test_user_threshold_is_the_quantile_of_the_valid_scores():
  scores = jnp.array([5.0, -1.0, 3.0, 100.0, 0.5, 2.0])
  mask = jnp.array([True, True, True, False, True, True])
  for q in (0.1, 0.5, 0.9):
    expected = np.quantile(np.array([5.0, -1.0, 3.0, 0.5, 2.0]), q)
    np.testing.assert_allclose(feduv.user_threshold(scores, mask, q), expected, rtol=1e-6)
  assert float(feduv.user_threshold(scores, jnp.zeros(6, bool), 0.1)) == 0.0


def _setup():
  config = load_config('feduv', 'n=127,runlocal')
  config.data.image_size = 8
  config.model.width = 2
  config.model.num_stages = 2
  config.model.embedding_dim = DIM
  config.federated.num_clients = NUM_CLIENTS
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(NUM_CLIENTS), 4).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  fed = federated.build(images, labels, [np.array([i], np.int32) for i in range(NUM_CLIENTS)])
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('feduv').build(config, model, fed, step_mode='scan')
  return config, fed, algorithm, algorithm.init(jax.random.PRNGKey(0))


def _holds_a_codeword(tree, codewords) -> bool:
  """Whether any leaf holds, along its last axis, a row equal to one of `codewords` (or -it)."""
  for leaf in jax.tree.leaves(tree):
    leaf = np.asarray(leaf)
    if leaf.ndim and leaf.shape[-1] == codewords.shape[1]:
      rows = leaf.reshape(-1, codewords.shape[1])
      if np.any(np.all(np.isclose(rows[:, None], codewords[None]), axis=-1)) or np.any(
          np.all(np.isclose(rows[:, None], -codewords[None]), axis=-1)):
        return True
  return False


def test_privacy_the_server_never_receives_a_codeword():
  config, fed, algorithm, state = _setup()
  codewords = np.asarray(state.clients['codeword'])
  assert codewords.shape == (NUM_CLIENTS, 127) and set(state.clients) == {'codeword', 'threshold'}
  assert len(np.unique(codewords, axis=0)) == NUM_CLIENTS
  assert set(state.server) == {'model', 'projection'}
  assert not _holds_a_codeword(state.server, codewords)
  ids = jnp.array([2, 5])
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(1))
  assert set(client_input.shared) == {'model', 'projection', 'lr_scale'}
  assert client_input.per_client == {}
  data = federated.sample_round(fed, np.asarray(ids), round_index=0, seed=0, steps=2,
                                batch_size=2)
  for i, client in enumerate((2, 5)):
    private = jax.tree.map(lambda x, c=client: x[c], state.clients)
    result = algorithm.client_update(client_input, private, jax.tree.map(lambda x, i=i: x[i], data),
                                     jax.random.PRNGKey(i))
    # What is sent: theta and W' only; the codeword stays, unchanged, with the new threshold.
    assert set(result.update) == {'model', 'projection'}
    assert result.update['projection'].shape == (127, DIM)
    assert not _holds_a_codeword(result.update, codewords)
    np.testing.assert_array_equal(result.private['codeword'], codewords[client])
    assert np.isfinite(result.private['threshold'])
    assert float(result.metrics['train_loss']) > 0.0
  new_server = algorithm.server_update(
      state.server, jax.tree.map(lambda x: jnp.stack([x, x]), result.update),
      jnp.array([1.0, 1.0]), ids, state.round, jax.random.PRNGKey(0))
  assert set(new_server) == {'model', 'projection'}
  assert not _holds_a_codeword(new_server, codewords)


def test_threshold_is_the_quantile_of_the_clients_own_scores():
  config, fed, algorithm, state = _setup()
  client_input = algorithm.broadcast(state.server, jnp.array([1]), state.round,
                                     jax.random.PRNGKey(1))
  data = jax.tree.map(lambda x: x[0], federated.sample_round(
      fed, np.array([1]), round_index=0, seed=0, steps=2, batch_size=2))
  private = jax.tree.map(lambda x: x[1], state.clients)
  result = algorithm.client_update(client_input, private, data, jax.random.PRNGKey(0))
  model = models.build_backbone(config.model)
  scores, mask = feduv.own_scores(model, result.update['model'], result.update['projection'],
                                  private['codeword'], data)
  expected = np.quantile(np.asarray(scores)[np.asarray(mask)], config.feduv.threshold_quantile)
  np.testing.assert_allclose(result.private['threshold'], expected, rtol=1e-5)


def test_class_embeddings_are_each_clients_secret_embedding():
  _, _, algorithm, state = _setup()
  rows = np.asarray(algorithm.class_embeddings(state))
  v = np.asarray(state.clients['codeword'])
  expected = v @ np.asarray(state.server['projection']) / 127
  np.testing.assert_allclose(rows, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize('field, value, match', [
    ('feduv.code_length', 100, r'feduv.code_length=100; expected one of \(127, 255, 511\)'),
    ('feduv.threshold_quantile', 1.0, r'threshold_quantile=1.0; expected a fraction in \(0, 1\)'),
    ('feduv.codeword_scale', 'unit',
     r"feduv.codeword_scale='unit'; expected one of \('inverse_squared_norm', 'inverse_norm'\)"),
    ('feduv.message_bits', 8, r'message_bits=8 gives 256 messages for 1000 clients'),
    ('feduv.message_bits', 65,
     r'no binary BCH\(511, 65\) code; expected one of \[1, 10, 19, 28, 31, .*, 259, '),
    ('head.loss', 'positive_cosine', r"head.loss='positive_cosine'; FedUV's Eq. 4"),
    ('federated.partition', 'balanced', r"partition='balanced'; FedUV trains one identity"),
])
def test_config_errors_name_the_field(field, value, match):
  config = load_config('feduv', None)
  section, key = field.split('.')
  config[section][key] = value
  with pytest.raises(ValueError, match=match):
    algorithms.check_config(config)
