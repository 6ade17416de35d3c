r"""APFL (Deng et al., 2020) on FedPAD's detector: each data center trains the shared detector, a
personal one and the weight alpha that mixes the two (fedjax_face/algorithms/apfl.py,
docs/personalization.md). The 'pad' evaluator scores each data center's held-out subjects with
its mixed detector ('in_domain_personal'), and the unseen target with the shared one.

    python -m fedjax_face.main --config=configs/pad/apfl.py --workdir=/tmp/pad_apfl

FedPAD's setting (configs/pad/fedpad.py: the paper's ResNet-18, Adam, one local step a round);
alpha steps at the setting's rate (the paper uses one rate for w, v and alpha). Argument (comma
separated): alpha=A (a fixed alpha: 0.25 | 0.5 | 0.75; default: the adaptive alpha from 0.5),
protocol=OCI_M|OMI_C|OCM_I|ICM_O, or centers=<letters> and target=<letter>;
backbone=resnet18|pad_net; paper; runlocal.
"""

from fedjax_face.algorithms import apfl
from fedjax_face.proj.pad import setting

FIXED_ALPHAS = ('0.25', '0.5', '0.75')


def get_config(arg=None):
  # A personal detector and alpha each.
  c, args = setting.personalization_config('apfl', arg, {'alpha': FIXED_ALPHAS})
  c.apfl = apfl.config_section()
  c.apfl.alpha_learning_rate = c.optimizer.learning_rate
  if 'alpha' in args:
    c.apfl.adaptive_alpha = False
    c.apfl.alpha_init = float(args['alpha'])
  return c
