"""Tests run with the XLA CPU defaults the entry points set (core/xla_flags.py), before JAX starts,
and with one persistent XLA compilation cache per test session."""

import atexit
import os
import shutil
import tempfile

from fedjax_face.core import xla_flags

xla_flags.apply_cpu_defaults()

# The suite compiles the same small programs many times (every runlocal run, in this process and
# in the subprocesses the tests start, which inherit the variable). The cache is new for each
# session, so nothing compiled by another version of the code is ever read.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  _CACHE = tempfile.mkdtemp(prefix='fedjax_face_xla_cache_')
  os.environ['JAX_COMPILATION_CACHE_DIR'] = _CACHE
  atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
  import jax  # pylint: disable=g-import-not-at-top  (after the XLA flags above)
  jax.config.update('jax_compilation_cache_dir', _CACHE)
