r"""FedGC (Niu & Deng, AAAI 2022): FedPE plus the server's softmax-regularizer step (Alg. 1).

    python -m fedjax_face.main --config=configs/fedgc/fedgc.py --workdir=/tmp/fedgc
    python -m fedjax_face.main --config=configs/fedgc/fedgc.py:loss=cosface --workdir=/tmp/fedgc_cos
    python -m fedjax_face.main --config=configs/fedgc/fedgc.py --config.fedgc.reg_lambda=1 --workdir=...

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgc


def get_config(arg=None):
  c = config_lib.federated_config('fedgc', arg)
  c.fedgc = fedgc.config_section()
  return c
