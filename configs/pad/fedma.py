r"""FedMA (the FedGPAD paper's Table V baseline): layer-wise matched averaging of FedPAD's
`backbone=pad_net` network (EI, C and the depth head), widths capped at 1.5 times a data
center's, then FedAvg rounds on the matched network (algorithms/fedma/).

    python -m fedjax_face.main --config=configs/pad/fedma.py --workdir=/tmp/fedma

Argument (comma separated): protocol=OCI_M|OMI_C|OCM_I|ICM_O (default OCI_M), or
centers=<letters> and target=<letter>, paper (256x256, the full width), runlocal.
"""

from fedjax_face.proj.pad import setting


def get_config(arg=None):
  return setting.fedma_config(arg)
