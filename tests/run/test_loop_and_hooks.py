"""run/loop.py and run/hooks/: the round loop with fake training steps and the hooks on real
checkpoints, signals and stopped.json, without training a model (no `train_and_evaluate`, no
compiled program: the states are a few numpy arrays)."""

import json
import os
import signal
import threading
import time
from typing import Callable, NamedTuple

import ml_collections
import numpy as np
import pytest

from fedjax_face import eval as eval_lib
from fedjax_face.core.algorithm import RoundState
from fedjax_face.io import checkpoint, files, metrics
from fedjax_face.run import hooks, loop, resume
from fedjax_face.run.hooks import checkpointing, divergence, evaluation, logging, preemption


# -- fakes -----------------------------------------------------------------------------------------

def count(state, r):
  """A training step on a plain int: the state counts the rounds, the loss is the round's."""
  return state + 1, {'train_loss': float(r)}


def recording(name: str, calls: list, record: Callable[[int], dict] | None = None) -> hooks.Hook:
  """A hook that appends (name, what, done) for each call (and the error for `failed`)."""
  return hooks.Hook(
      at_start=lambda end: calls.append((name, 'at_start', end.done)),
      after_round=lambda end: calls.append((name, 'after_round', end.done)),
      at_end=lambda end: calls.append((name, 'at_end', end.done)),
      failed=lambda done, error: calls.append((name, 'failed', done, error)),
      record=record or (lambda done: {}))


def raising(where: str, at: int, error: Exception) -> hooks.Hook:
  """A hook whose `where` call raises `error` when the round end's `done` is `at`."""

  def call(end):
    if end.done == at:
      raise error

  return hooks.Hook(**{where: call})


def round_state(r: int, value: float | None = None) -> RoundState:
  """A small round state of round `r` (its server weights all `value`, else `r`)."""
  w = np.full(3, r if value is None else value, np.float32)
  return RoundState(server={'w': w}, clients={'c': np.arange(4, dtype=np.float32) + r},
                    round=np.int32(r))


def train_state(nan_at: int | None = None):
  """A training step on a `round_state`: round r gives the state of round r + 1 (nan weights at
  round `nan_at`) and a loss of 2 + r."""

  def step(state, r):
    done = r + 1
    return (round_state(done, np.nan if done == nan_at else None),
            {'train_loss': np.float32(2.0 + r)})

  return step


def cfg(**fields) -> ml_collections.ConfigDict:
  return ml_collections.ConfigDict(fields)


def ckpt_config(every: int = 2, seconds: float = 0.0, num_rounds: int = 5):
  return cfg(checkpoint_every=every, checkpoint_every_seconds=seconds, num_rounds=num_rounds)


class Writer:
  """A MetricWriter that keeps what it was given."""

  def __init__(self):
    self.calls = []
    self.closed = 0

  def write_scalars(self, step, scalars):
    self.calls.append((step, dict(scalars)))

  def close(self):
    self.closed += 1


class Method(NamedTuple):
  """What the logging and evaluation hooks use of an algorithm."""
  class_embeddings: Callable = lambda state: None
  eval_variables: Callable = lambda server: server
  personalized: Callable | None = None


@pytest.fixture
def workdir(tmp_path) -> str:
  return str(tmp_path / 'run')


@pytest.fixture
def ckpt(workdir):
  """A Checkpointer on `workdir` that keeps every round, its saves and closes counted."""
  opened = checkpoint.Checkpointer(workdir, max_to_keep=10)
  opened.saves, opened.closes = [], 0
  save, close = opened.save, opened.close

  def counted_save(round_index, state, run=None):
    opened.saves.append(round_index)
    save(round_index, state, run)

  def counted_close():
    opened.closes += 1
    close()

  opened.save, opened.close = counted_save, counted_close
  yield opened
  close()


def steps(workdir) -> list[int]:
  return checkpoint.checkpoint_steps(files.join(workdir, 'checkpoints'))


def saved_record(workdir, step: int) -> dict | None:
  return checkpoint.read_digest_file(checkpoint.digest_path(workdir, step))[1]


# -- the loop ----------------------------------------------------------------------------------

