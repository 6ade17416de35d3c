r"""FedBN (Li et al., ICLR 2021) in the FedFR paper's setting: started from the pre-trained model,
every client keeps its BatchNorm layers and its class embeddings, the rest is averaged; scored on
FedFR's personalized protocol with each client's own BatchNorm layers (docs/personalization.md).

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain
    python -m fedjax_face.main --config=configs/fedfr/fedbn.py --workdir=/tmp/fedbn \
        --config.init_from=/tmp/fedfr_pretrain

Local data only (no public images), CosFace over the client's own identities (the setting's
head), the setting's rounds, clients and optimizer. Argument (comma separated): paper (the
paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'paper': (True,), 'runlocal': (True,)})
  return setting.fedfr_config('fedbn', runlocal=bool(args.get('runlocal')),
                              paper=bool(args.get('paper')))
