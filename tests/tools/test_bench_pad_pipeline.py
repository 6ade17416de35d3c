"""tools/bench/pad_pipeline.py on runlocal FedPAD: what it counts, never its timings."""

import math

import ml_collections

from fedjax_face.tools import export_pad
from fedjax_face.tools.bench import pad_pipeline
from tests.config_files import load_config


def test_loading_counts_every_training_frame_and_the_round_its_frames(tmp_path):
  # FedPAD on its Table II network, without the target's evaluation: what is counted here is the
  # same for any detector, and the ResNet-18 and the evaluation took ~5 s more to compile.
  config = load_config('pad/fedpad', 'backbone=pad_net,runlocal')
  config.evals = ml_collections.ConfigDict()
  fields = export_pad.export(config, 'fedgpad', str(tmp_path / 'lists'), depth_bits=8)
  rows = [pad_pipeline.loading_rate(fields, config.data.image_size, t) for t in (1, 2)]
  listed = sum(len((tmp_path / 'lists' / name / f'image_list_{kind}.txt').read_text().split('\n'))
               - 1 for name in config.data.pad.sources for kind in ('real', 'fake'))
  assert [r['frames'] for r in rows] == [listed, listed]
  trained = pad_pipeline.round_rate(config, fields, str(tmp_path / 'run'), rounds=3)
  assert trained['frames_per_round'] == len(config.data.pad.sources) * config.federated.batch_size
  for x in [r['frames_per_s'] for r in rows] + [trained['frames_per_s'], trained['data_s']]:
    assert math.isfinite(x) and x > 0
