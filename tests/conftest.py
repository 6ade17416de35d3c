"""Tests run with the XLA CPU defaults the entry points set (core/xla_flags.py), before JAX starts,
and with one persistent XLA compilation cache per test session."""

import atexit
import os
import shutil
import tempfile

from fedjax_face.core import xla_flags

xla_flags.apply_cpu_defaults()

# The suite compiles the same small programs many times: every runlocal run, in both pytest-xdist
# workers and in the subprocesses the tests start, all of which inherit these variables from the
# process that set them first. Nearly all of those programs compile in well under JAX's default
# 1 s threshold for caching (a runlocal run is ~120 compiles of ~0.07 s, 10 of its 14 s), so the
# threshold is 0. The cache is new for each session, so nothing compiled by another version of
# the code is ever read.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix='fedjax_face_xla_cache_')
  os.environ['JAX_COMPILATION_CACHE_DIR'] = _CACHE
  os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS'] = '0'
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  import jax  # pylint: disable=g-import-not-at-top  (after the XLA flags above)
  jax.config.update('jax_compilation_cache_dir', _CACHE)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)


# pytest-xdist's `--dist loadfile` hands whole files to the workers, by default the files with the
# most tests first. The slowest files hold few tests (one trained run or one subprocess each), so
# they were handed out last, and the suite ended with one worker running one of them alone. Under
# xdist, the files below go first, slowest first (the greedy longest-first rule), and the rest
# follow by test count as before. The list holds the slowest files of the last clean-clone
# measurement (BUILD_NOTES, "The test suite"); a file missing from it only runs later, so a stale
# list costs wall time, never a test.
SLOWEST_FILES = (
    'tests/tools/test_bench.py',
    'tests/core/test_distributed.py',
    'tests/test_experiment_pad.py',
    'tests/algorithms/test_fedma.py',
    'tests/algorithms/test_fedgpad.py',
    'tests/data/test_pad_lists.py',
    'tests/test_experiment_fedfr.py',
    'tests/models/test_pad.py',
    'tests/models/test_conv.py',
)


def _file_order(items) -> list:
  """The items' files in the order they should be handed out: SLOWEST_FILES first, then the others
  by test count (most first), ties in collection order."""
  counts = {}
  for item in items:
    path = item.nodeid.split('::', 1)[0]
    counts[path] = counts.get(path, 0) + 1
  rank = {path: i for i, path in enumerate(SLOWEST_FILES)}
  return sorted(counts, key=lambda p: (rank.get(p, len(rank)), -counts[p] if p not in rank else 0))


def pytest_configure(config):
  # The order is set by pytest_collection_modifyitems below; xdist's own reordering by test count
  # would undo it. Only under `--dist loadfile`, in the controller and in the workers alike.
  if getattr(config.option, 'dist', 'no') == 'loadfile':
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
  if getattr(config.option, 'dist', 'no') != 'loadfile' and not hasattr(config, 'workerinput'):
    return
  order = {path: i for i, path in enumerate(_file_order(items))}
  items.sort(key=lambda item: order[item.nodeid.split('::', 1)[0]])   # stable within a file
