"""run/replay.py: round r's client updates again, from the checkpoint before it, are what the run's
clients sent, bit for bit (a 3-round runlocal FedPE run on the loop backend, its sends recorded
as they left the engine's client loop)."""

import re

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.core import checks
from fedjax_face.core import engine as engine_lib
from fedjax_face.run import replay as replay_lib
from fedjax_face.run import simulation
from fedjax_face.run.hooks import evaluation
from tests import config_files


def identical(a, b) -> bool:
  return all(jax.tree.leaves(jax.tree.map(
      lambda x, y: np.array_equal(np.asarray(x), np.asarray(y)), a, b)))


def test_replayed_updates_are_what_the_clients_sent(tmp_path, monkeypatch):
  config = config_files.load_config('fedgc/fedpe')
  config.engine.backend = 'loop'
  config.num_rounds, config.checkpoint_every, config.checkpoint_keep = 3, 1, 2   # holds 2 and 3
  for kind in list(config.evals):   # no evaluator: the final evaluation only hands out replay
    del config.evals[kind]
  # What the engine's clients sent each round: the `ClientResult`s its loop returned, the very
  # list its server step (`_finish_list`) stacks and aggregates.
  sent, given = [], []
  loop = engine_lib.RoundEngine._loop   # pylint: disable=protected-access
  final_evaluation = evaluation.evaluate

  def recording_loop(self, run_client, n, signature):
    sent.append(loop(self, run_client, n, signature))
    return sent[-1]

  def capturing(*args, **kwargs):
    given.append(kwargs.get('replay'))
    return final_evaluation(*args, **kwargs)

  monkeypatch.setattr(engine_lib.RoundEngine, '_loop', recording_loop)
  monkeypatch.setattr(evaluation, 'evaluate', capturing)
  experiment.train_and_evaluate(config, str(tmp_path))
  replay = given[-1]   # the final evaluation's (mid-run evaluations get none)
  assert isinstance(replay, replay_lib.Replay) and len(sent) == 3
  sim = replay.sim

  # Round 3 from checkpoint 2, round 1 from the initial state (there is no checkpoint 0): each
  # real client's update, bit for bit the one it sent.
  for r in (3, 1):
    cohort = simulation.cohort_of(sim.cohorts, sim.engine, r - 1)
    real = [i for i, k in enumerate(cohort) if k < sim.fed.num_clients]
    updates = replay(r)
    assert len(updates) == len(real) == 4
    assert identical(updates, [sent[r - 1][i].update for i in real]), r
  assert not identical(updates, replay(3))   # rounds 1 and 3 sent different updates

  # What round 3's real clients received, in the order of replay(3): the engine's broadcast
  # (`_prepare`, on the whole padded cohort, with the round's key), padding rows left out.
  clients, received = replay.received(3)
  cohort = simulation.cohort_of(sim.cohorts, sim.engine, 2)
  np.testing.assert_array_equal(clients, cohort[cohort < sim.fed.num_clients])
  sent_input, _ = engine_lib._prepare(   # pylint: disable=protected-access
      replay.algorithm, replay.state_before(3), cohort, cohort,
      jax.random.fold_in(sim.root_rng, 3))
  assert identical(received.shared, sent_input.shared)

  # Round 2 trained from checkpoint 1, which checkpoint_keep=2 rotated away: one line naming the
  # round, the rounds held and the rounds that can be replayed.
  with pytest.raises(checks.UsageError) as refused:
    replay(2)
  line = str(refused.value)
  assert '\n' not in line
  assert re.search(r'replay\(2\): round 2 trained from the checkpoint of round 1, which .* no '
                   r'longer holds \(rounds held: 2, 3; config.checkpoint_keep=2', line), line
  assert line.endswith('expected a round that can be replayed: 1, 3.'), line
