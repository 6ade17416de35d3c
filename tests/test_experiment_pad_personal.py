"""End to end, the personalization baselines on anti-spoofing (configs/pad/fedbn.py, fedrep.py,
ditto.py, apfl.py): each data center's held-out subjects scored with its own model (FedBN: its
BatchNorm layers; FedRep: its classifier; Ditto: its personal detector; APFL: its mix), the
unseen target with the shared one. On the Table II network (`backbone=pad_net`), which compiles in
a fraction of the ResNet-18's time.

Full tier (about 19-30 s of CPU each at runlocal size): the default suite checks the parts these
runs compose: the per-center scoring and the run putting the personal models into
`EvalInputs.personal_live_logits` (tests/eval/pad/test_personal_in_domain.py), and what each data
center sends and keeps (tests/algorithms/test_fedbn_fedrep.py, test_ditto_apfl.py)."""

import numpy as np
import pytest

from fedjax_face import experiment
from tests import config_files


@pytest.mark.full
@pytest.mark.parametrize('name', ['fedbn', 'fedrep', 'ditto', 'apfl'])
def test_each_data_center_is_scored_with_its_own_model(tmp_path, name):
  config = config_files.load_config(f'pad/{name}', 'backbone=pad_net,runlocal')
  results = experiment.train_and_evaluate(config, str(tmp_path))
  assert results['config_name'].startswith(f'{name}/')
  pad = results['pad']
  assert (pad['sources'], pad['target']) == (['O', 'C', 'I'], 'M')
  personal = pad['in_domain_personal']
  assert personal['model'] == 'personal' and sorted(personal['centers']) == ['C', 'I', 'O']
  for key in ('hter', 'eer', 'auc'):
    by_center = [m[key] for m in personal['centers'].values()]
    assert all(0.0 <= v <= 1.0 for v in by_center)
    assert personal['mean'][key] == pytest.approx(np.mean(by_center), abs=1e-12)
    assert personal['worst'][key] == (min(by_center) if key == 'auc' else max(by_center))
