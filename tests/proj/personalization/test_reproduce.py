"""The personalization table: real configs started from FedFR's pre-training, the rows the
methods they name, FedFR against each baseline on every personalized column."""

from fedjax_face import experiment
from fedjax_face.proj.fedfr import reproduce as fedfr_tables
from fedjax_face.proj.personalization import reproduce
from tests import config_files


def test_every_run_loads_and_starts_from_fedfr_s_pretraining():
  table = reproduce.TABLES[1]
  assert len(table.titles) == len(table.columns) == 7
  for row in table.rows:
    experiment.validate(config_files.run_config(row.run))
  assert [row.run.init_from for row in table.rows] == [None] + [fedfr_tables.PRETRAIN] * 6
  # FedFR is Table 1's FedFR run, config for config (so also its workdir's name: the reason the
  # table keeps its own archive, results/personalization_tables).
  assert table.rows[1].run == fedfr_tables.TABLES[1].rows[4].run


def test_rows_are_the_methods_they_name():
  algorithms = {row.label: config_files.load_config(row.run.config, row.run.arg)
                for row in reproduce.TABLES[1].rows}
  assert {label: c.algorithm for label, c in algorithms.items()} == {
      'pre-trained (public identities)': 'centralized', 'FedFR': 'fedfr', 'FedBN': 'fedbn',
      'FedRep': 'fedrep', 'FedPer': 'fedrep', 'Ditto': 'ditto', 'APFL': 'apfl'}
  assert algorithms['FedRep'].fedrep.alternate and not algorithms['FedPer'].fedrep.alternate


def test_fedfr_is_judged_against_each_baseline_on_every_personalized_column():
  table = reproduce.TABLES[1]
  assert table.own_orderings
  personalized = [c for c in table.columns if c.startswith('personalized/')]
  assert personalized == [
      'personalized/tar/0.0001', 'personalized/tar/0.001', 'personalized/tpir/0.01',
      'personalized/tpir/0.1', 'personalized/spread/tar/worst_10pct/0.001',
      'personalized/spread/tpir/worst_10pct/0.1']
  assert [(o.ahead, o.behind, o.column) for o in table.orderings] == [
      (('FedFR',), (baseline,), column)
      for baseline in ('FedBN', 'FedRep', 'FedPer', 'Ditto', 'APFL') for column in personalized]


def test_the_anti_spoofing_table_stands_each_baseline_against_fedpad_and_fedgpad():
  table = reproduce.TABLES[2]
  for row in table.rows:
    experiment.validate(config_files.run_config(row.run))
  algorithms = {row.label: config_files.load_config(row.run.config, row.run.arg)
                for row in table.rows}
  assert {label: (c.algorithm, c.data.pad.target) for label, c in algorithms.items()} == {
      'FedPAD': ('fedpad', 'M'), 'FedGPAD': ('fedgpad', 'M'), 'FedBN': ('fedbn', 'M'),
      'FedRep': ('fedrep', 'M'), 'FedPer': ('fedrep', 'M'), 'Ditto': ('ditto', 'M'),
      'APFL': ('apfl', 'M')}
  assert table.columns == ('pad/in_domain_personal/mean/hter',
                           'pad/in_domain_personal/worst/hter',
                           'pad/in_domain_personal/mean/auc', 'pad/hter', 'pad/auc')
  baselines = ('FedBN', 'FedRep', 'FedPer', 'Ditto', 'APFL')
  assert [(o.ahead, o.behind, o.column, o.lower_is_better) for o in table.orderings] == [
      ((b,), ('FedPAD',), column, True) for b in baselines
      for column in table.columns[:2] + ('pad/hter',)] + [
      (('FedGPAD',), (b,), 'pad/hter', True) for b in baselines]


def test_the_schedule_table_varies_only_the_step_and_the_local_epochs():
  table = reproduce.TABLES[3]
  assert table.orderings == () and table.columns == reproduce.TABLES[1].columns
  runs = [row.run for row in table.rows]
  assert runs[0] == fedfr_tables.PRETRAIN and len(runs) == 1 + 5 * 4
  # Table 1's baseline runs are this table's cells at the setting's values, by name.
  assert runs[1::4] == [run for _, run in reproduce.BASELINES]
  base = config_files.run_config(reproduce.BASELINES[4][1])      # APFL at the setting's values
  assert (base.optimizer.learning_rate, base.federated.local_epochs,
          base.federated.local_steps, base.apfl.alpha_learning_rate) == (0.001, 1.0, 4, 0.001)
  for label, run in zip([row.label for row in table.rows][1:], runs[1:]):
    c = config_files.run_config(run)
    experiment.validate(c)
    fast, long = 'lr 0.01' in label, 'E = 4' in label
    assert c.optimizer.learning_rate == (0.01 if fast else 0.001), label
    assert (c.federated.local_epochs, c.federated.local_steps) == ((4.0, 15) if long
                                                                   else (1.0, 4)), label
    if c.algorithm == 'apfl':     # one eta for w, v and alpha, as the paper's
      assert c.apfl.alpha_learning_rate == c.optimizer.learning_rate, label


def test_the_tuned_table_reuses_table_3_s_runs_and_judges_against_fedfr_and_the_start():
  table, schedules = reproduce.TABLES[4], reproduce.TABLES[3]
  runs = {row.label: row.run for row in table.rows}
  assert list(runs)[:2] == ['pre-trained (public identities)', 'FedFR']
  assert runs['FedFR'] == reproduce.FEDFR_RUN and runs['pre-trained (public identities)'] == (
      fedfr_tables.PRETRAIN)
  # Its seed-0 cells are Table 3's 'lr 0.01, E = 4' runs, by name.
  tuned = {row.label: row.run for row in schedules.rows if row.label.endswith('lr 0.01, E = 4')}
  assert {label: run for label, run in runs.items() if label in tuned} == tuned and len(tuned) == 5
  assert [(o.ahead, o.behind) for o in table.orderings][::6] == (
      [(('FedFR',), (label,)) for label in tuned]
      + [((label,), ('pre-trained (public identities)',)) for label in tuned])
  assert len(table.orderings) == 60 and {o.column for o in table.orderings} == set(
      reproduce.PERSONAL + reproduce.WORST)
