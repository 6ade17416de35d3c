"""`python -m fedjax_face.tools.bench --config=configs/bench.py --out=DIR` (see the package docstring)."""

from absl import app, flags
from ml_collections import config_flags

from fedjax_face.core import xla_flags
from fedjax_face.tools.bench import report, run


def define_flags():
  """--config and --out, defined only when run as a program: other tools define an `out` flag
  too, and absl refuses a flag defined twice in one process (e.g. a test session)."""
  config_flags.DEFINE_config_file('config', None, 'Bench config file (configs/bench.py).',
                                  lock_config=True)
  flags.DEFINE_string('out', None, 'Directory for bench.json and bench.md.')
  flags.mark_flags_as_required(['config', 'out'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  results = run(flags.FLAGS.config, flags.FLAGS.out)
  print(report.markdown(results), flush=True)


if __name__ == '__main__':
  define_flags()
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main)
