"""The 'leakage' evaluator: its known answers (re-identification rank-1 = 1 and TAR = 1 with the
exact template, chance with random vectors), each kind's templates from a fake replay (the rows
the server receives, over one round and over several with a client's latest rows kept; FedFV's
broadcast decoded two ways; FedUV's W′ update; the released class embeddings) through the whole
evaluator with a fake embed function and a fake data source, the synthetic source's probes, and
the one-line refusals of its check. No driver run."""

import types

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_face import eval as eval_lib
from fedjax_face.core.algorithm import ClientInput
from fedjax_face.data import sources
from fedjax_face.eval.privacy import leakage

DIM = 32
NUM_IDS = 48        # training identities of the fake source
PER = 3             # probes per identity


def _table(seed=0):
  """One embedding per code 0..255: identity i's images are code i, distractor j's 56 + j."""
  return np.random.default_rng(seed).standard_normal((256, DIM)).astype(np.float32)


TABLE = _table()
LEVELS = jnp.asarray((np.arange(256) / 255.0 - 0.5) / 0.5, jnp.float32)   # preprocess.normalize


def fake_embed(x):
  """A 'model' that maps an image of constant code c to TABLE[c] (mirror included)."""
  code = jnp.argmin(jnp.abs(x[:, 0, 0, 0][:, None] - LEVELS[None]), axis=1)
  return jnp.asarray(TABLE)[code]


def _images(codes):
  return np.broadcast_to(np.asarray(codes, np.uint8)[:, None, None, None],
                         (len(codes), 2, 2, 3)).copy()


class FakeSource(types.ModuleType):
  TASK = 'recognition'

  def __init__(self):
    super().__init__('fake_leakage_source')
    self.asked = []

  def identity_probes(self, config, data, ids, per_identity, num_distractors):
    self.asked.append(np.asarray(ids).tolist())
    labels = np.concatenate([np.repeat(ids, per_identity),
                             data.num_identities + np.repeat(np.arange(num_distractors),
                                                             per_identity)])
    codes = np.where(labels < data.num_identities, labels, labels - data.num_identities + 56)
    return _images(codes), labels


def _config(algorithm='fedgc', **section):
  c = ml_collections.ConfigDict()
  c.algorithm, c.seed, c.num_rounds = algorithm, 0, 5
  c.data = ml_collections.ConfigDict({'source': 'fake'})
  c.eval = ml_collections.ConfigDict({'batch_size': 16})
  c.fedfv = ml_collections.ConfigDict({'group_size': 2})
  c.evals = ml_collections.ConfigDict({'leakage': leakage.config_leakage()})
  c.evals.leakage.update({'round': 2, 'num_distractors': 40, 'probes_per_identity': PER,
                          'max_identities': 64, **section})
  return c


@pytest.fixture
def fake_source(monkeypatch):
  source = FakeSource()
  monkeypatch.setitem(sources.SOURCES, 'fake', source)
  return source


def _setup(config, clients_rows=2):
  """One client per `clients_rows` identities; 2 training images per identity."""
  train_labels = np.repeat(np.arange(NUM_IDS), 2)
  data = types.SimpleNamespace(num_identities=NUM_IDS, train_labels=train_labels,
                               train_images=_images(train_labels))
  table = np.arange(NUM_IDS).reshape(-1, clients_rows)
  return eval_lib.EvalSetup(config, data, types.SimpleNamespace(identity_table=table))


class FakeReplay:
  """`replay(r)` of a fake run: clients 1, 3, 4 of round r send `sent(client)`."""

  def __init__(self, sent, shared=None, class_rows=None):
    self.sent, self.shared, self.class_rows = sent, shared or {}, class_rows
    self.algorithm = types.SimpleNamespace(client_rows=('W',),
                                           class_embeddings=lambda state: self.class_rows)
    self.clients = np.array([1, 3, 4])

  def __call__(self, r):
    assert r == 2
    return [self.sent(k) for k in self.clients]

  def received(self, r):
    assert r == 2
    return self.clients, ClientInput(shared=self.shared, per_client={})

  def state_before(self, r):
    return None


def _run(config, setup, replay, class_embeddings=None):
  evaluator = leakage.make_leakage(config, config.evals.leakage, setup)
  return evaluator.evaluate(eval_lib.EvalInputs(embed=fake_embed,
                                                class_embeddings=class_embeddings,
                                                replay=replay))


