r"""FedPE+Fixed (FedGC paper, Table 5): FedPE with every class embedding frozen at its random init.

    python -m fedjax_face.main --config=configs/fedgc/fedpe_fixed.py --workdir=/tmp/fedpe_fixed

Random vectors in high dimension are nearly orthogonal, so fixed embeddings cannot collapse across
clients; only the backbone learns. The init is `head.init_std` (N(0, std^2) per coordinate).

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, lookalikes
(look-alike identity families over different clients), runlocal.
"""

from fedjax_face.algorithms import fedpe
from fedjax_face.proj.fedgc import setting


def get_config(arg=None):
  c = setting.config('fedpe', arg)
  c.fedpe = fedpe.config_section()
  c.fedpe.fixed_class_embeddings = True
  return c
