"""The FedFR paper's tables: real configs, fields and results paths; every federated row starts from
the one pre-training run."""

from fedjax_face import experiment
from fedjax_face.data import sources
from fedjax_face.io import checkpoint
from fedjax_face.proj.fedfr import reproduce, setting
from fedjax_face.run import resume
from tests import config_files


def test_every_run_loads_and_starts_from_the_pretraining():
  for table in reproduce.TABLES.values():
    assert len(table.titles) == len(table.columns)
    for row in table.rows:
      experiment.validate(config_files.run_config(row.run))
      if row.run.config in ('fedfr/fedfr', 'fedfr/fedface'):
        # Fig. 4's scenarios start from their own pre-training, the tables from the default one.
        assert row.run.init_from == reproduce.Run('fedfr/pretrain', row.run.arg
                                                  if row.run.arg.startswith('ids=') else '')
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
  assert [dict(r.run.overrides).get('fedfr.hn_threshold')
          for r in reproduce.TABLES['_fig3'].rows] == ['-1.0', '0.2', '0.3', None, '0.5', '0.6']
  assert reproduce.TABLES['_fig3'].rows[3].run == reproduce.TABLES[1].rows[4].run   # t_HN = 0.4


def test_fig4_scenarios_train_on_the_identities_of_their_pretraining():
  rows = reproduce.TABLES['_fig4'].rows
  assert len(rows) == 4 * len(setting.FIG4_IDS_PER_CLIENT)
  for ids in setting.FIG4_IDS_PER_CLIENT:
    runs = [row.run for row in rows if row.run.arg == f'ids={ids}']
    assert [run.config for run in runs] == ['fedfr/pretrain', 'fedfr/fedface', 'fedfr/fedfr',
                                            'fedfr/centralized']
    configs = [config_files.load_config(run.config, run.arg) for run in runs]
    data = [resume.flatten(config.to_dict()) for config in configs]
    fields = sources.data_fields(configs[0])
    assert 'data.synthetic.num_identities' in fields
    assert all(sources.data_fields(config) == fields for config in configs)
    for field in fields:
      assert len({repr(d.get(field)) for d in data}) == 1, (ids, field)
    assert data[0]['data.synthetic.num_identities'] == 100 + setting.FIG4_CLIENTS * int(ids)
    fedface = config_files.load_config('fedfr/fedface', f'ids={ids}')
    assert fedface.federated.num_clients == setting.FIG4_CLIENTS
    assert fedface.head.loss == ('positive_cosine' if ids == '1' else 'cosface')


def test_fig4_checks_the_papers_four_orderings_in_every_scenario():
  table = reproduce.TABLES['_fig4']
  assert [o.claim for o in table.orderings if o.claim.startswith('1 ID ')] == [
      '1 ID per client: FedFR above pre-trained', '1 ID per client: FedFR above FedFace',
      '1 ID per client: pre-trained above FedFace', '1 ID per client: centralized above FedFR']
  assert len(table.orderings) == 4 * 4
  assert {o.column for o in table.orderings} == {'verification/lfw/accuracy'}
