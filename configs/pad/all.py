r"""All: the detector trained on every data center's frames pooled in one place (the FedGPAD
paper's upper bound, which gives up the data centers' privacy), tested on the protocol's target.

    python -m fedjax_face.main --config=configs/pad/all.py:protocol=OCI_M --workdir=/tmp/pad_all

One client holds every data center's attack and live classes; each batch draws half a data
center's batch of each of them (for three data centers 192 with the ResNet-18's 64 frames a data
center, 96 with `backbone=pad_net`'s 32): live and attack balanced, every data center equally,
and as many images a step as the federation trains on. With half that, All saw half the
federation's images and lost to every method, in-domain too (docs/pad.md, "Why All came last at
first, and why FedPAD beats it", among the earlier figures). Its Adam state persists from step
to step (`federated.client_optimizer_state='keep'`), as centralized training has it: the data
centers' optimizer is created afresh every round (the authors' code), which for one client
would restart Adam at every step.

`batch_norm=per_center` computes BatchNorm's training statistics over each data center's slice
of the batch, as the federated data centers do, instead of over the pooled batch (the default):
the test of whether pooled statistics are why All's in-domain error is above FedPAD's.

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (default OCI_M),
batch_norm=pooled|per_center (default pooled), backbone=resnet18|pad_net (FedPAD's detector:
default resnet18), paper, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'protocol': setting.PROTOCOLS, 'paper': (True,),
                                    'runlocal': (True,),
                                    'backbone': tuple(setting.BACKBONES),
                                    'batch_norm': ('pooled', 'per_center')})
  runlocal = bool(args.get('runlocal'))
  c = setting.pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'), runlocal=runlocal,
                         paper=bool(args.get('paper')),
                         backbone=args.get('backbone', 'resnet18'))
  c.data.pad.pooled = True
  c.federated.num_clients = 1
  # The federation's images per step: a data center's batch (live and attack) per data center.
  c.federated.batch_size = (c.federated.batch_size // 2) * 2 * len(c.data.pad.sources)
  c.federated.client_optimizer_state = 'keep'   # centralized Adam: one state for the whole run
  if args.get('batch_norm') == 'per_center':
    c.model.batch_norm_groups = len(c.data.pad.sources)
  c.fedgpad = fedgpad.config_section()
  return c
