"""Algorithms as pure functions: what each client sends, and the server steps by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import common, pairwise
from fedjax_face.core import aggregation, class_tables
from fedjax_face.algorithms.fedgc import correction, regularizer
from fedjax_face.core.algorithm import RoundState
from fedjax_face.data import federated
from tests import engine_cases


def _setup(name):
  config = engine_cases.tiny_config(name)
  fed = engine_cases.tiny_problem()
  model = models.build_backbone(config.model)
  algorithm = algorithms.get(name).build(config, model, fed, step_mode='scan')
  return config, fed, algorithm


def _one_client_result(algorithm, fed, state, client=1):
  ids = np.array([client], np.int32)
  data = federated.sample_round(fed, ids, round_index=0, seed=0, steps=2, batch_size=4)
  client_input = algorithm.broadcast(state.server, jnp.asarray(ids), state.round,
                                     jax.random.PRNGKey(1))
  take = lambda x: x[0]
  private = aggregation.gather_clients(state.clients, jnp.asarray(ids))
  return algorithm.client_update(
      client_input._replace(per_client=jax.tree.map(take, client_input.per_client)),
      jax.tree.map(take, private), jax.tree.map(take, data), jax.random.PRNGKey(0))


def test_fedpe_class_embeddings_never_leave_the_client():
  _, fed, algorithm = _setup('fedpe')
  state = algorithm.init(jax.random.PRNGKey(0))
  result = _one_client_result(algorithm, fed, state)
  assert set(result.update) == {'model'}                  # only the backbone is sent
  assert set(result.update['model']) <= {'params', 'batch_stats'}
  assert set(result.private) == {'W'}                     # W_k stays on the client
  assert not np.allclose(result.private['W'], state.clients['W'][1])   # and was trained


def test_fedgc_sends_backbone_and_class_embeddings():
  _, fed, algorithm = _setup('fedgc')
  state = algorithm.init(jax.random.PRNGKey(0))
  result = _one_client_result(algorithm, fed, state)
  assert set(result.update) == {'model', 'W'}             # Alg. 1 line 8
  assert result.private == {}


def test_fedpe_server_update_is_the_weighted_mean():
  _, fed, algorithm = _setup('fedpe')
  state = algorithm.init(jax.random.PRNGKey(0))
  models_stacked = jax.tree.map(lambda x: jnp.stack([x, x + 1.0, x + 5.0]), state.server['model'])
  weights = jnp.array([1.0, 3.0, 0.0])
  out = algorithm.server_update(state.server, {'model': models_stacked}, weights,
                                jnp.array([0, 1, fed.num_clients]), state.round,
                                jax.random.PRNGKey(2))
  jax.tree.map(lambda o, x: np.testing.assert_allclose(o, x + 0.75, rtol=1e-5, atol=1e-6),
               out['model'], state.server['model'])


def test_fedgc_server_update_scatters_then_corrects_all_clients():
  config, fed, algorithm = _setup('fedgc')
  state = algorithm.init(jax.random.PRNGKey(0))
  w = np.asarray(state.server['W'])
  mask = np.asarray(fed.class_mask)
  new_rows = w[[2, 4]] + 0.5 * mask[[2, 4]][..., None]
  models_stacked = jax.tree.map(lambda x: np.stack([x, x]), state.server['model'])
  # Jitted, as the engine runs it: the server step's arithmetic is the subject, not op-by-op
  # dispatch, which would compile each of its many small ops on its own.
  out = jax.jit(algorithm.server_update)(
      state.server, {'model': models_stacked, 'W': new_rows}, jnp.array([2.0, 2.0]),
      jnp.array([2, 4]), state.round, jax.random.PRNGKey(2))
  w_tilde = w.copy()
  w_tilde[[2, 4]] = new_rows                                   # line 12
  step = config.fedgc.reg_lambda * config.optimizer.learning_rate
  grad = jax.jit(jax.grad(lambda x: regularizer.softmax_regularizer(
      x, jnp.asarray(mask), self_gradient=config.fedgc.reg_self_gradient)))(w_tilde)
  expected = w_tilde - step * np.asarray(grad) * mask[..., None]   # line 14
  np.testing.assert_allclose(out['W'], expected, rtol=1e-5, atol=1e-7)
  # Clients outside the cohort are corrected too: the regularizer spans every client's W.
  assert not np.allclose(out['W'][0], w[0])


def test_unknown_algorithm_lists_valid_names():
  with pytest.raises(ValueError, match=r"algorithm='fedx' is unknown; expected one of \['apfl', 'centralized', 'ditto', 'fedaws', 'fedbn', 'fedface', 'fedfr', 'fedfv', 'fedgc', 'fedgpad', 'fedma', 'fedpad', 'fedpe', 'fedrep', 'feduv'\]"):
    algorithms.get('fedx')


def test_general_case_averages_shared_identity_and_regularizes_against_exclusive_classes():
  """Hand-made 3 clients: identity 0 is shared by clients 0 and 1; 1, 2, 3 are exclusive."""
  table = np.array([[0, 1], [0, 2], [3, -1]], np.int32)
  valid, holders = class_tables.identity_holders(table, 4)
  np.testing.assert_array_equal(valid, [True, True, True, True])
  np.testing.assert_array_equal(holders, [[1, 1, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]])
  rng = np.random.default_rng(0)
  slots = rng.normal(size=(3, 2, 4)).astype(np.float32)
  slots[2, 1] = 0.0
  rows = np.asarray(class_tables.to_identity_rows(jnp.asarray(slots), table, 4))
  np.testing.assert_allclose(rows[0], (slots[0, 0] + slots[1, 0]) / 2, rtol=1e-6)
  np.testing.assert_array_equal(rows[1:], [slots[0, 1], slots[1, 1], slots[2, 0]])
  # Identity 0 meets 1 (client 0) and 2 (client 1) in local softmaxes: only 3 is a cross term.
  allowed = np.asarray(pairwise.allowed_mask(jnp.asarray(valid), jnp.asarray(holders)))
  np.testing.assert_array_equal(allowed, [[1, 0, 0, 1], [0, 1, 1, 1], [0, 1, 1, 1],
                                          [1, 1, 1, 1]])
  corrected = correction.flat_gradient_correction(jnp.asarray(rows), jnp.asarray(valid),
                                                    jnp.asarray(holders), step_size=0.5)
  back = np.asarray(class_tables.to_client_slots(corrected, table))
  np.testing.assert_array_equal(back[0, 0], back[1, 0])   # every holder gets the same row
  np.testing.assert_array_equal(back[2, 1], np.zeros(4))  # padding stays zero
  np.testing.assert_allclose(back[2, 0], np.asarray(corrected)[3], rtol=0)


def test_shared_identities_split_images_between_holders():
  from fedjax_face.data import federated, partition
  clients = partition.share_identities([np.array([0, 1]), np.array([2]), np.array([3])], 0.5, 2,
                                       np.random.default_rng(1))
  assert sum(len(c) for c in clients) == 4 + 2
  labels = np.repeat(np.arange(4), 6)
  fed = federated.build(np.zeros((24, 2, 2, 3), np.uint8), labels, clients)
  seen = np.concatenate(fed.client_indices)
  np.testing.assert_array_equal(np.sort(seen), np.arange(24))   # every image once, none twice
  with pytest.raises(ValueError, match='shared_group_size=5; expected 2 to num_clients'):
    partition.share_identities(clients, 0.5, 5, np.random.default_rng(0))


@pytest.mark.parametrize('name', ['fedpe', 'fedgc'])
def test_kept_optimizer_state_stays_private_and_continues_across_rounds(name):
  # One client, FedPE / FedGC with client_optimizer_state='keep': two rounds of two steps
  # equal one optimizer run of four steps over the same batches (the server's mean of one
  # client is that client's model; FedGC's correction is off at lambda 0). With 'reset' they
  # do not (momentum 0.9 restarts).
  config = engine_cases.tiny_config(name)
  config.federated.client_optimizer_state = 'keep'
  if name == 'fedgc':
    config.fedgc.reg_lambda = 0.0
  fed = engine_cases.tiny_problem()
  model = models.build_backbone(config.model)
  kept = algorithms.get(name).build(config, model, fed, step_mode='scan')
  config.federated.client_optimizer_state = 'reset'
  reset = algorithms.get(name).build(config, model, fed, step_mode='scan')
  ids = jnp.array([1], jnp.int32)
  rounds = [federated.sample_round(fed, np.asarray(ids), round_index=r, seed=0, steps=2,
                                   batch_size=4) for r in (0, 1)]
  rngs = [jax.random.PRNGKey(10), jax.random.PRNGKey(11)]

  def two_rounds(algorithm):
    state = algorithm.init(jax.random.PRNGKey(0))
    # The server's steps jitted, as the engine runs them: their arithmetic is the subject, and op
    # by op each of their many small ops would compile on its own.
    broadcast, server_update = jax.jit(algorithm.broadcast), jax.jit(algorithm.server_update)
    scatter = jax.jit(aggregation.scatter_clients)
    for r, data in enumerate(rounds):
      client_input = broadcast(state.server, ids, jnp.int32(r), jax.random.PRNGKey(1))
      take = lambda x: x[0]
      private = jax.tree.map(take, aggregation.gather_clients(state.clients, ids))
      result = algorithm.client_update(
          client_input._replace(per_client=jax.tree.map(take, client_input.per_client)),
          private, jax.tree.map(take, data), rngs[r])
      assert set(result.update) == ({'model'} if name == 'fedpe' else {'model', 'W'})
      assert 'opt_state' not in result.update                  # the momentum never leaves
      stacked = jax.tree.map(lambda x: x[None], result.update)
      server = server_update(state.server, stacked, jnp.ones(1), ids, jnp.int32(r),
                             jax.random.PRNGKey(2))
      clients = scatter(state.clients, ids, jax.tree.map(lambda x: x[None], result.private))
      state = RoundState(server=server, clients=clients, round=state.round + 1)
    return result

  kept_result, reset_result = two_rounds(kept), two_rounds(reset)
  assert 'opt_state' in kept_result.private and 'opt_state' not in reset_result.private

  # The same four steps as one optimizer run: round 0's data then round 1's.
  state = kept.init(jax.random.PRNGKey(0))
  train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode='scan')
  w0 = (state.clients['W'] if name == 'fedpe' else state.server['W'])[1]
  variables, w, opt_state = state.server['model'], w0, None
  for data, rng in zip(rounds, rngs):
    variables, w, opt_state, _ = train(variables, w, jax.tree.map(lambda x: x[0], data), rng,
                                       opt_state)
  final_w = kept_result.private['W'] if name == 'fedpe' else kept_result.update['W']
  np.testing.assert_allclose(final_w, w, rtol=1e-5, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               kept_result.update['model'], variables)
  reset_w = reset_result.private['W'] if name == 'fedpe' else reset_result.update['W']
  assert np.abs(np.asarray(reset_w) - np.asarray(w)).max() > 1e-4


def test_keeping_the_optimizer_is_refused_where_not_offered():
  config = engine_cases.tiny_config('fedfv')
  config.federated.client_optimizer_state = 'keep'
  with pytest.raises(ValueError, match=r"client_optimizer_state='keep' is not offered by fedfv; "
                                       r"expected 'reset' \(methods that offer it: \['fedgc', "
                                       r"'fedgpad', 'fedpad', 'fedpe'\]\)"):
    algorithms.check_config(config)
