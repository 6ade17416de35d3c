"""DP's adaptive clip (Andrew et al. 2021; core/privacy.py) and the PLD accountant beside RDP: the
clip after 3 rounds equals the paper's geometric update computed by hand from the same norms and
the same noise draws, and the model's noise is z_Δ·C_t of each round's clip; ε of an adaptive
run is dp-accounting on the composed events (the update's Gaussian and the count's); the PLD ε
is dp-accounting's PLD on the same events and at most the RDP ε where no sampling is involved,
and "n/a" with why where the cohort is sampled; a bad field is one line; a runlocal run with
adaptive clipping resumes bit for bit and reports its clip. Under secure aggregation: the masked
bits plus the clients' noise shares decode to the noised count the server would draw when the
shares' total is its draw, and 3 rounds follow the paper's update by hand from the clients'
draws."""

import os
import shutil

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fedjax_face import config_lib, experiment
from fedjax_face.core import blocks as blocks_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import privacy, secure_aggregation
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from tests import config_files, saved_checkpoints

REPLACE_ONE = dp_accounting.NeighboringRelation.REPLACE_ONE


def _shift_algorithm() -> Algorithm:
  """Each client sends the model plus its own vector data['x'] (so its update's norm is |x_i|,
  whatever the model); the server takes the (noised, uniform) mean."""
  def init(rng, start=None):
    del rng, start
    return RoundState(server={'w': jnp.zeros(3)}, clients={}, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, round_index, rng
    return ClientInput(shared={'w': server['w']}, per_client={})

  def client_update(client_input, private, data, rng):
    del rng
    return ClientResult(update={'w': client_input.shared['w'] + data['x'][0, 0]}, private=private,
                        metrics={'loss': jnp.float32(0.0)})

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    return {'w': jnp.tensordot(weights / jnp.sum(weights), updates['w'], axes=1)}

  plain = Algorithm(name='shift', init=init, broadcast=broadcast, client_update=client_update,
                    server_update=server_update, eval_variables=lambda s: s,
                    class_embeddings=lambda state: None,
                    update_origin=lambda ci: {'w': ci.shared['w']})
  return plain


# Norms 0.5, 1, 2, 4 and a padding row: the clip of 1.0 leaves two of four whole.
X = np.array([[0.5, 0, 0], [0, 1.0, 0], [0, 0, 2.0], [4.0, 0, 0], [9.0, 9.0, 9.0]], np.float32)
IDS = np.array([0, 1, 2, 3, 4], np.int32)       # 4 = the padding id (num_clients)
WEIGHTS = np.array([3.0, 1.0, 2.0, 5.0, 0.0], np.float32)


@pytest.mark.parametrize('backend', ['loop', 'vmap'])
def test_three_rounds_follow_andrew_et_al_by_hand(backend):
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=0.0, noise_multiplier=0.8, clip_rule='adaptive',
                        target_quantile=0.5, clip_learning_rate=0.2, count_noise_multiplier=0.5)
  z_update = (0.8 ** -2 - (2 * 0.5) ** -2) ** -0.5        # z_Δ = (z^-2 - (2σ_b)^-2)^-1/2
  assert spec.update_noise_multiplier == pytest.approx(z_update, rel=1e-12)
  algorithm = blocks_lib.chain(blocks_lib.nested, blocks_lib.adaptive_clip(1.0))(_shift_algorithm())
  engine = engine_lib.RoundEngine(algorithm, backend=backend, dp=spec)
  state = algorithm.init(jax.random.PRNGKey(0))
  data = {'x': X[:, None, None, :]}
  norms = np.linalg.norm(X[:4].astype(np.float64), axis=1)
  clip, w = 1.0, np.zeros(3)
  for t in range(3):
    rng = jax.random.PRNGKey(100 + t)
    new_state, metrics = engine.run_round(state, IDS, WEIGHTS, data, rng)
    # The same draws the server made: the count's and the update sum's, from their streams.
    server_key = engine_lib.server_keys(rng)[1]
    count_draw = float(jax.random.normal(jax.random.fold_in(server_key, privacy.COUNT_STREAM),
                                         (), jnp.float32))
    sum_noise, _ = privacy.noisy_updates(
        {'w': jnp.zeros((5, 3))}, jnp.asarray(WEIGHTS), spec,
        jax.random.fold_in(server_key, privacy.NOISE_STREAM),
        noise_std=jnp.float32(z_update) * jnp.float32(clip))
    # By hand: clip each update to C_t, the uniform mean plus the sum's noise / m ...
    clipped = X[:4] * np.minimum(1.0, clip / norms)[:, None]
    w = w + clipped.mean(axis=0) + np.asarray(sum_noise['w'])[0]
    np.testing.assert_allclose(new_state.server['method']['w'], w, rtol=1e-5, atol=1e-6)
    # ... and the clip's geometric step from the noised fraction under it (m = 4 real clients).
    fraction = (np.sum(norms <= clip) + 0.5 * count_draw) / 4
    assert float(metrics['dp/clip_norm']) == pytest.approx(clip, rel=1e-6)
    assert float(metrics['dp/noisy_fraction_under_clip']) == pytest.approx(fraction, rel=1e-5)
    clip = clip * np.exp(-0.2 * (fraction - 0.5))
    assert float(privacy.clip_of(new_state.server)) == pytest.approx(clip, rel=1e-6)
    assert privacy.COUNT_KEY not in new_state.server['method']
    state = new_state
  assert clip != 1.0   # the clip moved