def test_hooks_are_called_in_order_around_each_round():
  calls = []
  trained = loop.run_rounds(count, 0, 0, 3, [recording('a', calls), recording('b', calls)])
  assert calls == [('a', 'at_start', 0), ('b', 'at_start', 0),
                   ('a', 'after_round', 1), ('b', 'after_round', 1),
                   ('a', 'after_round', 2), ('b', 'after_round', 2),
                   ('a', 'after_round', 3), ('b', 'after_round', 3),
                   ('a', 'at_end', 3), ('b', 'at_end', 3)]
  assert trained.state == 3


def test_a_round_end_carries_the_state_and_metrics_of_its_round():
  ends = []
  keep = lambda end: ends.append(end)
  hook = hooks.Hook(at_start=keep, after_round=keep, at_end=keep)
  seen = []

  def step(state, r):
    seen.append((int(state[0]), r))
    return state + 1, {'train_loss': 10.0 + r}

  trained = loop.run_rounds(step, np.array([2]), 2, 5, [hook])
  assert seen == [(2, 2), (3, 3), (4, 4)]   # rounds start_round..num_rounds - 1
  assert [(e.done, int(e.state[0]), e.metrics) for e in ends] == [
      (2, 2, {}),                            # at_start: the state resumed, no metrics
      (3, 3, {'train_loss': 12.0}), (4, 4, {'train_loss': 13.0}), (5, 5, {'train_loss': 14.0}),
      (5, 5, {'train_loss': 14.0})]          # at_end: the last round's
  assert ends[-1] is ends[-2]
  assert int(trained.state[0]) == 5


def test_a_start_at_num_rounds_trains_nothing_but_starts_and_ends():
  calls = []

  def never(state, r):
    raise AssertionError(f'round {r} trained')

  trained = loop.run_rounds(never, 7, 4, 4, [recording('a', calls)])
  assert calls == [('a', 'at_start', 4), ('a', 'at_end', 4)]
  assert trained.state == 7
  assert trained.in_rounds_s == 0.0 and trained.first_round_s == 0.0 and trained.train_s >= 0.0


def test_trained_says_where_the_time_went():
  def slow(state, r):
    time.sleep(0.01)
    return state + 1, {}

  hook = hooks.Hook(at_start=lambda end: time.sleep(0.05), after_round=lambda end: time.sleep(0.05))
  trained = loop.run_rounds(slow, 0, 0, 3, [hook])
  assert trained.state == 3
  assert trained.in_rounds_s >= 0.03                        # the training steps alone
  assert trained.train_s - trained.in_rounds_s >= 0.2       # the hooks' 4 sleeps are not in them
  assert trained.first_round_s >= 0.06                      # at_start and the first step
  assert trained.first_round_s < trained.train_s
  assert trained._fields == ('state', 'in_rounds_s', 'first_round_s', 'train_s')


@pytest.mark.parametrize('at, done', [(0, 0), (2, 2)])
def test_a_round_that_raises_tells_every_hook_the_rounds_done(at, done):
  calls = []
  error = RuntimeError('out of memory')

  def step(state, r):
    if r == at:
      raise error
    return state + 1, {}

  with pytest.raises(RuntimeError) as raised:
    loop.run_rounds(step, 0, 0, 4, [recording('a', calls), recording('b', calls)])
  assert raised.value is error
  assert calls[-2:] == [('a', 'failed', done, error), ('b', 'failed', done, error)]
  assert ('a', 'at_end', done) not in calls and len([c for c in calls if c[1] == 'at_end']) == 0
  assert [c[2] for c in calls if c[:2] == ('a', 'after_round')] == list(range(1, done + 1))


@pytest.mark.parametrize('where, at, done', [('at_start', 1, 1), ('after_round', 3, 3),
                                             ('at_end', 4, 4)])
def test_a_hook_that_raises_tells_every_hook_the_rounds_done(where, at, done):
  calls = []
  error = FloatingPointError('round: not finite')
  hook_list = [recording('a', calls), raising(where, at, error), recording('b', calls)]
  with pytest.raises(FloatingPointError) as raised:
    loop.run_rounds(count, 0, 1, 4, hook_list)
  assert raised.value is error
  assert calls[-2:] == [('a', 'failed', done, error), ('b', 'failed', done, error)]
  # The hooks after the one that raised are not called for that round end.
  assert ('a', where, at) in calls and ('b', where, at) not in calls


