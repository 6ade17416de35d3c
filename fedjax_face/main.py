r"""Command line: `python -m fedjax_face.main --config=configs/fedgc.py --workdir=/tmp/fedgc`.

Flags only; everything else is `experiment.train_and_evaluate`. Override any config field with
`--config.<field>=value` (e.g. `--config.fedgc.reg_lambda=1`); unknown fields are rejected.
"""

from absl import app, flags, logging
from ml_collections import config_flags

from fedjax_face import experiment

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Experiment config file (configs/*.py).',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, metrics and reports.')
flags.mark_flags_as_required(['config', 'workdir'])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  if not flags.FLAGS['verbosity'].present:
    # Orbax logs every checkpoint step at INFO; the progress line is the run's log. `-v 0` restores it.
    logging.set_verbosity(logging.WARNING)
  experiment.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == '__main__':
  app.run(main)
