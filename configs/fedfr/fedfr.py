r"""FedFR: hard-negative public data, contrastive regularization and the DFC branch.

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain
    python -m fedjax_face.main --config=configs/fedfr/fedfr.py --workdir=/tmp/fedfr \
        --config.init_from=/tmp/fedfr_pretrain

Argument (comma separated): the rows of the paper's Table 1 / 2 -- row=fedavg (local data only),
row=hn (+ hard-negative public data), row=hn_con (+ contrastive), row=fedfr (+ DFC, the default),
row=dfc_cosface (the DFC branch trained with CosFace, Table 2), row=finetune / row=kd (Table 2's
two-stage personalization: row=hn_con's rounds, then one round of local adaptation); ids=N
(Fig. 4: 20 clients (paper 100) of N identities each, generic evaluation only; start it from
`pretrain.py:ids=N`); paper (the paper's sizes); runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedfr
from fedjax_face.proj.fedfr import setting

ROWS = ('fedavg', 'hn', 'hn_con', 'fedfr', 'dfc_cosface', 'finetune', 'kd')


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'row': ROWS, 'ids': setting.IDS_PER_CLIENT,
                                    'paper': (True,), 'runlocal': (True,)})
  runlocal = bool(args.get('runlocal'))
  c = setting.fedfr_config('fedfr', runlocal=runlocal, paper=bool(args.get('paper')))
  if 'ids' in args:
    setting.set_identities_per_client(c, int(args['ids']), runlocal,
                                      paper=bool(args.get('paper')))
  c.fedfr = fedfr.config_section()
  row = args.get('row', 'fedfr')
  c.fedfr.public_data = row != 'fedavg'
  c.fedfr.contrastive_weight = 0.0 if row in ('fedavg', 'hn') else 5.0
  c.fedfr.dfc = row in ('fedfr', 'dfc_cosface')
  c.fedfr.dfc_loss = 'cosface' if row == 'dfc_cosface' else 'bce'
  if row in ('finetune', 'kd'):
    c.fedfr.adaptation = row
    c.num_rounds += 1        # T federated rounds, then one of local adaptation
  return c
