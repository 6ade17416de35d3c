"""The round loop: a training step, then the hooks. It knows no engine: `train_round(state, r)`
is the simulation's step (run/simulation.py) or a federation server's."""

import functools
import time
from typing import NamedTuple

import jax

from fedjax_face.run import hooks as hooks_lib


class Trained(NamedTuple):
  """What the loop returns: the final state and where the time went (seconds): in the training
  steps, in the first step of this start (it compiles), and in the loop all told."""
  state: object
  in_rounds_s: float
  first_round_s: float
  train_s: float


def run_rounds(train_round, state, start_round: int, num_rounds: int, hooks) -> Trained:
  """Rounds `start_round`..`num_rounds - 1` of `train_round(state, r) -> (state, metrics)`, each
  followed by every hook's `after_round`; `at_start` before them, `at_end` after; when anything
  raises, every hook's `failed` is told before the error propagates."""
  record = functools.partial(hooks_lib.run_record, hooks)
  done, in_rounds_s, first_round_s = start_round, 0.0, 0.0
  t_train = time.perf_counter()
  try:
    end = hooks_lib.RoundEnd(start_round, state, {}, record)
    for hook in hooks:
      hook.at_start(end)
    for r in range(start_round, num_rounds):
      t_round = time.perf_counter()
      state, metrics = train_round(state, r)
      in_rounds_s += time.perf_counter() - t_round
      done = r + 1
      if r == start_round:
        first_round_s = time.perf_counter() - t_train   # compiles: steady state is the rest
      end = hooks_lib.RoundEnd(done, state, metrics, record)
      for hook in hooks:
        hook.after_round(end)
    jax.block_until_ready(state)
    for hook in hooks:
      hook.at_end(end)
  except Exception as error:
    for hook in hooks:
      hook.failed(done, error)
    raise
  return Trained(state, in_rounds_s, first_round_s, time.perf_counter() - t_train)
