"""Runs that tell the truth when they are resumed, extended or rerun (issue 32): a shorter rerun
refused before anything is written; a DP run's epsilon composed over the noise each round really
ran at (recorded beside its checkpoints) and a spent target refused; a run the divergence guard
stopped neither rerun unchanged nor allowed to rotate away its good checkpoints; a step schedule
that keeps its decay rounds when extended; checkpoints without digests unverified; a dangling
`checkpoints` link named; `checkpoints_rejected/` bounded. Each is done for real: runlocal runs in
real workdirs, rerun as a user would."""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys

import dp_accounting
import jax
import numpy as np
import pytest
from dp_accounting import rdp

from fedjax_face import experiment
from fedjax_face.core import checks
from fedjax_face.io import checkpoint, files
from fedjax_face.run import setup as run_setup
from tests import config_files, saved_checkpoints
from tests.test_faults import _corrupt

load_config = config_files.load_config




def _record(workdir, step: int) -> dict:
  """The run record saved beside checkpoint `step`."""
  return json.loads((workdir / 'checkpoint_digests' / f'{step}.json').read_text())['run']


def _scalars(logdir, tag: str) -> dict[int, float]:
  """step -> value of `tag` in the TensorBoard event files under `logdir` (TFRecord framing read
  by hand: no TensorBoard in the test environment); a later file's value wins."""
  from tensorboardX.proto import event_pb2  # pylint: disable=g-import-not-at-top
  out = {}
  for name in sorted(os.listdir(logdir)):
    with open(os.path.join(logdir, name), 'rb') as f:
      data = f.read()
    at = 0
    while at < len(data):
      (length,) = struct.unpack('<Q', data[at:at + 8])
      event = event_pb2.Event.FromString(data[at + 12:at + 12 + length])
      at += 12 + length + 4
      for value in event.summary.value:
        if value.tag == tag:
          out[event.step] = value.simple_value
  return out


@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  """name -> a finished run's workdir, made once per module: 'fedgc' (runlocal, 2 rounds),
  'dp' (`_dp_config(3)`) and 'pretrain' (FedFR's pre-training, 4 rounds). Tests change their
  own copies (`_copy`)."""
  runs = {}

  def get(name: str):
    if name not in runs:
      config = {'fedgc': lambda: load_config('fedgc'), 'dp': lambda: _dp_config(3),
                'pretrain': lambda: load_config('pretrain')}[name]()
      workdir = tmp_path_factory.mktemp(name)
      runs[name] = (workdir, experiment.train_and_evaluate(config, str(workdir)))
    return runs[name]
  return get


def _copy(finished, name: str, to):
  """A copy of the finished run `name` at `to`, and its results."""
  workdir, results = finished(name)
  shutil.copytree(workdir, to)
  return results


# 1. A shorter rerun.

def test_a_shorter_rerun_of_a_finished_run_is_refused_before_anything_is_written(tmp_path):
  config = load_config('fedgc')
  config.num_rounds = 4
  experiment.train_and_evaluate(config, str(tmp_path))
  before = saved_checkpoints.workdir_files(tmp_path)
  config.num_rounds = 2
  with pytest.raises(ValueError, match=rf'^config.num_rounds=2 but {re.escape(str(tmp_path))} '
                     r'holds round 4; a run cannot be shortened\. Expected config.num_rounds >= 4'):
    experiment.train_and_evaluate(config, str(tmp_path))
  assert saved_checkpoints.workdir_files(tmp_path) == before
  assert saved_checkpoints.steps(tmp_path) == [3, 4]
  assert int(saved_checkpoints.restore(tmp_path, 4)['round']) == 4


# 2. Extending a DP run.

DELTA = 1e-5


def _dp_config(num_rounds: int, target: float = 4.0):
  config = load_config('fedpe')
  config.num_rounds = num_rounds
  config.federated.participation = 0.5   # 2 of 4 clients a round: the sampled accountant
  config.dp.enabled = True
  config.dp.target_epsilon = target
  del config.evals.identification, config.evals.diagnostics
  config.evals.verification.pair_sets = ('lfw',)
  return config


