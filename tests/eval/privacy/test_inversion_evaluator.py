"""The 'inversion' evaluator: off by default, its one-line refusals, and one evaluation on a fake
`EvalInputs` whose replay gives FedPE's real round-1 updates (engine.client_messages) on the
runlocal benchmark: the attacker's model of the update reproduces it exactly from the true
images (under the flips the client drew), and an evaluation gives the results, the image grid of
true images over reconstructions, and the arrays; the model cut to one stage, 2 local steps of
2 images, so that it compiles in seconds."""

import itertools

import jax
import numpy as np
import pytest

from fedjax_face import algorithms, eval as eval_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated, preprocess
from fedjax_face.eval.privacy import evaluators, inversion
from fedjax_face.run import setup as run_setup
from tests.config_files import load_config


def _config(**fields):
  c = load_config('fedgc/fedpe')
  c.evals.inversion = eval_lib.config_section('inversion')
  c.evals.inversion.update(fields)
  return c


def test_off_by_default_in_every_recognition_config():
  c = _config()
  assert c.evals.inversion.targets == 0
  eval_lib.check_config(c)
  assert evaluators.make_inversion(c, c.evals.inversion, None) is None


@pytest.mark.parametrize('field,value,message', [
    ('targets', -1, r'config.evals.inversion.targets=-1; expected a non-negative integer.'),
    ('distance', 'l1', r"config.evals.inversion.distance='l1'"),
    ('round', 3, r'config.evals.inversion.round=3; expected a round of the run, 1..2.'),
    ('tv_weight', -1.0, r'config.evals.inversion.tv_weight=-1.0; expected a finite non-negative'),
])
def test_bad_fields_are_named(field, value, message):
  c = _config(targets=1)
  c.evals.inversion[field] = value
  with pytest.raises(ValueError, match=message):
    eval_lib.check_config(c)


def test_refusals_name_what_the_attack_needs():
  c = _config(targets=1)
  c.secure_aggregation.enabled = True
  with pytest.raises(ValueError, match='sees only the masked sum'):
    evaluators.check_inversion(c, c.evals.inversion)
  c = _config(targets=1)
  c.optimizer.name = 'adam'
  with pytest.raises(ValueError, match="pseudo-gradient only under SGD; expected 'sgd'"):
    evaluators.check_inversion(c, c.evals.inversion)
  c = _config(targets=1)
  c.algorithm = 'fedfv'
  with pytest.raises(ValueError, match=r"algorithm='fedfv', whose client update the attack does "
                                       r"not model; expected one of \('fedpe', 'fedgc'\)"):
    evaluators.check_inversion(c, c.evals.inversion)
  c = _config(targets=1)
  c.evals.inversion.extra = 1
  with pytest.raises(ValueError, match=r'has fields .*extra.*; expected'):
    evaluators.check_inversion(c, c.evals.inversion)


class _Replay:
  """`EvalInputs.replay` of round 1, from the initial state (as run/replay.py gives it)."""

  def __init__(self, config, algorithm, fed, state):
    self.state = state
    self.cohort = np.arange(fed.num_clients, dtype=np.int32)
    fl = config.federated
    self.data = federated.sample_round(fed, self.cohort, round_index=0, seed=config.seed,
                                       steps=fl.local_steps, batch_size=fl.batch_size)
    results = engine_lib.client_messages(algorithm, state, self.cohort, self.data,
                                         jax.random.PRNGKey(1), num_clients=fed.num_clients)
    self.updates = [r.update for r in results]

  def __call__(self, r):
    assert r == 1
    return self.updates

  def state_before(self, r):
    assert r == 1
    return self.state

  def round_batches(self, r):
    assert r == 1
    return self.cohort, self.data


@pytest.fixture(scope='module')
def evaluated():
  c = _config(targets=2, iterations=3)
  c.evals = type(c.evals)({'inversion': c.evals.inversion})
  c.model.num_stages = 1
  c.federated.local_steps = 2
  c.federated.batch_size = 2
  s = run_setup.set_up(c, algorithms.get(c.algorithm), None)
  state = run_setup.init_state(c, s.algorithm, None)
  replay = _Replay(c, s.algorithm, s.fed, state)
  inputs = eval_lib.EvalInputs(
      embed=eval_lib.make_embed(s.model)(s.algorithm.eval_variables(state.server)),
      class_embeddings=s.algorithm.class_embeddings(state), state=state, replay=replay)
  [evaluator] = s.evaluators
  return evaluator, inputs, replay, c


