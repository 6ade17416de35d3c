r"""FedGC (Niu & Deng, AAAI 2022): FedPE plus the server's softmax-regularizer step (Alg. 1).

    python -m fedjax_face.main --config=configs/fedgc/fedgc.py --workdir=/tmp/fedgc
    python -m fedjax_face.main --config=configs/fedgc/fedgc.py:loss=cosface --workdir=/tmp/fedgc_cos
    python -m fedjax_face.main --config=configs/fedgc/fedgc.py --config.fedgc.reg_lambda=1 --workdir=...

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, lookalikes
(look-alike identity families over different clients), runlocal.
"""

from fedjax_face.algorithms import fedgc
from fedjax_face.proj.fedgc import setting


def get_config(arg=None):
  c = setting.config('fedgc', arg)
  c.fedgc = fedgc.config_section()
  return c