def _dp_accounting_epsilon(history) -> float:
  """dp-accounting called directly over [(rounds, sigma), ...]: replace-one neighbours (so the
  Gaussian of sensitivity 2S has noise multiplier sigma / 2), 2 of 4 clients without
  replacement, each segment's rounds composed at its own sigma."""
  accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  for rounds, sigma in history:
    one_round = dp_accounting.SampledWithoutReplacementDpEvent(
        4, 2, dp_accounting.GaussianDpEvent(sigma / 2))
    accountant.compose(dp_accounting.SelfComposedDpEvent(one_round, rounds))
  return accountant.get_epsilon(DELTA)


def test_extending_a_dp_run_accounts_each_round_at_the_noise_it_ran_at(tmp_path, finished):
  tmp_path = tmp_path / 'run'
  first = _copy(finished, 'dp', tmp_path)
  sigma_1 = first['privacy']['noise_multiplier']
  # The target was spent over the 3 rounds: the 2 new ones would need more noise. Refused before
  # anything is written, with the rounds the budget affords at sigma_1 (dp-accounting's own count),
  # unless dp.allow_sigma_increase says the jump is wanted (issue 56 item 10).
  affordable = max(k for k in range(3) if _dp_accounting_epsilon([(3 + k, sigma_1)]) <= 4.0)
  before = saved_checkpoints.workdir_files(tmp_path)
  with pytest.raises(checks.UsageError, match=(
      rf'^config.num_rounds=5 with dp.target_epsilon=4: rounds 4-5 would run at noise multiplier '
      rf'[0-9.]+, up from the {sigma_1:.4g} of the rounds before; the budget affords {affordable} '
      rf'more round\(s\) at {sigma_1:.4g}\. Expected config.num_rounds <= {3 + affordable}, a '
      r'higher dp.target_epsilon, or dp.allow_sigma_increase=True for the jump\.$')):
    experiment.train_and_evaluate(_dp_config(5), str(tmp_path))
  assert saved_checkpoints.workdir_files(tmp_path) == before
  config = _dp_config(5)
  config.dp.allow_sigma_increase = True
  second = experiment.train_and_evaluate(config, str(tmp_path))
  sigma_2 = second['privacy']['noise_multiplier']
  priv = second['privacy']
  assert priv['amplified_by_sampling'] and sigma_2 != sigma_1
  # Rounds 1-3 ran at sigma_1 (calibrated for 3 rounds), rounds 4-5 at sigma_2.
  real = _dp_accounting_epsilon([(3, sigma_1), (2, sigma_2)])
  assert priv['epsilon'] == pytest.approx(real, rel=1e-12)
  saved = json.loads((tmp_path / 'results.json').read_text())
  assert saved['privacy']['epsilon'] == priv['epsilon']
  # The target is met over the whole history, not over a history that never ran.
  assert 3.99 <= real <= 4.0
  # The checkpoint records that history, and the report gives it.
  assert _record(tmp_path, 5)['privacy']['noise_history'] == [[3, sigma_1], [2, sigma_2]]
  assert priv['noise_history'] == [{'rounds': 3, 'noise_multiplier': sigma_1},
                                   {'rounds': 2, 'noise_multiplier': sigma_2}]
  # TensorBoard's dp/epsilon after each round: dp-accounting over the history up to it.
  curve = _scalars(tmp_path / 'tensorboard', 'dp/epsilon')
  cut = [[(1, sigma_1)], [(2, sigma_1)], [(3, sigma_1)], [(3, sigma_1), (1, sigma_2)],
         [(3, sigma_1), (2, sigma_2)]]
  assert sorted(curve) == [1, 2, 3, 4, 5]
  for step, history in zip(range(1, 6), cut):
    assert curve[step] == pytest.approx(_dp_accounting_epsilon(history), rel=1e-6), step


def test_a_spent_target_is_refused_and_a_raised_one_is_reached_over_the_history(tmp_path,
                                                                                finished):
  tmp_path = tmp_path / 'run'
  first = _copy(finished, 'dp', tmp_path)
  spent = first['privacy']['epsilon']
  before = saved_checkpoints.workdir_files(tmp_path)
  with pytest.raises(ValueError, match=rf'^config.dp.target_epsilon=2 cannot be met: the 3 rounds '
                     rf'already run spent epsilon={spent:.4g} \(delta=1e-05\); expected a target '
                     'above it'):
    experiment.train_and_evaluate(_dp_config(5, target=2.0), str(tmp_path))
  assert saved_checkpoints.workdir_files(tmp_path) == before
  # A raised target: the noise of rounds 4-5 is solved so that all 5 rounds reach it.
  sigma_1 = first['privacy']['noise_multiplier']
  raised = experiment.train_and_evaluate(_dp_config(5, target=6.0), str(tmp_path))['privacy']
  real = _dp_accounting_epsilon([(3, sigma_1), (2, raised['noise_multiplier'])])
  assert raised['epsilon'] == pytest.approx(real, rel=1e-12)
  assert 5.99 <= real <= 6.0


