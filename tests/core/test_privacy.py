"""Client-level differential privacy (core/privacy.py) and bytes on the wire (core/communication.py):
the clip by hand, the noise's standard deviation, epsilon against dp-accounting called directly,
the round unchanged with dp off, and the bytes equal to the arrays that cross."""

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import rdp

from fedjax_face import algorithms, config_lib, experiment, models
from fedjax_face.core import communication, privacy
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.data import federated, sources
from fedjax_face.run import setup as run_setup
from tests import config_files, engine_cases


def test_clip_scales_the_difference_from_what_was_received_to_the_bound():
  origin = {'model': {'w': jnp.array([1.0, 1.0]), 'count': jnp.int32(7)}, 'W': jnp.zeros((1, 2))}
  # Difference (3, 0) and (0, 4): norm 5.
  update = {'model': {'w': jnp.array([4.0, 1.0]), 'count': jnp.int32(9)}, 'W': jnp.array([[0.0, 4.0]])}
  clipped, norm = privacy.clip_update(update, origin, clip_norm=1.0)
  assert float(norm) == pytest.approx(5.0)
  np.testing.assert_allclose(clipped['model']['w'], [1.6, 1.0], rtol=1e-6)   # 1 + 3/5
  np.testing.assert_allclose(clipped['W'], [[0.0, 0.8]], rtol=1e-6)          # 4/5
  assert int(clipped['model']['count']) == 9                                  # integers pass
  # Inside the bound: unchanged, bit for bit.
  same, _ = privacy.clip_update(update, origin, clip_norm=5.5)
  jax.tree.map(np.testing.assert_array_equal, same, update)


def test_noise_std_is_sigma_times_clip_on_the_sum_and_on_each_client_row():
  spec = privacy.DpSpec(clip_norm=0.5, noise_std=3.0 * 0.5, client_rows=('W',))
  m_real, padding, dim = 4, 2, 8
  updates = {'model': jnp.zeros((m_real + padding, dim)), 'W': jnp.zeros((m_real + padding, 2, dim))}
  weights = jnp.array([5.0, 1.0, 2.0, 7.0, 0.0, 0.0])
  run = jax.jit(jax.vmap(lambda key: privacy.noisy_updates(updates, weights, spec, key)))
  noisy, uniform = run(jax.random.split(jax.random.PRNGKey(0), 5000))
  np.testing.assert_array_equal(uniform[0], [1, 1, 1, 1, 0, 0])   # weights by size are dropped
  model, rows = np.asarray(noisy['model']), np.asarray(noisy['W'])
  # The sum's one draw, z / m on every real row: the uniform mean is z / m, so m x it is z.
  np.testing.assert_array_equal(model[:, 0], model[:, 3])
  z = m_real * model[:, :m_real].mean(axis=1)
  # 40,000 draws: the sample std is within 2 % of sigma * S (its standard error is ~0.35 %).
  assert np.std(z) == pytest.approx(1.5, rel=0.02)
  # Each client's own rows: an independent draw of sigma * S each.
  assert np.std(rows[:, :m_real]) == pytest.approx(1.5, rel=0.02)
  assert abs(np.corrcoef(rows[:, 0, 0, 0], rows[:, 1, 0, 0])[0, 1]) < 0.05
  assert not np.any(model[:, m_real:]) and not np.any(rows[:, m_real:])   # padding untouched


def test_unprotected_class_rows_pass_as_they_are():
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=1.0, client_rows=('W',), class_rows='unprotected')
  updates = {'model': jnp.zeros((2, 3)), 'W': jnp.ones((2, 1, 3))}
  noisy, _ = privacy.noisy_updates(updates, jnp.ones(2), spec, jax.random.PRNGKey(0))
  np.testing.assert_array_equal(noisy['W'], updates['W'])
  assert np.any(np.asarray(noisy['model']))
  assert not privacy.amplified(privacy.DpSpec(1.0, 1.0, ('W',)))
  assert privacy.amplified(spec) and privacy.amplified(privacy.DpSpec(1.0, 1.0))


