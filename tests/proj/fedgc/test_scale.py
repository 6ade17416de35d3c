"""FedGC's scale study (proj/fedgc/scale.py, reproduce.SCALE_TABLES['_scale' | '_scale_5seeds']):
every run validates and has exactly its cell's sizes, the default cell is the default run, each
cell's gap is judged once, and the figure's numbers by hand on fixture results.json files."""

import json
import math

import numpy as np

from fedjax_face import experiment
from fedjax_face.data import partition, participation
from fedjax_face.proj.fedgc import reproduce, scale
from tests import config_files

# (clients, IDs per client) -> (num_identities, local_steps, local_epochs, samples a round), by
# hand: 0.16 x 40 x C_k samples, the steps ceil(that / 32).
SIZES = {(36, 10): (360, 2, 0.0, 64), (36, 30): (1080, 6, 0.0, 192),
         (36, 74): (2664, 15, 0.16, 474), (72, 10): (720, 2, 0.0, 64),
         (144, 10): (1440, 2, 0.0, 64)}


def _cell(label: str) -> tuple[int, int]:
  """'FedGC, 36 clients x 30 IDs' -> (36, 30)."""
  words = label.split(', ')[1].split()
  return int(words[0]), int(words[3])


def test_every_run_validates_with_exactly_its_cell_s_sizes():
  default = config_files.load_config('fedgc/fedgc', 'loss=softmax')
  assert {'data.synthetic.num_identities': str(default.data.synthetic.num_identities),
          'federated.num_clients': str(default.federated.num_clients),
          'federated.local_epochs': str(default.federated.local_epochs),
          'federated.local_steps': str(default.federated.local_steps)} == scale.DEFAULT_FIELDS
  seen = set()
  for table in reproduce.SCALE_TABLES.values():
    for row in table.rows:
      clients, ids = cell = _cell(row.label)
      seen.add(cell)
      config = config_files.run_config(row.run)
      experiment.validate(config)
      identities, steps, epochs, samples = SIZES[cell]
      fl = config.federated
      assert (config.data.synthetic.num_identities, fl.num_clients, fl.local_steps,
              fl.local_epochs) == (identities, clients, steps, epochs), row.label
      sizes = partition.client_sizes(identities, clients, fl.partition, np.random.default_rng(0))
      assert sizes.tolist() == [ids] * clients
      n_k = ids * config.data.synthetic.images_per_identity
      work = participation.round_work(np.array([n_k]), steps=steps, batch_size=fl.batch_size,
                                      local_epochs=fl.local_epochs)
      # E = 0.16 in every cell, and the cap cuts no sample nor runs a step with none.
      assert work.tolist() == [samples] == [math.ceil(0.16 * n_k)]
      assert steps * fl.batch_size - fl.batch_size < samples <= steps * fl.batch_size
      assert (config.data.synthetic.images_per_identity, config.model.embedding_dim,
              config.num_rounds, config.data.synthetic.num_test_identities, fl.participation,
              config.head.loss) == (40, 128, 60, 300, 1.0, 'softmax')
      if row.label.startswith('FedGC'):
        assert (config.fedgc.reg_lambda, config.fedgc.reg_self_gradient) == (20.0, False)
  assert seen == set(SIZES) == set(scale.CELLS)


def test_the_default_cell_is_the_default_run_and_other_names_are_their_sizes():
  reset = {row.label: row.run for row in reproduce.TABLES[12].rows}
  assert reproduce.SCALE_RUNS[(36, 10)] == {'FedPE': reset['FedPE reset'],
                                            'FedGC': reset['FedGC reset']}
  assert reproduce.SCALE_RUNS[(36, 10)]['FedGC'].name() == 'fedgc-fedgc_loss-softmax'
  assert reproduce.SCALE_RUNS[(36, 74)]['FedPE'].name() == (
      'fedgc-fedpe_loss-softmax_num_identities-2664_local_epochs-0.16_local_steps-15')
  assert reproduce.SCALE_RUNS[(144, 10)]['FedGC'].name() == (
      'fedgc-fedgc_loss-softmax_num_identities-1440_num_clients-144')
  names = [run.name() for runs in reproduce.SCALE_RUNS.values() for run in runs.values()]
  assert len(set(names)) == len(names) == 10


