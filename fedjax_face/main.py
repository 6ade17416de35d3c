r"""Command line: `python -m fedjax_face.main --config=configs/fedgc/fedgc.py --workdir=/tmp/fedgc`.

Flags only; everything else is `experiment.train_and_evaluate`. Override any config field with
`--config.<field>=value` (e.g. `--config.fedgc.reg_lambda=1`); unknown fields are rejected.

Several processes (one per host, or one per GPU): every process runs the same command. JAX's
distributed runtime starts when `--config.engine.distributed` is 'on', or 'auto' (the default)
with FEDJAX_FACE_DISTRIBUTED=on, a coordinator address or more than one process named. Under
SLURM, Open MPI and on Cloud TPU VMs JAX finds the processes itself (launch/slurm_gpu.sh,
launch/tpu_pod.sh); elsewhere name them, e.g. on one machine:

  python -m fedjax_face.main --config=configs/fedgc/fedgc.py:runlocal --workdir=/tmp/run \
      --coordinator_address=127.0.0.1:12345 --num_processes=2 --process_id=0 &
  python -m fedjax_face.main --config=configs/fedgc/fedgc.py:runlocal --workdir=/tmp/run \
      --coordinator_address=127.0.0.1:12345 --num_processes=2 --process_id=1

Exit status: 0 when the run finished. 2 when the command line cannot work as written, said in one
line on stderr naming the flag, config field, file (and line) or path and what was expected: an
unknown or missing flag, a value of the wrong type, a config file that is missing or refuses its
argument, a config value `experiment.validate` refuses (or an `init_from` run that is not there,
unfinished without `init_from_step`, or whose checkpoint fails its digests), a process setting, a
`--workdir` that is empty, a file, cannot be made, is in use by another run or cannot be resumed
as asked (`io/checkpoint.py:check_opening`), and any error of the project's readers
(`core/checks.UsageError`: a malformed list, record file, meta file or backbone). All are found
before the first file is written. `-v 1` or FEDJAX_FACE_TRACEBACK=1 prints the traceback before
the line. A failed checkpoint save (a full disk) ends the run at once with one line naming the
checkpoint and the cause, status 1. 75 (EX_TEMPFAIL) when SIGTERM or SIGINT stopped the run: the
round in flight finishes, its state is saved, and one line on stderr says which round (rerun the
same command to resume; during the final evaluation the run stops at once, its last checkpoint
saved, and results.json is whole or absent). Anything else that fails later (a diverged run) ends
with its traceback, message last, and status 1.
"""

import difflib
import logging as pylogging
import importlib.machinery
import importlib.util
import os
import re
import sys
import traceback

from absl import app, flags, logging
from ml_collections import config_flags

