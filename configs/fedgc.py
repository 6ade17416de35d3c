r"""FedGC on the embedded benchmark: the design card's command, README's command 1.

    python -m fedjax_face.main --config=configs/fedgc.py --workdir=/tmp/fedgc

The same config as `configs/fedgc/fedgc.py` (the FedGC paper's folder, with its baselines FedPE,
FedCos and centralized training), with the same arguments: loss=softmax|cosface|arcface,
partition=balanced|lognormal, lookalikes, runlocal.
"""

import importlib.util
import os

_PAPER_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'fedgc', 'fedgc.py')


def get_config(arg=None):
  spec = importlib.util.spec_from_file_location('configs_fedgc_fedgc', _PAPER_CONFIG)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)
