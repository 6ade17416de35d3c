r"""FedPE (Niu & Deng, AAAI 2022): FedAvg with each client's class embeddings kept private.

    python -m fedjax_face.main --config=configs/fedgc/fedpe.py --workdir=/tmp/fedpe
    python -m fedjax_face.main --config=configs/fedgc/fedpe.py:loss=arcface --workdir=/tmp/fedpe_arc

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedpe


def get_config(arg=None):
  c = config_lib.federated_config('fedpe', arg)
  c.fedpe = fedpe.config_section()
  return c
