"""The FedFR paper's tables: real configs, fields and results paths; every federated row starts from
the one pre-training run."""

from fedjax_face import experiment
from fedjax_face.proj.fedfr import reproduce
from tests import config_files


def test_every_run_loads_and_starts_from_the_pretraining():
  for table in reproduce.TABLES.values():
    assert len(table.titles) == len(table.columns)
    for row in table.rows:
      config = config_files.load_config(row.run.config, row.run.arg or None)
      for field, value in row.run.overrides:
        section, name = field.split('.')
        config[section][name] = type(config[section][name])(value)
      experiment.validate(config)
      if row.run.config == 'fedfr/fedfr':
        assert row.run.init_from == reproduce.PRETRAIN
  fedfr = reproduce.TABLES[1].rows[4].run
  assert fedfr == reproduce.TABLES[2].rows[3].run and fedfr.arg == ''   # shared by both


def test_rows_are_the_variants_they_name():
  rows = {row.label: row.run for row in reproduce.TABLES[1].rows}
  fedavg = config_files.load_config('fedfr/fedfr', rows['FedAvg, local data'].arg)
  assert not fedavg.fedfr.public_data and not fedavg.fedfr.dfc
  hn_con = config_files.load_config('fedfr/fedfr', rows['+ contrastive'].arg)
  assert hn_con.fedfr.contrastive_weight == 5.0 and not hn_con.fedfr.dfc
  kd = config_files.load_config('fedfr/fedfr', reproduce.TABLES[2].rows[1].run.arg)
  assert kd.fedfr.adaptation == 'kd'
  assert [dict(r.run.overrides)['fedfr.hn_threshold']
          for r in reproduce.TABLES['_fig3'].rows] == ['-1.0', '0.2', '0.3', '0.4', '0.5', '0.6']
