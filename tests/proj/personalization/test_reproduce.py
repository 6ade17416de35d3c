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
