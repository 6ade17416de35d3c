"""The bench's FedAvg workload (tools/bench/fedavg_cnn.py): the round it times is FedAvg.

A client's update is plain SGD on softmax cross-entropy over every identity, the server's the
n_k-weighted mean; the round must equal that computed by hand, whatever the loop's thread count,
and a client sends its parameters and nothing else.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_face.core import engine as engine_lib
from fedjax_face.tools.bench import common as bench_common
from fedjax_face.tools.bench import fedavg_cnn

SPEC = ml_collections.ConfigDict(dict(num_clients=3, cohort_size=3, identities_per_client=2,
                                      images_per_identity=3, local_steps=2, batch_size=4))
IMAGE_SIZE = 8
LEARNING_RATE = 0.1


@pytest.fixture(scope='module')
def setup():
  """The problem, the algorithm, its first state and round 1's inputs, built once for the module."""
  problem = bench_common.make_problem('tiny', SPEC, IMAGE_SIZE, seed=0)
  model = fedavg_cnn.ClassifierCNN(num_classes=problem.fed.num_identities)
  algorithm = fedavg_cnn.fedavg_classifier(model, np.asarray(problem.fed.identity_table),
                                           IMAGE_SIZE, LEARNING_RATE, 'unroll')
  state = algorithm.init(jax.random.PRNGKey(0))
  ids, weights, data = bench_common.round_inputs(problem, 1, seed=0)
  return problem, model, algorithm, state, ids, weights, data


def by_hand(problem, model, params, ids, weights, data):
  """Each client: SGD steps on its masked mean cross-entropy over global labels; then the mean."""
  def loss(p, images, labels, mask):
    logits = model.apply({'params': p}, images.astype(jnp.float32) / 127.5 - 1.0)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    return (ce * mask).sum() / mask.sum()

  # One compiled gradient for every step: run op by op, the six took ~4 s of the test.
  grad = jax.jit(jax.grad(loss))
  finals = []
  for row, k in enumerate(ids):
    p = params
    for s in range(SPEC.local_steps):
      labels = problem.fed.identity_table[k][data['labels'][row, s]]
      g = grad(p, data['images'][row, s], labels, data['mask'][row, s])
      p = jax.tree.map(lambda a, b: a - LEARNING_RATE * b, p, g)
    finals.append(p)
  w = weights / weights.sum()
  return jax.tree.map(lambda *xs: sum(wk * x for wk, x in zip(w, xs)), *finals)


@pytest.fixture(scope='module')
def one_thread_round(setup):
  """The round the loop backend runs on one thread (its default), computed once for the module:
  both the hand-computed FedAvg and the two-thread round are compared with it."""
  _, _, algorithm, state, ids, weights, data = setup
  return engine_lib.RoundEngine(algorithm, backend='loop').run_round(
      state, ids, weights, data, jax.random.PRNGKey(1))[0]


def test_round_is_fedavg_of_sgd_clients(setup, one_thread_round):
  problem, model, _, state, ids, weights, data = setup
  assert np.all(data['mask'])   # every step full: the hand loss needs no empty-batch case
  expected = by_hand(problem, model, state.server['params'], ids, weights, data)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
               one_thread_round.server['params'], expected)


def test_round_does_not_depend_on_the_loop_threads(setup, one_thread_round):
  _, _, algorithm, state, ids, weights, data = setup
  two_threads = engine_lib.RoundEngine(algorithm, backend='loop', loop_threads=2).run_round(
      state, ids, weights, data, jax.random.PRNGKey(1))[0]
  jax.tree.map(np.testing.assert_array_equal, one_thread_round.server, two_threads.server)


def test_a_client_sends_its_parameters_only(setup):
  _, _, algorithm, state, ids, _, data = setup
  client_input = algorithm.broadcast(state.server, jnp.asarray(ids), state.round, None)
  one = client_input._replace(per_client=jax.tree.map(lambda x: x[0], client_input.per_client))
  # What is sent, not its values: traced only (run op by op, the update took ~3 s; the round
  # test above runs it).
  result = jax.eval_shape(algorithm.client_update, one, {}, jax.tree.map(lambda x: x[0], data),
                          jax.random.PRNGKey(2))
  assert set(result.update) == {'params'} and result.private == {}
  assert jax.tree.structure(result.update['params']) == jax.tree.structure(state.server['params'])
  jax.tree.map(lambda a, b: np.testing.assert_equal(a.shape, b.shape), result.update['params'],
               state.server['params'])


def test_the_pytorch_loop_in_channels_last_trains_the_nchw_loops_states():
  """`torch_reference.cnn_clients(channels_last=True)` (a layout, not another model): the summed
  client states equal the NCHW loop's to float rounding, key for key and shape for shape. Runs
  only where torch is installed (it is optional)."""
  pytest.importorskip('torch')
  from fedjax_face.tools.bench import torch_reference  # pylint: disable=g-import-not-at-top
  spec = SPEC.to_dict()
  start = torch_reference.initial_cnn_state(IMAGE_SIZE, 6, seed=0)
  args = (spec, IMAGE_SIZE, 6, LEARNING_RATE, 0)
  nchw = torch_reference.cnn_clients(*args)(start, range(spec['cohort_size']))
  channels_last = torch_reference.cnn_clients(*args, channels_last=True)(
      start, range(spec['cohort_size']))
  assert list(channels_last) == list(nchw) == list(start)
  for key, value in nchw.items():
    assert channels_last[key].shape == value.shape == start[key].shape
    np.testing.assert_allclose(channels_last[key], value, rtol=1e-5, atol=1e-6, err_msg=key)
