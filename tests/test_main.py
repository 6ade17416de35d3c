"""The command line (main.py): bad input is one line on stderr naming the flag, field, file or path
and what was expected, with exit status 2, found before any data is made or anything compiled;
`-v 1` or FEDJAX_FACE_TRACEBACK=1 shows the traceback too (issue 32). Each case runs the command
in its own process, forked from one that has imported its dependencies (tests/forked_commands.py:
the module run as __main__, its own exit status and stderr); a usage error and a traceback also
come from `python -m fedjax_face.main` in a new interpreter, what a user runs."""

import os
import re
import subprocess
import sys

import pytest

import fedjax_face
from fedjax_face.core import xla_flags
from tests import config_files, forked_commands

ROOT = config_files.ROOT
CONFIG = 'configs/fedgc/fedgc.py:runlocal'
PROG = os.path.join(os.path.dirname(fedjax_face.__file__), 'main.py')   # argv[0] of `python -m`
TRACEBACK_ENV = 'FEDJAX_FACE_TRACEBACK'
RUNLOCAL = config_files.load_config('fedgc/fedgc')   # the values the messages quote


def command_env(env_update: dict | None) -> dict:
  """This process's environment less the switches under test, plus `env_update`."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('XLA_FLAGS', xla_flags.OPT_OUT_ENV, TRACEBACK_ENV)}
  return {**env, **(env_update or {})}


def run_main(*args: str, env_update: dict | None = None) -> subprocess.CompletedProcess:
  """`python -m fedjax_face.main *args` in a forked child (tests/forked_commands.py)."""
  return forked_commands.run_module('fedjax_face.main', *args, env=command_env(env_update))


def run_real_main(*args: str, env_update: dict | None = None) -> subprocess.CompletedProcess:
  """`python -m fedjax_face.main *args` in a new interpreter."""
  return subprocess.run([sys.executable, '-m', 'fedjax_face.main', *args], cwd=ROOT,
                        env=command_env(env_update), capture_output=True, text=True, timeout=120)


def error_line(out: subprocess.CompletedProcess) -> str:
  """The one non-empty line of stderr, less the program name; fails unless there is exactly one
  and the exit status is 2."""
  lines = [line for line in out.stderr.splitlines() if line.strip()]
  assert out.returncode == 2, out.stderr
  assert len(lines) == 1, out.stderr
  assert lines[0].startswith(f'{PROG}: '), lines[0]
  return lines[0][len(PROG) + 2:]


# (arguments after --workdir=<tmp>/run, the exact line expected after the program's name).
USAGE_ERRORS = {
    'wrong_type_int': (
        [f'--config={CONFIG}', '--config.federated.num_clients=abc'],
        f'--config.federated.num_clients=abc: expected an integer (config.federated.num_clients '
        f'is {RUNLOCAL.federated.num_clients} in {CONFIG}).'),
    'wrong_type_float_for_int': (
        [f'--config={CONFIG}', '--config.num_rounds=2.5'],
        f'--config.num_rounds=2.5: expected an integer (config.num_rounds is '
        f'{RUNLOCAL.num_rounds} in {CONFIG}).'),
    'wrong_type_bool': (
        [f'--config={CONFIG}', '--config.dp.enabled=maybe'],
        f'--config.dp.enabled=maybe: expected true or false (config.dp.enabled is '
        f'{RUNLOCAL.dp.enabled} in {CONFIG}).'),
    'wrong_type_space_separated': (
        ['--config', CONFIG, '--config.num_rounds', '2.5'],
        f'--config.num_rounds=2.5: expected an integer (config.num_rounds is '
        f'{RUNLOCAL.num_rounds} in {CONFIG}).'),
    'unknown_config_argument': (
        ['--config=configs/fedgc/fedgc.py:nonsense'],
        "--config=configs/fedgc/fedgc.py:nonsense: config argument 'nonsense' is unknown; "
        "expected one of ['lookalikes', 'loss', 'partition', 'runlocal']."),
    'missing_config_file': (
        ['--config=configs/fedgc/fedgcc.py:runlocal'],
        f'--config=configs/fedgc/fedgcc.py:runlocal: no file configs/fedgc/fedgcc.py (relative '
        f"to {ROOT}); expected a config file, e.g. configs/fedgc/fedgc.py. Did you mean "
        "'configs/fedgc/fedgc.py'?"),
    'negative_count': (   # refused by experiment.validate
        [f'--config={CONFIG}', '--config.num_rounds=-3'],
        'config.num_rounds=-3; expected a positive integer.'),
    'process_setting': (
        [f'--config={CONFIG}', '--process_id=-1'],
        '--process_id=-1; expected an integer >= 0.'),
    'unknown_field': (   # main.unknown_override's message, kept
        [f'--config={CONFIG}', '--config.federated.num_clientz=3'],
        "--config.federated.num_clientz: config.federated has no field 'num_clientz'. Did you "
        f"mean 'num_clients'? Its fields: {', '.join(sorted(RUNLOCAL.federated.keys()))}."),
    'cpu_convolution_library': (   # refused before JAX starts (main.start)
        [f'--config={CONFIG}', '--config.engine.cpu_convolutions=mkl'],
        "config.engine.cpu_convolutions='mkl'; expected one of ('auto', 'ynnpack', 'eigen')."),
    'positional_argument': (
        [f'--config={CONFIG}', 'extra'],
        "unexpected arguments ['extra']; expected only flags, e.g. "
        '--config=configs/fedgc/fedgc.py --workdir=/tmp/fedgc.'),
}


@pytest.mark.parametrize('case', sorted(USAGE_ERRORS))
def test_a_usage_error_is_one_line_and_exit_2(tmp_path, case):
  args, expected = USAGE_ERRORS[case]
  out = run_main(f'--workdir={tmp_path}/run', *args)
  assert error_line(out) == expected
  assert not (tmp_path / 'run').exists()   # refused before the workdir is made


def test_a_misspelled_flag_is_named_with_the_closest():
  out = run_main(f'--config={CONFIG}', '--workdirr=/tmp/x')
  assert error_line(out) == ('--workdirr: no such flag. Did you mean --workdir? --help lists the '
                             'flags.')


def test_missing_required_flags_say_what_they_expect():
  expected_workdir = ("the run's directory, e.g. --workdir=/tmp/fedgc (a local path or a URI "
                      'such as gs://bucket/run)')
  assert error_line(run_main(f'--config={CONFIG}')) == (
      f'--workdir is required; expected {expected_workdir}.')
  assert error_line(run_main()) == (
      '--config and --workdir are required; expected a config file, e.g. '
      f'--config=configs/fedgc/fedgc.py:runlocal; and {expected_workdir}.')


def test_a_workdir_that_is_a_file_is_one_line(tmp_path):
  path = tmp_path / 'run'
  path.write_text('not a directory')
  out = run_main(f'--config={CONFIG}', f'--workdir={path}')
  assert error_line(out) == (f'--workdir={path} exists and is not a directory; expected a '
                             'directory (it is created when missing).')
  assert path.read_text() == 'not a directory'


def test_a_workdir_under_a_file_names_the_file(tmp_path):
  (tmp_path / 'file').write_text('')
  out = run_main(f'--config={CONFIG}', f'--workdir={tmp_path}/file/run')
  assert error_line(out) == (f'--workdir={tmp_path}/file/run cannot be created: {tmp_path}/file '
                             'is not a directory; expected a directory that exists or can be made.')


def test_an_init_from_run_that_is_not_there_is_one_line(tmp_path):
  out = run_main(f'--config={CONFIG}', f'--workdir={tmp_path}/run',
                 f'--config.init_from={tmp_path}/pretrained')
  assert re.fullmatch(rf"config\.init_from='{re.escape(str(tmp_path))}/pretrained' has no "
                      r'\w+; expected the --workdir of a finished run\.', error_line(out))
  assert not (tmp_path / 'run').exists()


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='needs Linux /proc')
def test_an_unwritable_workdir_names_the_directory_that_refuses_it():
  # mkdir /proc/x fails with ENOENT although /proc exists: the line must not say only that.
  line = error_line(run_main(f'--config={CONFIG}', '--workdir=/proc/x'))
  assert re.fullmatch(r'--workdir=/proc/x cannot be created: /proc takes no new directory'
                      r'( \([^)]+\))?; expected a directory that exists or can be made\.', line)
  assert 'No such file or directory' not in line


@pytest.mark.parametrize('case, switch', [
    ('wrong_type_int', {TRACEBACK_ENV: '1'}), ('missing_config_file', {TRACEBACK_ENV: '1'}),
    ('negative_count', {TRACEBACK_ENV: '1'}), ('wrong_type_int', ['-v', '1']),
    ('negative_count', ['--verbosity=1']),
])
def test_the_traceback_is_shown_on_request_with_the_line_last(tmp_path, case, switch):
  args, expected = USAGE_ERRORS[case]
  flags_on = switch if isinstance(switch, list) else []
  env_on = switch if isinstance(switch, dict) else {}
  assert_traceback_then_line(run_main(f'--workdir={tmp_path}/run', *args, *flags_on,
                                      env_update=env_on), expected)


def assert_traceback_then_line(out: subprocess.CompletedProcess, expected: str) -> None:
  assert out.returncode == 2
  assert 'Traceback (most recent call last)' in out.stderr
  assert out.stderr.rstrip().splitlines()[-1] == f'{PROG}: {expected}'


# What a user sees: the real command in a new interpreter, for one usage error and one traceback.

def test_the_command_a_user_runs_says_one_line(tmp_path):
  args, expected = USAGE_ERRORS['wrong_type_int']
  assert error_line(run_real_main(f'--workdir={tmp_path}/run', *args)) == expected
  assert not (tmp_path / 'run').exists()


def test_the_command_a_user_runs_shows_the_traceback_on_request(tmp_path):
  args, expected = USAGE_ERRORS['negative_count']
  assert_traceback_then_line(run_real_main(f'--workdir={tmp_path}/run', *args,
                                           env_update={TRACEBACK_ENV: '1'}), expected)


def test_the_traceback_switch_at_0_is_off(tmp_path):
  args, expected = USAGE_ERRORS['negative_count']
  out = run_main(f'--workdir={tmp_path}/run', *args, env_update={TRACEBACK_ENV: '0'})
  assert error_line(out) == expected
