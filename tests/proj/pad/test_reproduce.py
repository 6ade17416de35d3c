"""The FedGPAD paper's tables: every run names a real config and validates; a Single run serves
every protocol's Single row and the calibration; Fused combines the Single runs of its
protocol's data centers; Fig. 5 draws the runs' scores."""

import json

import numpy as np

from fedjax_face import experiment
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval.pad import evaluators, metrics
from fedjax_face.proj.pad import reproduce
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict
from tests import config_files


def test_every_run_loads_and_validates():
  for table in reproduce.TABLES.values():
    assert len(table.titles) == len(table.columns)
    for row in table.rows:
      runs = row.run.runs if isinstance(row.run, spec.Combined) else (row.run,)
      for run in runs:
        experiment.validate(config_files.run_config(run))


def test_fused_rows_combine_their_protocols_single_runs(tmp_path):
  fused = [row.run for row in reproduce.TABLES[3].rows if row.label.startswith('Fused')]
  assert len(fused) == len(pad_benchmark.PROTOCOLS)
  for row, (sources, _) in zip(fused, pad_benchmark.PROTOCOLS.values()):
    assert [run.arg for run in row.runs] == [f'center={c}' for c in sources]
  # End to end over finished (fake) runs: the combined row's result is the mean of their
  # scores on the protocol's target (O&C&I -> M).
  row = fused[0]
  for i, run in enumerate(row.runs):
    workdir = tmp_path / run.name()
    workdir.mkdir()
    (workdir / 'results.json').write_text('{}')
    np.savez(workdir / evaluators.video_scores_file('M'),
             scores=np.array([0.9, 0.3 + 0.1 * i, 0.2]), labels=np.array([1, 1, 0]))
  result = table_runs.combined_result(row, str(tmp_path), (), 0, dry_run=True)
  mean = np.mean([[0.9, 0.3 + 0.1 * i, 0.2] for i in range(len(row.runs))], axis=0)   # 0.4
  assert result == {'pad': metrics.pad_metrics(mean, [1, 1, 0])}
  # A missing run leaves the row empty; a failed one marks it failed.
  (tmp_path / row.runs[1].name() / 'results.json').unlink()
  assert table_runs.combined_result(row, str(tmp_path), (), 0, dry_run=True) is None
  (tmp_path / row.runs[1].name() / table_runs.FAILED).write_text('{"returncode": 1, "error": "x"}')
  assert table_runs.combined_result(row, str(tmp_path), (), 0, dry_run=True) == {'failed': 'x'}


def _single_result(tmp_path, center: str) -> dict:
  pad = {'in_domain': {'hter': 0.01, 'eer': 0.02, 'auc': 0.99},
         'domains': {d: {'hter': 0.1 * i, 'eer': 0.2, 'auc': 0.7}
                     for i, d in enumerate(pad_benchmark.DOMAIN_NAMES) if d != center}}
  workdir = tmp_path / reproduce._single(center).name()  # pylint: disable=protected-access
  workdir.mkdir()
  (workdir / 'results.json').write_text(json.dumps({'pad': pad}))
  return pad


def test_one_single_run_per_center_serves_every_protocol_and_the_calibration(tmp_path):
  pad = _single_result(tmp_path, 'C')
  results = table_runs.run_all(reproduce.TABLES[3], str(tmp_path), (), dry_run=True)
  singles = {row.label: results.get((row.run, 0)) for row in reproduce.TABLES[3].rows
             if row.label.startswith('Single C')}
  assert singles == {f'Single C -> {t}': {'pad': pad['domains'][t]} for t in ('M', 'I', 'O')}
  calibration = table_runs.run_all(reproduce.TABLES[1], str(tmp_path), (), dry_run=True)
  text = markdown.render(reproduce.TABLES[1], calibration, 'cmd')
  # Columns: in-domain, then on O, C, I, M, S (its own domain empty).
  assert '| Single C | 1.00 | 0.00 | — | 20.00 | 30.00 | 40.00 |' in text   # in %
  assert '| Single O | — | — | — | — | — | — |' in text


