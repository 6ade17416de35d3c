"""The XLA CPU compiler defaults set on import (fedjax_face/__init__.py)."""

import os
import subprocess
import sys

import fedjax_face

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_defaults_are_appended_to_other_flags():
  out = fedjax_face.xla_flags_with_defaults('--xla_force_host_platform_device_count=8')
  assert out.split() == ['--xla_force_host_platform_device_count=8',
                         *fedjax_face.XLA_CPU_DEFAULTS]


def test_a_flag_the_user_set_is_kept():
  user = '--xla_cpu_use_fusion_emitters=true'
  out = fedjax_face.xla_flags_with_defaults(user)
  assert out.split() == [user, '--xla_cpu_enable_concurrency_optimized_scheduler=false']


def test_empty_flags_get_exactly_the_defaults():
  assert fedjax_face.xla_flags_with_defaults('  ').split() == list(fedjax_face.XLA_CPU_DEFAULTS)


def _flags_after_import(env_update: dict) -> str:
  env = {k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', 'FEDJAX_FACE_XLA_DEFAULTS')}
  env.update(env_update)
  code = 'import os, fedjax_face, jax; jax.devices(); print(os.environ.get("XLA_FLAGS", ""))'
  out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120, check=True)
  return out.stdout.strip()


def test_import_sets_the_flags_and_jax_accepts_them():
  # jax.devices() starts the CPU backend: an unknown flag would abort it.
  assert _flags_after_import({}).split() == list(fedjax_face.XLA_CPU_DEFAULTS)


def test_opt_out_leaves_xla_flags_alone():
  assert _flags_after_import({'FEDJAX_FACE_XLA_DEFAULTS': '0'}) == ''