def test_the_attackers_model_of_an_update_is_exact_at_the_true_images(evaluated):
  _, _, replay, config = evaluated
  grad_fn, lr = evaluators.client_update_model(config, 1)
  grad_fn = jax.jit(grad_fn)
  sent = replay.state.server['model']
  target = inversion.pseudo_gradient(sent['params'], replay.updates[0]['model']['params'], lr)
  images = np.asarray(preprocess.normalize(replay.data['images'][0]))   # [S, B, H, W, C]
  def distance(flips):   # the client's random flips are not known: try each of the 2^4
    flipped = images.copy()
    for i, flip in enumerate(flips):
      if flip:
        flipped[i // 2, i % 2] = flipped[i // 2, i % 2, :, ::-1]
    grads = grad_fn(flipped, sent['params'], sent['batch_stats'], replay.state.clients['W'][0],
                    replay.data['labels'][0], replay.data['mask'][0], replay.data['class_mask'][0])
    return float(inversion.gradient_distance(grads, target, 'cosine'))
  distances = sorted(distance(f) for f in itertools.product([0, 1], repeat=4))
  assert distances[0] < 1e-5 < distances[1]


def test_an_evaluation_reports_each_target_and_draws_the_grid(evaluated):
  evaluator, inputs, replay, _ = evaluated
  assert evaluator.evaluate(inputs._replace(replay=None)) is None   # mid-run: nothing replayed
  out = evaluator.evaluate(inputs)
  res = out.results
  assert [t['client'] for t in res['targets']] == [0, 1]
  assert all(t['images'] == 4 for t in res['targets'])
  for key in ('psnr', 'ssim', 'identity_match_mean_embedding', 'identity_match_class_embedding',
              'identity_match_mean_embedding_true_images'):
    assert np.isfinite(res[key]), key
  assert 0 <= res['identity_match_class_embedding'] <= 1
  grid = out.images['inversion.png']
  assert grid['images'].shape == (16, 16, 16, 3) and grid['rows'] == 4 and grid['cols'] == 4
  rows = grid['images'].reshape(4, 4, 16, 16, 3)
  # Row 0 is client 0's true images (each as drawn or mirrored), row 1 their reconstructions.
  true0 = np.asarray(replay.data['images'][0]).reshape(4, 16, 16, 3)
  for got, want in zip(rows[0], true0):
    assert np.array_equal(got, want) or np.array_equal(got, want[:, ::-1])
  np.testing.assert_array_equal(out.arrays['inversion.npz']['reconstructed'],
                                rows[[1, 3]].reshape(-1, 16, 16, 3))
  assert out.markdown[0].startswith("Gradient inversion of round 1's updates (cosine, 2 local")


def test_a_method_without_client_class_rows_is_refused(evaluated):
  evaluator, inputs, replay, _ = evaluated
  bare = inputs.state.replace(clients={})
  class NoRows(type(replay)):
    def __init__(self):
      self.__dict__.update(replay.__dict__)
      self.state = bare
  with pytest.raises(ValueError, match=r"fedpe keeps no per-client class rows \('W'\)"):
    evaluator.evaluate(inputs._replace(replay=NoRows()))


def test_class_rows_come_from_the_client_or_the_servers_per_client_slots():
  w = np.zeros((3, 2, 4))
  rows, whose = evaluators.client_rows({'model': {}}, {'W': w}, 3)        # FedPE: private
  assert rows is w and 'upper bound' in whose
  rows, whose = evaluators.client_rows({'model': {}, 'W': w}, {}, 3)      # FedGC: broadcast
  assert rows is w and 'broadcast' in whose
  assert evaluators.client_rows({'model': {}, 'W': np.zeros((5, 4))}, {}, 3) == (None, None)