from fedjax_face import experiment
from fedjax_face.run import resume
from fedjax_face.run.hooks import preemption
from fedjax_face.core import checks, distributed, policy, xla_flags
from fedjax_face.io import checkpoint, usage

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file (configs/*.py).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and reports '
                                '(a local path or a URI such as gs://bucket/run).')
_COORDINATOR = flags.DEFINE_string(
    'coordinator_address', None, 'HOST:PORT of process 0 for jax.distributed (default: '
    'JAX_COORDINATOR_ADDRESS, or found by JAX under SLURM / Open MPI / Cloud TPU).')
_NUM_PROCESSES = flags.DEFINE_integer(
    'num_processes', None, 'Processes of a multi-process run (default: JAX_NUM_PROCESSES).')
_PROCESS_ID = flags.DEFINE_integer('process_id', None,
                                   'This process, 0..num_processes-1 (default: JAX_PROCESS_ID).')
flags.mark_flags_as_required(['config', 'workdir'])

USAGE_EXIT = usage.USAGE_EXIT           # the command line cannot work as written
PREEMPTED_EXIT = 75                     # stopped by SIGTERM / SIGINT, state saved (EX_TEMPFAIL)
TRACEBACK_ENV = 'FEDJAX_FACE_TRACEBACK'  # '1': usage errors print their traceback too
_REQUIRED = {  # what a missing required flag expects
    'config': 'a config file, e.g. --config=configs/fedgc/fedgc.py:runlocal',
    'workdir': "the run's directory, e.g. --workdir=/tmp/fedgc (a local path or a URI such as "
               'gs://bucket/run)',
}
_EXPECTED = {bool: 'true or false', int: 'an integer', float: 'a number', str: 'a string',
             tuple: 'a tuple, e.g. (1, 2)', list: 'a list, e.g. [1, 2]'}


def verbosity(argv: list[str]) -> int:
  """The last `-v` / `--verbosity` level of `argv` in any of absl's spellings (0 when none), read
  by hand: it is wanted when absl's own parsing has failed."""
  level = 0
  for i, item in enumerate(argv[1:], start=1):
    if item == '--':
      break
    name, equals, value = item.partition('=')
    if name in ('-v', '--v', '-verbosity', '--verbosity'):
      value = value if equals else (argv[i + 1] if i + 1 < len(argv) else '')
      level = int(value) if re.fullmatch(r'-?\d+', value) else level
  return level


def wants_traceback(argv: list[str], environ=None) -> bool:
  """True with FEDJAX_FACE_TRACEBACK set (other than 0) or `-v 1` and above."""
  environ = os.environ if environ is None else environ
  return environ.get(TRACEBACK_ENV, '').strip() not in ('', '0') or verbosity(argv) >= 1


def exit_usage(message: str, error: BaseException | None = None, argv: list[str] | None = None):
  """Ends the process with exit status 2 and `message` as one line on stderr, after the
  traceback of `error` when it is wanted (`wants_traceback` of `argv`, default sys.argv)."""
  argv = sys.argv if argv is None else argv
  if error is not None and wants_traceback(argv):
    traceback.print_exception(error)
  usage.print_refusal(message, argv[0])
  sys.exit(USAGE_EXIT)


def config_spec(argv: list[str]) -> str | None:
  """The `--config` value of `argv` ('path[:argument]'), or None."""
  spec = None
  for i, item in enumerate(argv[1:], start=1):
    if item.startswith('--config='):
      spec = item.split('=', 1)[1]
    elif item == '--config' and i + 1 < len(argv):
      spec = argv[i + 1]
  return spec


def load_config_file(spec: str):
  """`get_config(argument)` of the config file `spec` names, loaded as config_flags loads it."""
  path, _, arg = spec.partition(':')
  loader = importlib.machinery.SourceFileLoader('fedjax_face_config', path)
  module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
  loader.exec_module(module)
  return module.get_config(arg or None)


def missing_config_file(spec: str, error: OSError) -> str:
  """One line for a config file that cannot be read, with the closest file beside it."""
  path = spec.partition(':')[0]
  if os.path.exists(path):
    return (f'--config={spec}: cannot read {path} ({error.strerror or error}); expected a config '
            'file (configs/*.py).')
  folder = os.path.dirname(path) or '.'
  beside = ([os.path.join(os.path.dirname(path), name) for name in sorted(os.listdir(folder))
             if name.endswith('.py')] if os.path.isdir(folder) else [])
  close = difflib.get_close_matches(path, beside, n=1, cutoff=0.8)
  hint = f" Did you mean '{close[0]}'?" if close else ''
  return (f'--config={spec}: no file {path} (relative to {os.getcwd()}); expected a config file, '
          f'e.g. configs/fedgc/fedgc.py.{hint}')


def check_config_file(argv: list[str]) -> None:
  """Exits with one line when the `--config` file is missing or its `get_config` refuses the
  argument (config_flags would defer the first and bury the second in a chained traceback)."""
  spec = config_spec(argv)
  if spec is None:
    return
  try:
    load_config_file(spec)
  except OSError as error:
    exit_usage(missing_config_file(spec, error), error, argv)
  except ValueError as error:
    exit_usage(f'--config={spec}: {error}', error, argv)


def unknown_override(argv: list[str]) -> str | None:
  """The first `--config.<path>=...` of `argv` that names no field of the `--config` file's
  config, as one line with the closest names and the section's fields; None if all exist (or the
  config file cannot be read: absl's own error then stands)."""
  spec = config_spec(argv)
  if spec is None:
    return None
  try:
    config = load_config_file(spec)
  except Exception:   # pylint: disable=broad-except
    return None
  for item in argv:
    if not item.startswith('--config.'):
      continue
    names = item[len('--config.'):].split('=', 1)[0].split('.')
    section, where = config, 'config'
    for name in names:
      if not hasattr(section, 'keys') or name not in section:
        fields = sorted(section.keys()) if hasattr(section, 'keys') else []
        close = difflib.get_close_matches(name, fields, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ''
        return (f'--config.{".".join(names)}: {where} has no field {name!r}.{hint} Its fields: '
                f'{", ".join(fields)}.')
      section, where = section[name], f'{where}.{name}'
  return None


def wrong_type(argv: list[str], field: str, value: str) -> str | None:
  """One line for `--config.<field>=value` of the wrong type: the type expected and the field's
  value in the config file; None when the field's type is not one of `_EXPECTED`."""
  spec = config_spec(argv)
  try:
    section = load_config_file(spec)
    *parents, name = field.split('.')
    for parent in parents:
      section = section[parent]
    expected = _EXPECTED.get(section.get_type(name))
  except Exception:   # pylint: disable=broad-except
    return None
  if expected is None:
    return None
  return (f'--config.{field}={value}: expected {expected} (config.{field} is '
          f'{section[name]!r} in {spec}).')


def flag_error(argv: list[str], error: Exception) -> str:
  """One line for an error of absl's flag parsing: an unknown flag, missing required flags, a
  config override of the wrong type; else the last line of absl's own message."""
  text = str(error)
  if isinstance(error, flags.UnrecognizedFlagError):
    close = difflib.get_close_matches(error.flagname, list(flags.FLAGS), n=1)
    hint = f' Did you mean --{close[0]}?' if close else ''
    return f'--{error.flagname}: no such flag.{hint} --help lists the flags.'
  missing = re.findall(r'Flag --(\S+) must have a value other than None', text)
  if missing:
    verb = 'is' if len(missing) == 1 else 'are'
    return (f'{" and ".join(f"--{name}" for name in missing)} {verb} required; expected '
            f'{"; and ".join(_REQUIRED.get(name, "a value") for name in missing)}.')
  override = re.match(r'flag --config\.([\w.]+)=(.*?): ', text)
  message = override and wrong_type(argv, *override.groups())
  return message or ([line for line in text.splitlines() if line.strip()] or [repr(error)])[-1]


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; every error in it is one line and exit status 2, not a traceback."""
  check_config_file(argv)
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError, flags.Error) as error:
    exit_usage(unknown_override(argv) or flag_error(argv, error), error, argv)


def start(config, workdir: str = '', training: bool = False) -> None:
  """JAX's distributed runtime (first: before anything touches a device), XLA CPU's convolution
  library (`engine.cpu_convolutions`, also before JAX starts its backend), then every check of
  the config (`train_and_evaluate` checks again, for runs started from Python; a run resuming its
  own checkpoints does not read `init_from`). A ValueError from either, or a FileNotFoundError
  (an `init_from` run that is not there), is a usage error, found before data is made or
  anything compiled."""
  try:
    distributed.initialize_distributed(config.engine.distributed,
                                       coordinator_address=_COORDINATOR.value,
                                       num_processes=_NUM_PROCESSES.value,
                                       process_id=_PROCESS_ID.value)
    convolutions = policy.cpu_convolutions_for(config)
    if not xla_flags.apply_cpu_convolutions(convolutions):
      logging.warning('XLA CPU convolutions stay on %s: JAX started before %s could be chosen '
                      '(engine.cpu_convolutions)', xla_flags.cpu_convolutions_in_effect(),
                      convolutions)
    experiment.validate(config, resuming=training and resume.resuming(workdir),
                        training=training)
  except (ValueError, FileNotFoundError) as error:
    exit_usage(str(error), error)


def main(argv, action=None):
  """Runs `action(config, workdir)`: `experiment.train_and_evaluate` (this module), or
  `experiment.evaluate_model` (`python -m fedjax_face.evaluate`)."""
  if len(argv) > 1:
    exit_usage(f'unexpected arguments {argv[1:]}; expected only flags, e.g. '
               '--config=configs/fedgc/fedgc.py --workdir=/tmp/fedgc.')
  if not flags.FLAGS['verbosity'].present:
    # Orbax logs every checkpoint step at INFO; the progress line is the run's log. `-v 0` restores it.
    logging.set_verbosity(logging.WARNING)
    pylogging.getLogger('absl').addFilter(_QuietOrbaxErrors())
    sys.unraisablehook = _without_closed_event_loops(sys.unraisablehook)
  start(_CONFIG.value, _WORKDIR.value, training=action is None)
  try:
    (action or experiment.train_and_evaluate)(_CONFIG.value, _WORKDIR.value)
  except checks.UsageError as error:   # a file, line, field or workdir the user can fix
    exit_usage(str(error), error)
  except preemption.Preempted as error:
    exit_now(str(error), PREEMPTED_EXIT, error)
  except checkpoint.SaveError as error:
    exit_now(str(error), 1, error)


def exit_now(line: str, status: int, error: BaseException) -> None:
  """Ends the process with `line` alone on stderr (the traceback first when wanted) and
  `status`, without the interpreter's shutdown: orbax's background threads, meeting a finalizing
  interpreter after a failed save, would print their own tracebacks after the line."""
  if wants_traceback(sys.argv):
    traceback.print_exception(error)
  sys.stdout.flush()
  logging.flush()
  sys.stderr.flush()
  # Threads still printing go to /dev/null from here, so the line is the last thing on stderr.
  stderr = os.dup(2)
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 2)
  os.write(stderr, f'{line}\n'.encode())
  os._exit(status)   # pylint: disable=protected-access


class _QuietOrbaxErrors(pylogging.Filter):
  """Drops orbax's ERROR records (a failed background save logged with each thread's
  traceback): the run stops on the failure with one line naming the checkpoint and the cause
  (`checkpoint.SaveError`). `-v 0` or above keeps them."""

  def filter(self, record):
    return not (record.levelno >= pylogging.ERROR and '/orbax/' in record.pathname)


def _without_closed_event_loops(unraisablehook):
  """`unraisablehook` less asyncio's 'Event loop is closed': after a failed background save,
  tensorstore's threads still call back into the event loop orbax has closed and report each
  failure as unraisable, one traceback a thread, before the run's own line
  (`checkpoint.SaveError`). `-v 0` or above keeps them."""
  def hook(unraisable):
    value = unraisable.exc_value
    if not (isinstance(value, RuntimeError) and str(value) == 'Event loop is closed'):
      unraisablehook(unraisable)
  return hook


if __name__ == '__main__':
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main, flags_parser=parse_flags)
