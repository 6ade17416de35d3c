"""Tests of `fedjax_face.eval.diagnostics` and `fedjax_face.eval.plots`."""

import json

import numpy as np
from PIL import Image
import pytest

from fedjax_face import config_lib
from fedjax_face.data import federated, preprocess
from fedjax_face.data.synthetic import benchmark
from fedjax_face.eval import EvalInputs, EvalSetup, diagnostics
from fedjax_face.eval import plots
from fedjax_face.io import artifacts

SQRT_HALF = np.sqrt(0.5)


def _two_clients():
  """Client 0: a=[1,0], b=[0,2]; client 1: c=[1,1], d=[-3,0]; one NaN padding row each."""
  emb = np.array([
      [[1.0, 0.0], [0.0, 2.0], [np.nan, np.nan]],
      [[1.0, 1.0], [np.nan, 7.0], [-3.0, 0.0]],
  ])
  mask = np.array([[True, True, False], [True, False, True]])
  return emb, mask


def test_class_embedding_similarity_two_clients():
  within, cross = diagnostics.class_embedding_similarity(*_two_clients())
  # within: cos(a, b) = 0; cos(c, d) = -1/sqrt(2).
  np.testing.assert_allclose(within, [0.0, -SQRT_HALF], atol=1e-7)
  # cross, client 0 rows against client 1 rows: (a,c), (a,d), (b,c), (b,d).
  np.testing.assert_allclose(cross, [SQRT_HALF, -1.0, SQRT_HALF, 0.0], atol=1e-7)
  assert within.dtype == cross.dtype == np.float64


def test_class_embedding_similarity_sizes_with_empty_client():
  rng = np.random.default_rng(0)
  emb = rng.normal(size=(3, 5, 8)).astype(np.float32)
  mask = np.zeros((3, 5), bool)
  mask[0, :4] = True  # 4 classes
  mask[2, 1:3] = True  # 2 classes; client 1 has none.
  within, cross = diagnostics.class_embedding_similarity(emb, mask)
  assert within.dtype == np.float32
  assert within.shape == (4 * 3 // 2 + 1,)
  assert cross.shape == (4 * 2,)
  unit = emb / np.linalg.norm(emb, axis=-1, keepdims=True)
  np.testing.assert_allclose(cross, (unit[0, :4] @ unit[2, 1:3].T).ravel(), atol=1e-6)
  np.testing.assert_allclose(within[-1], unit[2, 1] @ unit[2, 2], atol=1e-6)


def test_class_embedding_similarity_rejects_bad_inputs():
  emb, mask = _two_clients()
  with pytest.raises(ValueError, match='does not match'):
    diagnostics.class_embedding_similarity(emb, mask[:, :2])
  with pytest.raises(ValueError, match='NaN'):
    diagnostics.class_embedding_similarity(emb, np.ones_like(mask))


def test_similarity_summary():
  within, cross = diagnostics.class_embedding_similarity(*_two_clients())
  summary = diagnostics.similarity_summary(within, cross)
  assert summary['within_count'] == 2
  assert summary['within_mean'] == pytest.approx(-SQRT_HALF / 2)
  assert summary['within_std'] == pytest.approx(SQRT_HALF / 2)
  assert summary['within_max'] == pytest.approx(0.0, abs=1e-12)
  assert summary['within_p99'] == pytest.approx(np.percentile([0.0, -SQRT_HALF], 99))
  assert summary['cross_count'] == 4
  assert summary['cross_mean'] == pytest.approx((2 * SQRT_HALF - 1) / 4)
  assert summary['cross_max'] == pytest.approx(SQRT_HALF)
  assert summary['cross_min'] == pytest.approx(-1.0)
  empty = diagnostics.similarity_summary(np.zeros(0), cross)
  assert empty['within_count'] == 0 and empty['within_mean'] is None
  json.dumps(summary, allow_nan=False)
  json.dumps(empty, allow_nan=False)


def _assert_png(path, min_size=(200, 150)):
  with Image.open(path) as image:
    assert image.format == 'PNG'
    assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1]


def test_plot_roc_writes_png(tmp_path):
  curves = {
      'FedPE': (np.array([0.0, 0.0, 1e-3, 0.1, 1.0]), np.array([0.0, 0.5, 0.7, 0.9, 1.0])),
      'FedGC': ([0.0, 1e-4, 1e-2, 1.0], [0.0, 0.6, 0.95, 1.0]),
  }
  path = tmp_path / 'nested' / 'roc.png'
  artifacts.write_figure(str(path), plots.roc_figure(curves, title='LFW'))
  _assert_png(path)