def test_a_resumed_dp_run_keeps_its_noise_and_equals_the_uninterrupted_one(tmp_path):
  config = _dp_config(4)
  config.checkpoint_keep = 4
  straight = experiment.train_and_evaluate(config, str(tmp_path / 'straight'))
  # The same run stopped after round 2: its later checkpoints and results removed.
  shutil.copytree(tmp_path / 'straight', tmp_path / 'cut')
  for step in (3, 4):
    shutil.rmtree(tmp_path / 'cut' / 'checkpoints' / str(step))
    os.remove(tmp_path / 'cut' / 'checkpoint_digests' / f'{step}.json')
  os.remove(tmp_path / 'cut' / 'results.json')
  resumed = experiment.train_and_evaluate(config, str(tmp_path / 'cut'))
  assert resumed['timing']['resumed_from_round'] == 2
  assert resumed['privacy']['noise_history'] == straight['privacy']['noise_history']
  assert resumed['privacy']['epsilon'] == straight['privacy']['epsilon']
  jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(tmp_path / 'cut', 4),
               saved_checkpoints.restore(tmp_path / 'straight', 4))


# 3. The divergence guard after a rerun.

def _diverging():
  """FedGC at learning rate 2: round 1's loss 1.68, round 2's 48, round 3's 3.4e4 (> 1000x)."""
  config = load_config('fedgc')
  config.num_rounds = 8
  config.optimizer.learning_rate = 2.0
  return config


def test_a_run_the_guard_stopped_is_not_rerun_unchanged_and_keeps_its_good_checkpoints(tmp_path):
  with pytest.raises(FloatingPointError, match=r'^round 3: training loss .* is more than '
                     r'divergence_factor=1000 times'):
    experiment.train_and_evaluate(_diverging(), str(tmp_path))
  stopped = json.loads((tmp_path / 'stopped.json').read_text())
  assert stopped['round'] == 3 and stopped['reason'].startswith('round 3: training loss')
  good = {step: saved_checkpoints.restore(tmp_path, step) for step in (1, 2)}
  assert saved_checkpoints.steps(tmp_path) == [1, 2]
  # The guard's reference is in the checkpoint: round 1's loss.
  reference = _record(tmp_path, 2)['guard']
  assert reference['round'] == 1 and 1.0 < reference['loss'] < 3.0

  def unchanged():
    assert saved_checkpoints.steps(tmp_path) == [1, 2]
    for step, tree in good.items():
      jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(tmp_path, step), tree)

  # The same command: one line saying it stopped and why; nothing trained or written.
  before = saved_checkpoints.workdir_files(tmp_path)
  with pytest.raises(ValueError) as refused:
    experiment.train_and_evaluate(_diverging(), str(tmp_path))
  line = str(refused.value)
  assert '\n' not in line
  assert line.startswith(f'--workdir={tmp_path} stopped at round 3 (round 3: training loss ')
  assert ('change optimizer.* (e.g. a lower learning_rate), the fedgc section or '
          'divergence_factor') in line
  assert saved_checkpoints.workdir_files(tmp_path) == before
  # A change that does not cure it: resumed from round 2 with round 1's loss still the reference,
  # so round 3 stops it again (before, the rerun took round 3's blown-up loss as its reference,
  # saved rounds 3-4 and rotated the good checkpoints away).
  config = _diverging()
  config.divergence_factor = 2000.0
  with pytest.raises(FloatingPointError, match=rf"^round 3: training loss .* first round's "
                     rf"\({reference['loss']:.4g}\)"):
    experiment.train_and_evaluate(config, str(tmp_path))
  unchanged()
  assert json.loads((tmp_path / 'stopped.json').read_text())['round'] == 3
  # A lower learning rate goes on from round 2 to the end; config.json says what changed.
  config = _diverging()
  config.optimizer.learning_rate = 0.01
  results = experiment.train_and_evaluate(config, str(tmp_path))
  assert results['timing']['resumed_from_round'] == 2
  assert not (tmp_path / 'stopped.json').exists() and (tmp_path / 'results.json').exists()
  after_stop = json.loads((tmp_path / 'config.json').read_text())['provenance']['resumed'][-1][
      'after_stop']
  assert after_stop['round'] == 3
  assert 'optimizer.learning_rate: 2.0 -> 0.01' in after_stop['changed']
  assert _record(tmp_path, 8)['guard'] == reference


