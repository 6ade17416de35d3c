"""run/noise.py: the noise a DP run trains at across its starts (`plan_noise`), what it refuses,
and what a checkpoint records of it (`NoisePlan.record`). No run: configs and run records only.

Every cohort here is the whole population (4 of 4 clients): the accountant is then the plain
Gaussian's, milliseconds a sigma (sampling without replacement costs seconds a sigma)."""

import math
import re

import pytest
from dp_accounting.rdp import rdp_privacy_accountant  # pylint: disable=unused-import  (imported
# at collection: seconds, which core/privacy.py would otherwise spend in the first test)

from fedjax_face import config_lib
from fedjax_face.core import checks, privacy
from fedjax_face.run import noise

CLIENTS = COHORT = 4
DELTA = 1e-5


def _config(num_rounds: int, sigma: float = 1.0, target: float = 0.0, dp: bool = True):
  config = config_lib.base_config()
  config.algorithm = 'fedgc'
  config.num_rounds = num_rounds
  config.dp.enabled = dp
  config.dp.noise_multiplier = sigma
  config.dp.target_epsilon = target
  return config


def _plan(config, record=None, start_round=0, epsilons=True) -> noise.NoisePlan:
  return noise.plan_noise(config, record, start_round, (), CLIENTS, COHORT, epsilons=epsilons)


def _eps(history) -> float:
  return privacy.history_epsilon(CLIENTS, COHORT, history, DELTA, True)


def test_without_dp_there_is_no_plan_and_no_privacy_record():
  plan = _plan(_config(5, dp=False))
  assert plan == noise.NoisePlan(None, 0, [], [], [], ())
  assert plan.record(3) == {'privacy': None}
  # Not even a resume without any record is refused: nothing is accounted.
  assert _plan(_config(5, dp=False), None, 3) == noise.NoisePlan(None, 3, [], [], [], ())
  assert noise.check_budget_left(_config(5, dp=False), None) is None


def test_a_fresh_run_at_a_fixed_noise_multiplier():
  config = _config(5, sigma=1.5)
  plan = _plan(config)
  assert plan.dp.noise_multiplier == 1.5 and plan.dp.noise_std == 1.5 * config.dp.clip_norm
  assert plan.start_round == 0 and plan.history == []
  assert plan.total == [[5, 1.5]]
  assert plan.lines == ('dp: clip 1, noise multiplier 1.5',)
  assert plan.delta == DELTA
  assert plan.plan == {'num_rounds': 5, 'target_epsilon': 0.0, 'noise_multiplier': 1.5}
  assert len(plan.epsilons) == 5
  assert all(a < b for a, b in zip(plan.epsilons, plan.epsilons[1:]))
  assert plan.epsilons == [_eps([[r, 1.5]]) for r in range(1, 6)]
  # The record of round 3: the noise rounds 1-3 ran at, their epsilon, the plan.
  assert plan.record(3) == {'privacy': {
      'noise_history': [[3, 1.5]], 'rounds': 3, 'epsilon': plan.epsilons[2], 'delta': DELTA,
      'plan': plan.plan}}
  # Not asked for: no curve, the rest the same.
  assert _plan(config, epsilons=False)._replace(epsilons=plan.epsilons) == plan


def test_a_fresh_run_with_a_target_reaches_it_after_num_rounds():
  config = _config(5, target=20.0)
  plan = _plan(config)
  sigma = plan.dp.noise_multiplier
  assert sigma == privacy.noise_for_epsilon(20.0, CLIENTS, COHORT, 5, DELTA, True)
  assert plan.epsilons[-1] <= 20.0 < _eps([[5, sigma * 0.99]])
  assert plan.plan == {'num_rounds': 5, 'target_epsilon': 20.0, 'noise_multiplier': sigma}
  assert plan.lines == (f'dp: clip 1, noise multiplier {sigma:.4g}',)


def test_a_resume_reuses_the_noise_history_its_checkpoint_records():
  first = _plan(_config(5, sigma=1.0))
  record = first.record(3)   # preempted after round 3
  same = _plan(_config(5, sigma=1.0), record, 3)
  assert same.history == [[3, 1.0]] and same.total == [[5, 1.0]]
  assert same.epsilons == first.epsilons
  assert same.lines == ('dp: clip 1, noise multiplier 1',)
  assert same.record(5) == first.record(5)
  # Extended at another fixed noise: rounds 1-3 keep theirs, and the line says so.
  other = _plan(_config(8, sigma=2.0), record, 3)
  assert other.history == [[3, 1.0]] and other.total == [[3, 1.0], [5, 2.0]]
  assert other.lines == ('dp: clip 1, noise multiplier 2 for rounds 4-8 (rounds 1-3 ran: 3 at 1)',)
  assert other.epsilons[:3] == first.epsilons[:3]
  assert other.epsilons == privacy.history_epsilon_curve(CLIENTS, COHORT, [[3, 1.0], [5, 2.0]],
                                                         DELTA, True)
  assert other.record(6)['privacy']['noise_history'] == [[3, 1.0], [3, 2.0]]
  assert other.record(6)['privacy']['epsilon'] == other.epsilons[5]
  assert other.record(6)['privacy']['plan'] == {'num_rounds': 8, 'target_epsilon': 0.0,
                                                'noise_multiplier': 2.0}


def test_a_resumed_target_keeps_the_planned_noise_of_its_start():
  first = _plan(_config(5, target=20.0))
  again = _plan(_config(5, target=20.0), first.record(2), 2)
  assert again.dp.noise_multiplier == first.dp.noise_multiplier
  assert again.total == first.total and again.epsilons == first.epsilons