@pytest.mark.parametrize('amplified', [True, False])
def test_epsilon_is_dp_accounting_called_directly(amplified):
  num_clients, cohort, sigma, rounds, delta = 100, 10, 1.3, 25, 1e-5
  gaussian = dp_accounting.GaussianDpEvent(sigma / 2)   # replace-one: sensitivity 2S
  event = (dp_accounting.SampledWithoutReplacementDpEvent(num_clients, cohort, gaussian)
           if amplified else gaussian)
  accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  expected = accountant.get_epsilon(delta)
  assert privacy.epsilon(num_clients, cohort, sigma, rounds, delta, amplified) == expected
  assert privacy.epsilon(num_clients, cohort, 0.0, rounds, delta) == float('inf')
  assert privacy.epsilon(num_clients, cohort, sigma, 0, delta) == 0.0
  if amplified:   # sampling 10 of 100 must help
    assert expected < privacy.epsilon(num_clients, cohort, sigma, rounds, delta, False)
  # The per-round curve (TensorBoard's dp/epsilon) is the same accountant after each round.
  curve = privacy.epsilon_curve(num_clients, cohort, sigma, rounds, delta, amplified)
  assert curve == [privacy.epsilon(num_clients, cohort, sigma, t, delta, amplified)
                   for t in range(1, rounds + 1)]
  assert curve[-1] == expected and curve == sorted(curve)
  assert privacy.epsilon_curve(num_clients, cohort, 0.0, 3, delta) == [float('inf')] * 3


def mean_of_shifts(dim: int, num_clients: int = 0) -> Algorithm:
  """Each client sends what it received plus its own vector data['x'], whatever the round; the
  server takes the (noised) mean. With `num_clients`, each client also gets its own row of the
  server's table 'W' [num_clients, dim] and sends it back shifted the same way, and the server
  writes it back: a client row, as FedGC's W_k. A round with nothing to train, so what the engine
  adds (clip, noise, masks) is all that moves and all that compiles."""
  rows = ('W',) if num_clients else ()

  def init(rng, start=None):
    del rng, start
    server = {'w': jnp.zeros(dim), **({'W': jnp.zeros((num_clients, dim))} if rows else {})}
    return RoundState(server=server, clients={}, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del round_index, rng
    return ClientInput(shared={'w': server['w']},
                       per_client={'W': server['W'][client_ids]} if rows else {})

  def client_update(client_input, private, data, rng):
    del rng
    shift = data['x'][0, 0]
    return ClientResult(update=jax.tree.map(lambda v: v + shift, {**client_input.shared,
                                                                   **client_input.per_client}),
                        private=private, metrics={'loss': jnp.float32(0.0)})

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del round_index, rng
    new = {'w': jnp.tensordot(weights / jnp.sum(weights), updates['w'], axes=1)}
    if rows:   # padding clients' ids are past the table: dropped
      new['W'] = server['W'].at[client_ids].set(updates['W'], mode='drop')
    return new

  return Algorithm(name='shift', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda s: s,
                   class_embeddings=lambda state: None,
                   update_origin=lambda ci: {**ci.shared, **ci.per_client}, client_rows=rows)


def one_round(algorithm: Algorithm, dim: int, **engine_args):
  """One round of `algorithm` (`mean_of_shifts` of `dim`) over 5 clients on the loop backend, each
  client's shift N(0, 0.01²) per coordinate (an update's difference of norm ~0.01·sqrt(2·dim),
  under the clips of the tests here); the state as numpy."""
  from fedjax_face.core import engine as engine_lib  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(0).normal(0, 0.01, (5, 1, 1, dim)).astype(np.float32)
  ids, weights = np.arange(5, dtype=np.int32), np.array([3, 1, 2, 5, 4], np.float32)
  engine = engine_lib.RoundEngine(algorithm, backend='loop', **engine_args)
  state, _ = engine.run_round(algorithm.init(jax.random.PRNGKey(0)), ids, weights, {'x': x},
                              jax.random.PRNGKey(1))
  return jax.tree.map(np.asarray, state)


def test_dp_off_leaves_the_round_bit_identical():
  # Both kinds of update: the averaged 'w' and each client's own row of 'W' (as FedGC's W_k).
  config = engine_cases.tiny_config('fedgc')
  assert privacy.spec_from_config(config, ('W',)) is None     # dp.enabled defaults to False
  algorithm = mean_of_shifts(64, num_clients=5)
  plain = one_round(algorithm, 64)
  off = one_round(algorithm, 64, dp=privacy.spec_from_config(config, ('W',)))
  jax.tree.map(np.testing.assert_array_equal, plain, off)
  # And dp on does change it (the comparison can fail).
  on = one_round(algorithm, 64, dp=privacy.DpSpec(1.0, 1.0, ('W',), noise_multiplier=1.0))
  assert not np.array_equal(on.server['W'], plain.server['W'])
  assert not np.array_equal(on.server['w'], plain.server['w'])


def _one_client(name):
  config = engine_cases.tiny_config(name)
  # One stage of the small CNN: the clip and the bytes read every leaf alike, whatever the depth,
  # and the client's training compiles in about half the time of the three stages'.
  config.model.num_stages = 1
  fed = engine_cases.tiny_problem()
  algorithm = algorithms.get(name).build(config, models.build_backbone(config.model), fed,
                                         step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  ids = np.array([1], np.int32)
  client_input = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(3))
  row = jax.tree.map(lambda x: x[0], client_input.per_client)
  data = jax.tree.map(lambda x: x[0], federated.sample_round(fed, ids, round_index=0, seed=0,
                                                             steps=2, batch_size=4))
  private = jax.tree.map(lambda x: x[1], state.clients)
  return algorithm, state, ClientInput(client_input.shared, row), private, data


@pytest.mark.parametrize('name', ['fedpe', 'fedgc'])
def test_what_crosses_with_dp_is_within_the_clip_of_what_was_received(name):
  from fedjax_face.core import engine as engine_lib
  algorithm, _, client_input, private, data = _one_client(name)
  spec = privacy.DpSpec(clip_norm=0.01, noise_std=0.0, client_rows=algorithm.client_rows)
  # Jitted, as the engine runs it: one program, not each op compiled on its own.
  client = jax.jit(lambda client_input, private, data, rng: engine_lib._one_client(
      algorithm, client_input.shared, client_input.per_client, private, data, 1, rng, spec))
  result = client(client_input, private, data, jax.random.PRNGKey(5))
  origin = algorithm.update_origin(client_input)
  assert set(result.update) == set(origin) == ({'model'} if name == 'fedpe' else {'model', 'W'})
  delta = jax.tree.map(lambda u, o: u - o, result.update, origin)
  assert float(privacy.global_norm(delta)) == pytest.approx(0.01, rel=1e-4)   # clipped to S
  assert float(result.metrics['dp/clipped']) == 1.0
  assert float(result.metrics['dp/update_norm']) > 0.01


@pytest.mark.parametrize('name', ['fedpe', 'fedgc'])
def test_bytes_counted_are_the_arrays_that_cross(name):
  algorithm, state, client_input, private, data = _one_client(name)
  result = algorithm.client_update(client_input, private, data, jax.random.PRNGKey(5))
  spec = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), data)
  counted = communication.one_client_round(algorithm, state, spec)
  nbytes = lambda tree: sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree))
  assert sum(counted['up'].values()) == nbytes(result.update)
  assert sum(counted['down'].values()) == nbytes(client_input.shared) + nbytes(
      client_input.per_client)
  assert counted['up']['model'] == nbytes(result.update['model'])
  if name == 'fedgc':   # W_k: C_max rows of d floats, down and up
    assert counted['up']['W'] == counted['down']['W (own row)'] == nbytes(result.update['W']) > 0
  ledger = communication.ledger(algorithm, state, spec, [np.array([0, 1]), np.array([1, 2])], 5)
  per = sum(counted['up'].values())
  assert ledger['total_bytes']['up'] == 4 * per and ledger['clients_reached'] == 3


