r"""Any recognition config with the external sets' evaluator sections added: RFW (`evals.rfw`,
accuracy per race and its spread) and TinyFace (`evals.tinyface`, rank-k), both off until their
`root` is given. Their sections are not in every config (`eval.TASK_EVALUATORS`), so that no
existing config or archived run changes; this file adds them to the config its argument names:

    python -m fedjax_face.evaluate --config=configs/with_sets.py:configs/fedgc.py \
        --workdir=/tmp/eval_r50 --name=r50_sets \
        --config.init_from=/models/ms1mv3_arcface_r50/backbone.pth \
        --config.model.name=iresnet50 --config.data.image_size=112 \
        --config.evals.rfw.root=/data/RFW/test \
        --config.evals.rfw.images=/data/RFW/test_aligned/data \
        --config.evals.tinyface.root=/data/tinyface/aligned_112

The argument: `<config file>[:<its argument>]` (a path as `--config` takes it, or one under
configs/), e.g. `configs/fedfr/fedfr.py:runlocal`; without a file it is the argument of
configs/fedgc.py (`configs/with_sets.py:runlocal`). Training with it evaluates on the sets after
training as well.
"""

import importlib.util
import os

from fedjax_face import eval as eval_lib
from fedjax_face.data import sources

_CONFIGS = os.path.dirname(os.path.abspath(__file__))
SECTIONS = ('rfw', 'tinyface')


def _load(path: str, arg: str | None):
  spec = importlib.util.spec_from_file_location('configs_with_sets_base', path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def _config_file(path: str) -> str:
  """`path` as given, else under configs/ (with or without its leading 'configs/')."""
  if os.path.isfile(path):
    return path
  inside = path.removeprefix('configs' + os.sep)
  return os.path.join(_CONFIGS, inside)


def get_config(arg=None):
  path, base_arg = os.path.join(_CONFIGS, 'fedgc.py'), arg
  if arg and arg.partition(':')[0].endswith('.py'):
    given, _, rest = arg.partition(':')
    path, base_arg = _config_file(given), rest or None
    if not os.path.isfile(path):
      raise ValueError(f'configs/with_sets.py:{arg}: no config file {given}; expected '
                       '<config file>[:<its argument>], e.g. configs/fedgc.py:runlocal')
  config = _load(path, base_arg)
  if sources.task_of(config) != 'recognition':
    raise ValueError(f'configs/with_sets.py:{arg}: the config\'s task is '
                     f'{sources.task_of(config)}; expected a recognition config (RFW and '
                     'TinyFace evaluate a face recognition model)')
  for kind in SECTIONS:
    config.evals[kind] = eval_lib.config_section(kind)
  return config
