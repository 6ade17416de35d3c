r"""Centralized CosFace on the public and the private training images: FedFR's upper bound (the
last row of its Table 1, "centrally trained on 10k IDs").

    python -m fedjax_face.main --config=configs/fedfr/centralized.py --workdir=/tmp/fedfr_central

The same identities, held-out images, backbone and head as configs/fedfr/, trained from scratch
like the pre-training (configs/fedfr/pretrain.py) with its recipe and length in epochs.

Argument (comma separated): ids=N (Fig. 4's scenario of N identities per client), paper (the
paper's sizes), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'ids': setting.IDS_PER_CLIENT, 'paper': (True,),
                                    'runlocal': (True,)})
  runlocal = bool(args.get('runlocal'))
  c = setting.pretraining_config(runlocal=runlocal, paper=bool(args.get('paper')))
  c.data.centralized_on = 'all'
  if 'ids' in args:
    setting.set_identities_per_client(c, int(args['ids']), runlocal,
                                      paper=bool(args.get('paper')))
  # As many epochs as the pre-training over the public + private training images.
  d = c.data
  private = d.synthetic.num_identities - d.public_identities
  seen = d.public_identities + private * (1 - d.private_test_fraction)
  c.num_rounds = int(round(c.num_rounds * seen / d.public_identities))
  return c
