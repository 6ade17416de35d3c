r"""Utility against privacy on the embedded benchmark: FedPE and FedGC at epsilon = 1, 4, 16, infinity; FedFV.

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
SETTING = ('ours: FedPE and FedGC in the FedGC paper setting of configs/fedgc/ (36 clients, all '
           'in every round, 60 rounds, small CNN), FedFV in its own (configs/fedfv/: 1,000 clients '
           'of one identity, 8 a round, 1,500 rounds, GroupNorm CNN), synthetic benchmark, clip '
           'S = 1, delta = 1e-5, RDP accountant with replace-one neighbours; no paper reports '
           'these.')


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


def _fedfv_rows() -> list[Row]:
  """FedFV (1,000 clients, 8 a round): its class rows leave the client, so the choice of
  `dp.class_rows` decides whether sampling amplifies epsilon."""
  dp = (('dp.enabled', 'True'),)
  run = lambda *o: Run('fedfv/fedfv', '', o)
  blank = (None,) * len(COLUMNS)
  return [Row('FedFV off', run(), blank),
          Row('FedFV eps=inf (clip only)', run(*dp, ('dp.noise_multiplier', '0.0')), blank),
          Row('FedFV eps=16.0, class rows private', run(*dp, ('dp.target_epsilon', '16.0')), blank),
          Row('FedFV eps=16.0, class rows unprotected (outside epsilon)',
              run(*dp, ('dp.class_rows', 'unprotected'), ('dp.target_epsilon', '16.0')), blank)]


TABLES = {
    1: Table('Utility against client-level privacy: FedPE, FedGC (Softmax) and FedFV', 'results',
             COLUMNS, tuple(_rows('fedpe', 'FedPE') + _rows('fedgc', 'FedGC') + _fedfv_rows()),
             'none (no paper measures it); DP-FedAvg needs many clients per round',
             SETTING, digits=2, titles=TITLES),
}


def accuracy_against_epsilon(root: str, extra: tuple, seeds: tuple[int, ...],
                             out_dir: str | None) -> str:
  """The picture of Table 1 (seed `seeds[0]`): LFW-like accuracy against epsilon per method;
  the run without DP as a dotted line, clipping alone (epsilon infinite) drawn at the right."""
  from fedjax_face.eval import plots  # pylint: disable=g-import-not-at-top
  from fedjax_face.io import artifacts, files  # pylint: disable=g-import-not-at-top
  from fedjax_face.tools import tables  # pylint: disable=g-import-not-at-top

  lines = ['## Accuracy against epsilon (picture: privacy_accuracy.png)', '',
           '| method | epsilon | LFW-like accuracy (%) |', '| --- | --- | --- |']
  curves = {}
  for method, label in (('fedpe', 'FedPE'), ('fedgc', 'FedGC')):
    without, points = None, []
    for row in _rows(method, label):
      path = files.join(tables.workdir(root, row.run, extra, seeds[0]), 'results.json')
      if not files.exists(path):
        continue
      result = files.read_json(path)
      accuracy = 100 * result['verification']['lfw']['accuracy']
      eps = result.get('privacy', {}).get('epsilon', float('inf'))
      if row.label.endswith(' off'):
        without = accuracy
      else:
        points.append((eps, accuracy))
      lines.append(f"| {label} | {'off' if row.label.endswith(' off') else f'{eps:.3g}'} | "
                   f'{accuracy:.2f} |')
    curves[label] = (sorted(points), without)
  if out_dir and any(points for points, _ in curves.values()):
    artifacts.write_figure(files.join(out_dir, 'privacy_accuracy.png'),
                           plots.accuracy_epsilon_figure(curves))
  return '\n'.join(lines + [''])


EXTRAS = {1: ('privacy_accuracy.md', accuracy_against_epsilon)}
