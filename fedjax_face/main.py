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
"""

import difflib
import importlib.util
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from fedjax_face import experiment
from fedjax_face.core import distributed, xla_flags

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


def unknown_override(argv: list[str]) -> str | None:
  """The first `--config.<path>=...` of `argv` that names no field of the `--config` file's
  config, as one line with the closest names and the section's fields; None if all exist (or the
  config file cannot be read: absl's own error then stands)."""
  spec = next((a.split('=', 1)[1] for a in argv if a.startswith('--config=')), None)
  if spec is None:
    return None
  path, _, arg = spec.partition(':')
  try:
    module_spec = importlib.util.spec_from_file_location('fedjax_face_config', path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    config = module.get_config(arg or None)
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


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; an override naming no config field is one line, not a traceback."""
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError, flags.Error):
    message = unknown_override(argv)
    if message is None:
      raise
    print(f'{argv[0]}: {message}', file=sys.stderr)
    sys.exit(2)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not flags.FLAGS['verbosity'].present:
    # Orbax logs every checkpoint step at INFO; the progress line is the run's log. `-v 0` restores it.
    logging.set_verbosity(logging.WARNING)
  # Before anything touches a device: jax.distributed must start first.
  distributed.initialize_distributed(_CONFIG.value.engine.distributed,
                                     coordinator_address=_COORDINATOR.value,
                                     num_processes=_NUM_PROCESSES.value,
                                     process_id=_PROCESS_ID.value)
  experiment.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == '__main__':
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main, flags_parser=parse_flags)
