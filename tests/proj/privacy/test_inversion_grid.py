"""The privacy tables' gradient-inversion grid (Table 3, configs/privacy/inversion_grid.py): its
runs are FedPE and FedGC over local batch 1, 4, 16 x local steps 1, 2 with the attack on, each
config the cell its label names; and its markdown is read from results.json alone."""

import re

from fedjax_face.proj.privacy import reproduce
from fedjax_face.tools.tables import markdown
from tests import config_files

GRID = reproduce.TABLES[3]


def test_each_run_is_the_cell_its_label_names():
  cells = set()
  for row in GRID.rows:
    c = config_files.run_config(row.run)
    method, batch, steps = re.match(r'(FedPE|FedGC) batch (\d+), (\d+) steps?,',
                                    row.label).groups()
    assert c.algorithm == method.lower()
    assert (c.federated.batch_size, c.federated.local_steps) == (int(batch), int(steps))
    assert c.secure_aggregation.enabled == ('secure aggregation' in row.label)
    assert c.evals.inversion.labels == ('recovered' if 'labels recovered' in row.label else 'true')
    assert c.evals.inversion.targets > 0 and c.evals.inversion.round == c.num_rounds
    if row.label.endswith('DP off'):
      cells.add((method, c.federated.batch_size, c.federated.local_steps))
  assert cells == {(m, int(b), int(s)) for m in ('FedPE', 'FedGC') for b in reproduce.BATCHES
                   for s in reproduce.STEPS}


def test_the_grids_markdown_reads_results_json_alone():
  rows = GRID.rows[:2]
  result = {'inversion': {'psnr': 12.345, 'ssim': 0.1234, 'identity_match_mean_embedding': 0.25,
                          'identity_match_mean_embedding_true_images': 0.875,
                          'identity_chance': 0.3125},
            'verification': {'lfw': {'accuracy': 0.75}}}
  recovered = next(row for row in GRID.rows if 'labels recovered' in row.label)
  with_labels = {**result, 'inversion': {**result['inversion'], 'label_recovery': {'accuracy': 0.5}}}
  text = markdown.render(GRID, {(rows[0].run, 0): result, (recovered.run, 0): with_labels}, 'cmd')
  lines = text.splitlines()
  assert ('| FedPE batch 1, 1 step, DP off | curious server, each update before aggregation, '
          'given the true labels | 12.35 | 0.123 | 0.25 | 0.88 | 0.31 | — | 75.00 |') in lines
  assert (f'| {recovered.label} | {recovered.threat} | 12.35 | 0.123 | 0.25 | 0.88 | 0.31 | '
          '0.50 | 75.00 |') in lines
  assert f'| {rows[1].label} | {rows[1].threat} | — | — | — | — | — | — | — |' in lines
