"""FedFR's personalized protocol: pairs and galleries on a hand-made example, and the evaluator
over a hand-made partition with per-client models."""

import types

import numpy as np
import pytest

from fedjax_face.data import federated
from fedjax_face.eval import EvalInputs
from fedjax_face.eval.recognition import evaluators, personalized, report
from tests.config_files import load_config

# Test images of identities 0, 0, 0, 1, 1 (client c's own) and 2, 2, 3 (other clients').
LABELS = np.array([0, 0, 0, 1, 1, 2, 2, 3])
OWN = LABELS <= 1


def test_pairs_by_hand():
  first, second, issame = personalized.client_pairs(LABELS, OWN)
  genuine = sorted(zip(first[issame].tolist(), second[issame].tolist()))
  assert genuine == [(0, 1), (0, 2), (1, 2), (3, 4)]          # C(3,2) + C(2,2), never (i, i)
  impostors = set(zip(first[~issame].tolist(), second[~issame].tolist()))
  assert impostors == {(i, j) for i in range(5) for j in range(5, 8)}   # 5 own x 3 others
  assert len(impostors) == (~issame).sum() == 15
  assert np.all(first != second)


def test_perfect_features_are_accepted_and_identified():
  features = np.eye(4)[LABELS]          # one direction per identity
  ver = personalized.client_verification(features, LABELS, OWN, fars=(0.1, 0.01))
  # 15 impostors: FAR 0.1 allows one (all at distance 1, genuine at 0); 0.01 is unresolvable.
  assert ver == {'tar': {'0.1': 1.0, '0.01': None}, 'genuine_pairs': 4, 'impostor_pairs': 15}
  train_labels = np.array([0, 0, 1])
  ident = personalized.client_identification(np.eye(4)[train_labels], train_labels, features,
                                             LABELS, OWN, fpirs=(0.5,))
  assert ident == {'tpir': {'0.5': 1.0}, 'gallery': 2, 'mated_probes': 5, 'non_mated_probes': 3}


def test_mean_over_clients_keeps_unresolved_points_unresolved():
  got = personalized.mean_over_clients([{'a': 0.5, 'b': None}, {'a': 1.0, 'b': 0.2}])
  assert got == {'a': 0.75, 'b': None}


def test_worst_ten_percent_counts_whole_clients():
  # ceil(K / 10): one client up to 10, then one more per 10 started; 30 gives 3, not
  # math.ceil(0.1 * 30) = 4.
  assert [personalized.worst_count(k) for k in (1, 2, 9, 10, 11, 20, 30, 40, 41)] == [
      1, 1, 1, 1, 2, 2, 3, 4, 5]


def test_spread_by_hand_with_fewer_than_ten_clients_and_unresolved_points():
  per_client = [{'a': 0.75, 'b': 0.5, 'c': None},
                {'a': 0.25, 'b': 1.0, 'c': 0.125},
                {'a': 0.5, 'b': 0.375, 'c': 0.5}]
  assert personalized.spread_over_clients(per_client) == {
      'worst_10pct': {'a': 0.25, 'b': 0.375, 'c': None},   # K = 3: the worst client alone
      'min': {'a': 0.25, 'b': 0.375, 'c': None},           # client 0 cannot resolve 'c'
      'per_client': {'a': [0.75, 0.25, 0.5], 'b': [0.5, 1.0, 0.375], 'c': [None, 0.125, 0.5]}}


def test_spread_by_hand_with_twelve_clients_averages_the_lowest_two():
  values = [0.5, 0.875, 0.25, 1.0, 0.75, 0.625, 1.0, 0.375, 0.875, 0.5, 1.0, 0.75]
  spread = personalized.spread_over_clients([{'a': v} for v in values])
  assert spread['worst_10pct'] == {'a': (0.25 + 0.375) / 2}    # ceil(12 / 10) = 2 clients
  assert spread['min'] == {'a': 0.25} and spread['per_client'] == {'a': values}


