"""End to end, Ditto and APFL on anti-spoofing (configs/pad/ditto.py, apfl.py): each data
center's held-out subjects scored with its personal (Ditto) or mixed (APFL) detector
('in_domain_personal'), the unseen target with the shared one. On the Table II network
(`backbone=pad_net`), which compiles in a fraction of the ResNet-18's time.

Full tier (each a runlocal run): the default suite checks the parts these runs compose: the
per-center scoring and the run putting the personal models into `EvalInputs.personal_live_logits`
(tests/eval/pad/test_personal_in_domain.py), and what each data center sends and keeps
(tests/algorithms/test_ditto_apfl.py)."""

import pytest

from fedjax_face import experiment
from tests import config_files


@pytest.mark.full
@pytest.mark.parametrize('name', ['ditto', 'apfl'])
def test_each_data_center_is_scored_with_its_personal_detector(tmp_path, name):
  config = config_files.load_config(f'pad/{name}', 'backbone=pad_net,runlocal')
  results = experiment.train_and_evaluate(config, str(tmp_path))
  assert results['config_name'] == f'{name}/O+C+I->M'
  pad = results['pad']
  assert (pad['sources'], pad['target']) == (['O', 'C', 'I'], 'M')
  personal = pad['in_domain_personal']
  assert sorted(personal['centers']) == ['C', 'I', 'O']
  for key in ('hter', 'eer', 'auc'):
    by_center = [m[key] for m in personal['centers'].values()]
    assert personal['worst'][key] == (min(by_center) if key == 'auc' else max(by_center))
