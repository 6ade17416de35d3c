r"""The FedGPAD paper's tables on the embedded PAD benchmark, with the paper's numbers.

    python -m fedjax_face.reproduce --table=pad3 --seeds=0,1,2 --out_dir=docs
    python -m fedjax_face.reproduce --table=pad --seeds=0,1,2 --out_dir=docs   # all of them

Table I (the paper's list of its data sets) is here the benchmark's calibration: each domain's
Single model on its own held-out subjects and on every other domain. Table III: Single (each
data center alone), Fused (their scores averaged), FedPAD, FedGPAD and All (the data centers
pooled) on the four leave-one-out protocols, with the ROC curves of Fig. 5; Table V: FedAvg and
FedMA against FedGPAD; Table VI: FedGPAD without each of the Diff, Rec and Dep terms on O&C&M ->
I; Table VII: FedGPAD against the same network without disentanglement (FedPAD on the Table II
network, `backbone=pad_net`); Tables VIII-IX: more data centers, target C and S; Table X: data
centers with one attack type each.
HTER at the threshold chosen on the target's scores (the authors' code), EER and AUC, per video.

A Single run (`configs/pad/single.py:center=X`) scores every domain, so the Single rows and
Fused of all protocols come from five runs per seed. FedMA (Table V, `configs/pad/fedma.py`)
matches the Table II network without ES and Dec, and Table V also has FedAvg of that network.

Our FedPAD is the paper's "FedGPAD w/o Dis" (Table VII: the same EI, C and depth head, no ES or
Dec), not its ResNet-18 FedPAD of Table III; the Table III rows quote that paper row anyway.
"""

from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.io import files
from fedjax_face.proj.pad import baselines
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Combined, Ordering, Row, Run, Table

DOMAINS = pad_benchmark.DOMAIN_NAMES

COLUMNS = ('pad/hter', 'pad/eer', 'pad/auc')
TITLES = ('HTER', 'EER', 'AUC')
SETTING = ('ours: the embedded PAD benchmark (five synthetic capture domains; 48 subjects each, 40 '
           'train / 8 test, 2 live and 4 attack videos of 4 frames per subject, 32x32, RGB + HSV), '
           "the Table II network (FedGPAD; FedPAD's backbone=pad_net) or ResNet-18 (FedPAD, "
           "Single, All) at 1/8 width, 400 rounds of one Adam step per data center; "
           "HTER at the threshold chosen on the target's scores, per video (%); paper: OULU-NPU, "
           'CASIA-MFSD, Idiap Replay-Attack, MSU-MFSD, SiW at 256x256.')
ARROW = {name: '&'.join(sources) + ' -> ' + target
         for name, (sources, target) in pad_benchmark.PROTOCOLS.items()}

# The paper's Table III (HTER, EER, AUC).
PAPER_III = {
    'single': {('O', 'M'): (41.29, 37.42, 67.93), ('C', 'M'): (27.09, 24.69, 82.91),
               ('I', 'M'): (49.05, 20.04, 85.89), ('O', 'C'): (31.33, 34.73, 73.19),
               ('M', 'C'): (39.80, 40.67, 66.58), ('I', 'C'): (49.25, 47.11, 55.41),
               ('O', 'I'): (42.21, 43.05, 54.16), ('C', 'I'): (45.99, 48.55, 51.24),
               ('M', 'I'): (48.50, 33.70, 66.29), ('M', 'O'): (29.80, 24.12, 84.86),
               ('C', 'O'): (33.97, 21.24, 84.33), ('I', 'O'): (46.95, 35.16, 71.58)},
    'fused': {'OCI_M': (34.42, 23.26, 81.67), 'OMI_C': (38.32, 38.31, 67.93),
              'OCM_I': (42.21, 41.36, 59.72), 'ICM_O': (28.04, 22.24, 86.24)},
    'fedpad': {'OCI_M': (19.45, 17.43, 90.24), 'OMI_C': (42.27, 36.95, 70.49),
               'OCM_I': (32.53, 26.54, 73.58), 'ICM_O': (34.44, 34.45, 71.74)},
    'fedgpad': {'OCI_M': (12.73, 13.36, 91.25), 'OMI_C': (28.69, 27.55, 80.58),
                'OCM_I': (10.97, 11.11, 95.34), 'ICM_O': (21.95, 17.91, 89.85)},
    'all': {'OCI_M': (21.80, 17.18, 90.96), 'OMI_C': (29.46, 31.54, 76.29),
            'OCM_I': (30.57, 25.71, 72.21), 'ICM_O': (27.22, 25.91, 82.21)},
}
# Table V: FedAvg's numbers are Table III's FedPAD's, as printed.
PAPER_V = {
    'FedAvg': PAPER_III['fedpad'],
    'FedMA': {'OCI_M': (29.68, 25.85, 84.68), 'OMI_C': (31.17, 30.78, 78.81),
              'OCM_I': (24.82, 26.75, 73.05), 'ICM_O': (30.95, 25.15, 84.28)},
    'FedGPAD': PAPER_III['fedgpad'],
}
PAPER_X = {'single_I': (38.82, 33.63, 72.46), 'single_O': (35.76, 28.55, 78.86),
           'fused': (35.22, 25.56, 81.54), 'fedpad': (30.51, 26.10, 84.82),
           'fedgpad': (28.19, 23.01, 84.75)}
