"""Runs a Python snippet in a subprocess that sees N forced XLA CPU devices.

The device count is fixed when jax first initialises, so multi-device tests run in a fresh process.
"""

import os
import subprocess
import sys

from fedjax_face.core import xla_flags
from tests import config_files

ROOT = config_files.ROOT


def python_path() -> str:
  """The repository first, then whatever PYTHONPATH already holds (packages installed with
  `pip --target`, as on the lent accelerator machines, stay importable in the subprocess)."""
  return os.pathsep.join(p for p in (ROOT, os.environ.get('PYTHONPATH')) if p)


def device_count_flags(num_devices: int) -> str:
  """XLA_FLAGS forcing `num_devices` CPU devices, with the CPU defaults the entry points set."""
  return xla_flags.xla_flags_with_defaults(
      f'--xla_force_host_platform_device_count={num_devices}')


def run(code: str, num_devices: int = 8, timeout: int = 600, args: tuple[str, ...] = ()) -> str:
  """Runs `code` with `num_devices` CPU devices (`args` its sys.argv[1:]); asserts exit 0;
  returns its stdout."""
  env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=python_path(),
             XLA_FLAGS=device_count_flags(num_devices))
  out = subprocess.run([sys.executable, '-c', code, *args], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout
