"""run/schedule.py: which rounds are logged, checkpointed and evaluated mid-run, and the decay
rounds of a step schedule across an extension. Pure functions of a config: no run."""

import ml_collections
import pytest

from fedjax_face import config_lib
from fedjax_face.run import schedule


def _config(**fields) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(fields)


def _rounds(due, start: int, num_rounds: int) -> list[int]:
  return [done for done in range(start + 1, num_rounds + 1) if due(done)]


def test_logged_is_every_log_every_the_last_round_and_the_first_of_the_start():
  config = _config(log_every=5, num_rounds=12)
  assert _rounds(lambda d: schedule.logged(config, d, 0), 0, 12) == [1, 5, 10, 12]
  # A resume at round 6: its first round is logged (the progress line starts there).
  assert _rounds(lambda d: schedule.logged(config, d, 6), 6, 12) == [7, 10, 12]
  # A resume at round 9 whose first round is also a log_every round: logged once.
  assert _rounds(lambda d: schedule.logged(config, d, 9), 9, 12) == [10, 12]
  every = _config(log_every=1, num_rounds=3)
  assert _rounds(lambda d: schedule.logged(every, d, 0), 0, 3) == [1, 2, 3]


def test_log_every_zero_which_the_config_accepts_logs_the_first_and_last_rounds():
  config = config_lib.base_config()
  config.algorithm, config.log_every, config.num_rounds = 'fedgc', 0, 4
  config_lib.validate(config)   # accepted: a non-negative integer
  assert _rounds(lambda d: schedule.logged(config, d, 0), 0, 4) == [1, 4]


def test_checkpoint_due_by_rounds_or_by_seconds_either_off_at_zero():
  by_rounds = _config(checkpoint_every=3, checkpoint_every_seconds=0.0)
  assert _rounds(lambda d: schedule.checkpoint_due(by_rounds, d, 1e9), 0, 10) == [3, 6, 9]
  by_seconds = _config(checkpoint_every=0, checkpoint_every_seconds=10.0)
  assert schedule.checkpoint_due(by_seconds, 7, 9.999) is False
  assert schedule.checkpoint_due(by_seconds, 7, 10.0) is True
  both = _config(checkpoint_every=4, checkpoint_every_seconds=10.0)
  assert schedule.checkpoint_due(both, 4, 0.0) is True
  assert schedule.checkpoint_due(both, 5, 10.5) is True
  assert schedule.checkpoint_due(both, 5, 9.0) is False
  off = _config(checkpoint_every=0, checkpoint_every_seconds=0.0)
  assert _rounds(lambda d: schedule.checkpoint_due(off, d, 1e9), 0, 10) == []


def _attacked(**fields) -> ml_collections.ConfigDict:
  """A 10-round run saving every 4 rounds, its final evaluation attacking rounds by
  `fields`: leakage=(round, rounds), inversion=(round, targets)."""
  evals = {}
  if 'leakage' in fields:
    r, n = fields.pop('leakage')
    evals['leakage'] = _config(round=r, rounds=n, kinds=())
  if 'inversion' in fields:
    r, targets = fields.pop('inversion')
    evals['inversion'] = _config(round=r, targets=targets)
  return _config(**{'checkpoint_every': 4, 'checkpoint_every_seconds': 0.0, 'num_rounds': 10,
                    'checkpoint_keep': 2, 'evals': evals, **fields})


def test_the_rounds_an_attack_replays_from_are_saved_besides_the_rule():
  config = _attacked(leakage=(10, 3), inversion=(6, 1))
  # leakage replays rounds 8-10 (from checkpoints 7-9), inversion round 6 (from 5).
  assert schedule.replay_checkpoints(config) == {5, 7, 8, 9}
  assert _rounds(lambda d: schedule.checkpoint_due(config, d, 0.0), 0, 10) == [4, 5, 7, 8, 9]
  # Off (round 0, targets 0), or only the released model read: the rule alone.
  for off in (_attacked(leakage=(0, 1), inversion=(6, 0)), _attacked()):
    assert schedule.replay_checkpoints(off) == frozenset()
    assert _rounds(lambda d, c=off: schedule.checkpoint_due(c, d, 0.0), 0, 10) == [4, 8]
  released = _attacked(leakage=(10, 3))
  released.evals.leakage.kinds = ('released',)
  assert schedule.replay_checkpoints(released) == frozenset()
  # Round 1 replays from the initial state: nothing to save.
  assert schedule.replay_checkpoints(_attacked(inversion=(1, 2))) == frozenset()


