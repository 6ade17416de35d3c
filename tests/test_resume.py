"""Runs that tell the truth when they are resumed or rerun (issue 32), done for real: runlocal runs
in real workdirs, rerun as a user would. A resumed DP run keeps the noise each round ran at
(recorded beside its checkpoints) and ends as the uninterrupted run; a run the divergence guard
stopped is neither rerun unchanged nor allowed to rotate away its good checkpoints (the guard
runs before the checkpoint is saved, and its reference is carried in the run record).

The rules themselves, each on a workdir built by hand (no training), are tests/run/: a shorter
rerun refused (test_resume_rules), an extended DP run's epsilon over its history and a spent or
raised target (test_checkpoint_rules, with the sampled accountant against dp-accounting; and
test_noise), a step schedule's decay rounds kept (test_schedule), checkpoints without digests
and digests from before the run record, a dangling `checkpoints` link, what `init_from` may start
from (test_checkpoint_rules, test_resume_rules), and `checkpoint_keep` and
`checkpoints_rejected/` (tests/io/test_checkpoint.py; the field end to end in
tests/test_faults.py's corrupted-checkpoint run)."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from tests import config_files, saved_checkpoints

load_config = config_files.load_config


def _record(workdir, step: int) -> dict:
  """The run record saved beside checkpoint `step`."""
  return json.loads((workdir / 'checkpoint_digests' / f'{step}.json').read_text())['run']


def _dp_config(num_rounds: int, target: float = 4.0):
  config = load_config('fedpe')
  config.num_rounds = num_rounds
  config.federated.participation = 0.5   # 2 of 4 clients a round: the sampled accountant
  config.dp.enabled = True
  config.dp.target_epsilon = target
  # One stage of the small CNN: what is checked does not read the model's depth, and its programs
  # compile in about half the time of runlocal's three stages.
  config.model.num_stages = 1
  # No evaluator: what is checked is the privacy ledger and the checkpoints, none of which an
  # evaluation writes (two runs' evaluations less).
  for kind in list(config.evals):
    del config.evals[kind]
  return config


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


# The divergence guard after a rerun.

def _diverging():
  """FedGC at learning rate 2 (a one-stage small CNN, as the DP runs above): round 1's loss 1.32,
  round 2's 158, round 3's 1.1e5 (> 1000x and > 2000x)."""
  config = load_config('fedgc')
  config.num_rounds = 8
  config.optimizer.learning_rate = 2.0
  config.model.num_stages = 1
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
  # A change that cures it goes on from round 2, config.json recording what changed and
  # stopped.json removed: run/resume.py's rule, on a workdir built by hand in
  # tests/run/test_resume_rules.py (test_opening_a_stopped_run_that_goes_on_...); that the
  # reference stays in every later record, tests/run/test_loop_and_hooks.py.