def test_the_run_record_is_every_hook_s_part_the_later_hook_winning_a_key():
  a = hooks.Hook(record=lambda done: {'a': done, 'shared': 'a'})
  b = hooks.recorded({'lr_schedule': None, 'shared': 'b'})
  assert hooks.run_record([a, hooks.Hook(), b], 4) == {'a': 4, 'shared': 'b', 'lr_schedule': None}
  assert hooks.run_record([b, a], 4) == {'a': 4, 'shared': 'a', 'lr_schedule': None}
  assert hooks.run_record([], 4) == {}
  records = []
  keep = hooks.Hook(after_round=lambda end: records.append(end.record(end.done)),
                    at_end=lambda end: records.append(end.record(end.done)))
  loop.run_rounds(count, 0, 0, 2, [a, keep, b])
  assert records == [{'a': 1, 'shared': 'b', 'lr_schedule': None},
                     {'a': 2, 'shared': 'b', 'lr_schedule': None},
                     {'a': 2, 'shared': 'b', 'lr_schedule': None}]


# -- checkpointing --------------------------------------------------------------------------------

def _with_record(done: int) -> dict:
  return {'done': done}


def test_checkpoints_are_saved_on_the_cadence_and_after_the_last_round(workdir, ckpt):
  hook_list = [hooks.Hook(record=_with_record), hooks.recorded({'lr_schedule': None}),
               checkpointing.checkpointing(ckpt_config(every=2, num_rounds=5), ckpt)]
  trained = loop.run_rounds(train_state(), round_state(0), 0, 5, hook_list)
  assert ckpt.saves == [2, 4, 5] and ckpt.closes == 1
  assert steps(workdir) == [2, 4, 5]
  for step in (2, 4, 5):
    assert saved_record(workdir, step) == {'done': step, 'lr_schedule': None}
  assert int(trained.state.round) == 5
  restored = checkpoint.Checkpointer(workdir).restore(round_state(0))
  np.testing.assert_array_equal(restored.server['w'], np.full(3, 5, np.float32))
  assert int(restored.round) == 5


def test_a_last_round_on_the_cadence_is_saved_once(workdir, ckpt):
  hook = checkpointing.checkpointing(ckpt_config(every=2, num_rounds=4), ckpt)
  loop.run_rounds(train_state(), round_state(0), 0, 4, [hook])
  assert ckpt.saves == [2, 4] and steps(workdir) == [2, 4]


def test_checkpoint_every_zero_saves_only_the_last_round(workdir, ckpt):
  hook = checkpointing.checkpointing(ckpt_config(every=0, num_rounds=3), ckpt)
  loop.run_rounds(train_state(), round_state(0), 0, 3, [hook])
  assert ckpt.saves == [3] and steps(workdir) == [3]


def test_checkpoint_every_seconds_saves_when_the_time_has_passed(workdir, ckpt):
  hook = checkpointing.checkpointing(ckpt_config(every=0, seconds=1e-9, num_rounds=3), ckpt)
  loop.run_rounds(train_state(), round_state(0), 0, 3, [hook])
  assert ckpt.saves == [1, 2, 3]
  hourly = checkpoint.Checkpointer(workdir, max_to_keep=10)
  hourly.saves = []
  save = hourly.save
  hourly.save = lambda r, s, run=None: (hourly.saves.append(r), save(r, s, run))
  hook = checkpointing.checkpointing(ckpt_config(every=0, seconds=3600.0, num_rounds=6), hourly)
  loop.run_rounds(train_state(), round_state(3), 3, 6, [hook])
  assert hourly.saves == [6] and steps(workdir) == [1, 2, 3, 6]


def test_checkpoint_every_seconds_counts_from_the_last_save(workdir, ckpt, monkeypatch):
  clock = [0.0]
  monkeypatch.setattr(checkpointing, 'time', type('Clock', (), {
      'monotonic': staticmethod(lambda: clock[0])}))

  def ten_seconds(state, r):   # each round takes 10 s of the hook's clock
    clock[0] += 10.0
    return train_state()(state, r)

  hook = checkpointing.checkpointing(ckpt_config(every=0, seconds=25.0, num_rounds=7), ckpt)
  loop.run_rounds(ten_seconds, round_state(0), 0, 7, [hook])
  assert ckpt.saves == [3, 6, 7]


