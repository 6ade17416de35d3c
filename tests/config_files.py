"""The repository root and its config files, for tests at any depth of tests/."""

import glob
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_path(name: str) -> str:
  """configs/<name>.py when it exists (a top-level config such as bench.py or fedgc.py, which
  loads the paper's configs/fedgc/fedgc.py; or a paper's config named with its folder,
  'fedgc/centralized'), else the one configs/<paper>/<name>.py; a name several papers use
  ('centralized') takes its paper."""
  exact = os.path.join(ROOT, 'configs', f'{name}.py')
  if os.path.isfile(exact):
    return exact
  found = sorted(glob.glob(os.path.join(ROOT, 'configs', '**', f'{name}.py'), recursive=True))
  if len(found) != 1:
    raise ValueError(f'config {name!r}: expected one file configs/**/{name}.py, found {found}.')
  return found[0]


def load_config(name: str, arg: str | None = 'runlocal'):
  """`get_config(arg)` of the config file `name` (e.g. 'fedgc', 'bench')."""
  spec = importlib.util.spec_from_file_location(f'configs_{name.replace("/", "_")}', config_path(name))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def run_config(run):
  """The config a table's `Run` trains with: its file and argument, then its field overrides
  (dotted paths, each value parsed as the field's type)."""
  config = load_config(run.config, run.arg or None)
  for field, value in run.overrides:
    set_field(config, field, value, parse=True)
  return config


def set_field(config, field: str, value, parse: bool = False) -> None:
  """Sets the dotted `field` ('head.sample_rate') of `config` to `value` (parsed as the field's
  type when `parse`, as a command line's override is)."""
  *path, key = field.split('.')
  section = config
  for part in path:
    section = section[part]
  section[key] = type(section[key])(value) if parse else value
