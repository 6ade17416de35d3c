r"""Single: the detector trained by one data center alone, tested on the protocol's target (the
FedGPAD paper's Single rows; FedPAD's training with one client).

    python -m fedjax_face.main --config=configs/pad/single.py:protocol=OCI_M,center=O \
        --workdir=/tmp/pad_single_O

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (the target; default OCI_M),
center=<one of the protocol's data centers> (default its first), paper, runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.data import pad_benchmark
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'protocol': setting.PROTOCOLS,
                                    'center': pad_benchmark.DOMAIN_NAMES, 'paper': (True,),
                                    'runlocal': (True,)})
  protocol = args.get('protocol', 'OCI_M')
  sources, _ = pad_benchmark.PROTOCOLS[protocol]
  center = args.get('center', sources[0])
  if center not in sources:
    raise ValueError(f'config argument center={center!r} is not a data center of protocol '
                     f'{protocol}; expected one of {sources}.')
  c = setting.pad_config('fedpad', protocol=protocol, runlocal=bool(args.get('runlocal')),
                         paper=bool(args.get('paper')))
  c.data.pad.sources = (center,)
  c.federated.num_clients = 1
  c.fedgpad = fedgpad.config_section()
  return c
