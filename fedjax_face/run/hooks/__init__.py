"""Hooks: what happens around each round, one concern each. A hook is a NamedTuple of functions
(the idiom of `core.algorithm.Algorithm`); `run/loop.py` calls them, in the order the driver lists
them, with a `RoundEnd`:

  at_start(end)          before the first round of this start (`end.done` = its round)
  after_round(end)       after each round
  at_end(end)            after the last round
  failed(done, error)    when a round or a hook raised (`done`: the rounds finished)
  record(done) -> dict   its part of the run record saved beside the checkpoint of round `done`

  checkpointing.py   saves on the config's cadence and at the end, with the run record
  preemption.py      SIGTERM / SIGINT: save the rounds done and stop with one line
  divergence.py      the divergence guard, stopped.json
  logging.py         TensorBoard scalars, the last logged metrics
  evaluation.py      mid-run evaluation every `eval.every_rounds`
"""

from typing import Callable, NamedTuple


class RoundEnd(NamedTuple):
  """Where the run stands after a round: `done` rounds finished, the round `state` after them,
  the round's training `metrics`, and `record(done)`: the run record every hook contributes to
  (`run_record`)."""
  done: int
  state: object
  metrics: dict
  record: Callable[[int], dict]


def _nothing(*args) -> None:
  del args


def _no_record(done: int) -> dict:
  del done
  return {}


class Hook(NamedTuple):
  at_start: Callable[[RoundEnd], None] = _nothing
  after_round: Callable[[RoundEnd], None] = _nothing
  at_end: Callable[[RoundEnd], None] = _nothing
  failed: Callable[[int, Exception], None] = _nothing
  record: Callable[[int], dict] = _no_record


def run_record(hooks, done: int) -> dict:
  """The run record of the checkpoint of round `done`: every hook's part."""
  record = {}
  for hook in hooks:
    record.update(hook.record(done))
  return record


def recorded(record: dict) -> Hook:
  """A hook that only adds fixed `record` parts (e.g. the learning-rate decay of the start)."""
  return Hook(record=lambda done: record)
