r"""The federated building blocks side by side (issue 37): accuracy and bytes per client-round
of each block, on FedPE in the FedGC paper's setting (Table 1) and on FedFV in its one-identity
setting (Table 2), where client drift is worst.

    python -m fedjax_face.reproduce --table=blocks --seeds=0,1,2 --out_dir=docs

The rows are `proj/blocks/setting.py:VARIANTS`, run from configs/blocks/; no paper reports
these numbers, so the column beside ours stays empty.
"""

from fedjax_face.proj.blocks import setting
from fedjax_face.tools.tables import Row, Run, Table

COLUMNS = ('verification/lfw/accuracy', 'verification/sllfw/accuracy',
           'communication/bytes_per_client_round/up', 'communication/bytes_per_client_round/down',
           'privacy/epsilon')
TITLES = ('LFW-like', 'SLLFW-like', 'bytes up per client-round', 'bytes down per client-round',
          'epsilon')
FEDFV_COLUMNS = ('verification/lfw/accuracy', 'verification/cfp_fp/accuracy',
                 'communication/bytes_per_client_round/up',
                 'communication/bytes_per_client_round/down', 'privacy/epsilon')
FEDFV_TITLES = ('LFW-like', 'CFP-FP-like', 'bytes up per client-round',
                'bytes down per client-round', 'epsilon')


# Table 2's extra rows: FedAvgM and FedAdam at a tenth of Table 1's server step. At Table 1's
# steps both end at chance in FedFV's setting (docs/blocks.md says why); these rows show what
# the same optimizers do at a step the 8-client pseudo-gradient's noise allows. The value is the
# command line's (`--config.server_optimizer.learning_rate=...`), and so the workdir's name.
FEDFV_SMALLER_STEPS = {
    'fedavgm': ('FedAvgM, server rate 0.1 (effective step 1, as FedAvg)', '0.1'),
    'fedadam': ('FedAdam, eta 10^-2.5', '0.0031622776601683794'),
}


def _rows(config: str, name: str, columns, smaller_steps: dict | None = None
          ) -> tuple[Row, ...]:
  smaller_steps = smaller_steps or {}
  rows = []
  for block, (label, _) in setting.variants(name).items():
    rows.append(Row(label, Run(config, f'block={block}'), (None,) * len(columns)))
    if block in smaller_steps:
      label, rate = smaller_steps[block]
      rows.append(Row(label, Run(config, f'block={block}',
                                 (('server_optimizer.learning_rate', rate),)),
                      (None,) * len(columns)))
  return tuple(rows)


TABLES = {
    1: Table('Federated building blocks: FedPE in the FedGC setting', 'results', COLUMNS,
             _rows('blocks/fedgc_setting', 'fedpe', COLUMNS),
             'none (no paper compares them here)',
             'ours: FedPE in the FedGC paper setting of configs/fedgc/ (36 clients, all in every '
             'round unless the row says otherwise, 60 rounds, small CNN), synthetic benchmark; '
             'epsilon at delta = 1e-5 where DP is on.',
             titles=TITLES, column_digits=(2, 2, 0, 0, 2)),
    2: Table('Federated building blocks: FedFV, one identity per client', 'results',
             FEDFV_COLUMNS,
             _rows('blocks/fedfv_setting', 'fedfv', FEDFV_COLUMNS, FEDFV_SMALLER_STEPS),
             'none (no paper compares them here)',
             'ours: FedFV in its setting of configs/fedfv/ (1,000 clients of one identity, 8 a '
             'round, 1,500 rounds, GroupNorm CNN), synthetic benchmark; FedFV sends its class '
             'row w_i with the model (in the clear under secure aggregation: the server writes '
             'it per client).',
             titles=FEDFV_TITLES, column_digits=(2, 2, 0, 0, 2)),
}