def test_score_is_total_with_the_exact_template_and_chance_with_random_vectors():
  labels = np.repeat(np.arange(100), 4)
  probes = TABLE[:100][labels] + 0.0
  exact = leakage.score(TABLE[:100], np.arange(100), probes, labels)
  assert exact['rank1'] == 1.0 and exact['tar_at_far'] == {'0.001': 1.0, '0.01': 1.0}
  assert exact['candidates'] == 100 and exact['chance_rank1'] == 0.01
  rng = np.random.default_rng(1)
  random = leakage.score(rng.standard_normal((100, DIM)), np.arange(100), probes, labels)
  assert random['rank1'] <= 0.05                     # chance 0.01: 100 draws
  assert random['tar_at_far']['0.01'] <= 0.04        # TAR of random vectors ≈ FAR


def test_server_rows_leak_as_the_exact_template_and_random_vectors_do_not(fake_source):
  config = _config('fedgc', num_distractors=200)   # 6 x 618 pairs resolve FAR 1e-3
  setup = _setup(config)
  # Each client sends its own identities' rows: here the model's very embedding of them.
  replay = FakeReplay(lambda k: {'model': None, 'W': TABLE[setup.fed_view.identity_table[k]]})
  out = _run(config, setup, replay, class_embeddings=TABLE[:NUM_IDS])
  rows = out.results['kinds']
  assert set(rows) == {'server_rows', 'released'}
  server = rows['server_rows']
  assert server['party'] == 'curious server' and server['identities'] == 6   # clients 1, 3, 4
  assert server['candidates'] == 6 + 200 and server['chance_rank1'] == 1 / 206
  for row in (server, server['exact'], rows['released'], rows['released']['exact']):
    assert row['rank1'] == 1.0 and row['tar_at_far'] == {'0.001': 1.0, '0.01': 1.0}
  assert server['random']['rank1'] <= 1 / 6
  assert rows['released']['identities'] == NUM_IDS
  assert rows['released']['random']['rank1'] <= 0.1
  assert rows['released']['random']['tar_at_far']['0.01'] <= 0.05
  assert fake_source.asked == [list(range(NUM_IDS))]   # one rendering for every kind
  assert out.markdown[2].startswith('| template | party |') and len(out.markdown) == 7
  assert {line.count('|') for line in out.markdown[2:6]} == {15}   # 14 columns, every row
  assert out.scalars == {'server_rows/rank1': 1.0, 'released/rank1': 1.0}


class RoundsReplay(FakeReplay):
  """A fake run whose cohort differs by round: `cohorts[t]` the clients of round t."""

  def __init__(self, sent, cohorts):
    super().__init__(sent)
    self.cohorts, self.replayed = cohorts, []

  def __call__(self, r):
    self.replayed.append(r)
    return [self.sent(k, r) for k in self.cohorts[r]]

  def received(self, r):
    return np.asarray(self.cohorts[r]), ClientInput(shared={}, per_client={})


def test_latest_per_identity_keeps_an_identitys_latest_row_and_counts_the_others():
  rows, labels, repeats = leakage.latest_per_identity([
      (np.array([[1.0], [2.0]]), np.array([5, 7])),
      (np.array([[3.0], [4.0]]), np.array([7, 9])),
      (np.array([[6.0]]), np.array([5]))])
  assert dict(zip(labels.tolist(), rows[:, 0].tolist())) == {5: 6.0, 7: 3.0, 9: 4.0}
  assert repeats == 2


def test_several_rounds_cover_the_union_of_the_cohorts_with_each_clients_latest_rows(
    fake_source):
  del fake_source
  config = _config('fedgc', round=4, rounds=3, num_distractors=50)   # 1,368 impostor pairs
  setup = _setup(config)
  table = setup.fed_view.identity_table
  wrong = np.random.default_rng(7).standard_normal(TABLE.shape)
  # Client 4 takes part in rounds 2 and 4: its round-2 rows are noise, its round-4 rows exact, so
  # only its latest rows identify it; round 1 (client 0) is outside the window.
  cohorts = {1: [0], 2: [1, 4], 3: [3], 4: [4, 6]}
  sent = lambda k, r: {'W': (wrong if (k, r) == (4, 2) else TABLE)[table[k]]}
  replay = RoundsReplay(sent, cohorts)
  out = _run(config, setup, replay)
  server = out.results['kinds']['server_rows']
  assert replay.replayed == [2, 3, 4] and out.results['rounds'] == 3
  assert server['replayed_rounds'] == [2, 4] and server['repeats'] == 2   # client 4's two identities
  assert server['identities'] == 2 * 4                          # clients 1, 3, 4, 6
  assert server['rank1'] == 1.0 and server['tar_at_far'] == {'0.001': 1.0, '0.01': 1.0}
  assert out.markdown[0].startswith("Identity leakage (rounds 2-4 (the server's views) replayed")