PAPER_VII_WITHOUT = {'OCI_M': (18.55, 18.14, 88.87), 'OMI_C': (28.11, 27.29, 82.06),
                     'OCM_I': (34.14, 38.56, 73.31), 'ICM_O': (26.41, 22.44, 85.08)}


def _single(center: str, attacks: str = '') -> Run:
  return Run('pad/single', f'center={center}' + (f',attacks={attacks}' if attacks else ''))


def _pad_results(workdir: str) -> dict:
  return files.read_json(files.join(workdir, 'results.json'))['pad']


def _single_on(center: str, target: str, attacks: str = '') -> Combined:
  """A Single run's measurement on one of the domains it scored."""
  def read(dirs):
    return {'pad': _pad_results(dirs[0])['domains'][target]}
  return Combined(f'single_{center}{attacks}_on_{target}', (_single(center, attacks),), read)


def _fused(centers, target: str, attacks=()) -> Combined:
  """The paper's Fused: the Single runs' per-video scores on `target` averaged."""
  attacks = attacks or ('',) * len(centers)
  return Combined(f'fused_{"".join(centers)}_on_{target}',
                  tuple(_single(c, a) for c, a in zip(centers, attacks)),
                  lambda dirs: {'pad': baselines.fused_metrics(dirs, target)})


def _method(key: str, protocol: str) -> Run | Combined:
  sources, target = pad_benchmark.PROTOCOLS[protocol]
  return _fused(sources, target) if key == 'fused' else Run(f'pad/{key}', f'protocol={protocol}')


def _table3_rows() -> tuple[Row, ...]:
  rows = []
  for protocol, (sources, target) in pad_benchmark.PROTOCOLS.items():
    rows += [Row(f'Single {c} -> {target}', _single_on(c, target),
                 PAPER_III['single'][(c, target)]) for c in sources]
  for label, key in (('Fused', 'fused'), ('FedPAD', 'fedpad'), ('FedGPAD', 'fedgpad'),
                     ('All', 'all')):
    rows += [Row(f'{label} {ARROW[p]}', _method(key, p), PAPER_III[key][p])
             for p in pad_benchmark.PROTOCOLS]
  return tuple(rows)


def _calibration_rows() -> tuple[Row, ...]:
  """Table I: each domain's Single model in its own domain and in every other one."""
  def row(center):
    def read(dirs):
      pad = _pad_results(dirs[0])
      return {'pad': {'in_domain': pad['in_domain'], **pad['domains']}}
    return Row(f'Single {center}', Combined(f'calibration_{center}', (_single(center),), read),
               (None,) * (len(DOMAINS) + 1))
  return tuple(row(c) for c in DOMAINS)


# Table V's methods: (row label, config, its argument beside protocol=, the paper's row). FedMA
# matches the Table II network without ES and Dec, so FedAvg of that network (our FedPAD's
# backbone=pad_net) is its like-for-like row; the paper's FedAvg is its FedPAD (ResNet-18).
TABLE5_METHODS = (('FedAvg (our FedPAD)', 'fedpad', '', 'FedAvg'),
                  ('FedAvg (Table II network)', 'fedpad', ',backbone=pad_net', 'FedAvg'),
                  ('FedMA', 'fedma', '', 'FedMA'),
                  ('FedGPAD', 'fedgpad', '', 'FedGPAD'))