def test_a_rerun_of_a_finished_run_saves_nothing_again(workdir, ckpt):
  ckpt.save(4, round_state(4), {'done': 4})
  ckpt.wait()
  ckpt.saves.clear()
  hook = checkpointing.checkpointing(ckpt_config(every=2, num_rounds=4), ckpt)
  loop.run_rounds(train_state(), round_state(4), 4, 4, [hook])
  assert ckpt.saves == [] and ckpt.closes == 1
  assert saved_record(workdir, 4) == {'done': 4}


def test_a_non_finite_state_is_refused_and_never_checkpointed(workdir, ckpt):
  calls = []
  hook_list = [checkpointing.checkpointing(ckpt_config(every=1, num_rounds=4), ckpt),
               recording('a', calls)]
  with pytest.raises(FloatingPointError) as raised:
    loop.run_rounds(train_state(nan_at=2), round_state(0), 0, 4, hook_list)
  assert str(raised.value) == ('round 2: the state holds nan or inf; it is not checkpointed (the '
                               "last finite checkpoint stays). Lower optimizer.learning_rate or "
                               "the method's step.")
  assert calls[-1] == ('a', 'failed', 2, raised.value)
  ckpt.wait()
  assert steps(workdir) == [1]
  assert not os.path.exists(checkpoint.digest_path(workdir, 2))
  assert ckpt.saves == [1]   # refused before the save was asked for


def test_a_non_finite_last_state_is_refused_at_the_end(workdir, ckpt):
  hook_list = [checkpointing.checkpointing(ckpt_config(every=0, num_rounds=3), ckpt),
               divergence.divergence_guard(cfg(divergence_factor=0.0), workdir, True, None)]
  with pytest.raises(FloatingPointError, match=r'^round 3: the state holds nan or inf'):
    loop.run_rounds(train_state(nan_at=3), round_state(0), 0, 3, hook_list)
  assert steps(workdir) == []
  assert resume.read_stopped(workdir)['round'] == 3


def test_without_a_checkpointer_the_hook_does_nothing():
  assert checkpointing.checkpointing(ckpt_config(), None) == hooks.Hook()
  state = round_state(1)
  assert checkpointing.for_checkpoint(state) is state   # one process: the arrays themselves


# -- preemption -------------------------------------------------------------------------------

def signal_after(signals: preemption.Preemption, at: int) -> hooks.Hook:
  """SIGTERM, as the handler receives it, once round `at` is done (during the round)."""

  def after_round(end):
    if end.done == at:
      signals._handle(signal.SIGTERM, None)   # pylint: disable=protected-access

  return hooks.Hook(after_round=after_round)


def test_a_signal_stops_after_the_round_saves_it_and_says_so(workdir, ckpt):
  signals = preemption.Preemption()
  closed, calls = [], []
  hook_list = [signal_after(signals, 3), recording('a', calls),
               hooks.Hook(record=_with_record),
               checkpointing.checkpointing(ckpt_config(every=0, num_rounds=6), ckpt),
               preemption.preemption(signals, ckpt, workdir, 1, 6,
                                     (lambda: closed.append('data'),
                                      lambda: closed.append('writer'))),
               divergence.divergence_guard(cfg(divergence_factor=1e3), workdir, True, None)]
  with pytest.raises(preemption.Preempted) as raised:
    loop.run_rounds(train_state(), round_state(1), 1, 6, hook_list)
  assert str(raised.value) == (f'SIGTERM: stopped after round 3 of 6 (checkpoint {workdir}/'
                               'checkpoints/3 saved); rerun the same command to resume.')
  assert closed == ['data', 'writer']
  assert ckpt.saves == [3] and steps(workdir) == [3]
  assert saved_record(workdir, 3) == {'done': 3, 'guard': {'round': 2, 'loss': 3.0}}
  assert calls[-1] == ('a', 'failed', 3, raised.value)
  assert ('a', 'after_round', 4) not in calls
  assert resume.read_stopped(workdir) is None   # a preemption is no divergence


def test_a_round_already_saved_is_not_saved_again(workdir, ckpt):
  signals = preemption.Preemption()
  hook_list = [signal_after(signals, 2),
               checkpointing.checkpointing(ckpt_config(every=2, num_rounds=6), ckpt),
               preemption.preemption(signals, ckpt, workdir, 0, 6)]
  with pytest.raises(preemption.Preempted, match=r'^SIGTERM: stopped after round 2 of 6 '):
    loop.run_rounds(train_state(), round_state(0), 0, 6, hook_list)
  assert ckpt.saves == [2] and steps(workdir) == [2]


