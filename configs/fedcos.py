r"""FedCos (FedGC paper, Table 4): FedGC with the cosine regularizer in place of Eq. 5.

    python -m fedjax_face.main --config=configs/fedcos.py --workdir=/tmp/fedcos

The server step W <- W~ - lambda·eta·grad Reg_cos(W~) pushes every class embedding away from the
unweighted sum of the embeddings it never meets in a local softmax (no hard-example weighting);
`algorithms/regularizers.py` has our reading. The paper does not give FedCos's lambda; we use
FedGC's (`--config.fedgc.reg_lambda`).

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, runlocal.
"""

from fedjax_face import config_lib


def get_config(arg=None):
  c = config_lib.federated_config('fedgc', arg)
  c.fedgc.regularizer = 'cosine'
  return c
