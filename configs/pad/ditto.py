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

from fedjax_face import config_lib
from fedjax_face.algorithms import ditto
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'protocol': setting.PROTOCOLS, 'centers': setting.CENTERS,
                                    'target': pad_benchmark.DOMAIN_NAMES,
                                    'backbone': tuple(setting.BACKBONES), 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'),
                         runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                         centers=args.get('centers'), target=args.get('target'),
                         backbone=args.get('backbone', 'resnet18'))
  c.algorithm = 'ditto'   # FedPAD's detector and data centers, a personal detector each
  c.ditto = ditto.config_section()
  return c
