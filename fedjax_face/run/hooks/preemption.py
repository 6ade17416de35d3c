"""Preemption: SIGTERM and SIGINT ask the run to stop (the big_vision / orbax preemption pattern).
The round in flight finishes, the rounds done are saved, and the run raises `Preempted` with the
one line saying so (main.py exits with `main.PREEMPTED_EXIT`); rerunning the command resumes."""

import signal
import threading

import jax
import numpy as np

from fedjax_face.core import distributed
from fedjax_face.io import files
from fedjax_face.run.hooks import Hook, checkpointing

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGINT)   # SLURM / TPU-VM preemption, Ctrl-C


class Preempted(Exception):
  """A run stopped by SIGTERM or SIGINT, its state saved: the message is the one line saying so."""


class Preemption:
  """SIGTERM and SIGINT as a request to stop. A second signal gets the handler there was before
  (SIGTERM's default ends the process at once, Ctrl-C raises KeyboardInterrupt; the last
  checkpoint is resumed as after kill -9). Once `abandon` is called (training is saved: the final
  evaluation) a signal raises Preempted at once. Handlers are installed only from the main thread
  (Python's rule); elsewhere signals keep their handlers."""

  def __init__(self):
    self.signal_name = None
    self._previous = {}
    self._abandon_line = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in PREEMPTION_SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc_info):
    self._restore()

  def _restore(self):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    self.signal_name = signal.Signals(signum).name
    self._restore()   # a second signal acts as it would have
    if self._abandon_line is not None:
      raise Preempted(f'{self.signal_name}: stopped during the final evaluation '
                      f'({self._abandon_line}).')

  def abandon(self, line: str) -> None:
    """From now on a signal stops at once (`line`: what is saved and what to do); one that came
    already does so now."""
    self._abandon_line = line
    if self.signal_name is not None:
      raise Preempted(f'{self.signal_name}: stopped before the final evaluation ({line}).')

  def requested(self, chief: bool) -> str | None:
    """The name of the signal received, or None; with several processes, process 0's (every
    process then stops after the same round)."""
    if jax.process_count() == 1:
      return self.signal_name
    names = ('',) + tuple(s.name for s in PREEMPTION_SIGNALS)
    index = names.index(self.signal_name or '') if chief else 0
    index = int(distributed.process_zero_value(np.int32(index), chief))
    return names[index] or None


def preemption(signals: Preemption, ckpt, workdir: str, start_round: int, num_rounds: int,
               closers=()) -> Hook:
  """Before the first round and after each: on a signal, `closers` run (the data prefetcher, the
  TensorBoard writer: the logged rounds reach the disk), process 0 (`ckpt` not None) saves the
  rounds done unless saved and waits for the save, and Preempted is raised."""

  def check(end):
    name = signals.requested(ckpt is not None)
    if name is None:
      return
    for close in closers:
      close()
    where = 'no round trained since the start'
    if end.done > start_round:
      if ckpt is not None:
        if ckpt.last_saved() != end.done:
          checkpointing.save(ckpt, end)
        ckpt.wait()
      where = f'checkpoint {files.join(workdir, "checkpoints", str(end.done))} saved'
    raise Preempted(f'{name}: stopped after round {end.done} of {num_rounds} ({where}); rerun '
                    'the same command to resume.')

  return Hook(at_start=check, after_round=check)
