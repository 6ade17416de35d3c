"""The FedFV paper's tables and Fig. 5: real config arguments, shared runs, the mode statistic."""

import json
import os

import numpy as np
import pytest

from fedjax_face.io import artifacts
from fedjax_face.proj.fedfv import reproduce
from fedjax_face.tools.tables import archive
from fedjax_face.tools.tables import spec
from tests import config_files


def test_every_table_run_loads_and_the_default_run_is_shared():
  for table in reproduce.TABLES.values():
    assert table.columns == ('lfw', 'agedb_30', 'cfp_fp')   # the paper's column order
    for row in table.rows:
      config_files.load_config(row.run.config, row.run.arg)   # raises on a bad argument
  fedfv100 = reproduce.TABLES[3].rows[-1].run
  assert fedfv100 == reproduce.TABLES[1].rows[4].run == reproduce.TABLES[2].rows[0].run
  assert fedfv100.arg == ''
  assert [r.run.arg for r in reproduce.TABLES[1].rows] == [
      'n=1', 'n=5', 'n=10', 'n=50', '', 'n=500', 'n=1000']


def test_configs_the_tables_name_run_the_variants_they_say():
  rows = {row.label: row.run for row in reproduce.TABLES[3].rows}
  assert config_files.load_config(rows['FedUV-127'].config, 'n=127').feduv.code_length == 127
  assert config_files.load_config(rows['FedFV-100'].config, '').fedfv.num_equivalent == 100
  k5 = reproduce.TABLES[2].rows[2].run
  assert config_files.load_config(k5.config, k5.arg).fedfv.group_size == 5


def test_histogram_mode_is_the_fullest_bin_not_the_mean():
  values = np.concatenate([np.full(60, -0.34), np.full(40, 0.61)])
  summary = reproduce.cosine_summary(values)
  assert abs(summary['mean']) < 0.1 and summary['n'] == 100
  # -0.34 falls in the bin [-0.35, -0.325) of 80 bins over [-1, 1]: centre -0.3375.
  assert summary['counts'][26] == 60 and summary['counts'][64] == 40   # 0.61: [0.6, 0.625)
  assert sum(summary['counts']) == 100
  assert abs(reproduce.histogram_mode(summary['counts']) - (-0.3375)) < 1e-12


def test_figure5_reads_the_table3_runs(tmp_path):
  rows = {row.label: row.run for row in reproduce.TABLES[3].rows}
  for label, centre in (('Centralized', -0.31), ('FedAwS', 0.01)):
    for seed in (0, 1):
      workdir = spec.workdir(str(tmp_path), rows[label], (), seed)
      # 600 pairs at the mode, 400 at 0.5: the mean is elsewhere.
      cross = np.concatenate([np.full(600, centre + 0.001 * seed), np.full(400, 0.5)])
      artifacts.write_arrays(f'{workdir}/class_embedding_similarity.npz',
                             {'within': np.zeros(0, np.float32), 'cross': cross})
  text = reproduce.figure5(str(tmp_path), (), (0, 1), str(tmp_path / 'docs'))
  # Modes: the bin centres -0.3125 and 0.0125; means 0.6 x (-0.3095) + 0.4 x 0.5 = 0.0143 and
  # 0.6 x 0.0105 + 0.2 = 0.2063; the stds of the two-point mixtures below.
  std_central = np.std(np.concatenate([np.full(600, -0.31), np.full(400, 0.5)]))
  std_aws = np.std(np.concatenate([np.full(600, 0.01), np.full(400, 0.5)]))
  assert (f'| Centralized | -0.31 ± 0.00 | 0.01 ± 0.00 | {std_central:.2f} ± 0.00 | 2 |'
          in text)
  assert f'| FedAwS | 0.01 ± 0.00 | 0.21 ± 0.00 | {std_aws:.2f} ± 0.00 | 2 |' in text
  assert '| FedUV-511 | — | — | — | 0 |' in text
  assert (tmp_path / 'docs' / 'fedfv_fig5.png').stat().st_size > 0


def test_the_archive_keeps_what_figure5_reads_and_figure5_reads_it_the_same(tmp_path):
  """Table 3's runs are archived with their cosines' summary instead of every pair's cosine; Fig.
  5 made from the archive is the page and picture made from the sweep's own files."""
  rows = {row.label: row.run for row in reproduce.TABLES[3].rows}
  rng = np.random.default_rng(0)
  sweep, archive_dir = tmp_path / 'sweep', tmp_path / 'results' / 'fedfv_tables'
  for label in ('Centralized', 'FedFace'):
    for seed in (0, 1):
      workdir = spec.workdir(str(sweep), rows[label], (), seed)
      cross = rng.normal(0.3 * seed, 0.4, 5000).astype(np.float32)   # some beyond [-1, 1]
      artifacts.write_arrays(f'{workdir}/{reproduce.FIGURE5_FILE}',
                             {'within': np.zeros(0, np.float32), 'cross': cross})
      (sweep / os.path.basename(workdir) / 'results.json').write_text('{}')
  archive.archive_runs(reproduce.TABLES[3], str(sweep), (), (0, 1), str(archive_dir))
  kept = sorted(os.listdir(archive_dir / rows['FedFace'].name()))
  assert kept == [reproduce.FIGURE5_SUMMARY, 'results.json']
  from_sweep = reproduce.figure5(str(sweep), (), (0, 1), str(tmp_path / 'from_sweep'))
  from_archive = reproduce.figure5(str(archive_dir), (), (0, 1), str(tmp_path / 'from_archive'))
  assert from_archive == from_sweep and '| FedFace |' in from_archive
  assert ((tmp_path / 'from_archive' / 'fedfv_fig5.png').read_bytes()
          == (tmp_path / 'from_sweep' / 'fedfv_fig5.png').read_bytes())


def test_a_summary_on_other_bins_is_refused(tmp_path):
  run_dir = tmp_path / 'run'
  run_dir.mkdir()
  summary = reproduce.cosine_summary(np.zeros(3)) | {'bins': 40}
  (run_dir / reproduce.FIGURE5_SUMMARY).write_text(json.dumps(summary))
  with pytest.raises(ValueError, match=r"40 bins over \[-1.0, 1.0\]; expected Fig. 5's 80"):
    reproduce.read_cosine_summary(str(run_dir))