# 4. The smaller ones.

def test_extending_a_step_schedule_keeps_the_decay_rounds_of_the_start(tmp_path, capsys):
  config = load_config('fedgc')
  config.optimizer.schedule = 'step'   # decay_at (2/3, 13/15): rounds 4 and 5 of 6
  config.num_rounds = 6
  experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  config.num_rounds = 9
  capsys.readouterr()
  experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert ("optimizer.schedule=step: keeping the decay rounds of the run's start (4, 5); decay_at "
          'of num_rounds=9 would move them to (6, 8).') in capsys.readouterr().out
  # The extended run is the 9-round run whose rate decays at rounds 4 and 5 (before, rounds 7-9
  # ran at a rate 10x and 100x higher than round 6's).
  straight = load_config('fedgc')
  straight.optimizer.schedule = 'step'
  straight.num_rounds = 9
  straight.optimizer.decay_at = (4 / 9, 5 / 9)
  experiment.train_and_evaluate(straight, str(tmp_path / 'straight'))
  jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(tmp_path / 'run', 9),
               saved_checkpoints.restore(tmp_path / 'straight', 9))
  assert _record(tmp_path / 'run', 9)['lr_schedule'] == {'decay_at': [2 / 3, 13 / 15],
                                                         'decay_rounds': [4, 5]}


def test_checkpoints_without_digests_are_unverified_and_resumed_only_when_trusted(tmp_path, capsys,
                                                                                  finished):
  config = load_config('fedgc')
  _copy(finished, 'fedgc', tmp_path / 'run')   # rounds 1 and 2 kept
  shutil.rmtree(tmp_path / 'run' / 'checkpoint_digests')
  shutil.copytree(tmp_path / 'run', tmp_path / 'intact')
  _corrupt(tmp_path / 'run' / 'checkpoints' / '2')
  config.num_rounds = 3
  capsys.readouterr()
  # Before, round 1 was loaded without a word once the corrupted round 2 failed to read. Now none
  # having its digests is refused at opening, before anything is written (issue 56 item 9).
  before = (tmp_path / 'run' / 'config.json').read_bytes()
  digests = tmp_path / 'run' / 'checkpoint_digests'
  with pytest.raises(files.WorkdirError, match=(
      rf'^no checkpoint under {re.escape(str(tmp_path / "run" / "checkpoints"))} can be verified '
      rf'\(rounds 2, 1 have no digest file in {re.escape(str(digests))}\); delete those step '
      r'directories to start the run afresh, use a new --workdir, or '
      r'--config.trust_unverified_checkpoints=True to resume from round 2 without verifying '
      r'it\.$')):
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert (tmp_path / 'run' / 'config.json').read_bytes() == before
  assert capsys.readouterr().out == ''
  # Trusted: resumed from the newest, said in one line.
  config.trust_unverified_checkpoints = True
  results = experiment.train_and_evaluate(config, str(tmp_path / 'intact'))
  assert results['timing']['resumed_from_round'] == 2
  assert (f"checkpoint {tmp_path / 'intact' / 'checkpoints' / '2'} is unverified (no "
          f"{tmp_path / 'intact' / 'checkpoint_digests' / '2.json'}); resuming from it as "
          '--config.trust_unverified_checkpoints=True says') in capsys.readouterr().out


def test_a_checkpoints_link_to_nowhere_is_named(tmp_path):
  os.symlink(tmp_path / 'gone', tmp_path / 'checkpoints')
  with pytest.raises(files.WorkdirError,
                     match=rf"^{re.escape(str(tmp_path / 'checkpoints'))} is a symbolic "
                     rf"link to {re.escape(str(tmp_path / 'gone'))}, which does not exist; "
                     'expected a checkpoint directory'):
    experiment.train_and_evaluate(load_config('fedgc'), str(tmp_path))
  assert not (tmp_path / 'config.json').exists()