FEDERATED = [('fedpe', {'model'}), ('fedgc', {'model', 'W'}), ('fedfv', {'model', 'W'}),
             ('fedaws', {'model', 'W'}), ('fedfv/fedface', {'model', 'W'}),
             ('feduv', {'model', 'projection'}), ('fedfr', {'model', 'Phi'}),
             ('pad/fedgpad', {'params', 'batch_stats'}), ('pad/fedpad', {'params', 'batch_stats'})]


@pytest.mark.parametrize('name, sent', FEDERATED)
def test_every_federated_method_says_what_its_clients_received(name, sent):
  """Shapes only (eval_shape): the origin of each method's update has the update's structure."""
  config = config_files.load_config(name)
  fed, _ = sources.training_views(config, sources.load(config), one_client=False)
  algorithm = algorithms.get(config.algorithm).build(config, models.build_backbone(config.model),
                                                     fed, step_mode='scan')
  data = run_setup.one_client_data(fed, config)

  def update_and_origin(state, data):
    ids = jnp.zeros((1,), jnp.int32)
    ci = algorithm.broadcast(state.server, ids, state.round, jax.random.PRNGKey(0))
    ci = ClientInput(ci.shared, jax.tree.map(lambda x: x[0], ci.per_client))
    private = jax.tree.map(lambda x: x[0], state.clients)
    return (algorithm.client_update(ci, private, data, jax.random.PRNGKey(0)).update,
            algorithm.update_origin(ci))

  state = jax.eval_shape(algorithm.init, jax.random.PRNGKey(0))
  update, origin = jax.eval_shape(update_and_origin, state, data)
  assert set(update) == sent
  assert jax.tree.structure(update) == jax.tree.structure(origin)
  assert jax.tree.map(lambda x: (x.shape, x.dtype), update) == jax.tree.map(
      lambda x: (x.shape, x.dtype), origin)
  assert set(algorithm.client_rows) <= set(update)


