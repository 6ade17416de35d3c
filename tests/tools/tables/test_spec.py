"""A table's spec: run naming, seeds, overrides, and orderings that name the table's rows."""

import pytest

from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Run
from tests.tools.tables.fakes import ordered_table


def test_run_names_and_commands():
  run = Run('fedgc/fedgc', 'loss=softmax', (('federated.participation', '0.5'),))
  assert run.name() == 'fedgc-fedgc_loss-softmax_participation-0.5'
  cmd = run.command('/w', (('num_rounds', '3'),))
  assert cmd[1:] == ['-m', 'fedjax_face.main', '--config=configs/fedgc/fedgc.py:loss=softmax',
                     '--workdir=/w', '--config.federated.participation=0.5',
                     '--config.num_rounds=3']
  # The paper's folder is in the name: two papers' 'centralized' runs never share a workdir.
  assert Run('fedfv/centralized').name() != Run('fedgc/centralized').name()
  assert Run('fedfv/centralized').command('/w')[3] == '--config=configs/fedfv/centralized.py'


def test_seed_zero_shares_the_default_run_and_others_add_the_seed():
  run = Run('fedgc/fedpe', 'loss=cosface')
  assert spec.seed_overrides((), 0) == ()
  assert run.name(spec.seed_overrides((), 0)) == 'fedgc-fedpe_loss-cosface'
  extra = spec.seed_overrides((('num_rounds', '3'),), 2)
  assert run.name(extra) == 'fedgc-fedpe_loss-cosface_num_rounds-3_seed-2'
  assert run.command('/w', extra)[-2:] == ['--config.num_rounds=3', '--config.seed=2']


@pytest.mark.parametrize('items, message', [
    (['a'], r'--seeds=a; expected integers'),
    (['0', '0'], r'--seeds=0,0; expected distinct non-negative'),
    (['-1'], r'--seeds=-1; expected distinct non-negative'),
])
def test_bad_seeds(items, message):
  with pytest.raises(ValueError, match=message):
    spec.parse_seeds(items)


def test_seeds_and_overrides_parse():
  assert spec.parse_seeds(['0', '3', '1']) == (0, 3, 1)
  assert spec.parse_overrides(['num_rounds=3', 'a.b=x=y']) == (('num_rounds', '3'),
                                                                 ('a.b', 'x=y'))
  with pytest.raises(ValueError, match=r"--set='num_rounds'; expected field=value"):
    spec.parse_overrides(['num_rounds'])


@pytest.mark.parametrize('field, value, message', [
    ('ahead', ('Z',), r"ordering 'A above B' names row 'Z'; expected one of \['A', 'B', 'C'\]"),
    ('column', 'cfp_fp', r"ordering 'A above B' reads column 'cfp_fp'; expected one of \['lfw'\]"),
])
def test_an_ordering_must_name_the_tables_rows_and_columns(field, value, message):
  with pytest.raises(ValueError, match=message):
    ordered_table(**{field: value})
