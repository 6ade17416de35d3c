"""BatchNorm's running statistics under the codecs (core/blocks.py, core/compression.py): they
cross as the clients have them, the server's are the exact weighted mean of the clients', top-k's
error feedback no longer drives the running variance below zero, and the ledger counts them at
float32 size."""

import functools

import jax
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.core import aggregation, blocks, communication, compression
from fedjax_face.core.algorithm import ClientInput, RoundState
from fedjax_face.data import federated
from tests import engine_cases

CODECS = {'none': {}, 'quantize': {'compression__codec': 'quantize', 'compression__bits': 8},
          'topk': {'compression__codec': 'topk', 'compression__fraction': 0.01}}


@functools.cache
def _build(codec: str, name='fedpe'):
  """(the method alone, the method as a run wraps it, the tiny problem) under `codec` (a key of
  CODECS); small_cnn has a BatchNorm after each convolution and on the features. Built once per
  codec, so the tests of one codec share `_round`'s compile."""
  config = engine_cases.tiny_config(name)
  engine_cases.set_fields(**CODECS[codec])(config)
  fed = engine_cases.tiny_problem()
  method = algorithms.get(name).build(config, models.build_backbone(config.model), fed,
                                      step_mode='scan')
  spec = blocks.from_config(config)
  run = blocks.wrap(method, spec, fed.num_clients) if spec.active else method
  return method, run, fed


def _method_state(state: RoundState, wrapped: bool) -> RoundState:
  if not wrapped:
    return state
  return RoundState(server=state.server['method'], clients=state.clients['method'],
                    round=state.round)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _round(method, run, wrapped, state, ids, weights, data, key):
  """One round of `run` as the engine plays it (broadcast, every client, server step), and beside
  it the method's own client step on the same inputs: what each client's training made, before
  any codec. Returns (new state, what each client sent, the clients' trained statistics)."""
  keys = jax.random.split(key, len(ids))

  def clients_of(algorithm, round_state):
    client_input = algorithm.broadcast(round_state.server, ids, round_state.round, key)
    private = aggregation.gather_clients(round_state.clients, ids)
    return client_input, jax.vmap(
        lambda row, own, d, k: algorithm.client_update(ClientInput(client_input.shared, row), own,
                                                       d, k))(
            client_input.per_client, private, data, keys)

  _, results = clients_of(run, state)
  _, trained = clients_of(method, _method_state(state, wrapped))
  server = run.server_update(state.server, results.update, weights, ids, state.round, key)
  clients = aggregation.scatter_clients(state.clients, ids, results.private)
  new = RoundState(server=server, clients=clients, round=state.round + 1)
  return new, results.update, trained.update['model']['batch_stats']


def _rounds(codec: str, cohorts):
  """Plays `cohorts` one round each; yields, per round, (server statistics after it, the clients'
  trained statistics, their weights, what they sent)."""
  method, run, fed = _build(codec)
  wrapped = run is not method
  state = run.init(jax.random.PRNGKey(0))
  for r, cohort in enumerate(cohorts):
    ids = np.asarray(cohort, np.int32)
    weights = fed.num_examples[ids].astype(np.float32)
    data = federated.sample_round(fed, ids, round_index=r, seed=0, steps=2, batch_size=4)
    state, sent, trained = _round(method, run, wrapped, state, ids, weights, data,
                                  jax.random.PRNGKey(r + 1))
    server = _method_state(state, wrapped).server['model']['batch_stats']
    yield jax.tree.map(np.asarray, server), jax.tree.map(np.asarray, trained), weights, sent


def _assert_exact_weighted_mean(server, trained, weights):
  """`server` is sum_k w_k s_k / sum_k w_k of the clients' statistics s_k, computed here in
  float64. The server sums m float32 terms and divides once, so it may differ from the exact mean
  by float32 rounding alone: at most (m + 2)·eps32 · max_k |s_k| per coordinate. A codec's error
  (8-bit steps, top-k's dropped coordinates) is orders of magnitude larger."""
  w = np.asarray(weights, np.float64)
  bound = (len(w) + 2) * np.finfo(np.float32).eps

  def one(s, t):
    t = np.asarray(t, np.float64)
    exact = np.tensordot(w, t, axes=1) / w.sum()
    np.testing.assert_allclose(s, exact, rtol=0, atol=bound * np.abs(t).max())
  jax.tree.map(one, server, trained)


@pytest.mark.parametrize('codec', list(CODECS))
def test_server_statistics_are_the_exact_weighted_mean_under_each_codec(codec):
  (server, trained, weights, sent), = _rounds(codec, [(0, 1, 2, 3, 4)])
  _assert_exact_weighted_mean(server, trained, weights)
  # What crosses for the statistics: each client's own, float32 and whole, not a payload.
  jax.tree.map(lambda s, t: np.testing.assert_array_equal(s, t),
               sent['model']['batch_stats'], trained)
  assert {str(x.dtype) for x in jax.tree.leaves(sent['model']['batch_stats'])} == {'float32'}


def test_topk_error_feedback_keeps_the_running_variance_at_the_weighted_mean():
  """Before, top-k sent each client's change of the running statistics sparsely and fed back
  what it held: a client that sat out while others lowered a variance later sent its own held
  fall on top. Under that code these 15 rounds (k = 1 per tensor) took the server's running
  variance below zero from round 14 on ('features' to -0.009, then 'bn2' to -0.13 and 'features'
  to -0.32 in round 15). Now every round's statistics are the clients' weighted mean, so each
  variance is at least the smallest client's, which is >= 0."""
  cohorts = [(0, 1, 2, 3, 4), (2, 4), (0,), (0,), (4,), (2, 3), (2, 3), (1, 3), (0, 1), (0, 3),
             (0, 4), (2,), (1,), (2,), (0,)]
  rounds = list(_rounds('topk', cohorts))
  lowest = [{name: float(s['var'].min()) for name, s in server.items()}
            for server, _, _, _ in rounds]
  assert all(v >= 0 for low in lowest for v in low.values()), lowest
  for server, trained, weights, _ in rounds:
    _assert_exact_weighted_mean(server, trained, weights)


def test_ledger_counts_the_statistics_at_float32_and_the_rest_compressed():
  """Bytes up under top-k: k float32 values and k int32 indices per coded tensor of the model,
  plus 4 bytes per running-statistic coordinate, sent whole."""
  method, run, fed = _build('topk')
  state = jax.eval_shape(run.init, jax.random.PRNGKey(0))
  data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                      federated.sample_round(fed, np.array([0]), round_index=0, seed=0, steps=2,
                                             batch_size=4))
  ledger = communication.ledger(run, state, data, [np.array([0, 1]), np.array([2])],
                                fed.num_clients)
  model = state.server['method']['model']
  statistics = sum(x.size for x in jax.tree.leaves(model['batch_stats']))
  coded = [x.size for x in jax.tree.leaves(model['params'])]
  compressed = sum((4 + 4) * compression.topk_count(n, 0.01) for n in coded)
  assert statistics == 2 * (2 + 4 + 8 + 8)   # mean and var of small_cnn's BatchNorms at width 2
  assert ledger['bytes_per_client_round']['up_by_key'] == {'model': compressed + 4 * statistics}
  assert ledger['total_bytes']['up'] == 3 * (compressed + 4 * statistics)