def test_checkpoint_keep_is_a_field_and_rejected_checkpoints_are_bounded(tmp_path):
  config = load_config('fedgc')
  config.num_rounds = 4
  config.checkpoint_keep = 3
  experiment.train_and_evaluate(config, str(tmp_path))
  assert saved_checkpoints.steps(tmp_path) == [2, 3, 4]
  assert sorted(os.listdir(tmp_path / 'checkpoint_digests')) == ['2.json', '3.json', '4.json']
  rejected = tmp_path / 'checkpoints_rejected'   # six older rejections already there
  for i in range(6):
    (rejected / f'old-{i}').mkdir(parents=True)
    os.utime(rejected / f'old-{i}', (1e9 + i, 1e9 + i))
  _corrupt(tmp_path / 'checkpoints' / '4')
  config.num_rounds = 5
  experiment.train_and_evaluate(config, str(tmp_path))
  names = sorted(os.listdir(rejected))
  assert len(names) == checkpoint.REJECTED_TO_KEEP
  assert [n for n in names if n.startswith('4-')] and 'old-5' in names and 'old-0' not in names


def test_digests_written_before_the_run_record_still_verify(tmp_path, finished):
  config = load_config('fedgc')
  tmp_path = tmp_path / 'run'
  _copy(finished, 'fedgc', tmp_path)
  for step in (1, 2):   # the format before the record: the array digests alone
    path = tmp_path / 'checkpoint_digests' / f'{step}.json'
    path.write_text(json.dumps(json.loads(path.read_text())['arrays']))
  config.num_rounds = 3
  assert experiment.train_and_evaluate(config, str(tmp_path))['timing']['resumed_from_round'] == 2
  # A DP run's checkpoint without its noise history cannot be accounted: refused in one line
  # before anything is written, unless trusted.
  dp = _dp_config(2)
  experiment.train_and_evaluate(dp, str(tmp_path / 'dp'))
  path = tmp_path / 'dp' / 'checkpoint_digests' / '2.json'
  path.write_text(json.dumps(json.loads(path.read_text())['arrays']))
  dp.num_rounds = 3
  before = saved_checkpoints.workdir_files(tmp_path / 'dp')
  with pytest.raises(ValueError, match=r'^dp: the checkpoint records no noise history .* '
                     r'--config.trust_unverified_checkpoints=True to assume'):
    experiment.train_and_evaluate(dp, str(tmp_path / 'dp'))
  assert saved_checkpoints.workdir_files(tmp_path / 'dp') == before


def _fedfr_from(pretraining, **fields):
  config = load_config('fedfr')
  config.init_from = str(pretraining)
  for name, value in fields.items():
    config[name] = value
  return config


