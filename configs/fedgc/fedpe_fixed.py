r"""FedPE+Fixed (FedGC paper, Table 5): FedPE with every class embedding frozen at its random init.

    python -m fedjax_face.main --config=configs/fedgc/fedpe_fixed.py --workdir=/tmp/fedpe_fixed

Random vectors in high dimension are nearly orthogonal, so fixed embeddings cannot collapse across
clients; only the backbone learns. The init is `head.init_std` (N(0, std^2) per coordinate).

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedpe


def get_config(arg=None):
  c = config_lib.federated_config('fedpe', arg)
  c.fedpe = fedpe.config_section()
  c.fedpe.fixed_class_embeddings = True
  return c