def _table5_rows() -> tuple[Row, ...]:
  return tuple(Row(f'{label} {ARROW[p]}', Run(f'pad/{name}', f'protocol={p}{arg}'),
                   PAPER_V[paper][p])
               for label, name, arg, paper in TABLE5_METHODS for p in pad_benchmark.PROTOCOLS)


def _per_protocol(label: str) -> tuple[str, ...]:
  """A method's rows over the four protocols (an ordering averages them, as the paper does)."""
  return tuple(f'{label} {ARROW[p]}' for p in pad_benchmark.PROTOCOLS)


SINGLE_ROWS = tuple(f'Single {c} -> {target}'
                    for sources, target in pad_benchmark.PROTOCOLS.values() for c in sources)


def _ahead(ahead, behind, claim: str, columns=('pad/hter',)) -> tuple[Ordering, ...]:
  """Rows `ahead` (a label or several) beat rows `behind`: a lower HTER, a higher AUC."""
  def labels(rows):
    return (rows,) if isinstance(rows, str) else rows
  return tuple(Ordering(labels(ahead), labels(behind), column, claim,
                        lower_is_better=column != 'pad/auc') for column in columns)


def _average_ahead(ahead: str, behind: str, claim: str = '',
                   columns=('pad/hter', 'pad/auc')) -> tuple[Ordering, ...]:
  """A method ahead of another on the average of the four protocols (Single: of its 12 rows)."""
  rows = {label: SINGLE_ROWS if label == 'Single' else _per_protocol(label)
          for label in (ahead, behind)}
  return _ahead(rows[ahead], rows[behind],
                (claim or f'{ahead} ahead of {behind}') + ', average of the four protocols',
                columns)


# Table X: I trains on print attacks only, O on video (screen) attacks only; M has both.
_TABLE10_ATTACKS = (('I', 'print'), ('O', 'video'))
_MIXED = 'I (print) & O (video) -> M'


def _table10_rows() -> tuple[Row, ...]:
  centers, attacks = zip(*_TABLE10_ATTACKS)
  federated = 'centers=IO,target=M,attacks=print-video'
  return (Row('Single I (print) -> M', _single_on('I', 'M', 'print'), PAPER_X['single_I']),
          Row('Single O (video) -> M', _single_on('O', 'M', 'video'), PAPER_X['single_O']),
          Row(f'Fused {_MIXED}', _fused(centers, 'M', attacks), PAPER_X['fused']),
          Row(f'FedPAD {_MIXED}', Run('pad/fedpad', federated), PAPER_X['fedpad']),
          Row(f'FedGPAD {_MIXED}', Run('pad/fedgpad', federated), PAPER_X['fedgpad']))


TABLE10_ORDERINGS = (_ahead(f'FedGPAD {_MIXED}', f'FedPAD {_MIXED}', 'FedGPAD ahead of FedPAD')
                     + _ahead(f'FedPAD {_MIXED}', f'Fused {_MIXED}', 'FedPAD ahead of Fused')
                     + _ahead(f'Fused {_MIXED}', 'Single I (print) -> M',
                              'Fused ahead of Single I (print)')
                     + _ahead(f'Fused {_MIXED}', 'Single O (video) -> M',
                              'Fused ahead of Single O (video)'))


def _ablation(protocol: str = 'OCM_I', **weights: str) -> Run:
  return Run('pad/fedgpad', f'protocol={protocol}',
             tuple((f'fedgpad.loss_weights.{k}', v) for k, v in weights.items()))


# Table VI's Diff and Rec rows on every protocol (ours): whether dropping a disentanglement term
# helps beyond O&C&M -> I, where it did in every seed.
_TERMS_RUNS = (('FedGPAD', lambda p: _method('fedgpad', p)),
               ('FedGPAD without Diff', lambda p: _ablation(p, diff='0.0')),
               ('FedGPAD without Rec', lambda p: _ablation(p, rec='0.0')),
               ('FedPAD', lambda p: _method('fedpad', p)))
_TERMS_ROWS = tuple(Row(f'{label} {ARROW[p]}', make(p), (None,) * 3)
                    for label, make in _TERMS_RUNS for p in pad_benchmark.PROTOCOLS)


