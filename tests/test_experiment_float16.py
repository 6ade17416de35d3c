"""float16 through the driver (issue 62), each run a real workdir.

The suite: FedPE's runlocal run (a one-stage, width-2 CNN) in float16 with
`client_optimizer_state='keep'` (so the loss scale is each client's private state, checkpointed
with its momentum) trains: every round's loss finite and the last below the first, the
loss-scaling metrics logged each round, the scales in the last checkpoint's client states, and
the compute dtype in results.json's `engine` and config.json's provenance ('auto' resolved:
`run.resume.compute_dtype`).

The full tier: that run stopped after round 2 and resumed ends bit for bit as the uninterrupted
run (the scales and their counts of good steps in the client states included), and so does a
FedRep run on PAD, whose optimizer starts afresh each round while each data center keeps its
scale in `RoundState.clients['loss_scale']`; one float16 runlocal run per family of local step
(FedGC: common.local_step; FedFR: its client; FedGPAD: a PAD method; FedMA: its masked step;
FedRep on PAD: partial_sharing.train_part; Ditto: two models), each with a finite loss every
round and its skipped steps logged. The loss-scaling unit tests: tests/core/test_loss_scale.py,
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


def _float16(name: str):
  """`name`'s config in float16 for _ROUNDS rounds, every checkpoint kept, no evaluator (what is
  checked is the training and the checkpoints)."""
  config = config_files.load_config(name)
  config.model.dtype = 'float16'
  config.num_rounds = _ROUNDS
  config.checkpoint_keep = _ROUNDS
  for kind in list(config.evals):
    del config.evals[kind]
  return config


def _fedpe_keep():
  config = _float16('fedpe')
  config.federated.client_optimizer_state = 'keep'
  # Smaller than runlocal (one conv stage of width 2, not three of 4), and the local steps in one
  # scan (one step compiled, not two): the stages fewer took the run from 5.7 to 3.6 s of CPU.
  config.model.num_stages = 1
  config.model.width = 2
  config.model.embedding_dim = 8
  config.engine.step_mode = 'scan'
  return config


def _resumed_after_the_last_but_one_round(straight_run, config, tmp_path):
  """The last round's checkpoint of `straight_run` resumed from the one before it."""
  cut = tmp_path / 'cut'
  shutil.copytree(straight_run, cut)
  shutil.rmtree(cut / 'checkpoints' / str(_ROUNDS))
  os.remove(cut / 'checkpoint_digests' / f'{_ROUNDS}.json')
  os.remove(cut / 'results.json')
  resumed = experiment.train_and_evaluate(config, str(cut))
  assert resumed['timing']['resumed_from_round'] == _ROUNDS - 1
  return saved_checkpoints.restore(cut, _ROUNDS)


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
  jax.tree.map(np.testing.assert_array_equal,
               _resumed_after_the_last_but_one_round(straight_run, _fedpe_keep(), tmp_path),
               saved_checkpoints.restore(straight_run, _ROUNDS))


@pytest.mark.full
def test_fedreps_kept_scales_are_checkpointed_and_a_resumed_run_equals_the_uninterrupted_one(
    tmp_path):
  """FedRep on PAD (`partial_sharing.train_part`, one scale carried through its head and body
  phases) keeps each data center's scale in `RoundState.clients['loss_scale']` while its
  optimizer starts afresh each round ('reset')."""
  straight = tmp_path / 'straight'
  experiment.train_and_evaluate(_float16('pad/fedrep'), str(straight))
  for tag in ('train_loss', 'loss_scale/skipped_steps', 'loss_scale/scale'):
    assert sorted(logged_scalars(str(straight), tag)) == list(range(1, _ROUNDS + 1)), tag
  saved = saved_checkpoints.restore(straight, _ROUNDS)
  scales = saved['clients']['loss_scale']
  num_clients = _float16('pad/fedrep').federated.num_clients
  assert np.shape(scales['scale']) == np.shape(scales['good_steps']) == (num_clients,)
  assert np.all(np.asarray(scales['scale']) >= loss_scale.MIN_SCALE)
  assert np.any(np.asarray(scales['scale']) != loss_scale.INITIAL_SCALE)   # kept, not restarted
  jax.tree.map(np.testing.assert_array_equal,
               _resumed_after_the_last_but_one_round(straight, _float16('pad/fedrep'), tmp_path),
               saved)


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