def test_figure5_draws_the_finished_runs_of_each_protocol(tmp_path):
  labels = np.array([1, 1, 0, 0])
  for center, scores in (('O', [0.9, 0.3, 0.4, 0.1]), ('C', [0.5, 0.8, 0.2, 0.6]),
                         ('I', [0.7, 0.6, 0.5, 0.2])):
    workdir = tmp_path / reproduce._single(center).name()  # pylint: disable=protected-access
    workdir.mkdir()
    np.savez(workdir / evaluators.video_scores_file('M'), scores=np.array(scores), labels=labels)
  fedgpad = tmp_path / spec.Run('pad/fedgpad', 'protocol=OCI_M').name()
  fedgpad.mkdir()
  np.savez(fedgpad / evaluators.video_scores_file('M'), scores=np.array([0.9, 0.8, 0.1, 0.2]),
           labels=labels)
  text = reproduce.figure5(str(tmp_path), (), (0,), str(tmp_path))
  fused = np.mean([[0.9, 0.3, 0.4, 0.1], [0.5, 0.8, 0.2, 0.6], [0.7, 0.6, 0.5, 0.2]], axis=0)
  assert f'| O&C&I -> M | Fused | {100 * metrics.auc(fused, labels):.2f} |' in text
  assert '| O&C&I -> M | FedGPAD | 100.00 |' in text
  assert 'FedPAD' not in text and 'O&M&I -> C |' not in text   # not run: not drawn
  assert (tmp_path / 'pad_fig5.png').stat().st_size > 0


def test_table3_orderings_average_each_methods_protocols_as_the_paper_does():
  table = reproduce.TABLES[3]
  orderings = {(o.claim.split(',')[0], o.column): o for o in table.orderings}
  assert [claim for claim, column in orderings if column == 'pad/hter'] == [
      'FedGPAD ahead of FedPAD', 'FedPAD ahead of Fused', 'Fused ahead of Single',
      'All ahead of FedPAD', 'FedGPAD ahead of All']
  fused_single = orderings[('Fused ahead of Single', 'pad/hter')]
  assert fused_single.ahead == tuple(f'Fused {arrow}' for arrow in reproduce.ARROW.values())
  assert len(fused_single.behind) == 12 and fused_single.lower_is_better
  assert not orderings[('Fused ahead of Single', 'pad/auc')].lower_is_better
  # HTERs 10, 20, 30, 40 % (mean 25) against 20, 20, 40, 60 % (mean 35): FedGPAD leads by 10.
  rows = {row.label: row.run for row in table.rows}
  results = {}
  hters = zip(reproduce.ARROW.values(), (0.1, 0.2, 0.3, 0.4), (0.2, 0.2, 0.4, 0.6))
  for arrow, gpad, pad in hters:
    results[(rows[f'FedGPAD {arrow}'], 0)] = {'pad': {'hter': gpad}}
    results[(rows[f'FedPAD {arrow}'], 0)] = {'pad': {'hter': pad}}
  ordering = orderings[('FedGPAD ahead of FedPAD', 'pad/hter')]
  assert verdict.ordering_margins(table, ordering, results, (0,)) == {0: 10.0}


def test_the_terms_table_drops_one_weight_on_each_protocol_and_shares_table_vi():
  table = reproduce.TABLES['_terms']
  runs = {row.label: row.run for row in table.rows}
  table6 = {row.label: row.run for row in reproduce.TABLES[6].rows}
  assert runs['FedGPAD without Diff O&C&M -> I'] == table6['without Diff']
  assert runs['FedGPAD without Rec O&M&I -> C'].overrides == (('fedgpad.loss_weights.rec', '0.0'),)
  assert runs['FedGPAD without Rec O&M&I -> C'].arg == 'protocol=OMI_C'
  assert len(table.rows) == 4 * len(pad_benchmark.PROTOCOLS)
