r"""Utility against privacy on the embedded benchmarks: every method at epsilon = 1, 4, 16 and
infinity: FedPE, FedGC, FedFV, FedAwS, FedUV, FedFace and FedFR (Table 1); FedPAD and FedGPAD
(Table 2, HTER on the unseen domain). Table 3: gradient inversion of FedPE's and FedGC's client
updates over local batch x local steps (configs/privacy/inversion_grid.py), with recovered
labels at batch 1, under secure aggregation and under DP. Table 7: the HTER cost of
subject-level DP-SGD inside each data center (configs/pad/dp_sgd.py) for FedPAD and FedGPAD.
Tables 4-6 (the attacks): attacks.py.

    python -m fedjax_face.reproduce --table=privacy --out_dir=docs
    python -m fedjax_face.reproduce --table=privacy3 --out_dir=docs
    python -m fedjax_face.reproduce --table=privacy7 --out_dir=docs

Each method's default run with `dp.enabled` and `dp.target_epsilon` (the noise multiplier that
reaches it after the run's rounds, `core/privacy.py:noise_for_epsilon`), clip S = `dp.clip_norm`;
"inf" is clipping alone (noise 0), "off" the run without DP. No paper reports these numbers: the
column beside ours stays empty.
"""

from fedjax_face.proj.fedfr import reproduce as fedfr_tables
from fedjax_face.proj.privacy import attacks
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Row, Run, Table

EPSILONS = ('1.0', '4.0', '16.0')
COLUMNS = ('verification/lfw/accuracy', 'verification/sllfw/accuracy', 'privacy/epsilon',
           'privacy/noise_multiplier', 'communication/bytes_per_client_round/up')
TITLES = ('LFW-like', 'SLLFW-like', 'epsilon', 'noise multiplier', 'bytes up per client-round')
SETTING = ('ours: FedPE and FedGC in the FedGC paper setting of configs/fedgc/ (36 clients, all '
           'in every round, 60 rounds, small CNN), FedFV, FedAwS, FedUV and FedFace in theirs '
           '(configs/fedfv/: 1,000 clients of one identity, 8 a round, 1,500 rounds, GroupNorm '
           'CNN), FedFR in its own (configs/fedfr/: 10 clients from the pre-trained model, 30 '
           'rounds; generic LFW-like), synthetic benchmark, clip S = 1, delta = 1e-5, RDP '
           'accountant with replace-one neighbours; no paper reports these.')
PAD_COLUMNS = ('pad/hter', 'pad/auc', 'privacy/epsilon', 'privacy/noise_multiplier',
               'communication/bytes_per_client_round/up')
PAD_TITLES = ('HTER', 'AUC', 'epsilon', 'noise multiplier', 'bytes up per client-round')
DP = (('dp.enabled', 'True'),)


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


def _short_rows(label: str, run, columns=COLUMNS) -> list[Row]:
  """Off, clipping alone and each of `EPSILONS` for a method whose `run(*overrides)` is its
  default."""
  blank = (None,) * len(columns)
  return ([Row(f'{label} off', run(), blank),
           Row(f'{label} eps=inf (clip only)', run(*DP, ('dp.noise_multiplier', '0.0')), blank)]
          + [Row(f'{label} eps={eps}', run(*DP, ('dp.target_epsilon', eps)), blank)
             for eps in reversed(EPSILONS)])


def _fedfr_run(*overrides) -> Run:
  return Run('fedfr/fedfr', '', overrides, init_from=fedfr_tables.PRETRAIN)


def _pad_run(method: str):
  return lambda *overrides: Run(f'pad/{method}', 'protocol=OCI_M', overrides)


def _fedfv_rows() -> list[Row]:
  """FedFV (1,000 clients, 8 a round): its class rows leave the client, so the choice of
  `dp.class_rows` decides whether sampling amplifies epsilon."""
  dp = (('dp.enabled', 'True'),)
  run = lambda *o: Run('fedfv/fedfv', '', o)
  blank = (None,) * len(COLUMNS)
  return [Row('FedFV off', run(), blank),
          Row('FedFV eps=inf (clip only)', run(*dp, ('dp.noise_multiplier', '0.0')), blank),
          *[Row(f'FedFV eps={eps}, class rows private', run(*dp, ('dp.target_epsilon', eps)),
                blank) for eps in reversed(EPSILONS)],
          Row('FedFV eps=16.0, class rows unprotected (outside epsilon)',
              run(*dp, ('dp.class_rows', 'unprotected'), ('dp.target_epsilon', '16.0')), blank)]


