"""Tests run with the XLA CPU defaults the entry points set (core/xla_flags.py), before JAX starts,
with one persistent XLA compilation cache per test session, and in two tiers (below)."""

import atexit
import os
import shutil
import tempfile

import pytest

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


# Two tiers. The suite (README's test command, what CI runs) checks every property at least once:
# each method's "what crosses", each config end to end, each reader, refusal and equality. Tests
# marked `full` repeat a property the suite already checks on another backend, method or size, or
# run long trials; they run with FEDJAX_FACE_TESTS=full (BUILD_NOTES.md, "The test suite", lists
# them, says why each is a repeat, and records the last full run).
FULL_TIER_ENV = 'FEDJAX_FACE_TESTS'


def pytest_configure(config):
  config.addinivalue_line('markers', f'full: a repeat of a property the suite checks; runs with '
                          f'{FULL_TIER_ENV}=full')


def full_tier() -> bool:
  return os.environ.get(FULL_TIER_ENV) == 'full'


def pytest_collection_modifyitems(config, items):
  del config
  if full_tier():
    return
  skip = pytest.mark.skip(reason=f'the full tier: {FULL_TIER_ENV}=full')
  for item in items:
    if 'full' in item.keywords:
      item.add_marker(skip)


# What the suite compiles, per test: with FEDJAX_FACE_COMPILE_LOG=<folder>, each pytest process
# writes <folder>/compiles_<pid>.tsv, a line per XLA compilation it asked for (the test, the
# program's name, its seconds; a persistent-cache hit is a compilation that took milliseconds).
# The suite's CPU is mostly these (BUILD_NOTES.md, "The test suite"), so the costliest names say
# where a cut can come from. Subprocesses the tests start (forced devices, the bench, real
# federations) load no conftest and are not listed. Off by default.
COMPILE_LOG_ENV = 'FEDJAX_FACE_COMPILE_LOG'
_current_test = ['(collection)']


def _compile_logger(folder: str):
  """A jax.monitoring duration listener appending each backend compilation to this process's
  file, and the file's path."""
  path = os.path.join(folder, f'compiles_{os.getpid()}.tsv')

  def listener(event: str, duration: float, **kwargs) -> None:
    if event == '/jax/core/compile/backend_compile_duration':
      with open(path, 'a') as f:
        f.write(f"{_current_test[0]}\t{kwargs.get('fun_name', '?')}\t{duration:.4f}\n")

  return listener, path


if os.environ.get(COMPILE_LOG_ENV):
  os.makedirs(os.environ[COMPILE_LOG_ENV], exist_ok=True)
  from jax import monitoring  # pylint: disable=g-import-not-at-top  (after the XLA flags above)
  monitoring.register_event_duration_secs_listener(
      _compile_logger(os.environ[COMPILE_LOG_ENV])[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
  del nextitem
  _current_test[0] = item.nodeid   # fixtures set up for this test are charged to it
  yield