def test_report_adds_the_spread_below_the_means_and_reads_results_without_it():
  personal = {'model': 'personalized', 'clients': 3, 'genuine_pairs': 4.0,
              'impostor_pairs': 15.0, 'non_mated_probes': 3.0,
              'tar': {'0.1': 0.5, '0.01': None}, 'tpir': {'0.5': 0.75}}
  before = report.personalized_lines(personal)
  assert before[2:5] == ['| TAR@FAR=0.01 | TAR@FAR=0.1 | TPIR@FPIR=0.5 |', '| --- | --- | --- |',
                         '| — | 50.00 | 75.00 |'] and len(before) == 6
  personal['spread'] = {'worst_clients': 1,
                        'tar': {'worst_10pct': {'0.1': 0.25, '0.01': None},
                                'min': {'0.1': 0.25, '0.01': None}, 'per_client': {}},
                        'tpir': {'worst_10pct': {'0.5': 0.5}, 'min': {'0.5': 0.5},
                                 'per_client': {}}}
  after = report.personalized_lines(personal)
  assert after[:6] == before
  assert after[6:] == [
      "Spread across the 3 clients (worst 10 %: the mean of the lowest 1 client(s)' values; "
      "min: the lowest client's):", '',
      '| | TAR@FAR=0.01 | TAR@FAR=0.1 | TPIR@FPIR=0.5 |', '| --- | --- | --- | --- |',
      '| worst 10 % | — | 25.00 | 50.00 |', '| min | — | 25.00 | 50.00 |', '']


def test_evaluator_uses_each_clients_own_model():
  # 4 identities x 4 images (pixel value = identity); clients hold {0, 1} and {2, 3}; images
  # 2, 3 of each identity are held out. Client 0's model sees identities; client 1's sees noise.
  labels = np.repeat(np.arange(4), 4)
  images = np.repeat(labels, 4 * 4 * 3).reshape(16, 4, 4, 3).astype(np.uint8)
  held = np.isin(np.arange(16) % 4, (2, 3))
  fed = federated.build(images, np.where(held, -1, labels), [np.array([0, 1]), np.array([2, 3])])
  fed = fed.__class__(**{**fed.__dict__, 'test_indices': np.flatnonzero(held)})
  config = types.SimpleNamespace(eval=types.SimpleNamespace(batch_size=8))
  section = types.SimpleNamespace(fars=(0.1,), fpirs=(0.5,))
  setup = types.SimpleNamespace(fed_view=fed, benchmark=types.SimpleNamespace(
      train_images=images, train_labels=labels))
  evaluator = evaluators.make_personalized(config, section, setup)

  def identity_features(x):   # normalised pixel value -> one-hot of the identity
    value = np.round((np.asarray(x)[:, 0, 0, 0] + 1.0) * 127.5).astype(int)
    return np.eye(4)[value]
  noise = lambda x: np.random.default_rng(len(x)).normal(size=(len(x), 4))
  called = []
  def personal_embed(k):
    called.append(k)
    return identity_features if k == 0 else noise
  out = evaluator.evaluate(EvalInputs(embed=None, class_embeddings=None,
                                      personal_embed=personal_embed))
  assert sorted(set(called)) == [0, 1] and out.results['model'] == 'personalized'
  # Each client: 2 identities x C(2,2) genuine pairs, 4 own x 4 other test images impostors.
  assert out.results['genuine_pairs'] == 2 and out.results['impostor_pairs'] == 16
  perfect = evaluator.evaluate(EvalInputs(embed=identity_features, class_embeddings=None))
  assert perfect.results['model'] == 'global'
  assert perfect.results['tar'] == {'0.1': 1.0} and perfect.results['tpir'] == {'0.5': 1.0}
  # Client 1's noise model pulls the mean below the perfect global one.
  assert out.results['tar']['0.1'] < 1.0 or out.results['tpir']['0.5'] < 1.0
  # The spread: client 0 (identity features) is perfect, so the mean is the average of 1.0 and
  # client 1's value and the worst 10 % (one client of 2) and min are client 1's.
  spread = out.results['spread']
  assert spread['worst_clients'] == 1
  for kind, rate in (('tar', '0.1'), ('tpir', '0.5')):
    first, second = spread[kind]['per_client'][rate]
    assert first == 1.0
    assert out.results[kind][rate] == float(np.mean([first, second]))
    assert spread[kind]['worst_10pct'][rate] == spread[kind]['min'][rate] == second
    assert out.scalars[f'{kind}_worst10@{rate}'] == second
  assert perfect.results['spread']['tar'] == {'worst_10pct': {'0.1': 1.0}, 'min': {'0.1': 1.0},
                                              'per_client': {'0.1': [1.0, 1.0]}}


def test_config_errors():
  config = load_config('fedgc')
  config.evals.personalized = {'fars': (0.1,), 'fpirs': (0.1,)}
  with pytest.raises(ValueError, match=r'evals.personalized needs held-out images.*'
                     r'data.private_test_fraction'):
    evaluators.check_personalized(config, config.evals.personalized)
  config = load_config('fedfr')
  config.evals.personalized.fars = (0.0,)
  with pytest.raises(ValueError, match=r'personalized.fars=\(0.0,\); expected a non-empty tuple'):
    evaluators.check_personalized(config, config.evals.personalized)