INVERSION_CONFIG = 'privacy/inversion_grid'
INVERSION_COLUMNS = ('inversion/psnr', 'inversion/ssim', 'inversion/identity_match_mean_embedding',
                     'inversion/identity_match_mean_embedding_true_images',
                     'inversion/identity_chance', 'inversion/label_recovery/accuracy',
                     'verification/lfw/accuracy')
INVERSION_TITLES = ('PSNR dB', 'SSIM', 'identity matched', 'true images matched',
                    'identity by chance', 'labels recovered', 'LFW-like')
BATCHES, STEPS = ('1', '4', '16'), ('1', '2')   # 2: the setting's federated.local_steps
_SERVER = 'curious server, each update before aggregation'


def _inversion_rows(method: str, label: str) -> list[Row]:
  """One method's grid: local batch x local steps with the true labels given, then batch 1 with
  the labels recovered from the update, then batch 4 at the setting's steps under secure
  aggregation (without DP, and at epsilon 16 with the clients' noise), and under clipping alone
  (the server's noise, added after it sees the update)."""
  run = lambda arg, *o: Run(INVERSION_CONFIG, f'method={method},{arg}', o)
  blank = (None,) * len(INVERSION_COLUMNS)
  rows = [Row(f'{label} batch {b}, {s} step{"s" * (s != "1")}, DP off', run(f'batch={b},steps={s}'),
              blank, _SERVER + ', given the true labels') for b in BATCHES for s in STEPS]
  rows += [Row(f'{label} batch 1, {s} step{"s" * (s != "1")}, labels recovered, DP off',
               run(f'batch=1,steps={s},labels=recovered'), blank,
               _SERVER + ', labels read from the update') for s in STEPS]
  secure = 'curious server, the cohort\'s sum alone (secure aggregation)'
  rows += [Row(f'{label} batch 4, 2 steps, secure aggregation, DP off',
               run('batch=4,steps=2,secure'), blank, secure),
           Row(f'{label} batch 4, 2 steps, secure aggregation, eps=16.0',
               run('batch=4,steps=2,secure', *DP, ('dp.target_epsilon', '16.0')), blank,
               secure + ' with the clients\' noise'),
           Row(f'{label} batch 4, 2 steps, clip only',
               run('batch=4,steps=2', *DP, ('dp.noise_multiplier', '0.0')), blank,
               _SERVER + ', clipped (server noise comes after)')]
  return rows


DP_SGD_CONFIG = 'pad/dp_sgd'
DP_SGD_COLUMNS = ('pad/hter', 'pad/auc', 'method_state/dp_sgd/epsilon',
                  'method_state/dp_sgd/epsilon_pld', 'method_state/dp_sgd/noise_multiplier')
DP_SGD_TITLES = ('HTER', 'AUC', 'epsilon (RDP)', 'epsilon (PLD)', 'noise multiplier')


def _dp_sgd_rows(method: str, label: str) -> list[Row]:
  """One method without DP-SGD, then under it with clipping alone (the subject draws, frozen
  BatchNorm and clipping: every cost but the noise) and at epsilon 16 and 4."""
  blank = (None,) * len(DP_SGD_COLUMNS)
  run = lambda arm: Run(DP_SGD_CONFIG, f'method={method},{arm}')
  return [Row(f'{label} no DP-SGD', _pad_run(method)(), blank),
          Row(f'{label} DP-SGD, clip only', run('clip_only'), blank),
          *[Row(f'{label} DP-SGD, eps={eps}', run(f'epsilon={eps}'), blank)
            for eps in ('16', '4')]]