def _accountant_epsilon(accountant, event, delta):
  accountant.compose(event)
  return accountant.get_epsilon(delta)


@pytest.mark.parametrize('cohort', [10, 100])
def test_adaptive_epsilon_is_dp_accounting_on_the_composed_events(cohort):
  num_clients, z, sigma_b, rounds, delta = 100, 1.1, 2.0, 20, 1e-5
  z_update = (z ** -2 - (2 * sigma_b) ** -2) ** -0.5
  # Replace-one: the update sum's sensitivity is 2 C_t (multiplier z_Δ / 2), the count's 1.
  both = dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z_update / 2),
                                        dp_accounting.GaussianDpEvent(sigma_b)])
  one_round = (dp_accounting.SampledWithoutReplacementDpEvent(num_clients, cohort, both)
               if cohort < num_clients else both)
  expected = _accountant_epsilon(rdp.RdpAccountant(neighboring_relation=REPLACE_ONE),
                                 dp_accounting.SelfComposedDpEvent(one_round, rounds), delta)
  assert privacy.epsilon(num_clients, cohort, z, rounds, delta, True, sigma_b) == expected
  # Together the two are the one Gaussian of noise multiplier z (Andrew et al.): the fixed
  # clip's epsilon at z, to rounding.
  assert expected == pytest.approx(privacy.epsilon(num_clients, cohort, z, rounds, delta),
                                   rel=1e-9)


def test_pld_and_rdp_read_the_same_replace_one_gaussian():
  # dp-accounting's PLD doubles a record's norm bound for REPLACE_ONE itself; its RDP Gaussian
  # does not, so the project gives RDP std / (2C) and PLD std / C (core/privacy.py).
  replace = pld.PLDAccountant(neighboring_relation=REPLACE_ONE, value_discretization_interval=1e-3)
  add_remove = pld.PLDAccountant(value_discretization_interval=1e-3)
  assert (_accountant_epsilon(replace, dp_accounting.GaussianDpEvent(1.2), 1e-5) ==
          _accountant_epsilon(add_remove, dp_accounting.GaussianDpEvent(0.6), 1e-5))


@pytest.mark.parametrize('count_noise', [0.0, 2.0])
def test_pld_epsilon_is_dp_accounting_and_at_most_rdp_on_unsampled_histories(count_noise):
  num_clients, delta = 20, 1e-5
  history = [(6, 2.0), (4, 1.5)]
  for cohort, amplified in ((20, True), (5, False)):   # everyone, or a cohort not amplified
    accountant = pld.PLDAccountant(neighboring_relation=REPLACE_ONE,
                                   value_discretization_interval=privacy.PLD_DISCRETIZATION)
    events = []
    for rounds, sigma in history:
      # The update sum: records of norm <= C, std sigma C; the count: bits centred at 1/2.
      gaussian = (dp_accounting.GaussianDpEvent(sigma) if not count_noise else
                  dp_accounting.ComposedDpEvent([
                      dp_accounting.GaussianDpEvent(
                          (sigma ** -2 - (2 * count_noise) ** -2) ** -0.5),
                      dp_accounting.GaussianDpEvent(2 * count_noise)]))
      events.append(dp_accounting.SelfComposedDpEvent(gaussian, rounds))
    expected = _accountant_epsilon(accountant, dp_accounting.ComposedDpEvent(events), delta)
    got = privacy.history_epsilon_pld(num_clients, cohort, history, delta, amplified, count_noise)
    assert got == expected
    rdp_epsilon = privacy.history_epsilon(num_clients, cohort, history, delta, amplified,
                                          count_noise)
    assert got <= rdp_epsilon
  # A sampled cohort: PLD is not applicable, and the ledger says why.
  line = privacy.history_epsilon_pld(num_clients, 5, history, delta, True, count_noise)
  assert line == ("n/a: dp-accounting's PLD has no sampling without replacement (the cohort is "
                  'drawn without replacement, a fixed 5 of 20); the RDP epsilon uses it')
  assert privacy.history_epsilon_pld(num_clients, 20, [(3, 0.0)], delta) == float('inf')


