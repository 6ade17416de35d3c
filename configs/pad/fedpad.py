r"""FedPAD (Alg. 1): FedAvg of the detector (EI, C and the depth head) over the data centers.

    python -m fedjax_face.main --config=configs/pad/fedpad.py --workdir=/tmp/fedpad

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (the data centers and the unseen
target, the paper's Tables III-V; default OCI_M), or centers=<letters> and target=<letter>
(e.g. centers=OMIS,target=C: Tables VIII-IX), paper (256x256, the full-width network), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.data import pad_benchmark
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'protocol': setting.PROTOCOLS, 'centers': setting.CENTERS,
                                    'target': pad_benchmark.DOMAIN_NAMES, 'paper': (True,),
                                    'runlocal': (True,)})
  c = setting.pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'),
                         runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                         centers=args.get('centers'), target=args.get('target'))
  c.fedgpad = fedgpad.config_section()
  return c