def _centers_label(method: str, sources, target: str) -> str:
  """A Tables VIII-IX row: 'FedGPAD O&M&I -> C'."""
  return f'{method} {"&".join(sources)} -> {target}'


def _centers(target: str, groups) -> tuple[Row, ...]:
  rows = []
  for method in ('fedpad', 'fedgpad'):
    for sources in groups:
      run = Run(f'pad/{method}', f'centers={"".join(sources)},target={target}')
      label = _centers_label('FedPAD' if method == 'fedpad' else 'FedGPAD', sources, target)
      rows.append(Row(label, run, PAPER_CENTERS[target][method][len(sources)]))
  return tuple(rows)


PAPER_CENTERS = {
    'C': {'fedpad': {2: (49.22, 49.10, 51.19), 3: (42.27, 36.95, 70.49), 4: (41.74, 29.90, 78.47)},
          'fedgpad': {2: (34.17, 41.78, 68.74), 3: (28.69, 27.55, 80.58),
                      4: (24.20, 23.51, 85.34)}},
    'S': {'fedpad': {2: (25.11, 20.64, 88.08), 3: (29.61, 14.61, 93.30), 4: (12.45, 8.98, 97.18)},
          'fedgpad': {2: (13.67, 13.85, 93.72), 3: (11.49, 11.59, 95.54),
                      4: (9.72, 9.86, 96.37)}},
}

TABLE3_ORDERINGS = sum((_average_ahead(a, b) for a, b in (
    ('FedGPAD', 'FedPAD'), ('FedPAD', 'Fused'), ('Fused', 'Single'), ('All', 'FedPAD'),
    ('FedGPAD', 'All'))), ())


def _centers_orderings(target: str, groups) -> tuple[Ordering, ...]:
  """Tables VIII-IX: each added data center helps both methods, FedGPAD ahead at every count."""
  def label(method, sources):
    return _centers_label(method, sources, target)
  more = sum((_ahead(label(m, bigger), label(m, smaller),
                     f'{m}: {"&".join(bigger)} ahead of {"&".join(smaller)}')
              for m in ('FedPAD', 'FedGPAD') for smaller, bigger in zip(groups, groups[1:])), ())
  return more + sum((_ahead(label('FedGPAD', g), label('FedPAD', g),
                            f'FedGPAD ahead of FedPAD on {"&".join(g)}') for g in groups), ())


CENTER_GROUPS = {'C': (('O', 'I'), ('O', 'M', 'I'), ('O', 'M', 'I', 'S')),
                 'S': (('I', 'M'), ('I', 'C', 'M'), ('I', 'C', 'M', 'O'))}

CALIBRATION_COLUMNS = ('pad/in_domain/hter',) + tuple(f'pad/{d}/hter' for d in DOMAINS)

