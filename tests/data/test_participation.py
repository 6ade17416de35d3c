"""Who takes part: uniform / weighted / availability sampling and the straggler deadline."""

import numpy as np
import pytest

from fedjax_face import config_lib
from fedjax_face.core import privacy
from fedjax_face.data import federated, participation
from tests import engine_cases


def test_the_straggler_rule_drops_exactly_the_slowest():
  ids = np.array([1, 3, 4, 6, 8], np.int32)
  work = np.array([10, 40, 0, 10, 30, 0, 20, 0, 10], float)
  speed = np.array([1, 1, 0, 2, 1, 0, 1, 0, 0.5], float)
  # times: 1 -> 40, 3 -> 5, 4 -> 30, 6 -> 20, 8 -> 20 (ties: the larger id is dropped first)
  assert participation.drop_stragglers(ids, work, speed, 0.2).tolist() == [3, 4, 6, 8]
  assert participation.drop_stragglers(ids, work, speed, 0.4).tolist() == [3, 6, 8]
  assert participation.drop_stragglers(ids, work, speed, 0.6).tolist() == [3, 6]
  assert participation.drop_stragglers(ids, work, speed, 0.19).tolist() == ids.tolist()


def test_uniform_is_today_s_cohort():
  for r in range(5):
    np.testing.assert_array_equal(
        participation.select(20, 0.25, r, 3), federated.select_clients(20, 0.25, r, 3))


def test_weighted_sampling_draws_by_size_without_replacement():
  sizes = np.array([1000.0] + [1.0] * 19)
  counts = np.zeros(20)
  for r in range(200):
    ids = participation.select(20, 0.25, r, 0, sampling='weighted', sizes=sizes)
    assert len(ids) == 5 and len(set(ids.tolist())) == 5 and np.all(np.diff(ids) > 0)
    counts[ids] += 1
  assert counts[0] == 200   # the big client is (nearly surely) in every cohort
  np.testing.assert_array_equal(participation.select(20, 0.25, 7, 0, sampling='weighted',
                                                     sizes=sizes),
                                participation.select(20, 0.25, 7, 0, sampling='weighted',
                                                     sizes=sizes))


def test_availability_is_a_dirichlet_of_mean_c_and_each_client_online_at_its_rate():
  p = participation.availability(50, 0.2, alpha=5.0, seed=1)
  assert p.shape == (50,) and np.all((p > 0) & (p <= 1))
  assert p.mean() == pytest.approx(0.2, abs=1e-9)   # no client capped at this concentration
  online = np.zeros(50)
  rounds = 2000
  for r in range(rounds):
    ids = participation.select(50, 1.0, r, 1, sampling='availability', online_probability=p)
    online[ids] += 1   # C = 1: every online client is taken
  np.testing.assert_allclose(online / rounds, p, atol=4 * np.sqrt(0.25 / rounds))
  ids = participation.select(50, 0.1, 3, 1, sampling='availability', online_probability=p)
  assert len(ids) <= 5


def _fl(**fields):
  fl = config_lib.base_config().federated
  fl.update(fields)
  return fl


def test_cohorts_keep_their_size_with_padding_rows():
  cohorts = participation.Cohorts(_fl(num_clients=10, participation=0.5, straggler_drop=0.4),
                                  np.arange(1, 11, dtype=np.int64) * 3, seed=0)
  assert cohorts.size == 5
  ids = cohorts(0)
  assert len(ids) == 3   # floor(0.4 · 5) = 2 dropped
  padded = cohorts.padded(0, multiple=4)
  assert padded.tolist() == ids.tolist() + [10] * 5   # to the cohort's 5, then to 8


def test_work_is_the_samples_a_client_trains_on():
  sizes = np.array([3, 10, 100])
  np.testing.assert_array_equal(participation.round_work(sizes, steps=4, batch_size=8,
                                                         local_epochs=1.0), [3, 10, 32])
  np.testing.assert_array_equal(participation.round_work(sizes, steps=4, batch_size=8,
                                                         local_epochs=0.0), [32, 32, 32])


def test_dp_amplification_is_claimed_only_for_uniform_cohorts_and_data_dependent_ones_refused():
  config = engine_cases.tiny_config('fedpe')
  config.dp.enabled = True
  spec = privacy.spec_from_config(config, ())
  assert privacy.amplified(spec)
  config.federated.sampling = 'availability'
  spec = privacy.spec_from_config(config, ())
  assert not privacy.amplified(spec)
  ledger = privacy.ledger(config, spec, 10, 3, 2)
  assert 'no amplification' in ledger['sampling'] and ledger['amplified_by_sampling'] is False
  config.federated.sampling = 'weighted'
  with pytest.raises(ValueError, match="sampling='weighted' with dp.enabled"):
    config_lib.validate(config)
  config.federated.sampling = 'uniform'
  config.federated.straggler_drop = 0.2
  with pytest.raises(ValueError, match='straggler_drop=0.2 with dp.enabled'):
    config_lib.validate(config)


@pytest.mark.parametrize('field, value, message', [
    ('sampling', 'random', "federated.sampling='random'"),
    ('straggler_drop', 1.0, 'federated.straggler_drop=1.0'),
    ('availability_alpha', 0.0, 'federated.availability_alpha=0.0'),
    ('speed_sigma', -1.0, 'federated.speed_sigma=-1.0'),
])
def test_participation_config_errors_name_the_field(field, value, message):
  config = engine_cases.tiny_config('fedpe')
  config.federated[field] = value
  with pytest.raises(ValueError, match=message.replace('.', r'\.')):
    config_lib.validate(config)

