r"""FedGPAD (Alg. 2): domain-invariant and domain-specific extractors, only EI, C and Dep aggregated.

    python -m fedjax_face.main --config=configs/pad/fedgpad.py --workdir=/tmp/fedgpad

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (the data centers and the unseen
target, the paper's Tables III-V; default OCI_M), or centers=<letters> and target=<letter>
(e.g. centers=OMIS,target=C: Tables VIII-IX), paper (256x256, the full-width network), runlocal.
"""

from fedjax_face.proj.pad import setting


def get_config(arg=None):
  return setting.method_config('fedgpad', arg)