TABLES = {
    1: Table('The PAD benchmark\'s calibration (for the paper\'s Table I, its data sets): HTER of '
             'each domain\'s Single model', 'results', CALIBRATION_COLUMNS, _calibration_rows(),
             'a detector trained on one data set transfers imperfectly to another (its Single '
             'rows of Table III: 27-49 % HTER) and pooling data sets helps (Table III\'s All)',
             SETTING + ' In-domain: the data center\'s own held-out subjects, threshold chosen '
             'on their scores.',
             titles=('in-domain',) + tuple(f'on {d}' for d in DOMAINS)),
    3: Table('FedGPAD Table III: single, fused, federated and pooled data centers', 'results',
             COLUMNS, _table3_rows(),
             'FedGPAD < FedPAD < Fused < Single in HTER on average (18.59, 32.17, 35.75, 36.43), '
             'FedGPAD even below All (27.26), which pools the data centers',
             SETTING, titles=TITLES, orderings=TABLE3_ORDERINGS),
    5: Table('FedGPAD Table V: federated learning methods', 'results', COLUMNS, _table5_rows(),
             'FedGPAD < FedMA < FedAvg in average HTER (18.59, 29.15, 32.17)',
             SETTING, titles=TITLES,
             orderings=(_average_ahead('FedGPAD', 'FedAvg (our FedPAD)',
                                       'FedGPAD ahead of FedAvg')
                        + _average_ahead('FedGPAD', 'FedMA', 'FedGPAD ahead of FedMA')
                        + _average_ahead('FedMA', 'FedAvg (our FedPAD)',
                                         'FedMA ahead of FedAvg')
                        + _average_ahead('FedMA', 'FedAvg (Table II network)',
                                         'FedMA ahead of FedAvg of the same network'))),
    6: Table('FedGPAD Table VI: each loss term (O&C&M -> I)', 'results', COLUMNS,
             (Row('without Diff', _ablation(diff='0.0'), (None, None, None)),
              Row('without Rec', _ablation(rec='0.0'), (None, None, None)),
              Row('without Dep', _ablation(depth='0.0'), (None, None, None)),
              Row('FedGPAD (all terms)', Run('pad/fedgpad', 'protocol=OCM_I'),
                  PAPER_III['fedgpad']['OCM_I'])),
             'removing any of Diff, Rec and Dep raises the HTER (31.71, 40.29, 27.04 against '
             '10.97; the extracted text does not say which row drops which term)',
             SETTING, titles=TITLES,
             orderings=sum((_ahead('FedGPAD (all terms)', f'without {term}',
                                   f'FedGPAD ahead of FedGPAD without {term}')
                            for term in ('Diff', 'Rec', 'Dep')), ())),
    7: Table('FedGPAD Table VII: domain disentanglement', 'results', COLUMNS,
             tuple(Row(f'{label} {ARROW[p]}', Run(f'pad/{name}', f'protocol={p}{arg}'),
                       PAPER_VII_WITHOUT[p] if name == 'fedpad' else PAPER_III['fedgpad'][p])
                   # The same network without ES and Dec: FedPAD on the Table II network.
                   for name, label, arg in (('fedpad', 'without disentanglement (FedPAD, Table '
                                             'II network)', ',backbone=pad_net'),
                                            ('fedgpad', 'FedGPAD', ''))
                   for p in pad_benchmark.PROTOCOLS),
             'disentanglement lowers the average HTER from 26.80 to 18.59', SETTING,
             titles=TITLES,
             orderings=_average_ahead('FedGPAD', 'without disentanglement (FedPAD, Table II '
                                      'network)',
                                      'FedGPAD ahead of the same network without '
                                      'disentanglement', ('pad/hter',))),
    8: Table('FedGPAD Table VIII: more data centers, target C', 'results', COLUMNS,
             _centers('C', CENTER_GROUPS['C']), 'more data centers help both methods', SETTING,
             titles=TITLES, orderings=_centers_orderings('C', CENTER_GROUPS['C'])),
    9: Table('FedGPAD Table IX: more data centers, target S', 'results', COLUMNS,
             _centers('S', CENTER_GROUPS['S']), 'more data centers help both methods', SETTING,
             titles=TITLES, orderings=_centers_orderings('S', CENTER_GROUPS['S'])),
    10: Table('FedGPAD Table X: data centers with one attack type each (I print, O video; M has '
              'both)', 'results', COLUMNS, _table10_rows(),
              'FedGPAD <= FedPAD < Fused < Single in HTER (28.19, 30.51, 35.22; 38.82 and '
              '35.76): training across attack types helps', SETTING, titles=TITLES,
              orderings=TABLE10_ORDERINGS),
    '_terms': Table(
        'FedGPAD without Diff or Rec on every protocol (ours; Table VI on O&C&M -> I only)',
        'results', COLUMNS, _TERMS_ROWS,
        'removing Diff or Rec raises the HTER (Table VI, O&C&M -> I)', SETTING, titles=TITLES,
        orderings=sum((_average_ahead('FedGPAD', f'FedGPAD without {term}')
                       for term in ('Diff', 'Rec')), ())),
    '_fedma': Table(
        "FedMA's global neuron: the posterior mean (the authors' code) or the plain mean of the "
        'matched neurons (ours; why FedMA trails FedAvg here)', 'results', COLUMNS,
        tuple(Row(f'{label} {ARROW[p]}', Run(f'pad/{config}', f'protocol={p}{arg}', overrides),
                  (None,) * 3)
              for label, config, arg, overrides in (
                  ('FedMA', 'fedma', '', ()),
                  ('FedMA, matched mean', 'fedma', '', (('fedma.estimate', 'matched_mean'),)),
                  ('FedAvg (Table II network)', 'fedpad', ',backbone=pad_net', ()))
              for p in pad_benchmark.PROTOCOLS),
        'none: FedMA trails FedAvg here (Table V); no paper measures the estimate',
        SETTING, titles=TITLES,
        orderings=(_average_ahead('FedMA, matched mean', 'FedMA',
                                  'the matched mean ahead of the posterior mean')
                   + _average_ahead('FedMA, matched mean', 'FedAvg (Table II network)',
                                    'FedMA with the matched mean ahead of FedAvg of the same '
                                    'network'))),
    '_all_batch_norm': Table(
        'All: BatchNorm over the pooled batch or per data center, Adam kept or restarted (ours; '
        'why All is no upper bound)', 'results', ('pad/in_domain/hter',) + COLUMNS,
        tuple(Row(f'{label} {ARROW[p]}', Run(f'pad/{config}', f'protocol={p}{arg}', overrides),
                  (None,) * 4)
              for label, config, arg, overrides in (
                  ('All, BatchNorm over the pooled batch', 'all', '', ()),
                  ('All, BatchNorm per data center', 'all', ',batch_norm=per_center', ()),
                  # FedPAD's update but for one thing: one fresh Adam step on the pooled
                  # gradient, where FedPAD averages one per data center.
                  ('All, BatchNorm per data center, Adam restarted every step', 'all',
                   ',batch_norm=per_center', (('federated.client_optimizer_state', 'reset'),)),
                  ('FedPAD', 'fedpad', '', ()))
              for p in pad_benchmark.PROTOCOLS),
        'All (27.26 average HTER) above FedPAD (32.17); no paper measures the BatchNorm choice',
        SETTING + ' In-domain: the data centers\' held-out subjects, threshold chosen on their '
        'scores.', titles=('in-domain HTER',) + TITLES,
        orderings=_average_ahead('All, BatchNorm over the pooled batch', 'FedPAD',
                                 'All ahead of FedPAD')),
}


