"""The FedGPAD paper's tables: every run names a real config and validates; Fused combines the
Single runs of its protocol's data centers."""

import numpy as np

from fedjax_face import experiment
from fedjax_face.data import pad_benchmark
from fedjax_face.eval.pad import evaluators, metrics
from fedjax_face.proj.pad import reproduce
from fedjax_face.tools import tables
from tests import config_files


def test_every_run_loads_and_validates():
  for table in reproduce.TABLES.values():
    assert len(table.titles) == len(table.columns)
    for row in table.rows:
      runs = row.run.runs if isinstance(row.run, tables.Combined) else (row.run,)
      for run in runs:
        config = config_files.load_config(run.config, run.arg or None)
        for field, value in run.overrides:
          *path, key = field.split('.')
          section = config
          for part in path:
            section = section[part]
          section[key] = type(section[key])(value)
        experiment.validate(config)


def test_fused_rows_combine_their_protocols_single_runs(tmp_path):
  fused = [row.run for row in reproduce.TABLES[3].rows if isinstance(row.run, tables.Combined)]
  assert len(fused) == len(pad_benchmark.PROTOCOLS)
  for row, (protocol, (sources, _)) in zip(fused, pad_benchmark.PROTOCOLS.items()):
    assert [run.arg for run in row.runs] == [f'protocol={protocol},center={c}' for c in sources]
  # End to end over finished (fake) runs: the combined row's result is the mean of their scores.
  row = fused[0]
  for i, run in enumerate(row.runs):
    workdir = tmp_path / run.name()
    workdir.mkdir()
    (workdir / 'results.json').write_text('{}')
    np.savez(workdir / evaluators.VIDEO_SCORES, scores=np.array([0.9, 0.3 + 0.1 * i, 0.2]),
             labels=np.array([1, 1, 0]))
  result = tables.combined_result(row, str(tmp_path), (), 0, dry_run=True)
  mean = np.mean([[0.9, 0.3 + 0.1 * i, 0.2] for i in range(len(row.runs))], axis=0)   # 0.4
  assert result == {'pad': metrics.pad_metrics(mean, [1, 1, 0])}
  # A missing run leaves the row empty; a failed one marks it failed.
  (tmp_path / row.runs[1].name() / 'results.json').unlink()
  assert tables.combined_result(row, str(tmp_path), (), 0, dry_run=True) is None
  (tmp_path / row.runs[1].name() / tables.FAILED).write_text('{"returncode": 1, "error": "x"}')
  assert tables.combined_result(row, str(tmp_path), (), 0, dry_run=True) == {'failed': 'x'}