def test_config_errors_name_the_field():
  config = config_files.load_config('fedgc')
  for field, value, match in [('clip_norm', 0.0, 'config.dp.clip_norm=0.0; expected a finite '
                               'positive'),
                              ('noise_multiplier', -1.0, 'config.dp.noise_multiplier=-1.0'),
                              ('target_delta', 1.0, r'config.dp.target_delta=1.0; expected a '
                               r'number in \(0, 1\)'),
                              ('class_rows', 'public', "config.dp.class_rows='public'"),
                              ('noise_seed', 'urandom', r"config.dp.noise_seed='urandom'; "
                               r"expected one of \('config', 'os'\)")]:
    bad = config_files.load_config('fedgc')
    bad.dp[field] = value
    with pytest.raises(ValueError, match=match):
      config_lib.validate(bad)
  central = config_files.load_config('fedgc/centralized')
  central.dp.enabled = True
  with pytest.raises(ValueError, match=r'dp.enabled=True with centralized: .* needs clients'):
    experiment.validate(central)
  del config


def test_a_run_with_dp_reports_epsilon_and_bytes(tmp_path):
  config = config_files.load_config('fedgc')
  config.dp.enabled = True
  config.dp.noise_multiplier = 2.0
  # One stage of the small CNN: no check here reads the model's depth, and its client and server
  # programs compile in about half the time of runlocal's three stages.
  config.model.num_stages = 1
  # No evaluator: what is checked is the privacy and communication ledgers and the report's lines
  # of them, none of which an evaluation writes.
  for kind in list(config.evals):
    del config.evals[kind]
  results = experiment.train_and_evaluate(config, str(tmp_path))
  priv, comm = results['privacy'], results['communication']
  k = config.federated.num_clients   # runlocal: all 4 clients every round, FedGC sends W_k
  assert priv['epsilon'] == privacy.epsilon(k, k, 2.0, config.num_rounds, 1e-5, amplified=False)
  assert results['last_logged_round']['dp/epsilon'] == priv['epsilon']
  assert priv['amplified_by_sampling'] is False and priv['client_rows'] == ['W']
  per = comm['bytes_per_client_round']
  assert comm['client_rounds'] == k * config.num_rounds
  assert comm['total_bytes'] == {'down': k * config.num_rounds * per['down'],
                                 'up': k * config.num_rounds * per['up']}
  report = (tmp_path / 'report.md').read_text()
  assert f"epsilon = {priv['epsilon']:.3f} at delta = 1e-05 after 2 rounds" in report
  assert 'Communication per client per round' in report


def test_noisy_batchnorm_variances_are_raised_to_zero_and_nothing_else_moves():
  server = {'model': {'params': {'bn': {'scale': jnp.array([-1.0])}},
                      'batch_stats': {'bn': {'mean': jnp.array([-2.0]), 'var': jnp.array([-0.5, 3.0])}}},
            'W': jnp.array([[-1.0]])}
  fixed = privacy.valid_statistics(server)
  np.testing.assert_array_equal(fixed['model']['batch_stats']['bn']['var'], [0.0, 3.0])
  for path in (('model', 'params', 'bn', 'scale'), ('model', 'batch_stats', 'bn', 'mean'), ('W',)):
    a, b = fixed, server
    for k in path:
      a, b = a[k], b[k]
    np.testing.assert_array_equal(a, b)


def _bisection_on_every_order(target, num_clients, cohort, rounds, delta, amplified, history):
  """The search as `noise_for_epsilon` was written before it read single orders: each step asks
  `history_epsilon`, the accountant over all of its orders."""
  eps = lambda sigma: privacy.history_epsilon(num_clients, cohort,
                                              list(history) + [(rounds, sigma)], delta, amplified)
  low, high = 1e-3, 1.0
  while eps(high) > target:
    low, high = high, high * 2
  while high - low > 1e-3 * high:
    mid = (low + high) / 2
    low, high = (mid, high) if eps(mid) > target else (low, mid)
  return high