def test_checkpoint_keep_that_would_delete_a_replayed_checkpoint_is_refused_before_training():
  config = _attacked(leakage=(10, 3))   # saves 7, 8, 9 (replayed from) and 10 (the last)
  with pytest.raises(ValueError) as error:
    schedule.check_replay_checkpoints(config)
  assert str(error.value) == (
      "config.checkpoint_keep=2 with config.evals.leakage.round=10: the run saves 4 checkpoints "
      'from round 7 (which the attacks replay from) to round 10, so the oldest would be deleted '
      'before the final evaluation reads it; expected checkpoint_keep >= 4.')
  config.checkpoint_keep = 4
  schedule.check_replay_checkpoints(config)
  # Round 6 replayed from 5: saves 5, 8 (the rule) and 10.
  early = _attacked(inversion=(6, 1), checkpoint_keep=2)
  with pytest.raises(ValueError, match='expected checkpoint_keep >= 3'):
    schedule.check_replay_checkpoints(early)
  schedule.check_replay_checkpoints(_attacked())   # no attack: nothing asked


def test_evaluation_due_every_eval_every_rounds_before_the_last():
  config = _config(eval=_config(every_rounds=2), num_rounds=6)
  assert _rounds(lambda d: schedule.evaluation_due(config, d), 0, 6) == [2, 4]
  config.num_rounds = 7
  assert _rounds(lambda d: schedule.evaluation_due(config, d), 0, 7) == [2, 4, 6]
  config.eval.every_rounds = 0
  assert _rounds(lambda d: schedule.evaluation_due(config, d), 0, 7) == []
  assert schedule.evaluation_due(config, 0) is False


def _step_config(num_rounds: int) -> ml_collections.ConfigDict:
  config = config_lib.base_config()
  config.optimizer.schedule = 'step'   # decay_at (2/3, 13/15)
  config.num_rounds = num_rounds
  return config


def test_decay_record_is_the_fractions_and_their_rounds_or_none_when_constant():
  assert schedule.decay_record(config_lib.base_config()) is None
  assert schedule.decay_record(_step_config(6)) == {'decay_at': [2 / 3, 13 / 15],
                                                    'decay_rounds': [4, 5]}
  assert schedule.decay_record(_step_config(9)) == {'decay_at': [2 / 3, 13 / 15],
                                                    'decay_rounds': [6, 8]}
  assert schedule.decay_record(_step_config(15)) == {'decay_at': [2 / 3, 13 / 15],
                                                     'decay_rounds': [10, 13]}


def test_an_extension_keeps_the_decay_rounds_of_its_start_and_says_so():
  prior = {'lr_schedule': schedule.decay_record(_step_config(6))}
  config = _step_config(9)
  build, line = schedule.with_start_decay_rounds(config, prior)
  assert line == ("optimizer.schedule=step: keeping the decay rounds of the run's start (4, 5); "
                  'decay_at of num_rounds=9 would move them to (6, 8).')
  assert build is not config
  assert tuple(build.optimizer.decay_at) == (4 / 9, 5 / 9)
  assert schedule.decay_record(build)['decay_rounds'] == [4, 5]
  assert tuple(config.optimizer.decay_at) == (2 / 3, 13 / 15)   # the user's config is untouched
  assert build.num_rounds == 9
  # The run record goes on recording the start's decay, not the refitted one.
  assert schedule.lr_record(config, prior, line) == prior
  assert schedule.lr_record(config, prior, '') == {'lr_schedule': {
      'decay_at': [2 / 3, 13 / 15], 'decay_rounds': [6, 8]}}


@pytest.mark.parametrize('case', ['fresh', 'no_record', 'constant', 'same_rounds',
                                  'decay_at_changed', 'constant_at_start'])
def test_nothing_is_kept_when_there_is_nothing_to_keep(case):
  config = _step_config(9)
  prior = {'lr_schedule': schedule.decay_record(_step_config(6))}
  if case == 'fresh':
    prior = None
  elif case == 'no_record':
    prior = {'guard': None}
  elif case == 'constant':
    config.optimizer.schedule = 'constant'
  elif case == 'same_rounds':   # a resume of the same length
    config.num_rounds = 6
  elif case == 'decay_at_changed':   # a stopped run that changed optimizer.decay_at
    config.optimizer.decay_at = (0.5, 0.75)
  elif case == 'constant_at_start':
    prior = {'lr_schedule': None}
  build, line = schedule.with_start_decay_rounds(config, prior)
  assert build is config and line == ''
  assert schedule.lr_record(config, prior, line) == {'lr_schedule': schedule.decay_record(config)}