def test_plot_similarity_histograms_writes_png(tmp_path):
  rng = np.random.default_rng(0)
  results = {
      'FedPE': (rng.uniform(-0.2, 0.2, 300), rng.uniform(0.3, 0.9, 3000)),
      'FedGC': (rng.uniform(-0.2, 0.2, 300), rng.uniform(-0.2, 0.3, 3000)),
      'empty': (np.zeros(0), np.zeros(0)),
  }
  path = tmp_path / 'similarity.png'
  artifacts.write_figure(str(path), plots.similarity_figure(results))
  with Image.open(path) as image:
    # One panel per method, side by side.
    assert image.size[0] > 2 * image.size[1]
  _assert_png(path)


def test_lookalike_pairs_are_cross_client_family_members_and_strangers_match_in_number():
  # Identities 0-5 in families {0,1,2}, {3,4,5}; client 0 holds 0, 3; client 1 holds 1, 4;
  # client 2 holds 2 and 5, and also 0 (shared: 0 and 2 then have a common holder).
  families = np.array([0, 0, 0, 1, 1, 1])
  table = np.array([[0, 3, -1], [1, 4, -1], [2, 5, 0]])
  holders = diagnostics.holders_matrix(table, 6)
  look, strangers = diagnostics.lookalike_pairs(families, holders, 100, np.random.default_rng(0))
  assert look.tolist() == [[0, 1], [1, 2], [3, 4], [3, 5], [4, 5]]
  assert len(strangers) == 5
  for a, b in strangers:
    assert families[a] != families[b] and not (holders[a] & holders[b]).any()
  capped, _ = diagnostics.lookalike_pairs(families, holders, 2, np.random.default_rng(0))
  assert len(capped) == 2 and set(map(tuple, capped.tolist())) <= set(map(tuple, look.tolist()))


def test_feature_cosines_by_hand():
  features = {0: np.array([[1.0, 0.0], [0.0, 2.0]]), 1: np.array([[3.0, 0.0]])}
  # Pair (0, 1): cosines 1 and 0, mean 0.5; identity 0's two images are orthogonal.
  np.testing.assert_allclose(diagnostics.mean_feature_cosines(features, np.array([[0, 1]])), [0.5])
  np.testing.assert_allclose(diagnostics.same_identity_feature_cosines(features), [0.0])
  np.testing.assert_allclose(
      diagnostics.pair_cosines(np.array([[1.0, 1.0], [2.0, 0.0]]), np.array([[0, 1]])),
      [np.sqrt(0.5)])


def test_lookalike_feature_cosines_embed_normalised_images():
  # The evaluator must embed the way the protocol does: images in [-1, 1], not raw uint8. A
  # linear stub embedding (the first 8 normalised pixels) gives the expected cosines by hand.
  config = config_lib.runlocal(config_lib.base_config())
  bench = benchmark.make_benchmark(seed=0, num_identities=8, images_per_identity=3,
                                   num_test_identities=4, num_pairs=20, num_folds=1,
                                   lookalike_family_size=2)
  clients = [np.array([0, 2, 4, 6], np.int32), np.array([1, 3, 5, 7], np.int32)]
  fed = federated.build(bench.train_images, bench.train_labels, clients)
  evaluator = diagnostics.make_diagnostics(config, None, EvalSetup(config, bench, fed))

  def embed(x):
    x = np.asarray(x)
    assert x.dtype == np.float32 and -1.0 - 1e-6 <= x.min() and x.max() <= 1.0 + 1e-6
    return x.reshape(len(x), -1)[:, :8]

  out = evaluator.evaluate(EvalInputs(embed=embed, class_embeddings=None)).results['lookalikes']
  assert out['pairs'] == 4                       # families {0,1}, {2,3}, ... split over 2 clients
  features = {i: np.asarray(preprocess.normalize(bench.train_images[bench.train_labels == i][:4]))
              .reshape(-1, 32 * 32 * 3)[:, :8] for i in range(8)}
  pairs = np.array([[0, 1], [2, 3], [4, 5], [6, 7]])
  np.testing.assert_allclose(out['feature_cos_lookalike'],
                             diagnostics.mean_feature_cosines(features, pairs).mean(), rtol=1e-5)
  assert 'class_cos_lookalike' not in out        # no class embeddings given