def test_target_epsilon_gives_the_noise_that_reaches_it():
  sigma = privacy.noise_for_epsilon(4.0, 100, 10, 25, 1e-5)
  # Each step of the search reads as few orders as decide it; the sigma is the whole accountant's.
  assert sigma == _bisection_on_every_order(4.0, 100, 10, 25, 1e-5, True, ())
  assert privacy.noise_for_epsilon(4.0, 10, 10, 30, 1e-5) == _bisection_on_every_order(
      4.0, 10, 10, 30, 1e-5, True, ())   # every client every round: no sampling
  assert privacy.epsilon(100, 10, sigma, 25, 1e-5) <= 4.0
  assert privacy.epsilon(100, 10, sigma * 0.99, 25, 1e-5) > 4.0   # the smallest, to 1 %
  config = config_files.load_config('fedgc')
  config.dp.enabled, config.dp.target_epsilon = True, 4.0
  spec = privacy.spec_from_config(config, ('W',), num_clients=100, cohort_size=10)
  assert spec.noise_multiplier == privacy.noise_for_epsilon(4.0, 100, 10, config.num_rounds, 1e-5,
                                                            amplified=False)
  assert spec.noise_std == spec.noise_multiplier * config.dp.clip_norm


@pytest.fixture
def kept_sampled_rdp(monkeypatch):
  """dp-accounting's RDP of one round sampled without replacement (its
  `_compute_rdp_sample_wor_gaussian`, a pure function of (q, sigma, orders) that costs ~0.3 s of
  CPU a call) computed once per (q, sigma) while the test runs. The accountants below still
  compose every event themselves; only the same computation is not repeated (the tests asking
  for this built ~20 accountants over 3 sigmas)."""
  from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=protected-access
  compute = rdp_privacy_accountant._compute_rdp_sample_wor_gaussian
  kept = {}

  def once(q, noise_multiplier, orders):
    key = (q, noise_multiplier, tuple(np.asarray(orders).tolist()))
    if key not in kept:
      kept[key] = compute(q=q, noise_multiplier=noise_multiplier, orders=orders)
    return kept[key]
  monkeypatch.setattr(rdp_privacy_accountant, '_compute_rdp_sample_wor_gaussian', once)


def _direct(history, num_clients=100, cohort=10, delta=1e-5):
  """dp-accounting called directly over [(rounds, sigma), ...], each segment at its sigma."""
  accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  for rounds, sigma in history:
    event = dp_accounting.SampledWithoutReplacementDpEvent(
        num_clients, cohort, dp_accounting.GaussianDpEvent(sigma / 2))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, rounds))
  return accountant.get_epsilon(delta)


def test_a_noise_history_is_composed_segment_by_segment(kept_sampled_rdp):
  history = [(3, 1.3), (2, 2.5), (4, 0.9)]
  assert privacy.history_epsilon(100, 10, history, 1e-5) == _direct(history)
  # After each round: the history cut there, exactly (TensorBoard's dp/epsilon).
  cuts = [history[:i] + [(t, history[i][1])] for i in range(3) for t in range(1, history[i][0] + 1)]
  assert privacy.history_epsilon_curve(100, 10, history, 1e-5) == [_direct(c) for c in cuts]
  # One segment is the single-sigma accountant; a noiseless segment makes the rest inf.
  assert (privacy.history_epsilon(100, 10, [(25, 1.3)], 1e-5) ==
          privacy.epsilon(100, 10, 1.3, 25, 1e-5))
  assert privacy.history_epsilon_curve(100, 10, [(1, 1.3), (2, 0.0), (1, 1.3)], 1e-5)[1:] == [
      float('inf')] * 3
  assert privacy.history_epsilon(100, 10, [], 1e-5) == 0.0
  # The record joins a resume at the same sigma to its segment.
  assert privacy.extended([[3, 1.3]], 2, 1.3) == [[5, 1.3]]
  assert privacy.extended([[3, 1.3]], 2, 2.5) == [[3, 1.3], [2, 2.5]]
  assert privacy.extended([], 0, 2.5) == []