@pytest.mark.parametrize('field, value, expected', [
    ('clip_rule', 'median', "config.dp.clip_rule='median'; expected one of ('fixed', 'adaptive')."),
    ('target_quantile', 1.0, 'config.dp.target_quantile=1.0; expected a number in (0, 1)'),
    ('clip_learning_rate', -0.1, 'config.dp.clip_learning_rate=-0.1; expected a finite positive'),
    ('count_noise_multiplier', 0.4, 'config.dp.count_noise_multiplier=0.4 with noise multiplier '
     '1: the count alone would spend the whole budget; expected a count_noise_multiplier above '
     '0.5'),
])
def test_a_bad_adaptive_field_is_one_line(field, value, expected):
  config = config_files.load_config('fedpe')
  config.dp.enabled = True
  config.dp.clip_rule = 'adaptive'
  config.dp[field] = value
  with pytest.raises(ValueError) as error:
    config_lib.validate(config)
  assert str(error.value).startswith(expected) and '\n' not in str(error.value)


def test_adaptive_with_secure_aggregation_validates():
  config = config_files.load_config('fedpe')
  config.dp.enabled = True
  config.dp.clip_rule = 'adaptive'
  config.secure_aggregation.enabled = True
  config_lib.validate(config)   # no longer refused: the count is masked and noised in shares


SECURE = secure_aggregation.Spec(fraction_bits=24, neighbors=0)
# The decoded sum's rounding: each of the m clients' s_k·v_k to 2^-(f+1) (core/secure_aggregation).
RING_ROUNDING = 4 * 2.0 ** -25


def test_the_masked_count_decodes_to_the_noised_count_of_the_clients_shares():
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=0.0, noise_multiplier=0.8, clip_rule='adaptive',
                        count_noise_multiplier=0.5)
  bits = jnp.array([1.0, 0.0, 1.0, 1.0, 1.0])   # the last row pads the cohort
  shares = engine_lib.aggregation_shares(jnp.asarray(WEIGHTS), spec)
  np.testing.assert_array_equal(shares, [0.25, 0.25, 0.25, 0.25, 0.0])
  keys = [jax.random.fold_in(jax.random.PRNGKey(7), k) for k in range(5)]
  # Each client's share of the count's noise, N(0, σ_b² s_k): σ_b √s_k times its own draw.
  draws = np.array([float(jax.random.normal(key, (), jnp.float32)) for key in keys])
  own_noise = 0.5 * np.sqrt([0.25, 0.25, 0.25, 0.25, 0.0]) * draws
  values = [privacy.count_share(b, s, spec, key) for b, s, key in zip(bits, shares, keys)]
  np.testing.assert_allclose(np.array(values) - np.asarray(bits), own_noise, rtol=1e-6)
  secret = jax.random.PRNGKey(3)
  masked = [secure_aggregation.mask_update(SECURE, {'count': v}, s, secret, jnp.int32(k), 5)[0]
            for k, (v, s) in enumerate(zip(values, shares))]
  assert all(int(m['count']) != 0 for m in masked)   # each message alone is a ring element
  seen = secure_aggregation.unmasked_sum(
      SECURE, jax.tree.map(lambda *xs: jnp.stack(xs), *masked))['count']
  # The central path with its draw equal to the shares' total: (Σ b over real rows + Σ n_k) / m.
  central = privacy.noised_fraction(bits, jnp.asarray(WEIGHTS), own_noise.sum())
  assert float(central) == pytest.approx((3 + own_noise.sum()) / 4, rel=1e-6)
  assert float(seen) == pytest.approx(float(central), abs=RING_ROUNDING + 1e-7)


