r"""FedRep (Collins et al., ICML 2021) and FedPer on FedPAD's detector: each data center keeps its
classifier C, the feature extractor is averaged (docs/personalization.md). The 'pad' evaluator
scores each data center's held-out subjects with its own classifier ('in_domain_personal'), and
the unseen target with the shared model, whose classifier is the initialisation's.

    python -m fedjax_face.main --config=configs/pad/fedrep.py --workdir=/tmp/pad_fedrep

FedPAD's setting (configs/pad/fedpad.py: the paper's ResNet-18, Adam) with two local steps a
round: FedRep's head step, then its body step. Argument (comma separated): fedper (head and body
trained together), protocol=OCI_M|OMI_C|OCM_I|ICM_O, or centers=<letters> and target=<letter>;
backbone=resnet18|pad_net; paper; runlocal.
"""

from fedjax_face.algorithms import fedrep
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  c, args = setting.personalization_config('fedrep', arg, {'fedper': (True,)})   # C kept
  c.federated.local_steps = 2   # tau_h = 1 head step, then tau = 1 body step
  c.fedrep = fedrep.config_section()
  c.fedrep.alternate = not args.get('fedper')
  return c
