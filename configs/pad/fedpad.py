r"""FedPAD (Alg. 1): FedAvg of the detector over the data centers: the paper's ResNet-18 (§IV-A4),
or with `backbone=pad_net` the Table II network without ES and Dec (EI, C and the depth head).

    python -m fedjax_face.main --config=configs/pad/fedpad.py --workdir=/tmp/fedpad

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (the data centers and the unseen
target, the paper's Tables III-V; default OCI_M), or centers=<letters> and target=<letter>
(e.g. centers=OMIS,target=C: Tables VIII-IX), backbone=resnet18|pad_net (default resnet18),
paper (256x256, the full-width network), runlocal.
"""

from fedjax_face.proj.pad import setting


def get_config(arg=None):
  return setting.method_config('fedpad', arg)
