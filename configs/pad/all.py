r"""All: the detector trained on every data center's frames pooled in one place (the FedGPAD
paper's upper bound, which gives up the data centers' privacy), tested on the protocol's target.

    python -m fedjax_face.main --config=configs/pad/all.py:protocol=OCI_M --workdir=/tmp/pad_all

One client holds every data center's attack and live classes; each batch draws 8 frames of each
of them (48 for three data centers): live and attack balanced, every data center equally.

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (default OCI_M), paper, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'protocol': setting.PROTOCOLS, 'paper': (True,),
                                    'runlocal': (True,)})
  runlocal = bool(args.get('runlocal'))
  c = setting.pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'), runlocal=runlocal,
                         paper=bool(args.get('paper')))
  c.data.pad.pooled = True
  c.federated.num_clients = 1
  c.federated.batch_size = (2 if runlocal else 8) * 2 * len(c.data.pad.sources)
  c.fedgpad = fedgpad.config_section()
  return c
