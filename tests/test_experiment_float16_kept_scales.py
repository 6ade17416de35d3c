"""float16 through the driver, the loss scale a client keeps between rounds where its optimizer
starts afresh (`federated.client_optimizer_state='reset'`; core/loss_scale.py), full tier only:
FedRep on PAD (`partial_sharing.train_part`, one scale carried through its head and body phases,
algorithms/fedrep.py) keeps each data center's scale in `RoundState.clients['loss_scale']`, which
the checkpoint holds, so a run stopped after round 2 and resumed ends bit for bit as the
uninterrupted one. The suite's float16 runs: tests/test_experiment_float16.py."""

import os
import shutil

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.core import loss_scale
from tests import config_files, saved_checkpoints
from tests.test_experiment_precision import logged_scalars

_ROUNDS = 3


def _fedrep_float16():
  config = config_files.load_config('pad/fedrep')
  config.model.dtype = 'float16'
  config.num_rounds = _ROUNDS
  config.checkpoint_keep = _ROUNDS
  for kind in list(config.evals):   # what is checked is the training and the checkpoints
    del config.evals[kind]
  return config


@pytest.mark.full
def test_fedreps_kept_scales_are_checkpointed_and_a_resumed_run_equals_the_uninterrupted_one(
    tmp_path):
  straight = tmp_path / 'straight'
  experiment.train_and_evaluate(_fedrep_float16(), str(straight))
  for tag in ('train_loss', 'loss_scale/skipped_steps', 'loss_scale/scale'):
    assert sorted(logged_scalars(str(straight), tag)) == list(range(1, _ROUNDS + 1)), tag
  saved = saved_checkpoints.restore(straight, _ROUNDS)
  scales = saved['clients']['loss_scale']
  num_clients = _fedrep_float16().federated.num_clients
  assert np.shape(scales['scale']) == np.shape(scales['good_steps']) == (num_clients,)
  assert np.all(np.asarray(scales['scale']) >= loss_scale.MIN_SCALE)
  assert np.any(np.asarray(scales['scale']) != loss_scale.INITIAL_SCALE)   # kept, not restarted
  cut = tmp_path / 'cut'
  shutil.copytree(straight, cut)
  shutil.rmtree(cut / 'checkpoints' / str(_ROUNDS))
  os.remove(cut / 'checkpoint_digests' / f'{_ROUNDS}.json')
  os.remove(cut / 'results.json')
  resumed = experiment.train_and_evaluate(_fedrep_float16(), str(cut))
  assert resumed['timing']['resumed_from_round'] == _ROUNDS - 1
  jax.tree.map(np.testing.assert_array_equal, saved_checkpoints.restore(cut, _ROUNDS), saved)