def test_a_signal_before_the_first_round_trains_nothing_and_saves_nothing(workdir, ckpt):
  signals = preemption.Preemption()
  signals._handle(signal.SIGTERM, None)   # pylint: disable=protected-access
  closed = []
  hook_list = [checkpointing.checkpointing(ckpt_config(every=1, num_rounds=6), ckpt),
               preemption.preemption(signals, ckpt, workdir, 2, 6, (lambda: closed.append(1),))]

  def never(state, r):
    raise AssertionError(f'round {r} trained')

  with pytest.raises(preemption.Preempted) as raised:
    loop.run_rounds(never, round_state(2), 2, 6, hook_list)
  assert str(raised.value) == ('SIGTERM: stopped after round 2 of 6 (no round trained since the '
                               'start); rerun the same command to resume.')
  assert closed == [1] and ckpt.saves == [] and steps(workdir) == []


def test_another_process_stops_without_saving_and_names_process_0_s_checkpoint(workdir):
  signals = preemption.Preemption()
  closed = []
  hook_list = [signal_after(signals, 1),
               preemption.preemption(signals, None, workdir, 0, 3, (lambda: closed.append(1),))]
  with pytest.raises(preemption.Preempted) as raised:
    loop.run_rounds(count, 0, 0, 3, hook_list)
  assert str(raised.value) == (f'SIGTERM: stopped after round 1 of 3 (checkpoint {workdir}/'
                               'checkpoints/1 saved); rerun the same command to resume.')
  assert closed == [1] and not os.path.exists(workdir)


def test_no_signal_no_stop():
  signals = preemption.Preemption()
  assert signals.requested(True) is None
  calls = []
  loop.run_rounds(count, 0, 0, 3, [preemption.preemption(signals, None, '/nowhere', 0, 3,
                                                         (lambda: calls.append(1),))])
  assert calls == []


def test_after_abandon_a_signal_stops_at_once():
  signals = preemption.Preemption()
  signals.abandon('the checkpoint of round 4 is saved; rerun the same command to evaluate it')
  with pytest.raises(preemption.Preempted) as raised:
    signals._handle(signal.SIGINT, None)   # pylint: disable=protected-access
  assert str(raised.value) == ('SIGINT: stopped during the final evaluation (the checkpoint of '
                               'round 4 is saved; rerun the same command to evaluate it).')
  came = preemption.Preemption()
  came._handle(signal.SIGTERM, None)   # pylint: disable=protected-access
  with pytest.raises(preemption.Preempted) as raised:
    came.abandon('saved')
  assert str(raised.value) == 'SIGTERM: stopped before the final evaluation (saved).'


def test_the_handlers_are_installed_from_the_main_thread_and_restored():
  before = {sig: signal.getsignal(sig) for sig in preemption.PREEMPTION_SIGNALS}
  with preemption.Preemption() as signals:
    for sig in preemption.PREEMPTION_SIGNALS:
      assert signal.getsignal(sig) == signals._handle   # pylint: disable=protected-access
  assert {sig: signal.getsignal(sig) for sig in preemption.PREEMPTION_SIGNALS} == before
  # A signal restores the handlers there were before: a second one acts as it would have.
  with preemption.Preemption() as signals:
    signals._handle(signal.SIGTERM, None)   # pylint: disable=protected-access
    assert {sig: signal.getsignal(sig) for sig in preemption.PREEMPTION_SIGNALS} == before
  # From another thread nothing is installed.
  seen = []

  def elsewhere():
    with preemption.Preemption():
      seen.append({sig: signal.getsignal(sig) for sig in preemption.PREEMPTION_SIGNALS})

  thread = threading.Thread(target=elsewhere)
  thread.start()
  thread.join()
  assert seen == [before]


# -- the divergence guard -------------------------------------------------------------------------

def losses(*values):
  """A training step on an int whose round r has loss `values[r]`."""
  return lambda state, r: (state + 1, {'train_loss': np.float32(values[r])})


