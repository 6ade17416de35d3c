"""The privacy tables: every run names a real config whose DP fields validate; each method's
rows are its run without DP, with clipping alone, and at a target epsilon."""

from fedjax_face import experiment
from fedjax_face.proj.privacy import reproduce
from tests import config_files


def test_every_run_loads_and_validates():
  for table in reproduce.TABLES.values():
    assert len(table.titles) == len(table.columns)
    for row in table.rows:
      config = config_files.run_config(row.run)
      experiment.validate(config)
      overrides = dict(row.run.overrides)
      if row.run.config == reproduce.DP_SGD_CONFIG or row.label.endswith('no DP-SGD'):
        _assert_dp_sgd_row(row, config)
        continue
      assert config.dp.enabled == ('off' not in row.label)
      if 'clip only' in row.label:
        assert overrides['dp.noise_multiplier'] == '0.0'
      elif 'eps=' in row.label:
        assert overrides['dp.target_epsilon'] == row.label.split('eps=')[1].split(',')[0]


def _assert_dp_sgd_row(row, config):
  """Table 7's row: the method's own run, or DP-SGD with clipping alone or at the label's ε."""
  assert not config.dp.enabled
  d = config.fedgpad.get('dp_sgd')
  assert (d is not None and d.enabled) == ('DP-SGD,' in row.label)
  if 'clip only' in row.label:
    assert d.noise_multiplier == 0.0 and d.target_epsilon == 0.0
  elif 'eps=' in row.label:
    assert d.target_epsilon == float(row.label.split('eps=')[1])


def test_every_federated_family_is_in_the_tables():
  labels = {row.label.split()[0] for table in reproduce.TABLES.values() for row in table.rows}
  assert labels == {'FedPE', 'FedGC', 'FedFV', 'FedAwS', 'FedUV', 'FedFace', 'FedFR', 'FedPAD',
                    'FedGPAD'}
  fedfr = [row.run for row in reproduce.TABLES[1].rows if row.label.startswith('FedFR')]
  assert all(run.init_from is not None and run.init_from.config == 'fedfr/pretrain'
             for run in fedfr)


def test_every_family_has_every_epsilon_and_clipping_alone():
  found = {}
  for table in reproduce.TABLES.values():
    for row in table.rows:
      family, _, rest = row.label.partition(' ')
      if rest.startswith('eps='):
        found.setdefault(family, set()).add(rest[4:].split(' ')[0].rstrip(','))
  expected = set(reproduce.EPSILONS) | {'inf'}
  assert found and all(eps == expected for eps in found.values()), found
