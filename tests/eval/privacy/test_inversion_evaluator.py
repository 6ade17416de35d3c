"""The 'inversion' evaluator: off by default, its one-line refusals, and one evaluation on a fake
`EvalInputs` whose replay gives FedPE's real round-1 updates (engine.client_messages) on the
runlocal benchmark: the attacker's model of the update reproduces it exactly from the true
images (under the flips the client drew), and an evaluation gives the results, the image grid of
true images over reconstructions, and the arrays; the model cut to one stage, 2 local steps of
2 images, so that it compiles in seconds."""

import itertools
import re
import types

import jax
import numpy as np
import pytest

from fedjax_face import algorithms, eval as eval_lib
from fedjax_face.core import algorithm as algorithm_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import checks, privacy, secure_aggregation
from fedjax_face.data import federated, preprocess
from fedjax_face.eval.privacy import evaluators, inversion
from fedjax_face.models import heads
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
  c = _config(targets=1, labels='recovered')
  c.federated.batch_size = 4
  with pytest.raises(ValueError, match=r"labels='recovered' reads one example's label from the "
                                       r'update; expected federated.batch_size=1, not 4.'):
    evaluators.check_inversion(c, c.evals.inversion)
  c.federated.batch_size = 1
  evaluators.check_inversion(c, c.evals.inversion)
  c.secure_aggregation.enabled = True
  with pytest.raises(ValueError, match="FedPE's label is read from its own backbone update, which "
                                       "secure aggregation sums with the cohort's"):
    evaluators.check_inversion(c, c.evals.inversion)
  c = _config(targets=1)
  c.secure_aggregation.enabled = True   # attacked from the sum it reveals
  evaluators.check_inversion(c, c.evals.inversion)
  pad = load_config('pad/fedpad')
  pad.evals.inversion = eval_lib.config_section('inversion')
  pad.evals.inversion.targets = 1
  with pytest.raises(ValueError, match=r"algorithm='fedpad' trains a live / spoof model with "
                                       r'Adam from a fresh state, whose update carries the signs'):
    evaluators.check_inversion(pad, pad.evals.inversion)
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
  c.model.dtype = 'float16'
  with pytest.raises(checks.UsageError, match=re.escape(
      "config.model.dtype='float16' with config.evals.inversion.targets=1: the attacker's model "
      "of a client's update takes every SGD step, while a float16 client skips the steps its "
      'private loss scale overflows; expected model.dtype float32 or bfloat16, or '
      'evals.inversion.targets=0.')):
    eval_lib.check_config(c)
  c.model.dtype = 'bfloat16'   # no loss scaling: the attacker's model computes as the client
  evaluators.check_inversion(c, c.evals.inversion)
  c.model.dtype, c.evals.inversion.targets = 'float16', 0   # off: nothing to refuse
  eval_lib.check_config(c)
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
  return evaluator, inputs, replay, c, s


def test_the_attackers_model_of_an_update_is_exact_at_the_true_images(evaluated):
  _, _, replay, config, _ = evaluated
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
  evaluator, inputs, replay, _, _ = evaluated
  assert evaluator.evaluate(inputs._replace(replay=None)) is None   # mid-run: nothing replayed
  out = evaluator.evaluate(inputs)
  res = out.results
  assert [t['client'] for t in res['targets']] == [0, 1]
  assert all(t['images'] == 4 for t in res['targets'])
  for key in ('psnr', 'ssim', 'identity_match_mean_embedding', 'identity_match_class_embedding',
              'identity_match_mean_embedding_true_images'):
    assert np.isfinite(res[key]), key
  assert 0 <= res['identity_match_class_embedding'] <= 1
  # Chance: each target's images all named its batch's most frequent identity.
  shares = []
  for t in range(2):
    ids = np.asarray(replay.data['labels'][t]).reshape(-1)[np.asarray(
        replay.data['mask'][t]).reshape(-1).astype(bool)]
    shares.append(np.max(np.unique(ids, return_counts=True)[1]) / len(ids))
  assert [t['identity_chance'] for t in res['targets']] == shares
  assert res['identity_chance'] == np.mean(shares)   # 4 images a target: equal weights
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
  evaluator, inputs, replay, _, _ = evaluated
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


class _SecureReplay(_Replay):
  """The fixture's round as a run with secure aggregation (and DP at `noise_std`, clip S large
  enough that no update is clipped) replays it: the clipped updates before masking, and the
  parts of the run's simulation the evaluator reads (run/simulation.py's `Simulation`)."""

  def __init__(self, replay, config, algorithm, fed, noise_std):
    self.__dict__.update(replay.__dict__)
    self.config = config
    self.raw = replay.updates
    self.dp = (None if noise_std is None else
               privacy.DpSpec(clip_norm=1e3, noise_std=noise_std, secure=True))
    origin = {'model': replay.state.server['model']}
    self.updates = (self.raw if self.dp is None else
                    [privacy.clip_update(u, origin, 1e3)[0] for u in self.raw])
    engine = types.SimpleNamespace(dp=self.dp, secure=secure_aggregation.Spec(),
                                   noise_secret=None, cohort_multiple=lambda: 1)
    self.sim = types.SimpleNamespace(
        engine=engine, fed=fed, num_examples=np.asarray(fed.num_examples, np.float32),
        cohorts=types.SimpleNamespace(padded=lambda r, multiple: self.cohort),
        root_rng=jax.random.PRNGKey(config.seed))
    self.algorithm = algorithm