def test_the_guard_takes_the_first_round_s_loss_as_its_reference(workdir):
  records = []
  guard = divergence.divergence_guard(cfg(divergence_factor=1e3), workdir, True, None)
  keep = hooks.Hook(after_round=lambda end: records.append(end.record(end.done)))
  assert guard.record(0) == {'guard': None}
  loop.run_rounds(losses(2.5, 100.0, 2499.0), 0, 0, 3, [guard, keep])
  assert records == [{'guard': {'round': 1, 'loss': 2.5}}] * 3
  # Rounds without a training loss (a method that reports none) set no reference.
  quiet = divergence.divergence_guard(cfg(divergence_factor=1e3), workdir, True, None)
  loop.run_rounds(lambda s, r: (s + 1, {}), 0, 0, 2, [quiet])
  assert quiet.record(2) == {'guard': None}
  assert resume.read_stopped(workdir) is None


def test_a_loss_beyond_divergence_factor_stops_the_run_and_writes_stopped_json(workdir):
  config = cfg(divergence_factor=1e3, algorithm='fedgc', optimizer=cfg(learning_rate=2.0))
  calls = []
  guard = divergence.divergence_guard(config, workdir, True, None)
  with pytest.raises(FloatingPointError) as raised:
    loop.run_rounds(losses(2.0, 48.0, 2001.0, 1.0), 0, 0, 4, [guard, recording('a', calls)])
  assert str(raised.value) == (
      "round 3: training loss 2001 is more than divergence_factor=1000 times the first round's "
      '(2); the run diverged (lower optimizer.learning_rate or the method\'s step, or raise '
      '--config.divergence_factor).')
  assert calls[-1] == ('a', 'failed', 3, raised.value)
  assert resume.read_stopped(workdir) == {'round': 3, 'reason': str(raised.value),
                                          'config': config.to_dict()}


def test_a_resumed_guard_keeps_the_reference_its_checkpoint_records(workdir):
  reference = {'round': 1, 'loss': 2.0}
  guard = divergence.divergence_guard(cfg(divergence_factor=1e3), workdir, True, reference)
  assert guard.record(2) == {'guard': reference}
  # Round 3's 1999 is within 1000x round 1's 2; round 4's 2001 is not (it would be, taken as
  # its own reference).
  with pytest.raises(FloatingPointError, match=r"^round 4: training loss 2001 is more than "
                     r"divergence_factor=1000 times the first round's \(2\)"):
    loop.run_rounds(losses(0, 0, 1999.0, 2001.0), 0, 2, 5, [guard])
  assert guard.record(4) == {'guard': reference}
  assert resume.read_stopped(workdir)['round'] == 4


def test_a_non_finite_loss_stops_the_run_even_with_the_factor_off(workdir):
  guard = divergence.divergence_guard(cfg(divergence_factor=0.0), workdir, True, None)
  loop.run_rounds(losses(1.0, 1e9), 0, 0, 2, [guard])   # off: a finite blow-up goes on
  with pytest.raises(FloatingPointError) as raised:
    loop.run_rounds(losses(1.0, np.nan), 0, 0, 2, [guard])
  assert str(raised.value) == ('round 2: training loss nan; the run diverged (lower '
                               "optimizer.learning_rate, or the method's step such as "
                               'fedgc.reg_lambda). No checkpoint of this state was written.')
  stopped = json.loads(open(os.path.join(workdir, resume.STOPPED_FILE)).read())
  assert stopped['round'] == 2 and stopped['reason'] == str(raised.value)


@pytest.mark.parametrize('chief, error, written', [
    (True, FloatingPointError('round 2: the state holds nan or inf;\n  lower it'), True),
    (False, FloatingPointError('round 2: training loss nan'), False),
    (True, RuntimeError('out of memory'), False),
    (True, preemption.Preempted('SIGTERM: stopped after round 2 of 4'), False)])
def test_stopped_json_is_written_for_a_divergence_by_process_0_only(workdir, chief, error,
                                                                    written):
  config = cfg(divergence_factor=1e3, algorithm='fedgc')
  guard = divergence.divergence_guard(config, workdir, chief, None)
  with pytest.raises(type(error)):
    loop.run_rounds(count, 0, 0, 4, [raising('after_round', 2, error), guard])
  if written:   # its reason on one line
    assert resume.read_stopped(workdir) == {
        'round': 2, 'reason': 'round 2: the state holds nan or inf; lower it',
        'config': {'divergence_factor': 1e3, 'algorithm': 'fedgc'}}
  else:
    assert not os.path.exists(os.path.join(workdir, resume.STOPPED_FILE))


# -- logging -------------------------------------------------------------------------------------

