r"""Centralized training on the FedFV setting's identities: the upper bound of its Table 3.

    python -m fedjax_face.main --config=configs/fedfv/centralized.py --workdir=/tmp/fedfv_central

The same 1,000 identities, backbone, Eq. 2 head (normalised softmax, here over all identities at
once), batch size and learning-rate schedule as configs/fedfv/, and the same images seen: a
federated round of m clients x S local steps is one centralized round of m·S steps, so the
schedule's decay rounds fall on the same images. The partition stays `one_per_client`: it only
groups identities for the class-embedding diagnostics (every pair is then a cross-client pair).

Argument (comma separated): paper (the paper's backbone at 64x64), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.data import federated
from fedjax_face.proj.fedfv import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'paper': (True,), 'runlocal': (True,)})
  c = setting.one_per_client_config('centralized', runlocal=bool(args.get('runlocal')),
                                    paper=bool(args.get('paper')))
  fl = c.federated
  c.federated.local_steps = federated.cohort_size(fl.num_clients, fl.participation) * fl.local_steps
  return c