def _engines_sum(replay):
  """The server's decoded sum of the 'model' updates as core/engine.py's clients mask them
  (`_one_client`: clip, noise share, pairwise masks, each client's own `update` as it trained)
  and its server unmasks them (`secure_aggregation.unmasked_sum`)."""
  m = len(replay.cohort)
  weights = np.asarray(replay.sim.num_examples)[replay.cohort]
  shares = engine_lib.aggregation_shares(weights, replay.dp)
  round_rng = jax.random.fold_in(replay.sim.root_rng, 1)
  client_input = replay.algorithm.broadcast(replay.state.server, replay.cohort, 0, None)
  masked = []
  for i, (k, raw) in enumerate(zip(replay.cohort, replay.raw)):
    sent = replay.algorithm._replace(client_update=lambda *_, u=raw: algorithm_lib.ClientResult(
        update=u, private={}, metrics={}))
    result = engine_lib._one_client(  # pylint: disable=protected-access
        sent, client_input.shared, client_input.per_client, {}, None, int(k), round_rng,
        replay.dp, secure_aggregation.Spec(), np.int32(i), shares[i], m)
    masked.append(result.update['model'])
  stacked = jax.tree.map(lambda *xs: np.stack(xs), *masked)
  return secure_aggregation.unmasked_sum(secure_aggregation.Spec(), stacked)


@pytest.mark.parametrize('noise_std', [None, 0.05])
def test_under_secure_aggregation_the_attack_matches_the_sum_the_server_decodes(
    evaluated, monkeypatch, noise_std):
  _, inputs, replay, config, s = evaluated
  c = config.copy_and_resolve_references()
  c.secure_aggregation.enabled = True
  c.dp.enabled = noise_std is not None
  secure = _SecureReplay(replay, c, s.algorithm, s.fed, noise_std)
  attacked = {}
  def capture(attack, target, shape, rng, *args, restarts=1):
    attacked.update(target=target, shape=shape, args=args)
    return np.zeros(shape, np.float32), 0.5
  monkeypatch.setattr(inversion, 'invert', capture)
  out = evaluators.make_inversion(c, c.evals.inversion,
                                  eval_lib.EvalSetup(c, s.data, s.fed)).evaluate(
      inputs._replace(replay=secure))
  _, lr = evaluators.client_update_model(c, 1)
  # What the attack matched is exactly minus the decoded sum over the rate, bit for bit.
  expected = jax.tree.map(lambda x: -x / lr, _engines_sum(secure)['params'])
  for got, want in zip(jax.tree.leaves(attacked['target']), jax.tree.leaves(expected)):
    np.testing.assert_array_equal(got, want)
  # One joint attack: every client's batch, with the shares the engine weighs them by.
  assert attacked['shape'] == replay.data['images'].shape
  shares = attacked['args'][-1]
  if noise_std is None:
    n = np.asarray(s.fed.num_examples, np.float32)[replay.cohort]
    np.testing.assert_array_equal(shares, n / n.sum())
  else:
    np.testing.assert_array_equal(shares, np.full(len(replay.cohort), 1 / len(replay.cohort),
                                                  np.float32))
  res = out.results
  assert res['secure_aggregation'] is True and [t['client'] for t in res['targets']] == [0, 1]
  assert res['threat_model'].startswith('curious server: only the weighted sum of the 4 clients')
  assert res['dp_noise'] == ('none (no DP)' if noise_std is None else
                             "each client's share N(0, (sigma S)^2 s_k), sigma S = "
                             f"{noise_std:.4g}, the run's own draws")
  if noise_std is not None:   # sigma = 0: the sum with the noise shares is the clipped one's
    silent = _SecureReplay(replay, c, s.algorithm, s.fed, 0.0)
    sent = replay.state.server['model']
    with_noise, how = evaluators.secure_view(silent, 1, replay.cohort, silent.updates, sent)
    deltas = [jax.tree.map(lambda u, o: u - o, u['model'], sent) for u in silent.updates]
    without = evaluators.secure_sum(deltas, shares, secure_aggregation.Spec().fraction_bits)
    assert how['dp_noise'].startswith("each client's share N(0, (sigma S)^2 s_k), sigma S = 0,")
    for got, want in zip(jax.tree.leaves(with_noise), jax.tree.leaves(without)):
      np.testing.assert_array_equal(got, want)