def test_three_rounds_under_secure_aggregation_follow_andrew_et_al_by_hand():
  # The loop backend alone: vmap's masked round compiles for 6 s, and the masked sum is the same
  # unmasking on either (tests/core/test_secure_aggregation.py runs masked rounds on both, vmap's
  # in the full tier).
  backend = 'loop'
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=0.0, noise_multiplier=0.8, clip_rule='adaptive',
                        target_quantile=0.5, clip_learning_rate=0.2, count_noise_multiplier=0.5,
                        secure=True)
  z_update = (0.8 ** -2 - (2 * 0.5) ** -2) ** -0.5        # z_Δ = (z^-2 - (2σ_b)^-2)^-1/2
  algorithm = blocks_lib.chain(blocks_lib.nested, blocks_lib.adaptive_clip(1.0))(_shift_algorithm())
  engine = engine_lib.RoundEngine(algorithm, backend=backend, dp=spec, secure=SECURE)
  state = algorithm.init(jax.random.PRNGKey(0))
  data = {'x': X[:, None, None, :]}
  norms = np.linalg.norm(X[:4].astype(np.float64), axis=1)
  clip, w = 1.0, np.zeros(3)
  for t in range(3):
    rng = jax.random.PRNGKey(100 + t)
    new_state, metrics = engine.run_round(state, IDS, WEIGHTS, data, rng)
    # The clients' draws, from their own keys: client k's share of the update sum's noise,
    # N(0, (z_Δ C_t)² / 4) per coordinate, and of the count's, N(0, σ_b² / 4).
    client_key = lambda k, stream: jax.random.fold_in(jax.random.fold_in(rng, k), stream)
    update_noise = sum(np.asarray(privacy.noise_share(
        {'w': jnp.zeros(3)}, jnp.float32(z_update) * jnp.float32(clip) * jnp.sqrt(0.25),
        client_key(k, privacy.NOISE_STREAM))['w']) for k in range(4))
    count_noise = sum(0.5 * 0.5 * float(jax.random.normal(client_key(k, privacy.COUNT_STREAM),
                                                          (), jnp.float32)) for k in range(4))
    # By hand: the uniform mean of the clipped updates plus the shares' total / m ...
    clipped = X[:4] * np.minimum(1.0, clip / norms)[:, None]
    w = w + clipped.mean(axis=0) + update_noise / 4
    np.testing.assert_allclose(new_state.server['method']['w'], w, rtol=1e-5, atol=1e-6)
    # ... and the clip's geometric step from the fraction the masked shares decode to.
    fraction = (np.sum(norms <= clip) + count_noise) / 4
    assert float(metrics['dp/clip_norm']) == pytest.approx(clip, rel=1e-6)
    assert float(metrics['dp/noisy_fraction_under_clip']) == pytest.approx(
        fraction, abs=RING_ROUNDING + 1e-6)
    clip = clip * np.exp(-0.2 * (fraction - 0.5))
    assert float(privacy.clip_of(new_state.server)) == pytest.approx(clip, rel=1e-5)
    assert privacy.COUNT_KEY not in new_state.server['method']
    state = new_state
  assert clip != 1.0   # the clip moved


def test_a_runlocal_adaptive_run_resumes_bit_for_bit_and_reports_its_clip(tmp_path):
  config = config_files.load_config('fedpe')
  config.num_rounds = 2
  config.checkpoint_keep = 2
  config.dp.enabled = True
  config.dp.clip_rule = 'adaptive'
  config.dp.clip_norm = 0.05
  # One stage of the small CNN: no check here reads the model's depth, and its programs compile
  # in about half the time of runlocal's three stages.
  config.model.num_stages = 1
  # No evaluator: what is checked is the privacy ledger, the report's privacy lines and the
  # checkpoints, none of which an evaluation writes (2 runs' embeddings and ROC figures less).
  for kind in list(config.evals):
    del config.evals[kind]
  straight = experiment.train_and_evaluate(config, str(tmp_path / 'straight'))
  priv = straight['privacy']
  final = saved_checkpoints.restore(tmp_path / 'straight', 2)['server']['blocks'][privacy.CLIP_KEY]
  assert priv['clip_rule'] == 'adaptive'
  assert priv['adaptive_clip']['initial_clip_norm'] == 0.05
  assert priv['adaptive_clip']['final_clip_norm'] == float(final) != 0.05
  assert priv['unit'] == 'client (all of its data)'
  assert priv['accountant'] == 'RDP (dp-accounting), replace-one neighbours'
  cohort, clients = 4, 4   # runlocal: every client every round, so PLD applies
  assert priv['epsilon'] == privacy.epsilon(clients, cohort, 1.0, 2, priv['delta'], True, 5.0)
  assert priv['epsilon_pld'] <= priv['epsilon']
  report = (tmp_path / 'straight' / 'report.md').read_text()
  assert 'adaptive clip C_t from 0.05 to' in report and 'PLD accountant (unit: client' in report
  # Stopped after round 1 and resumed: the clip came back from the checkpoint.
  shutil.copytree(tmp_path / 'straight', tmp_path / 'cut')
  for step in (2,):
    shutil.rmtree(tmp_path / 'cut' / 'checkpoints' / str(step))
    os.remove(tmp_path / 'cut' / 'checkpoint_digests' / f'{step}.json')
  os.remove(tmp_path / 'cut' / 'results.json')
  resumed = experiment.train_and_evaluate(config, str(tmp_path / 'cut'))
  assert resumed['timing']['resumed_from_round'] == 1
  assert resumed['privacy'] == priv
  jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(tmp_path / 'cut', 2),
               saved_checkpoints.restore(tmp_path / 'straight', 2))
