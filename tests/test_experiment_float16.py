"""float16 through the driver (issue 62), each run a real workdir.

The suite: FedPE's runlocal run (a width-2 CNN) in float16 with `client_optimizer_state='keep'` (so the loss
scale is each client's private state, checkpointed with its momentum) trains: every round's
loss finite and the last below the first, the loss-scaling metrics logged each round, the
scales in the last checkpoint's client states, and the compute dtype in results.json's `engine`
and config.json's provenance ('auto' resolved: `run.resume.compute_dtype`).

The full tier: that run stopped after round 2 and resumed ends bit for bit as the uninterrupted
run (the scales and their counts of good steps in the client states included); one float16 runlocal run per family of local step (FedGC: common.local_step;
FedFR: its client; FedGPAD: a PAD method; FedMA: its masked step; FedRep on PAD:
partial_sharing.train_part; Ditto: two models), each with a finite loss every round and its
skipped steps logged. The loss-scaling unit tests: tests/core/test_loss_scale.py,
tests/algorithms/test_loss_scaled_steps.py; float16's loss against float32's:
tests/test_experiment_precision.py."""

import json
import os
import shutil

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.core import loss_scale, precision
from fedjax_face.run import resume
from tests import config_files, saved_checkpoints
from tests.test_experiment_precision import logged_scalars

_ROUNDS = 3


def _fedpe_keep():
  config = config_files.load_config('fedpe')
  config.model.dtype = 'float16'
  config.num_rounds = _ROUNDS
  config.checkpoint_keep = _ROUNDS
  config.federated.client_optimizer_state = 'keep'
  # Smaller than runlocal, and the local steps in one scan (one step compiled, not two): the
  # driver's float16 run at about two thirds of runlocal's CPU time.
  config.model.width = 2
  config.model.embedding_dim = 8
  config.engine.step_mode = 'scan'
  # No evaluator: what is checked is the training and the checkpoints.
  for kind in list(config.evals):
    del config.evals[kind]
  return config


@pytest.fixture(scope='module')
def straight_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp('float16') / 'straight'
  experiment.train_and_evaluate(_fedpe_keep(), str(workdir))
  return workdir


def test_a_float16_run_trains_and_logs_its_loss_scaling(straight_run):
  losses = logged_scalars(str(straight_run), 'train_loss')
  assert sorted(losses) == list(range(1, _ROUNDS + 1))
  assert all(np.isfinite(v) for v in losses.values()) and losses[_ROUNDS] < losses[1]
  for tag in ('loss_scale/skipped_steps', 'loss_scale/scale'):
    assert sorted(logged_scalars(str(straight_run), tag)) == list(range(1, _ROUNDS + 1)), tag
  saved = saved_checkpoints.restore(straight_run, _ROUNDS)
  scales = np.asarray(saved['clients']['opt_state']['loss_scale']['scale'])
  assert scales.dtype == np.float32 and np.all(scales >= loss_scale.MIN_SCALE)
  results = json.loads((straight_run / 'results.json').read_text())
  config_json = json.loads((straight_run / 'config.json').read_text())
  assert results['engine']['compute_dtype'] == 'float16'
  assert config_json['provenance']['start']['compute_dtype'] == 'float16'


def test_each_start_records_the_dtype_auto_resolved_to():
  assert resume.compute_dtype({'model': {'dtype': 'auto'}}) == precision.resolve_here('auto')
  assert resume.compute_dtype({'model': {'dtype': 'bfloat16'}}) == 'bfloat16'
  assert resume.compute_dtype({'model': {'name': 'small_cnn'}}) == 'float32'   # before the field


@pytest.mark.full
def test_a_resumed_float16_run_equals_the_uninterrupted_one(straight_run, tmp_path):
  cut = tmp_path / 'cut'
  shutil.copytree(straight_run, cut)
  shutil.rmtree(cut / 'checkpoints' / str(_ROUNDS))
  os.remove(cut / 'checkpoint_digests' / f'{_ROUNDS}.json')
  os.remove(cut / 'results.json')
  resumed = experiment.train_and_evaluate(_fedpe_keep(), str(cut))
  assert resumed['timing']['resumed_from_round'] == _ROUNDS - 1
  jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(cut, _ROUNDS),
               saved_checkpoints.restore(straight_run, _ROUNDS))


@pytest.mark.full
@pytest.mark.parametrize('name', ['fedgc', 'fedfr/fedfr', 'pad/fedgpad', 'pad/fedma', 'pad/ditto',
                                  'pad/fedrep'])
def test_each_family_of_local_step_trains_in_float16(tmp_path, name):
  config = config_files.load_config(name)
  config.model.dtype = 'float16'
  experiment.train_and_evaluate(config, str(tmp_path))
  losses = logged_scalars(str(tmp_path), 'train_loss')
  skipped = logged_scalars(str(tmp_path), 'loss_scale/skipped_steps')
  assert losses and all(np.isfinite(v) for v in losses.values()), losses
  assert sorted(skipped) == sorted(losses), (skipped, losses)   # every round logs its skips
