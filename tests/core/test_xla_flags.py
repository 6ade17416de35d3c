"""The XLA CPU compiler defaults (core/xla_flags.py): set by the entry points, never on import."""

import os
import subprocess
import sys

import pytest

from fedjax_face.core import xla_flags
from tests import config_files

ROOT = config_files.ROOT
# Every `python -m` entry point that runs JAX programs.
ENTRY_POINTS = ('fedjax_face.main', 'fedjax_face.tools.bench', 'fedjax_face.tools.bench.pipeline',
                'fedjax_face.tools.bench.pad_pipeline', 'fedjax_face.tools.bench.regularizer',
                'fedjax_face.proj.fedgc.visualize')


DEFAULTS = xla_flags.XLA_CPU_DEFAULTS


def test_defaults_are_appended_to_other_flags():
  out = xla_flags.xla_flags_with_defaults('--xla_force_host_platform_device_count=8', DEFAULTS)
  assert out.split() == ['--xla_force_host_platform_device_count=8', *DEFAULTS]


def test_a_flag_the_user_set_is_kept():
  user = '--xla_cpu_use_fusion_emitters=true'
  out = xla_flags.xla_flags_with_defaults(user, DEFAULTS)
  assert out.split() == [user, '--xla_cpu_enable_concurrency_optimized_scheduler=false']


def test_empty_flags_get_exactly_the_defaults():
  assert xla_flags.xla_flags_with_defaults('  ', DEFAULTS).split() == list(DEFAULTS)


@pytest.mark.parametrize('version, expected', [
    ('0.10.2', DEFAULTS), ('0.10.0', DEFAULTS),
    # jaxlib 0.11.2 aborts at start on --xla_cpu_use_fusion_emitters (seen on a lent GPU machine).
    ('0.11.2', ()), ('0.9.2', ()), ('0.100.1', ())])
def test_defaults_only_under_the_measured_jaxlib_series(version, expected):
  assert xla_flags.cpu_defaults(version) == expected
  flags = '--xla_force_host_platform_device_count=2'
  assert xla_flags.xla_flags_with_defaults(flags, xla_flags.cpu_defaults(version)).split() == [
      flags, *expected]


def test_apply_honours_the_opt_out():
  environ = {xla_flags.OPT_OUT_ENV: '0', 'XLA_FLAGS': '--a=1'}
  xla_flags.apply_cpu_defaults(environ)
  assert environ['XLA_FLAGS'] == '--a=1'
  environ = {}
  xla_flags.apply_cpu_defaults(environ)
  assert environ['XLA_FLAGS'].split() == list(xla_flags.cpu_defaults())


def _flags_seen_by(code: str, env_update: dict) -> str:
  env = {k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', xla_flags.OPT_OUT_ENV)}
  env.update(env_update)
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120, check=True)
  return out.stdout.rpartition('XLA_FLAGS=')[2].strip()   # after any --help text


def test_import_leaves_the_environment_alone():
  code = ('import os, fedjax_face, fedjax_face.experiment, jax; jax.devices(); '
          'print("XLA_FLAGS=" + os.environ.get("XLA_FLAGS", ""))')
  assert _flags_seen_by(code, {}) == ''


@pytest.mark.parametrize('module', ENTRY_POINTS)
def test_entry_points_set_the_flags_and_jax_accepts_them(module):
  # The module run as `python -m` with --help (absl exits after the flags are parsed), then
  # jax.devices() starts the CPU backend: an unknown flag would abort it.
  code = ('import os, runpy, sys\n'
          f'sys.argv = ["{module}", "--help"]\n'
          'try:\n'
          f'  runpy.run_module("{module}", run_name="__main__", alter_sys=True)\n'
          'except SystemExit:\n'
          '  pass\n'
          'import jax; jax.devices()\n'
          'print("XLA_FLAGS=" + os.environ.get("XLA_FLAGS", ""))\n')
  assert _flags_seen_by(code, {}).split() == list(xla_flags.cpu_defaults())
  assert _flags_seen_by(code, {xla_flags.OPT_OUT_ENV: '0'}) == ''
