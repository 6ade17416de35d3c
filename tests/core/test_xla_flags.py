"""The XLA CPU compiler defaults (core/xla_flags.py): set by the entry points, never on import.
What an entry point does runs in a child forked from one that has imported jax without starting
a backend (tests/forked_commands.py): each child's backend reads its own XLA_FLAGS when it
starts, as a new interpreter's does (a test below shows it). What importing does is seen in a new
interpreter: the forking process has imported everything already."""

import os
import subprocess
import sys

import pytest

from fedjax_face.core import xla_flags
from tests import config_files, forked_commands

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


def _run_code(code: str, env_update: dict, new_interpreter: bool = False):
  """`python -c code` without this process's XLA flags or opt-out: in a forked child, or in a new
  interpreter."""
  env = {k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', xla_flags.OPT_OUT_ENV)}
  env.update(env_update)
  if new_interpreter:
    return subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
  return forked_commands.run_code(code, env=env)


def _flags_seen_by(code: str, env_update: dict, new_interpreter: bool = False) -> str:
  out = _run_code(code, env_update, new_interpreter)
  assert out.returncode == 0, out.stderr
  return out.stdout.rpartition('XLA_FLAGS=')[2].strip()   # after any --help text


def test_a_child_s_backend_reads_its_own_xla_flags_when_it_starts():
  # Else every check below would pass on the flags the forking process had read already.
  out = _run_code('import jax; jax.devices()', {'XLA_FLAGS': '--xla_no_such_flag=1'})
  assert out.returncode != 0
  assert 'Unknown flag in XLA_FLAGS: --xla_no_such_flag=1' in out.stderr, out.stderr


def test_import_leaves_the_environment_alone():
  code = ('import os, fedjax_face, fedjax_face.experiment, jax; jax.devices(); '
          'print("XLA_FLAGS=" + os.environ.get("XLA_FLAGS", ""))')
  assert _flags_seen_by(code, {}, new_interpreter=True) == ''


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


def test_eigen_convolutions_are_one_flag_under_the_measured_series_only():
  assert xla_flags.convolution_flags('eigen', '0.10.2') == (
      '--xla_cpu_experimental_ynn_fusion_type=-individual_convolution',)
  assert xla_flags.convolution_flags('ynnpack', '0.10.2') == ()   # XLA's own default
  assert xla_flags.convolution_flags('eigen', '0.11.2') == ()
  with pytest.raises(ValueError, match="'mkl' is not one of \\('ynnpack', 'eigen'\\)"):
    xla_flags.convolution_flags('mkl', '0.10.2')


def test_the_convolution_library_applies_before_the_backend_starts_and_never_after():
  eigen = xla_flags.convolution_flags('eigen')
  environ = {'XLA_FLAGS': '--a=1'}
  assert xla_flags.apply_cpu_convolutions('eigen', environ, backend_started=False)
  assert environ['XLA_FLAGS'].split() == ['--a=1', *eigen]
  assert xla_flags.cpu_convolutions_in_effect(environ['XLA_FLAGS']) == (
      'eigen' if eigen else 'ynnpack')
  # Started already: nothing changes, and the answer says whether what runs is what was asked.
  environ = {'XLA_FLAGS': '--a=1'}
  assert xla_flags.apply_cpu_convolutions('eigen', environ, backend_started=True) is not bool(eigen)
  assert environ == {'XLA_FLAGS': '--a=1'}
  # The user's own setting of the flag, and the opt-out, are kept as they are.
  for environ in ({'XLA_FLAGS': '--xla_cpu_experimental_ynn_fusion_type=dot'},
                  {'XLA_FLAGS': '', xla_flags.OPT_OUT_ENV: '0'}):
    before = dict(environ)
    assert xla_flags.apply_cpu_convolutions('eigen', environ, backend_started=False)
    assert environ == before


def test_main_runs_an_iresnet_on_eigen_convolutions():
  """`main.start` chooses the library before JAX starts: read back once the backend runs."""
  code = ('import sys\n'
          'from absl import flags\n'
          'from fedjax_face import config_lib, main\n'
          'from fedjax_face.core import xla_flags\n'
          'flags.FLAGS.mark_as_parsed()\n'
          'config = config_lib.base_config()\n'
          'config.model.name = sys.argv[1]\n'
          'try:\n'
          '  main.start(config)\n'
          'except SystemExit:\n'   # the base config names no method: refused after the choice
          '  pass\n'
          'import jax; jax.devices()\n'
          'print("XLA_FLAGS=" + xla_flags.cpu_convolutions_in_effect())\n')
  eigen = 'eigen' if xla_flags.convolution_flags('eigen') else 'ynnpack'
  for model, library in (('iresnet50', eigen), ('small_cnn', 'ynnpack')):
    assert _flags_seen_by(code.replace('sys.argv[1]', repr(model)), {}) == library