TABLES = {
    1: Table('Utility against client-level privacy: face recognition', 'results', COLUMNS,
             tuple(_rows('fedpe', 'FedPE') + _rows('fedgc', 'FedGC') + _fedfv_rows()
                   + [row for name, label in (('fedaws', 'FedAwS'), ('feduv', 'FedUV'),
                                              ('fedface', 'FedFace'))
                      for row in _short_rows(label, lambda *o, n=name: Run(f'fedfv/{n}', '', o))]
                   + _short_rows('FedFR', _fedfr_run)),
             'none (no paper measures it); DP-FedAvg needs many clients per round',
             SETTING, titles=TITLES, column_digits=(2, 2, 2, 2, 0)),
    2: Table('Utility against client-level privacy: face anti-spoofing (O&C&I -> M)', 'results',
             PAD_COLUMNS,
             tuple(_short_rows('FedPAD', _pad_run('fedpad'), PAD_COLUMNS)
                   + _short_rows('FedGPAD', _pad_run('fedgpad'), PAD_COLUMNS)),
             'none (no paper measures it); three data centers, all in every round, get no '
             'amplification from sampling',
             'ours: the PAD setting of configs/pad/ (three data centers, 400 rounds), clip S = 1, '
             'delta = 1e-5, RDP accountant with replace-one neighbours; HTER and AUC in %.',
             titles=PAD_TITLES, column_digits=(2, 2, 2, 2, 0)),
    3: Table('Gradient inversion of a client update: local batch x local steps', 'results',
             INVERSION_COLUMNS,
             tuple(_inversion_rows('fedpe', 'FedPE') + _inversion_rows('fedgc', 'FedGC')),
             'none (no paper measures it); Inverting Gradients recovers less as the local batch '
             'and steps grow',
             'ours: FedPE and FedGC in the FedGC paper setting at 32 x 32 (small CNN, 36 clients, 8 '
             'a round, all 8 attacked, the second of 2 rounds replayed), Inverting Gradients '
             '(cosine + TV, 200 iterations), seed 0; identity matched: the global model names the '
             "reconstruction's identity by its nearest mean embedding (true images: the ceiling; "
             "by chance: every image named its batch's most frequent identity); labels "
             "recovered: the fraction right (batch 1); FedPE's attacker is given its private "
             'class rows (an upper bound).',
             titles=INVERSION_TITLES, column_digits=(2, 3, 2, 2, 2, 2, 2)),
    4: attacks.TABLES[4],   # what each method reveals, attacked: the FedGC setting
    5: attacks.TABLES[5],   # and the FedFV setting
    6: attacks.TABLES[6],   # and face anti-spoofing
    7: Table('The HTER cost of subject-level DP-SGD inside each data center (O&C&I -> M)',
             'results', DP_SGD_COLUMNS,
             tuple(_dp_sgd_rows('fedpad', 'FedPAD') + _dp_sgd_rows('fedgpad', 'FedGPAD')),
             'none (no paper trains them with DP-SGD)',
             'ours: the PAD setting of configs/pad/ (three data centers, 400 rounds), seed 0; '
             'configs/pad/dp_sgd.py: each data center\'s subjects Poisson-sampled at q = 0.5 a '
             'step (2 frames each, 1 live and 1 attack), each subject\'s gradient clipped to C = '
             '1, BatchNorm frozen, delta = 1e-5, RDP and PLD accountants with add-or-remove-one '
             'subject neighbours; "no DP-SGD" is the method\'s own run (balanced batches, '
             'train-mode BatchNorm); HTER and AUC in %.',
             titles=DP_SGD_TITLES, column_digits=(2, 2, 2, 2, 3), evaluate_diverged=True),
}


def accuracy_against_epsilon(root: str, extra: tuple, seeds: tuple[int, ...],
                             out_dir: str | None) -> str:
  """The picture of Table 1 (seed `seeds[0]`): LFW-like accuracy against epsilon per method;
  the run without DP as a dotted line, clipping alone (epsilon infinite) drawn at the right.
  Runs that diverged have no point; FedFV's row with unprotected class rows is left out (its
  epsilon does not cover what it sends)."""
  from fedjax_face.eval import plots  # pylint: disable=g-import-not-at-top
  from fedjax_face.io import artifacts, files  # pylint: disable=g-import-not-at-top

  lines = ['## Accuracy against epsilon (picture: privacy_accuracy.png)', '',
           '| method | epsilon | LFW-like accuracy (%) |', '| --- | --- | --- |']
  curves = {}
  for row in TABLES[1].rows:
    if 'unprotected' in row.label:
      continue
    label = row.label.split(' ')[0]
    points, without = curves.get(label, ([], None))
    path = files.join(spec.workdir(root, row.run, extra, seeds[0]), 'results.json')
    if files.exists(path):
      result = files.read_json(path)
      accuracy = 100 * result['verification']['lfw']['accuracy']
      eps = result.get('privacy', {}).get('epsilon', float('inf'))
      if row.label.endswith(' off'):
        without = accuracy
      else:
        points.append((eps, accuracy))
      lines.append(f"| {label} | {'off' if row.label.endswith(' off') else f'{eps:.3g}'} | "
                   f'{accuracy:.2f} |')
    curves[label] = (points, without)
  curves = {label: (sorted(points), without) for label, (points, without) in curves.items()}
  if out_dir and any(points for points, _ in curves.values()):
    artifacts.write_figure(files.join(out_dir, 'privacy_accuracy.png'),
                           plots.accuracy_epsilon_figure(curves))
  return '\n'.join(lines + [''])


EXTRAS = {1: ('privacy_accuracy.md', accuracy_against_epsilon)}
