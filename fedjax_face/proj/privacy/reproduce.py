r"""Utility against privacy on the embedded benchmark: the methods at epsilon = 1, 4, 16 and infinity.

    python -m fedjax_face.reproduce --table=privacy1 --out=docs/privacy_table1.md

Each method's default run with `dp.enabled` and `dp.target_epsilon` (the noise multiplier that
reaches it after the run's rounds, `core/privacy.py:noise_for_epsilon`), clip S = `dp.clip_norm`;
"inf" is clipping alone (noise 0), "off" the run without DP. No paper reports these numbers: the
column beside ours stays empty.
"""

from fedjax_face.tools.tables import Row, Run, Table

EPSILONS = ('1.0', '4.0', '16.0')
COLUMNS = ('verification/lfw/accuracy', 'verification/sllfw/accuracy', 'privacy/epsilon',
           'privacy/noise_multiplier', 'communication/bytes_per_client_round/up')
TITLES = ('LFW-like', 'SLLFW-like', 'epsilon', 'noise multiplier', 'bytes up per client-round')
SETTING = ('ours: the FedGC paper setting of configs/fedgc/ (36 clients, all in every round, 60 '
           'rounds, small CNN, synthetic benchmark), delta = 1e-5, RDP accountant with replace-one '
           'neighbours; no paper reports these.')


def _rows(method: str, label: str) -> list[Row]:
  config = f'fedgc/{method}'
  dp = (('dp.enabled', 'True'),)
  rows = [Row(f'{label} off', Run(config, 'loss=softmax'), (None,) * len(COLUMNS))]
  rows.append(Row(f'{label} eps=inf (clip only)',
                  Run(config, 'loss=softmax', dp + (('dp.noise_multiplier', '0.0'),)),
                  (None,) * len(COLUMNS)))
  rows += [Row(f'{label} eps={eps}',
               Run(config, 'loss=softmax', dp + (('dp.target_epsilon', eps),)),
               (None,) * len(COLUMNS)) for eps in reversed(EPSILONS)]
  return rows


TABLES = {
    1: Table('Utility against client-level privacy (Softmax): FedPE and FedGC', 'results',
             COLUMNS, tuple(_rows('fedpe', 'FedPE') + _rows('fedgc', 'FedGC')),
             'none (no paper measures it); DP-FedAvg needs many clients per round',
             SETTING, digits=2, titles=TITLES),
}
