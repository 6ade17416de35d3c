"""bfloat16 and float16 end to end (issue 62), the full tier: FedGC's runlocal run in bfloat16 and
in float16 (dynamic loss scaling, core/loss_scale.py) logs a training loss within 2 % of
float32's every round, and a 10-round FedGC config that reaches >= 70 % LFW accuracy in float32
ends within 1 point of it in bfloat16 (float16's gap there is open: the comment above that test). float16 per family of local step, and resumed:
tests/test_experiment_float16.py. The suite's cheaper bfloat16 checks
are tests/models/test_precision.py's (the lowered program in the compute dtype; a few SGD steps
within 2 % of float32). Per-round losses are read back from the run's TensorBoard events."""

import glob
import struct

import pytest
from tensorboardX.proto import event_pb2

from fedjax_face import experiment
from tests import config_files


def logged_scalars(workdir: str, tag: str) -> dict[int, float]:
  """step -> value of `tag` in the TensorBoard event files under `<workdir>/tensorboard`
  (TFRecord framing: a little-endian uint64 length, its CRC, the record, the record's CRC)."""
  values = {}
  for path in sorted(glob.glob(f'{workdir}/tensorboard/events.*')):
    with open(path, 'rb') as f:
      data = f.read()
    at = 0
    while at < len(data):
      (length,) = struct.unpack('<Q', data[at:at + 8])
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
      at += 12 + length + 4
      values.update({event.step: v.simple_value for v in event.summary.value if v.tag == tag})
  return values


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """(setting, dtype) -> (results, {round: training loss}) of FedGC's runlocal run ('runlocal')
  or `ten_round_config` ('ten_rounds') in that dtype, each run once for the module."""
  done = {}

  def run(setting: str, dtype: str):
    if (setting, dtype) not in done:
      config = (config_files.load_config('fedgc') if setting == 'runlocal' else
                ten_round_config())
      config.model.dtype = dtype
      workdir = str(tmp_path_factory.mktemp(f'{setting}_{dtype}'))
      results = experiment.train_and_evaluate(config, workdir)
      done[setting, dtype] = results, logged_scalars(workdir, 'train_loss')
    return done[setting, dtype]

  return run


@pytest.mark.full
@pytest.mark.parametrize('dtype', ['bfloat16', 'float16'])
def test_runlocal_loss_stays_within_two_percent_of_float32_each_round(runs, dtype):
  float32, low = runs('runlocal', 'float32')[1], runs('runlocal', dtype)[1]
  num_rounds = config_files.load_config('fedgc').num_rounds
  assert sorted(float32) == sorted(low) == list(range(1, num_rounds + 1))
  for r in float32:
    assert abs(low[r] - float32[r]) <= 0.02 * abs(float32[r]), (r, float32, low)


def ten_round_config():
  """FedGC's runlocal setting made large enough to learn in 10 rounds: 32 identities of 8 images
  at 32x32, a width-8 small CNN with 32-d embeddings, 4 local steps; 600 LFW pairs, so that one
  point is 6 pairs (at runlocal's 100 pairs one pair is a point, and two float32-close runs
  ended 8 points apart)."""
  config = config_files.load_config('fedgc')
  config.num_rounds = 10
  config.data.image_size = 32
  config.data.synthetic.num_identities = 32
  config.data.synthetic.images_per_identity = 8
  config.model.width = 8
  config.model.embedding_dim = 32
  config.federated.local_steps = 4
  config.data.synthetic.num_pairs = 600
  return config


# float16 is not held to this: at seeds 0 and 1 it ended 3.2 and 2.2 points under float32
# (0.703 / 0.735, 0.685 / 0.707) with no step skipped, where bfloat16 ended within 0.2 points,
# though float16's gradients are the closer to float32's (BUILD_NOTES.md, "Mixed precision").
@pytest.mark.full
@pytest.mark.parametrize('dtype', ['bfloat16'])
def test_ten_rounds_end_within_one_point_of_float32(runs, dtype):
  float32 = runs('ten_rounds', 'float32')[0]['verification']['lfw']['accuracy']
  low = runs('ten_rounds', dtype)[0]['verification']['lfw']['accuracy']
  assert float32 >= 0.70, float32
  assert abs(low - float32) <= 0.01, (float32, low)
