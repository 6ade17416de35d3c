"""Runs a Python snippet in a subprocess that sees N forced XLA CPU devices.

The device count is fixed when jax first initialises, so multi-device tests run in a fresh process.
"""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code: str, num_devices: int = 8, timeout: int = 600) -> str:
  """Runs `code` with `num_devices` CPU devices; asserts exit 0; returns its stdout."""
  env = dict(os.environ, XLA_FLAGS=f'--xla_force_host_platform_device_count={num_devices}',
             JAX_PLATFORMS='cpu', PYTHONPATH=ROOT)
  out = subprocess.run([sys.executable, '-c', code], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=timeout)
  assert out.returncode == 0, out.stderr[-3000:]
  return out.stdout
