r"""FedFace in the FedFR paper's setting (its Fig. 4): started from the pre-trained model, class
embeddings initialised from the clients' mean features, cosine spreadout on the server.

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py:ids=8 --workdir=/tmp/pre_ids8
    python -m fedjax_face.main --config=configs/fedfr/fedface.py:ids=8 --workdir=/tmp/fedface_ids8 \
        --config.init_from=/tmp/pre_ids8

As the FedFR paper re-implements it: CosFace (s = 30, m = 0.4, the setting's head) over the
client's own identities when it holds several, FedFace's positive-only loss (m = 0.9) when it
holds one; local data only (no public images); the client sends theta and its class embeddings.

Argument (comma separated): ids=N (20 clients, paper 100, of N identities each; default 8,
the paper's 40 scaled by 1/5), paper (the paper's sizes; ids=40|20|10|1), runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedface
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'ids': setting.IDS_PER_CLIENT, 'paper': (True,),
                                    'runlocal': (True,)})
  runlocal = bool(args.get('runlocal'))
  c = setting.fedfr_config('fedface', runlocal=runlocal, paper=bool(args.get('paper')))
  ids = int(args.get('ids', setting.FIG4_IDS_PER_CLIENT[0]))
  setting.set_identities_per_client(c, ids, runlocal, paper=bool(args.get('paper')))
  if ids == 1:   # FedFace's own loss: a softmax over one class is constant
    c.head.loss = 'positive_cosine'
    c.head.margin = 0.9
  c.fedface = fedface.config_section()
  return c