def test_each_cell_s_gap_is_judged_once_on_the_six_pair_sets():
  judged = {}
  for tid, table in reproduce.SCALE_TABLES.items():
    for ordering in table.orderings:
      if len(ordering.ahead) > 1:
        continue   # the gap's growth, below
      cell = _cell(ordering.ahead[0])
      assert (ordering.ahead, ordering.behind) == ((scale.label('FedGC', cell),),
                                                   (scale.label('FedPE', cell),))
      judged.setdefault(cell, []).append((tid, ordering.column))
  columns = [f'verification/{s}/accuracy' for s in reproduce.PAIR_SETS]
  # The default cell's gap is Table 12's ('FedGC reset above FedPE reset', the same runs).
  assert judged == {cell: [('_scale_5seeds' if cell == (36, 74) else '_scale', c)
                           for c in columns] for cell in SIZES if cell != (36, 10)}
  grows = reproduce.SCALE_TABLES['_scale_5seeds'].orderings[-1]
  assert (grows.ahead, grows.behind, grows.column) == (
      ('FedGC, 36 clients x 74 IDs', 'FedPE, 36 clients x 10 IDs'),
      ('FedPE, 36 clients x 74 IDs', 'FedGC, 36 clients x 10 IDs'), 'verification/lfw/accuracy')
  # The picture is an extra page of the 5-seed table, written and checked once it is in docs.
  in_docs = '_scale_5seeds' in reproduce.TABLES
  assert reproduce.EXTRAS == ({'_scale_5seeds': ('fedgc_scale_figure.md', reproduce.scale_figure)}
                              if in_docs else {})


def _write(root, run, seed, lfw, cross_mean, cross_p99=0.75):
  name = run.name((('seed', str(seed)),) if seed else ())
  (root / name).mkdir()
  (root / name / 'results.json').write_text(json.dumps({
      'verification': {'lfw': {'accuracy': lfw}},
      'diagnostics': {'class_embedding_similarity': {'cross_mean': cross_mean,
                                                     'cross_p99': cross_p99}}}))


def test_the_figure_s_gaps_and_cosines_by_hand_on_fixture_runs(tmp_path):
  runs = reproduce.SCALE_RUNS
  # Fractions exact in binary, so that the gaps are exact: 81.25 - 75 = +6.25, 50 - 51.5625 =
  # -1.5625; FedPE's seed 2 missing, so its gap is not drawn.
  for seed, gc, pe in ((0, 0.8125, 0.75), (1, 0.5, 0.515625)):
    _write(tmp_path, runs[(36, 10)]['FedGC'], seed, gc, 0.25)
    _write(tmp_path, runs[(36, 10)]['FedPE'], seed, pe, 0.125 * (seed + 1), 0.5 + 0.25 * seed)
  _write(tmp_path, runs[(36, 10)]['FedGC'], 2, 0.75, 0.25)
  _write(tmp_path, runs[(36, 74)]['FedGC'], 0, 0.875, 0.0)
  _write(tmp_path, runs[(36, 74)]['FedPE'], 0, 0.625, 0.5)
  data = scale.figure_data(str(tmp_path), runs, (), (0, 1, 2))
  assert data[(36, 10)]['gap'] == {0: 6.25, 1: -1.5625}
  assert data[(36, 74)]['gap'] == {0: 25.0}
  assert data[(72, 10)]['gap'] == {}
  assert data[(36, 10)][scale.COSINE_COLUMNS[0]] == {'FedPE': {0: 0.125, 1: 0.25},
                                                     'FedGC': {0: 0.25, 1: 0.25, 2: 0.25}}
  page = reproduce.scale_figure(str(tmp_path), (), (0, 1, 2), None)
  lines = page.splitlines()
  # FedPE's cosines over its seeds 0, 1: mean 0.1875, std 0.125 / sqrt(2) = 0.0884; 99th pct.
  # 0.625 ± 0.25 / sqrt(2) = 0.1768. The gap's mean (6.25 - 1.5625) / 2 = 2.34375.
  assert ('| identities | 36 | 10 | 9/128 | 0: +6.25, 1: -1.56 | +2.34 | 0.188 ± 0.088 | '
          '0.250 ± 0.000 | 0.625 ± 0.177 | 0.750 ± 0.000 | 2 |') in lines
  assert ('| identities | 36 | 74 | 73/128 | 0: +25.00 | +25.00 | 0.500 | 0.000 | 0.750 | 0.750 '
          '| 1 |') in lines
  assert '| clients | 72 | 10 | 9/128 | — | — | — | — | — | — | 0 |' in lines
  assert lines.count('| clients | 36 | 10 | 9/128 | 0: +6.25, 1: -1.56 | +2.34 | 0.188 ± 0.088 | '
                     '0.250 ± 0.000 | 0.625 ± 0.177 | 0.750 ± 0.000 | 2 |') == 1
  # Drawn with cells that have no runs (the figure's pixels are not compared).
  reproduce.scale_figure(str(tmp_path), (), (0, 1, 2), str(tmp_path / 'docs'))
  assert (tmp_path / 'docs' / 'fedgc_scale.png').read_bytes()[:4] == b'\x89PNG'
