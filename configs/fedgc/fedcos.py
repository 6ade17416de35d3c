r"""FedCos (FedGC paper, Table 4): FedGC with the cosine regularizer in place of Eq. 5.

    python -m fedjax_face.main --config=configs/fedgc/fedcos.py --workdir=/tmp/fedcos

The server step W <- W~ - lambda·eta·grad Reg_cos(W~) pushes every class embedding away from the
unweighted sum of the embeddings it never meets in a local softmax (no hard-example weighting);
`algorithms/fedgc/regularizer.py` has our reading. The paper does not give FedCos's lambda; we use
FedGC's (`--config.fedgc.reg_lambda`) with the regularizer averaged over its rows
(`fedgc.reg_reduction='mean'`): Eq. 5's softmax weights a row's pushes by probabilities that sum to
at most 1, the cosine form by 1 per cross-client class, so summed over rows its step is ~C times
larger (C = all other clients' classes) and diverged here (λ = 20: class-embedding norms inf by
round 10 of the default run; docs/fedgc.md, "Readings of the paper"). Averaged, each class
embedding is pushed with total weight ~1, as in
the softmax form. `--config.fedgc.reg_reduction=sum` is the literal alternative.

Argument (comma separated): loss=softmax|cosface|arcface, partition=balanced|lognormal, lookalikes
(look-alike identity families over different clients), runlocal.
"""

from fedjax_face.algorithms import fedgc
from fedjax_face.proj.fedgc import setting


def get_config(arg=None):
  c = setting.config('fedgc', arg)
  c.fedgc = fedgc.config_section()
  c.fedgc.regularizer = 'cosine'
  c.fedgc.reg_reduction = 'mean'
  return c
