r"""Ditto (Li et al., ICML 2021) on FedPAD's detector: each data center trains the shared detector
(FedAvg's local steps) and a personal one pulled towards the detector it received
(fedjax_face/algorithms/ditto.py, docs/personalization.md). The 'pad' evaluator scores each data
center's held-out subjects with its personal detector ('in_domain_personal'), and the unseen
target with the shared one.

    python -m fedjax_face.main --config=configs/pad/ditto.py --workdir=/tmp/pad_ditto

FedPAD's setting (configs/pad/fedpad.py: the paper's ResNet-18, Adam, one local step a round).
Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O, or centers=<letters> and
target=<letter>; backbone=resnet18|pad_net; paper; runlocal.
"""

from fedjax_face.algorithms import ditto
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  c, _ = setting.personalization_config('ditto', arg)   # a personal detector each
  c.ditto = ditto.config_section()
  return c
