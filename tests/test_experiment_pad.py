"""End to end, the anti-spoofing task: the pooled `all` configs trained and scored on the unseen
target, and PAD's config errors. Split from tests/test_experiment.py so that pytest-xdist's
`--dist loadfile` can run PAD's runs beside the rest (tests/test_experiment_fedfr.py)."""

import json

import numpy as np
import pytest

from fedjax_face import experiment
from tests import config_files

load_config = config_files.load_config


# FedPAD's algorithm on the pooled client, its BatchNorm over the pooled batch or per data center;
# FedGPAD's own rounds are tests/algorithms/test_fedgpad.py's.
# The per-center case trains the Table II network (its BatchNorms group per data center as the
# ResNet-18's do), which compiles in a fraction of the ResNet-18's time.
# FEDJAX_FACE_TESTS=full: the per-center case, configs/pad/all.py end to end with an option (the
# suite runs the config in the `[all-runlocal]` case; `GroupedBatchNorm` against `nn.BatchNorm` on
# each slice is tests/models/test_pad.py's
# test_grouped_batch_norm_normalizes_each_slice_and_averages_the_running_statistics and
# test_per_center_batch_norm_keeps_the_network_s_variables; the option's refusal outside a pooled,
# balanced client is test_pad_config_errors_name_the_field below).
@pytest.mark.parametrize('name, arg', [
    ('all', 'runlocal'),
    pytest.param('all', 'backbone=pad_net,batch_norm=per_center,runlocal', marks=pytest.mark.full)])
def test_pad_configs_run_end_to_end(tmp_path, name, arg):
  # The data centers train on their own domains (all: pooled in one client); the detector is
  # scored on the unseen target.
  config = load_config(f'pad/{name}', arg)
  assert config.model.batch_norm_groups == (3 if 'per_center' in arg else 1)
  results = experiment.train_and_evaluate(config, str(tmp_path))
  pad = results['pad']
  assert (pad['sources'], pad['target'], pad['threshold_rule']) == (['O', 'C', 'I'], 'M', 'test')
  p = config.data.pad
  assert pad['num_videos'] == p.test_subjects * (p.live_videos + p.attack_videos)
  assert pad['num_live'] == p.test_subjects * p.live_videos
  for key in ('hter', 'eer', 'auc'):
    assert 0.0 <= pad[key] <= 1.0
  assert '| HTER (%) | EER (%) | AUC (%) |' in (tmp_path / 'report.md').read_text()
  assert (tmp_path / 'pad_roc.png').exists()
  saved = np.load(tmp_path / 'pad_video_scores.npz')   # for Fused
  assert saved['scores'].shape == saved['labels'].shape == (pad['num_videos'],)
  # config.json holds the anti-spoofing task's fields only: no head's loss, no public split.
  written = json.loads((tmp_path / 'config.json').read_text())
  # Its evaluators are the anti-spoofing task's (the attacks off at their defaults), none of
  # recognition's.
  assert 'head' not in written and list(written['evals']) == ['inversion', 'membership', 'pad']
  assert not {'public_identities', 'private_test_fraction', 'centralized_on'} & set(written['data'])
  assert {k for k in written['data'] if isinstance(written['data'][k], dict)} == {'pad', 'pad_lists'}


@pytest.mark.parametrize('field, value, match', [
    ('data.pad.target', 'O', r"sources=\('O', 'C', 'I'\) with target='O'; expected distinct data "
                             r'centers, none of them the target'),
    ('data.pad.sources', ('O', 'X'), r"names domains \['X'\]; expected names from"),
    ('data.pad.center_attacks', ('print', 'display', 'print'),
     r"center_attacks entry 'display' leaves data center C no attack \(it has \('print', 'cut', "
     r"'replay'\)\)"),
    ('data.pad.center_attacks', ('print',), r"center_attacks=\('print',\) has 1 entries for 3 data "
                                             r'centers'),
    ('data.pad.center_attacks', ('print', 'video', 'print'),
     r"center_attacks entry 'video' \(data center C\); expected '\+'-joined kinds"),
    ('federated.num_clients', 4, r'num_clients=4; the PAD benchmark has one client per data '
                                 r'center \(one for all with data.pad.pooled\): expected 3'),
    ('evals.pad.threshold_rule', 'dev', r"threshold_rule='dev'; expected one of"),
    ('model.batch_norm_groups', 3, r'batch_norm_groups=3 with data.pad.pooled=False, '
                                   r'federated.balanced_classes=True and 3 data centers; '
                                   r'expected 1, or \(pooled, balanced classes\) 3'),
])
def test_pad_config_errors_name_the_field(field, value, match):
  config = load_config('pad/fedgpad')
  config_files.set_field(config, field, value)
  with pytest.raises(ValueError, match=match):
    experiment.validate(config)
