"""Checkpointing: process 0 saves the round state (never a non-finite one) with the run record
every `checkpoint_every` rounds or `checkpoint_every_seconds`, and after the last round; each save
is waited for, so a failed one (a full disk) stops the run before another round trains."""

import time

import jax
import numpy as np

from fedjax_face.io import checkpoint
from fedjax_face.run import schedule
from fedjax_face.run.hooks import Hook, RoundEnd, divergence


def for_checkpoint(state):
  """What process 0 saves: host copies with several processes (orbax then writes from process 0
  alone, see io/checkpoint.py), the arrays themselves with one."""
  if jax.process_count() == 1:
    return state
  return jax.tree.map(np.asarray, state)


def save(ckpt: checkpoint.Checkpointer, end: RoundEnd) -> None:
  """Saves round `end.done`'s state with its run record (FloatingPointError when not finite)."""
  ckpt.save(end.done, divergence.checked_finite(for_checkpoint(end.state), end.done),
            end.record(end.done))


def checkpointing(config, ckpt: checkpoint.Checkpointer | None) -> Hook:
  """The hook of process 0 (`ckpt` None elsewhere: it does nothing)."""
  if ckpt is None:
    return Hook()
  saved_at = [time.monotonic()]

  def after_round(end):
    ckpt.check()   # a failed background save stops the run now, not at the next save
    if schedule.checkpoint_due(config, end.done, time.monotonic() - saved_at[0]):
      save(ckpt, end)
      # Waited for: a failed save stops the run before another round trains, and host arrays
      # (engine.client_state='host') are written before the next round changes them.
      ckpt.wait()
      saved_at[0] = time.monotonic()

  def at_end(end):
    if ckpt.latest_round() != end.done:
      save(ckpt, end)
    ckpt.close()

  return Hook(after_round=after_round, at_end=at_end)