def test_a_target_is_reached_over_the_history_or_refused_when_spent(kept_sampled_rdp):
  ran = [(10, 1.0)]
  spent = privacy.history_epsilon(100, 10, ran, 1e-5)
  sigma = privacy.target_noise(spent + 1.0, 100, 10, 25, 1e-5, True, ran)
  assert _direct(ran + [(15, sigma)]) <= spent + 1.0 < _direct(ran + [(15, sigma * 0.99)])
  with pytest.raises(ValueError, match=rf'^config.dp.target_epsilon={spent * 0.9:g} cannot be met: '
                     rf'the 10 rounds already run spent epsilon={spent:.4g} \(delta=1e-05\)'):
    privacy.target_noise(spent * 0.9, 100, 10, 25, 1e-5, True, ran)
  # The plan the rounds ran under is kept when neither num_rounds nor the target changed.
  planned = {'num_rounds': 25, 'target_epsilon': spent + 1.0, 'noise_multiplier': 1.0}
  assert privacy.target_noise(spent + 1.0, 100, 10, 25, 1e-5, True, ran, planned) == 1.0
  # A plan made for other num_rounds is solved again: for these 25 rounds, the sigma above (its
  # bisection's accountant values are kept, so this costs no new ones).
  planned_30 = {**planned, 'num_rounds': 30}
  assert privacy.target_noise(spent + 1.0, 100, 10, 25, 1e-5, True, ran, planned_30) == sigma
  assert sigma != 1.0


# A repeat of test_target_epsilon_gives_the_noise_that_reaches_it's equality (the search reads as
# few orders as decide each step; the sigma is the whole accountant's) after rounds already run at
# their own sigma: ~3 s of CPU for the whole accountant at each step the search decided from one
# order.
@pytest.mark.full
def test_after_rounds_already_run_the_search_gives_the_whole_accountant_s_sigma():
  ran = [(10, 1.0)]
  target = privacy.history_epsilon(100, 10, ran, 1e-5) + 1.0
  assert privacy.noise_for_epsilon(target, 100, 10, 15, 1e-5, True, ran) == (
      _bisection_on_every_order(target, 100, 10, 15, 1e-5, True, ran))


@pytest.mark.parametrize('cohort_size, amplified', [(2, True), (4, False)])
def test_the_ledger_claims_amplification_only_for_a_cohort_smaller_than_the_population(
    cohort_size, amplified):
  config = config_files.load_config('fedpe')
  config.dp.enabled = True
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=1.0, client_rows=(), class_rows='private',
                        noise_multiplier=1.0)
  priv = privacy.ledger(config, spec, num_clients=4, cohort_size=cohort_size, rounds=3)
  assert priv['amplified_by_sampling'] is amplified
  # Every client every round: the epsilon of the unsampled Gaussian, either way of asking.
  if cohort_size == 4:
    assert priv['epsilon'] == privacy.epsilon(4, 4, 1.0, 3, 1e-5, amplified=False)


@pytest.mark.parametrize('secure', [False, True])
def test_noise_from_the_os_is_the_seed_s_noise_xor_a_secret(secure):
  """`dp.noise_seed='os'`: the engine XORs a secret into every noise key, and nothing else moves:
  a zero secret is the seed's noise bit for bit, another secret other noise of the same
  spread. Under secure aggregation the clients' shares change with it too. (The engine's noise
  keys do not depend on the method: a method with no training keeps the compiles small.)"""
  from fedjax_face.core import secure_aggregation  # pylint: disable=g-import-not-at-top
  spec = privacy.DpSpec(clip_norm=0.5, noise_std=0.5, client_rows=(), class_rows='private',
                        noise_multiplier=1.0, secure=secure)
  algorithm = mean_of_shifts(256)
  run = lambda secret: one_round(algorithm, 256, dp=spec, noise_secret=secret,
                                 secure=secure_aggregation.Spec() if secure else None)
  seeded, zero, other = (run(None), run(np.zeros(2, np.uint32)),
                         run(np.array([0x1234, 0xABCD], np.uint32)))
  jax.tree.map(np.testing.assert_array_equal, zero, seeded)
  moved = other.server['w'] - seeded.server['w']
  assert np.all(moved != 0)
  # Two draws of N(0, (σS/m)²) per coordinate apart: std sqrt(2)·0.5/5.
  assert np.std(moved) == pytest.approx(np.sqrt(2) * 0.5 / 5, rel=0.25)


def test_the_os_secret_is_new_at_every_start_and_the_config_s_seed_draws_none():
  assert privacy.noise_secret('config') is None
  first, second = privacy.noise_secret('os'), privacy.noise_secret('os')
  assert first.dtype == np.uint32 and first.shape == (2,) and not np.array_equal(first, second)
