"""`fedjax_face.main` (or `fedjax_face.evaluate`) run in the test's own process, as its command
line would run it: the flags parsed, the traceback switches off, and what main changes for its
process (the absl log level and filters, the unraisable hook, the flags) put back afterwards."""

import logging as pylogging
import sys
import warnings

from absl import flags, logging
from absl.testing import flagsaver

from fedjax_face import main as fedjax_main
from tests import config_files

PROG = fedjax_main.__file__   # argv[0], the name the one line starts with


def run(monkeypatch, capsys, *args: str, action=None) -> tuple[int, list[str]]:
  """(exit status, the non-empty lines of stderr) of `main.main` with `args` after argv[0];
  `action`: `fedjax_face.evaluate.evaluate_model` for the evaluate command."""
  argv = [PROG, *args]
  monkeypatch.setattr(sys, 'argv', argv)   # main reads `-v` from it
  monkeypatch.delenv(fedjax_main.TRACEBACK_ENV, raising=False)
  monkeypatch.chdir(config_files.ROOT)
  monkeypatch.setattr(sys, 'unraisablehook', sys.unraisablehook)
  verbosity, absl_filters = logging.get_verbosity(), list(pylogging.getLogger('absl').filters)
  capsys.readouterr()
  code = 0
  try:
    with flagsaver.flagsaver(), warnings.catch_warnings():
      # ml_collections loads the config file with importlib's load_module, which Python 3.11
      # flags as deprecated; the command line shows no warnings, so neither does this.
      warnings.filterwarnings('ignore', 'the load_module', DeprecationWarning)
      try:
        fedjax_main.main(fedjax_main.parse_flags(argv), action=action)
      except SystemExit as stopped:
        code = stopped.code
      finally:
        flags.FLAGS.unparse_flags()
  finally:
    logging.set_verbosity(verbosity)
    pylogging.getLogger('absl').filters[:] = absl_filters
  return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]
