r"""FedPE (Niu & Deng, AAAI 2022): FedAvg with each client's class embeddings kept private.

    python -m fedjax_face.main --config=configs/fedgc/fedpe.py --workdir=/tmp/fedpe
    python -m fedjax_face.main --config=configs/fedgc/fedpe.py:loss=arcface --workdir=/tmp/fedpe_arc

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, lookalikes
(look-alike identity families over different clients), runlocal.
"""

from fedjax_face.algorithms import fedpe
from fedjax_face.proj.fedgc import setting


def get_config(arg=None):
  c = setting.config('fedpe', arg)
  c.fedpe = fedpe.config_section()
  return c