@pytest.mark.parametrize('record', [None, {}, {'privacy': None}, {'guard': None},
                                    {'privacy': {'noise_history': [[2, 1.0]], 'plan': None}}],
                         ids=['none', 'empty', 'privacy_none', 'no_privacy', 'other_rounds'])
def test_a_resume_whose_record_holds_no_history_of_its_rounds_is_refused(record):
  config = _config(5, target=30.0)
  with pytest.raises(checks.UsageError) as refused:
    _plan(config, record, 3)
  assert str(refused.value) == (
      'dp: the checkpoint of round 3 records no noise history (saved before it was recorded, or '
      'its checkpoint_digests/ file is missing), so the epsilon of its rounds cannot be '
      'accounted; expected a checkpoint with its digest file, or '
      "--config.trust_unverified_checkpoints=True to assume every round ran at this config's "
      'noise multiplier (config.dp.target_epsilon=30).')
  assert str(refused.value) == noise.no_history_line(config, 3)


def test_trusted_a_missing_history_is_assumed_at_this_config_s_noise_and_said():
  config = _config(5, sigma=1.25)
  config.trust_unverified_checkpoints = True
  plan = _plan(config, None, 3)
  assert plan.lines == (
      'dp: the checkpoint of round 3 records no noise history; assuming rounds 1-3 ran at noise '
      'multiplier 1.25 (config.trust_unverified_checkpoints=True)',
      'dp: clip 1, noise multiplier 1.25')
  assert plan.history == [[3, 1.25]] and plan.total == [[5, 1.25]]
  assert plan.epsilons == _plan(_config(5, sigma=1.25)).epsilons
  assert plan.record(4)['privacy']['noise_history'] == [[4, 1.25]]


def _budget_case():
  """3 rounds run at sigma 2; a target that affords 5 more rounds at 2 but not 6."""
  first = _plan(_config(3, sigma=2.0))
  target = (_eps([[8, 2.0]]) + _eps([[9, 2.0]])) / 2
  return first.record(3), target


def test_new_rounds_at_a_higher_noise_are_refused_naming_the_rounds_the_budget_affords():
  record, target = _budget_case()
  config = _config(13, target=target)
  new = privacy.noise_for_epsilon(target, CLIENTS, COHORT, 10, DELTA, True, [[3, 2.0]])
  assert new > 2.0
  with pytest.raises(checks.UsageError) as refused:
    _plan(config, record, 3)
  assert str(refused.value) == (
      f'config.num_rounds=13 with dp.target_epsilon={target:g}: rounds 4-13 would run at noise '
      f'multiplier {new:.4g}, up from the 2 of the rounds before; the budget affords 5 more '
      'round(s) at 2. Expected config.num_rounds <= 8, a higher dp.target_epsilon, or '
      'dp.allow_sigma_increase=True for the jump.')
  # One round more than the budget affords: all but that one.
  with pytest.raises(checks.UsageError, match=r'; the budget affords 5 more round\(s\) at 2\. '
                     r'Expected config\.num_rounds <= 8, '):
    _plan(_config(9, target=target), record, 3)
  # Allowed when asked for: the new rounds run at the higher noise, and the line says so.
  config.dp.allow_sigma_increase = True
  plan = _plan(config, record, 3)
  assert plan.dp.noise_multiplier == new
  assert plan.total == [[3, 2.0], [10, new]]
  assert plan.lines == (f'dp: clip 1, noise multiplier {new:.4g} for rounds 4-13 (rounds 1-3 '
                        'ran: 3 at 2)',)
  assert plan.epsilons[-1] <= target
  # Within what the budget affords: a lower noise, no refusal.
  within = _plan(_config(8, target=target), record, 3)
  assert within.dp.noise_multiplier <= 2.0 and within.total[0] == [3, 2.0]


def test_a_target_the_rounds_run_have_spent_is_refused_at_opening():
  record, _ = _budget_case()
  spent = record['privacy']['epsilon']
  assert spent == _eps([[3, 2.0]])
  config = _config(5, target=round(spent * 0.9, 3))
  with pytest.raises(ValueError) as refused:
    noise.check_budget_left(config, record)
  assert str(refused.value) == (
      f'config.dp.target_epsilon={config.dp.target_epsilon:g} cannot be met: the 3 rounds '
      f'already run spent epsilon={spent:.4g} (delta=1e-05); expected a target above it, or a '
      'new --workdir.')
  assert noise.check_budget_left(_config(5, target=spent * 2), record) is None
  assert noise.check_budget_left(_config(5), record) is None   # no target: nothing to spend
  # No record: refused as plan_noise refuses it (without the round), unless trusted.
  with pytest.raises(ValueError, match=re.escape(noise.no_history_line(config))):
    noise.check_budget_left(config, None)
  assert noise.no_history_line(config).startswith('dp: the checkpoint records no noise history ')
  config.trust_unverified_checkpoints = True
  assert noise.check_budget_left(config, None) is None


def test_an_extension_whose_target_the_old_noise_just_meets_is_not_refused():
  # Rounds 1-5 ran at 1.7; the target is epsilon of 10 rounds at 1.7 (plus 0.01 %): rounds 6-10
  # at 1.7 meet it, so no higher noise is needed.
  first = _plan(_config(5, sigma=1.7))
  target = _eps([[10, 1.7]]) * (1 + 1e-4)
  plan = _plan(_config(10, target=target), first.record(5), 5)
  # The planned noise is the target's, found by a search to 0.1 % (privacy.noise_for_epsilon).
  assert 1.7 <= plan.dp.noise_multiplier <= 1.7 * (1 + 1e-3)
  assert math.isfinite(plan.epsilons[-1]) and plan.epsilons[-1] <= target