def test_init_from_a_corrupted_pretraining_is_refused_naming_the_checkpoint(tmp_path, finished):
  _copy(finished, 'pretrain', tmp_path / 'pre')   # 4 rounds
  final = tmp_path / 'pre' / 'checkpoints' / '4'
  # One bit flipped in an array's data file: before, FedFR started from it silently (exit 0) while
  # resuming the pre-training itself rejected it. orbax's b-tree files carry checksums (a flip
  # there is unreadable), its data files do not: the flip is made in the first data file, largest
  # first, that orbax then reads without an error and with an array changed.
  reference = saved_checkpoints.restore(tmp_path / 'pre', 4)
  data_files = sorted((os.path.join(root, name) for root, _, names in os.walk(final)
                       for name in names if '/d/' in os.path.join(root, name) + '/'),
                      key=os.path.getsize, reverse=True)
  for path in data_files:
    original = open(path, 'rb').read()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x01
    with open(path, 'wb') as f:
      f.write(flipped)
    try:
      changed = not all(np.array_equal(a, b) for a, b in zip(
          jax.tree.leaves(reference),
          jax.tree.leaves(saved_checkpoints.restore(tmp_path / 'pre', 4))))
    except Exception:   # pylint: disable=broad-except  (orbax raises many kinds)
      changed = False
    if changed:
      break
    with open(path, 'wb') as f:
      f.write(original)
  else:
    pytest.fail(f'no data file of {final} reads with one bit flipped')
  config = _fedfr_from(tmp_path / 'pre')
  experiment.validate(config)   # the run is finished; its arrays are checked when read
  # Where the flipped bit lands decides which check refuses it: a value that stays finite fails the
  # digest comparison, one that becomes nan or inf the finiteness check (the flip's place depends
  # on how orbax laid out the file). Either refusal names the checkpoint; nothing else passes.
  with pytest.raises(checkpoint.CheckpointReadError, match=(
      rf"^config\.init_from='{re.escape(str(tmp_path / 'pre'))}': checkpoint "
      rf"{re.escape(str(final))} (fails verification: 1 array\(s\) differ from what was saved "
      r"\(\[.*\]\)|holds nan or inf); expected a checkpoint as it was saved")):
    experiment.train_and_evaluate(config, str(tmp_path / 'fedfr'))
  assert not (tmp_path / 'fedfr').exists()   # refused before anything is written
  # From the command line: one line, exit status 2.
  out = subprocess.run([sys.executable, '-m', 'fedjax_face.main',
                        '--config=configs/fedfr/fedfr.py:runlocal',
                        f'--workdir={tmp_path / "cli"}', f'--config.init_from={tmp_path / "pre"}'],
                       cwd=config_files.ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 2 and 'Traceback' not in out.stderr, out.stderr[-2000:]
  assert re.search(
      rf"config\.init_from='{re.escape(str(tmp_path / 'pre'))}': checkpoint {re.escape(str(final))} "
      r"(fails verification: 1 array\(s\) differ from what was saved \(\[.*\]\)|holds nan or "
      r"inf); expected a checkpoint as it was saved \(rerun the run it comes from, or name "
      r"another round with config\.init_from_step\)\.$", out.stderr.strip().splitlines()[-1])


def test_init_from_an_unfinished_pretraining_needs_init_from_step(tmp_path, finished):
  # A pre-training of 4 rounds preempted for real (SIGTERM to the command, as SLURM does): it
  # saves the round it reached and stops, without results.json.
  pre = tmp_path / 'pre'
  proc = subprocess.Popen([sys.executable, '-m', 'fedjax_face.main',
                           '--config=configs/fedfr/pretrain.py:runlocal', f'--workdir={pre}',
                           '--config.num_rounds=4', '--config.checkpoint_every=0'],
                          cwd=config_files.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  try:
    for line in proc.stdout:
      if line.startswith('round 1/'):
        proc.send_signal(signal.SIGTERM)
        break
    _, err = proc.communicate(timeout=120)
  finally:
    proc.kill()
    proc.wait(timeout=60)
  assert proc.returncode == 75, err[-2000:]
  reached = int(re.search(r'stopped after round (\d) of 4', err)[1])
  assert reached < 4 and not (pre / 'results.json').exists()
  # Before, FedFR started from it silently, though the message said a finished run is expected.
  with pytest.raises(ValueError, match=(
      rf"^config\.init_from='{re.escape(str(pre))}' is an unfinished run \(its newest checkpoint "
      rf"is round {reached} of num_rounds=4\); expected a finished run, or "
      rf"--config.init_from_step=<round> to start from one of its checkpoints \(rounds "
      rf"{reached}\)\.$")):
    experiment.validate(_fedfr_from(pre))
  with pytest.raises(ValueError, match=rf"config\.init_from_step=9, but .* holds the checkpoints "
                     rf"of rounds {reached}; expected one of them\."):
    experiment.validate(_fedfr_from(pre, init_from_step=9))
  # Told which round: started from that checkpoint, verified.
  config = _fedfr_from(pre, init_from_step=reached)
  start = run_setup.warm_start(config)
  jax.tree.map(np.testing.assert_array_equal, start, saved_checkpoints.restore(pre, reached))
  assert experiment.train_and_evaluate(config, str(tmp_path / 'fedfr'))['rounds'] == 2
  # A finished run whose results.json is gone is no finished run either.
  _copy(finished, 'pretrain', tmp_path / 'done')
  (tmp_path / 'done' / 'results.json').unlink()
  with pytest.raises(ValueError, match=r"is an unfinished run \(it has no results\.json\)"):
    experiment.validate(_fedfr_from(tmp_path / 'done'))
