"""The FedGC paper's tables: runs shared between tables, and every run names real config fields."""

from fedjax_face.proj.fedgc import reproduce
from tests import config_files


def test_runs_equal_to_the_defaults_are_shared_between_tables():
  run = reproduce._fedgc(**{'federated.participation': '0.5'})  # pylint: disable=protected-access
  assert run.config == 'fedgc/fedgc' and run.arg == 'loss=softmax'
  assert run.overrides == (('federated.participation', '0.5'),)
  assert reproduce._fedgc(**{'fedgc.reg_lambda': '20.0'}) == reproduce._fedgc()  # pylint: disable=protected-access
  assert reproduce.TABLES[1].rows[-1].run == reproduce.TABLES[4].rows[-1].run   # FedGC C = 1.0


def test_every_table_run_names_real_config_fields():
  for tid, table in reproduce.TABLES.items():
    # The scale study's tables state their own cells' setting (proj/fedgc/scale.py).
    setting = reproduce.SCALE_SETTING if tid in reproduce.SCALE_TABLES else reproduce.SETTING
    assert table.setting == setting
    for row in table.rows:
      config = config_files.load_config(row.run.config, row.run.arg)
      for key, value in row.run.overrides:
        node = config
        for part in key.split('.'):
          assert part in node, f'{row.label}: {key} is not a config field'
          node = node[part]
        type(node)(value)   # raises if the value does not parse as the field's type