def test_mid_run_evaluations_without_replay_say_nothing(fake_source):
  del fake_source
  config = _config('fedgc')
  assert _run(config, _setup(config), None, TABLE[:NUM_IDS]) is None


def test_fedfv_broadcast_is_decoded_two_ways(fake_source):
  del fake_source
  config = _config('fedfv', share_threshold=0.35)
  setup = _setup(config, clients_rows=1)
  unit = TABLE[:NUM_IDS] / np.linalg.norm(TABLE[:NUM_IDS], axis=1, keepdims=True)
  groups = np.array([[10, 11], [10, 12], [11, 13], [20, 21], [22, 23], [22, 24], [30, 31]])
  eq = unit[groups].mean(axis=1)
  eq /= np.linalg.norm(eq, axis=1, keepdims=True)
  members = leakage.equivalent_members(eq, TABLE[:NUM_IDS], 2)
  assert members == [tuple(g) for g in groups.tolist()]
  replay = FakeReplay(lambda k: {'model': None, 'W': TABLE[[k]]}, shared={'W_eq': eq},
                      class_rows=TABLE[:NUM_IDS])
  rows = _run(config, setup, replay, TABLE[:NUM_IDS]).results['kinds']
  assert set(rows) == {'server_rows', 'broadcast_as_is', 'broadcast_shared', 'released'}
  as_is, shared = rows['broadcast_as_is'], rows['broadcast_shared']
  assert as_is['party'] == shared['party'] == 'curious client'
  assert as_is['templates'] == 14 and as_is['identities'] == 11
  assert as_is['rank1'] <= 0.5                 # a blend of two: one member at most at rank 1
  # The three linked pairs share 10, 11 and 22: their sums lean towards them.
  assert shared['templates'] == shared['links'] == 3 and shared['false_links'] == 0
  assert shared['rank1'] == 1.0 and shared['exact']['rank1'] == 1.0


def test_feduv_update_direction_is_the_clients_mean_feature_up_to_sign():
  rng = np.random.default_rng(0)
  received = rng.standard_normal((127, DIM))
  v = rng.choice([-1.0, 1.0], 127)
  g = TABLE[5]
  found = leakage.projection_update(received + 0.01 * np.outer(v, g), received)
  assert abs(found @ g) / np.linalg.norm(g) == pytest.approx(1.0, abs=1e-6)


def test_off_by_default_and_the_checks_refuse_in_one_line(fake_source, monkeypatch):
  config = _config('fedgc', round=0)
  leakage.check_leakage(config, config.evals.leakage)
  assert leakage.make_leakage(config, config.evals.leakage, _setup(config)) is None

  def refused(match, algorithm='fedgc', **section):
    c = _config(algorithm, **section)
    with pytest.raises(ValueError, match=match):
      leakage.check_leakage(c, c.evals.leakage)

  refused(r"algorithm='fedpe': the method reveals no identity rows", 'fedpe')
  refused(r"kinds has 'broadcast_as_is', which algorithm='fedgc' does not reveal",
          kinds=('server_rows', 'broadcast_as_is'))
  refused(r"kinds=\('rows',\); expected a tuple of some of", kinds=('rows',))
  refused(r'round=9; expected a round of the run', round=9)
  refused(r'^config.evals.leakage.rounds=3; expected at most round=2 ', rounds=3)
  refused(r'^config.evals.leakage.rounds=0; expected a positive integer', rounds=0)
  refused(r'share_threshold=1.5; expected', share_threshold=1.5)
  refused(r'evals.leakage.num_distractors', num_distractors=0)
  monkeypatch.delattr(FakeSource, 'identity_probes')
  refused(r"config.evals.leakage with data.source='fake': that source has no identity_probes")


def test_synthetic_probes_are_new_images_of_the_training_identities():
  from fedjax_face.data.sources import synthetic
  config = ml_collections.ConfigDict({'seed': 0, 'data': {
      'image_size': 16, 'synthetic': synthetic.config_section()}})
  data = types.SimpleNamespace(num_identities=6, train_identity_params=None)
  from fedjax_face.data.synthetic import identities, streams
  data.train_identity_params = identities.sample_identities(streams.rng(0, streams.TRAIN_IDS), 6)
  images, labels = synthetic.identity_probes(config, data, [1, 4], 2, 3)
  assert images.shape == (10, 16, 16, 3) and images.dtype == np.uint8
  np.testing.assert_array_equal(labels, [1, 1, 4, 4, 6, 6, 7, 7, 8, 8])
  alone, _ = synthetic.identity_probes(config, data, [4], 2, 0)   # independent of the others
  np.testing.assert_array_equal(alone, images[2:4])
  assert not np.array_equal(images[0], images[1])                 # fresh nuisance per image