def _logging(writer, epsilons=(), last_logged=None, start_round=0, num_rounds=7,
             method=Method()):
  config = cfg(log_every=3, num_rounds=num_rounds)
  progress = metrics.Progress(num_rounds, start_round, 100)
  return logging.logging(config, method, writer, progress, start_round, list(epsilons),
                         last_logged)


def test_the_logged_rounds_go_to_the_writer_with_the_progress_rates(capsys):
  writer = Writer()
  hook = _logging(writer)
  loop.run_rounds(losses(*range(10, 17)), 0, 0, 7, [hook])
  assert [step for step, _ in writer.calls] == [1, 3, 6, 7]
  for step, scalars in writer.calls:
    assert set(scalars) == {'train_loss', 'rounds_per_s', 'images_per_s'}
    assert scalars['train_loss'] == 9.0 + step
  assert np.isnan(writer.calls[0][1]['rounds_per_s'])   # measured from the first logged round
  assert writer.calls[1][1]['rounds_per_s'] > 0
  lines = capsys.readouterr().out.splitlines()
  assert [line.split(' | ')[0] for line in lines] == [
      'round 1/7 (14%)', 'round 3/7 (43%)', 'round 6/7 (86%)', 'round 7/7 (100%)']
  assert hook.record(7) == {'last_logged': {'round': 7, 'train_loss': 16.0}}


def test_under_dp_epsilon_is_written_every_round():
  writer = Writer()
  epsilons = [0.5 * r for r in range(1, 8)]
  hook = _logging(writer, epsilons)
  loop.run_rounds(losses(*range(10, 17)), 0, 0, 7, [hook])
  assert [step for step, _ in writer.calls] == [1, 2, 3, 4, 5, 6, 7]
  for step, scalars in writer.calls:
    if step in (2, 4, 5):   # not logged: epsilon alone
      assert scalars == {'dp/epsilon': 0.5 * step}
    else:
      assert scalars['dp/epsilon'] == 0.5 * step and scalars['train_loss'] == 9.0 + step
  assert hook.record(7) == {'last_logged': {'round': 7, 'train_loss': 16.0, 'dp/epsilon': 3.5}}
  # Without noise epsilon is inf: a value, not a divergence.
  writer = Writer()
  loop.run_rounds(losses(1.0, 1.0), 0, 0, 2, [_logging(writer, [float('inf')] * 2,
                                                       num_rounds=2)])
  assert [scalars['dp/epsilon'] for _, scalars in writer.calls] == [float('inf')] * 2


def test_a_resumed_run_logs_its_first_round_and_keeps_the_last_logged_until_it_logs():
  writer = Writer()
  resumed = {'round': 3, 'train_loss': 1.5}
  hook = _logging(writer, last_logged=resumed, start_round=3)
  assert hook.record(3) == {'last_logged': resumed}
  loop.run_rounds(losses(*range(10, 17)), 0, 3, 7, [hook])
  assert [step for step, _ in writer.calls] == [4, 6, 7]
  assert hook.record(7)['last_logged'] == {'round': 7, 'train_loss': 16.0}
  # A rerun of a finished run trains and logs nothing: the record it resumed stays.
  rerun = _logging(Writer(), last_logged=resumed, start_round=7)
  loop.run_rounds(count, 0, 7, 7, [rerun])
  assert rerun.record(7) == {'last_logged': resumed}
  assert _logging(Writer(), last_logged={}).record(0) == {'last_logged': None}


def test_class_embedding_norms_are_logged_when_the_method_keeps_them():
  writer = Writer()
  method = Method(class_embeddings=lambda state: np.array([[3.0, 4.0], [0.0, 1.0]]))
  hook = _logging(writer, method=method, num_rounds=1)
  loop.run_rounds(losses(2.0), 0, 0, 1, [hook])
  assert hook.record(1) == {'last_logged': {'round': 1, 'train_loss': 2.0,
                                            'class_embeddings/norm_mean': 3.0,
                                            'class_embeddings/norm_max': 5.0}}


