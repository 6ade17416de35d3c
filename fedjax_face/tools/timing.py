"""Wall-clock timing of JAX calls: compile and steady state apart (the benches share it)."""

import statistics
import time
from typing import Callable

import jax


def measure(fn: Callable, *args, warmup: int = 1, repeats: int = 3,
            budget_s: float | None = None) -> dict:
  """Times `fn(*args)` to completion (`block_until_ready`): compile and steady state apart.

  Args:
    fn: the call to time; its result is blocked on, so asynchronous dispatch is not mistaken for
      speed.
    *args: its arguments, the same for every call (every timed call does the same work).
    warmup: untimed calls before the timed ones (at least 1: the first traces and compiles).
    repeats: timed calls (at least 1).
    budget_s: if given, the timed calls stop once their total passes it (at least one is made), so
      a slow combination costs about one budget rather than `repeats` slow calls.

  Returns:
    {'median_s', 'first_call_s', 'compile_s' (first call minus median, at least 0), 'times_s',
    'repeats' (timed calls made)}.
  """
  if warmup < 1 or repeats < 1:
    raise ValueError(f'warmup={warmup}, repeats={repeats}; expected both at least 1.')
  start = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - start
  for _ in range(warmup - 1):
    jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
    if budget_s is not None and sum(times) >= budget_s:
      break
  median = statistics.median(times)
  return {'median_s': median, 'first_call_s': first, 'compile_s': max(0.0, first - median),
          'times_s': times, 'repeats': len(times)}