def figure5(root: str, extra: tuple, seeds: tuple[int, ...], out_dir: str | None) -> str:
  """The paper's Fig. 5 (seed `seeds[0]`): ROC curves of Fused, FedPAD, FedGPAD and All per
  protocol, drawn from the runs' per-video scores on the target (pad_fig5.png)."""
  from fedjax_face.eval import plots  # pylint: disable=g-import-not-at-top
  from fedjax_face.eval.pad import evaluators, metrics  # pylint: disable=g-import-not-at-top
  from fedjax_face.io import artifacts  # pylint: disable=g-import-not-at-top

  def run_dir(run: Run) -> str:
    return spec.workdir(root, run, extra, seeds[0])

  def target_scores(run: Run, target: str):
    path = files.join(run_dir(run), evaluators.video_scores_file(target))
    if not files.exists(path):
      return None
    arrays = files.read_npz(path)
    return arrays['scores'], arrays['labels']

  lines = ['## Fig. 5: ROC curves per protocol (picture: pad_fig5.png)', '',
           '| protocol | method | AUC (%) |', '| --- | --- | --- |']
  panels = {}
  for protocol, (sources, target) in pad_benchmark.PROTOCOLS.items():
    curves = {}
    if all(target_scores(_single(c), target) is not None for c in sources):
      curves['Fused'] = baselines.fused_scores([run_dir(_single(c)) for c in sources], target)
    for label, key in (('FedPAD', 'fedpad'), ('FedGPAD', 'fedgpad'), ('All', 'all')):
      scored = target_scores(_method(key, protocol), target)
      if scored is not None:
        curves[label] = scored
    panels[ARROW[protocol]] = {}
    for label, (scores, labels) in curves.items():
      fpr, tpr, _ = metrics.roc(scores, labels)
      panels[ARROW[protocol]][label] = (fpr, tpr)
      lines.append(f'| {ARROW[protocol]} | {label} | {100 * metrics.auc(scores, labels):.2f} |')
  if out_dir and any(panels.values()):
    artifacts.write_figure(files.join(out_dir, 'pad_fig5.png'), plots.roc_panels_figure(panels))
  return '\n'.join(lines + [''])


EXTRAS = {3: ('pad_fig5.md', figure5)}
