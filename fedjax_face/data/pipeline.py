"""Host input pipeline: the next rounds' data prepared in a background thread while a round trains.

`Prefetcher` runs `make(r)` (in training: select the cohort, `federated.sample_round`, which for a
decoded store reads and decodes the round's images on the store's thread pool) for rounds r+1 ..
r+depth while the engine runs round r. JAX dispatch is asynchronous and image decoding releases
the GIL, so the host work overlaps the device's. The thread changes only *when* a round's data is
made: `sample_round` is a pure function of (seed, round, client), so runs with prefetch on and off
are bit-identical (tests/test_pipeline.py).

Augmentation: the training transform (random horizontal flip, then `(x / 255 - 0.5) / 0.5`;
docs/references.md, insightface-transform) runs inside the jitted local step
(`algorithms/common.py` with `data/preprocess.py`), on the accelerator: the host ships uint8, a
quarter of the bytes of float32, and the flips come from the round's JAX key, so a run is
reproducible on every backend. `augment` is the same transform in numpy, for measuring the
host-side cost (`bench_pipeline`) and for feeding another trainer.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Iterable

import numpy as np

# How often a blocked producer checks whether the consumer has gone away.
_POLL_S = 0.1


def augment(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
  """uint8 `[B, H, W, C]` -> float32 in [-1, 1], each image mirrored left-right with prob. 1/2."""
  flip = rng.random(len(images)) < 0.5
  if flip.any():  # mirrored while still uint8: a quarter of the bytes of float32
    images = images.copy()
    images[flip] = images[flip, :, ::-1]
  out = np.empty(images.shape, np.float32)
  np.multiply(images, np.float32(2.0 / 255.0), out=out)  # (x/255 - 0.5)/0.5 == x*2/255 - 1
  out -= np.float32(1.0)
  return out


def _produce(make: Callable[[int], Any], rounds: list[int], out: queue.Queue,
             stop: threading.Event) -> None:
  # Holds no reference to the Prefetcher, so an abandoned Prefetcher is collected and its
  # __del__ sets `stop`.
  for r in rounds:
    if stop.is_set():
      return
    try:
      item = (r, make(r), None)
    except BaseException as e:  # pylint: disable=broad-except
      item = (r, None, e)  # re-raised in the consumer's thread by get(r)
    while not stop.is_set():
      try:
        out.put(item, timeout=_POLL_S)
        break
      except queue.Full:
        continue
    if item[2] is not None:
      return


class Prefetcher:
  """`make(r)` for r in `rounds`, computed `depth` rounds ahead in one background thread.

  Example:
    rounds = Prefetcher(lambda r: sample(r), range(start, end), depth=1)
    for r in range(start, end):
      data = rounds.get(r)
      ...
    rounds.close()

  Attributes:
    depth: rounds made ahead (0: none; `get` calls `make` itself).
    wait_s: seconds `get` spent waiting for data (the input pipeline's stall on training).
  """

  def __init__(self, make: Callable[[int], Any], rounds: Iterable[int], depth: int = 1):
    if depth < 0:
      raise ValueError(f'depth must be >= 0, got {depth}')
    self._make = make
    self._rounds = list(rounds)
    self._next = 0
    self.depth = int(depth)
    self.wait_s = 0.0
    self._stop = threading.Event()
    self._thread = None
    if self.depth and self._rounds:
      self._queue = queue.Queue(maxsize=self.depth)
      self._thread = threading.Thread(
          target=_produce, args=(make, self._rounds, self._queue, self._stop),
          name='round-prefetch', daemon=True)
      self._thread.start()

  def get(self, r: int) -> Any:
    """make(r); rounds must be asked for in the order given. Re-raises what make(r) raised."""
    if self._next >= len(self._rounds) or self._rounds[self._next] != r:
      expected = self._rounds[self._next] if self._next < len(self._rounds) else 'none (done)'
      raise ValueError(f'Prefetcher.get({r}): rounds are served in order; expected {expected}')
    self._next += 1
    t0 = time.perf_counter()
    if self._thread is None:
      value = self._make(r)
    else:
      got, value, error = self._queue.get()
      assert got == r, (got, r)
      if error is not None:
        self.close()
        raise error
    self.wait_s += time.perf_counter() - t0
    return value

  def close(self) -> None:
    """Stops the thread (it finishes the round it is making, if any, and drops it)."""
    self._stop.set()
    thread, self._thread = self._thread, None
    if thread is not None:
      thread.join()

  def __del__(self):
    self._stop.set()  # no join: __del__ may run on any thread