def test_non_finite_metrics_of_a_logged_round_stop_the_run():
  writer = Writer()
  hook = _logging(writer, num_rounds=7)
  # Round 2 is not logged: the logging hook does not look at it (the divergence guard does).
  with pytest.raises(FloatingPointError) as raised:
    loop.run_rounds(losses(1.0, np.nan, np.inf), 0, 0, 7, [hook])
  assert str(raised.value) == ("round 3: non-finite training metrics {'train_loss': inf}; the run "
                               'diverged (lower optimizer.learning_rate or fedgc.reg_lambda).')
  assert [step for step, _ in writer.calls] == [1]
  assert hook.record(3) == {'last_logged': {'round': 1, 'train_loss': 1.0}}
  method = Method(class_embeddings=lambda state: np.array([[np.nan, 0.0]]))
  with pytest.raises(FloatingPointError, match=r'^round 1: non-finite training metrics '):
    loop.run_rounds(losses(1.0), 0, 0, 1, [_logging(Writer(), method=method, num_rounds=1)])


def test_another_process_logs_nothing_but_keeps_the_record(capsys):
  hook = logging.logging(cfg(log_every=1, num_rounds=2), Method(), None, None, 0, [0.1, 0.2],
                         None)
  loop.run_rounds(losses(4.0, 5.0), 0, 0, 2, [hook])
  assert hook.record(2) == {'last_logged': {'round': 2, 'train_loss': 5.0, 'dp/epsilon': 0.2}}
  assert capsys.readouterr().out == ''


# -- mid-run evaluation ---------------------------------------------------------------------------

def _evaluator(seen: list) -> eval_lib.Evaluator:
  def evaluate(inputs):
    r = int(inputs.state.round)
    seen.append((r, inputs.embed, inputs.class_embeddings, inputs.personal_embed))
    return eval_lib.EvalOutput(results={'round': r}, scalars={'acc': r / 10}, figures={},
                               arrays={'fake.npz': {'x': np.arange(r)}})
  return eval_lib.Evaluator('fake', evaluate)


def _predict(variables):
  """`eval.predictions` of a recognition model: its embed function (here a label of it)."""
  return {'embed': ('embed of', float(variables['w'][0])), 'live_logits': None}


def test_evaluation_runs_every_eval_every_rounds_before_the_last(workdir):
  os.makedirs(workdir)
  seen, writer = [], Writer()
  config = cfg(eval=cfg(every_rounds=2), num_rounds=7)
  silent = eval_lib.Evaluator('silent', lambda inputs: None)   # nothing to say: left out
  hook = evaluation.mid_run_evaluation(config, [_evaluator(seen), silent], _predict,
                                       Method(class_embeddings=lambda state: 'W'), workdir,
                                       writer)
  loop.run_rounds(train_state(), round_state(0), 0, 7, [hook])
  assert [r for r, *_ in seen] == [2, 4, 6]
  assert seen[0][1:] == (('embed of', 2.0), 'W', None)
  assert writer.calls == [(2, {'eval/fake/acc': 0.2}), (4, {'eval/fake/acc': 0.4}),
                          (6, {'eval/fake/acc': 0.6})]
  np.testing.assert_array_equal(np.load(os.path.join(workdir, 'fake.npz'))['x'], np.arange(6))


def test_no_mid_run_evaluation_when_off_and_no_files_from_another_process(workdir):
  seen = []
  off = evaluation.mid_run_evaluation(cfg(eval=cfg(every_rounds=0), num_rounds=4),
                                      [_evaluator(seen)], _predict, Method(), workdir, Writer())
  loop.run_rounds(train_state(), round_state(0), 0, 4, [off])
  assert seen == []
  other = evaluation.mid_run_evaluation(cfg(eval=cfg(every_rounds=1), num_rounds=3),
                                        [_evaluator(seen)], _predict, Method(), workdir, None)
  loop.run_rounds(train_state(), round_state(0), 0, 3, [other])
  assert [r for r, *_ in seen] == [1, 2]
  assert not os.path.exists(workdir)


def test_evaluate_sees_the_personalized_models_and_eval_scalars_name_each_type():
  seen = []
  method = Method(personalized=lambda state: f'personal of round {int(state.round)}')
  outputs = evaluation.evaluate([_evaluator(seen)], _predict, method, round_state(3))
  assert seen == [(3, ('embed of', 3.0), None, 'personal of round 3')]
  assert outputs['fake'].results == {'round': 3}
  assert evaluation.eval_scalars({'a': outputs['fake'], 'b': outputs['fake']._replace(
      scalars={'x': 1.0, 'y': 2.0})}) == {'eval/a/acc': 0.3, 'eval/b/x': 1.0, 'eval/b/y': 2.0}