def test_a_batch_1_label_is_read_from_fedgcs_rows_or_fedpes_feature_shift():
  c = _config()
  lr, wd = 0.1, c.optimizer.weight_decay
  w = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (5, 8)))
  f = jax.random.normal(jax.random.PRNGKey(1), (1, 8))
  class_mask = np.array([True, True, True, True, False])
  head = heads.head_kwargs_from_config({'loss': 'softmax'})
  grads = jax.jit(jax.grad(lambda w, f, y: heads.loss(f, w, y[None], class_mask, None, **head),
                           argnums=(0, 1)))
  for label in range(4):
    g_rows, g_features = grads(w, f, label)
    sent_rows = w - lr * (g_rows + wd * w)   # FedGC: one SGD step on its rows
    assert evaluators.recovered_label(c, {'W': sent_rows}, None, w, class_mask, lr) == (
        label, 'idlg_sign')
    shift = {'features': {'bias': f[0]}}   # FedPE at batch 1: the features are the BN shift
    sent = {'params': {'features': {'bias': f[0] - lr * g_features[0]}}}
    assert evaluators.recovered_label(c, {'model': sent}, shift, w, class_mask, lr) == (
        label, 'feature_gradient')
  with pytest.raises(ValueError, match=r"small_cnn has no final BatchNorm shift \('features'/"):
    evaluators.recovered_label(c, {'model': {'params': {}}}, {}, w, class_mask, lr)


def test_the_sum_attack_client_by_client_takes_the_joint_objectives_step():
  """inversion.make_sum_attack (each client's VJP, the sum's cotangent) against the gradient of
  `sum_model`'s joint objective, on a toy dense head: the distance it reports is the joint one at
  the start, and its one Adam step moves each pixel by the rate against that gradient's sign."""
  kernel = jax.random.normal(jax.random.PRNGKey(0), (6, 4))

  def grad_fn(images, params, batch_stats, w, labels, mask, class_mask):
    del batch_stats, mask, class_mask
    def loss(p):
      logits = images.reshape(-1, 6) @ p['kernel'] @ w.T
      return -jax.numpy.mean(jax.nn.log_softmax(logits)[np.arange(2), labels.reshape(-1)])
    return jax.grad(loss)({'kernel': params})

  m = 3
  w = jax.random.normal(jax.random.PRNGKey(1), (m, 5, 4))
  labels = np.array([[[0, 1]], [[2, 3]], [[4, 0]]], np.int32)
  mask, class_mask = np.ones((m, 1, 2), bool), np.ones((m, 5), bool)
  shares = np.array([0.5, 0.3, 0.2], np.float32)
  args = (kernel, {}, w, labels, mask, class_mask, shares)
  joint = jax.jit(evaluators.sum_model(grad_fn))
  target = joint(jax.random.uniform(jax.random.PRNGKey(2), (m, 1, 2, 2, 3, 1)), *args)
  start = jax.random.uniform(jax.random.PRNGKey(3), (m, 1, 2, 2, 3, 1), minval=-0.5, maxval=0.5)
  objective = lambda x: inversion.gradient_distance(joint(x, *args), target, 'cosine')
  expected_distance, g = jax.jit(jax.value_and_grad(objective))(start)
  images, distance = inversion.make_sum_attack(
      grad_fn, 2, iterations=1, learning_rate=0.1, tv_weight=0.0, distance='cosine')(
          start, target, *args)
  assert float(distance) == pytest.approx(float(expected_distance), rel=1e-6)
  # Adam's first step is lr * g / (|g| + 1e-8): the rate against the sign where |g| >> 1e-8 (the
  # rate of step 0 of a 1-iteration schedule, already decayed at 3/8 of it).
  rate = float(inversion.learning_rate_schedule(0.1, 1)(0))
  np.testing.assert_allclose(images, start - rate * g / (np.abs(g) + 1e-8), rtol=1e-5, atol=1e-6)


def test_the_secure_sums_noise_follows_the_rounds_adaptive_clip():
  """Under adaptive clipping the clients' noise shares of round r are σ_Δ·C_t at the clip the
  round ran at (held by the state it trained from), not the first round's C_0; a fixed clip
  keeps σS and reads no state."""
  adaptive = privacy.DpSpec(clip_norm=0.5, noise_std=0.5 * 1.5, noise_multiplier=1.5,
                            clip_rule='adaptive', count_noise_multiplier=0.0)
  held = {3: privacy.with_clip({'blocks': {}}, 0.25)}
  replay = types.SimpleNamespace(state_before=lambda r: types.SimpleNamespace(server=held[r]))
  assert float(evaluators.round_noise_std(adaptive, replay, 3)) == 1.5 * 0.25
  fixed = adaptive._replace(clip_rule='fixed')
  no_state = types.SimpleNamespace(state_before=None)   # calling it would fail
  assert evaluators.round_noise_std(fixed, no_state, 3) == 0.5 * 1.5
