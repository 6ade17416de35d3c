r"""FedBN (Li et al., ICLR 2021) on FedPAD's detector: each data center keeps its BatchNorm layers,
the rest is averaged (docs/personalization.md). The 'pad' evaluator scores each data center's
held-out subjects with its own BatchNorm layers ('in_domain_personal'), and the unseen target with
the shared model, whose BatchNorm layers are the initialisation's (the server never receives one).

    python -m fedjax_face.main --config=configs/pad/fedbn.py --workdir=/tmp/pad_fedbn

FedPAD's setting (configs/pad/fedpad.py: the paper's ResNet-18, Adam, one local step a round).
Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O, or centers=<letters> and
target=<letter>; backbone=resnet18|pad_net; paper; runlocal.
"""

from fedjax_face.proj.pad import setting


def get_config(arg=None):
  c, _ = setting.personalization_config('fedbn', arg)   # the BatchNorm layers kept
  return c
