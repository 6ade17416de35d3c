"""Tests of the insightface verification protocol in `fedjax_face.eval.verification`."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.eval.recognition import verification

ACC_THRESHOLDS = np.arange(0, 4, 0.01)
VAL_THRESHOLDS = np.arange(0, 4, 0.001)


def _embeddings_with_distances(distances) -> np.ndarray:
  """Unit float64 embeddings `[2P, 4]` whose pair i has squared L2 distance `distances[i]`.

  Pair member one is e0 and member two is at angle theta from it, with 2 - 2 cos(theta) = d.
  """
  distances = np.asarray(distances, dtype=np.float64)
  cos = 1.0 - distances / 2.0
  sin = np.sqrt(np.clip(1.0 - cos**2, 0.0, None))
  emb = np.zeros((2 * len(distances), 4))
  emb[0::2, 0] = 1.0
  emb[1::2, 0] = cos
  emb[1::2, 1] = sin
  return emb


def _random_pair_embeddings(rng, num_pairs, dim=16, noise=1.0):
  """Random unit embeddings and alternating labels, with overlapping genuine/impostor distances."""
  issame = np.arange(num_pairs) % 2 == 0
  first = rng.normal(size=(num_pairs, dim))
  second = np.where(issame[:, None], first + noise * rng.normal(size=(num_pairs, dim)),
                    rng.normal(size=(num_pairs, dim)))
  emb = np.empty((2 * num_pairs, dim))
  emb[0::2], emb[1::2] = first, second
  return emb / np.linalg.norm(emb, axis=1, keepdims=True), issame


# ----------------------------------------------------------------------------------------------
# Reference: a literal re-implementation of insightface's per-threshold loops.
# ----------------------------------------------------------------------------------------------


def _legacy_interp1d_slinear(x, y, x_new):
  """`interp1d(x, y, kind='slinear')(x_new)` as scipy computed it before rejecting repeated x.

  That interp1d stably sorted x and built the degree-1 B-spline with knots [x0, x..., x_last] and
  coefficients y; BSpline still evaluates such a spline.
  """
  interpolate = pytest.importorskip('scipy.interpolate')
  order = np.argsort(x, kind='mergesort')
  x, y = np.asarray(x)[order], np.asarray(y)[order]
  spline = interpolate.BSpline.construct_fast(np.r_[x[0], x, x[-1]], y, 1)
  return float(spline(x_new))


def _reference_folds(dist, issame, num_folds):
  size = len(dist) // num_folds
  for f in range(num_folds):
    test = np.zeros(len(dist), dtype=bool)
    test[f * size:(f + 1) * size] = True
    yield test, ~test


def _reference_accuracy(dist, issame, num_folds):
  accuracies, thresholds = [], []
  for test, train in _reference_folds(dist, issame, num_folds):
    acc_train = np.zeros(len(ACC_THRESHOLDS))
    for i, threshold in enumerate(ACC_THRESHOLDS):
      pred = np.less(dist[train], threshold)
      correct = np.sum(pred & issame[train]) + np.sum(~pred & ~issame[train])
      acc_train[i] = float(correct) / train.sum()
    best = np.argmax(acc_train)
    pred = np.less(dist[test], ACC_THRESHOLDS[best])
    correct = np.sum(pred & issame[test]) + np.sum(~pred & ~issame[test])
    accuracies.append(float(correct) / test.sum())
    thresholds.append(ACC_THRESHOLDS[best])
  return accuracies, thresholds


def _reference_val(dist, issame, num_folds, far_target):
  vals, fars, thresholds = [], [], []
  for test, train in _reference_folds(dist, issame, num_folds):
    far_train = np.zeros(len(VAL_THRESHOLDS))
    n_diff = float(np.sum(~issame[train]))
    for i, threshold in enumerate(VAL_THRESHOLDS):
      far_train[i] = float(np.sum(np.less(dist[train], threshold) & ~issame[train])) / n_diff
    if np.max(far_train) >= far_target:
      threshold = _legacy_interp1d_slinear(far_train, VAL_THRESHOLDS, far_target)
    else:
      threshold = 0.0
    pred = np.less(dist[test], threshold)
    vals.append(float(np.sum(pred & issame[test])) / float(np.sum(issame[test])))
    fars.append(float(np.sum(pred & ~issame[test])) / float(np.sum(~issame[test])))
    thresholds.append(threshold)
  return vals, fars, thresholds


# ----------------------------------------------------------------------------------------------
# 10-fold accuracy.
# ----------------------------------------------------------------------------------------------


def test_separable_pairs_are_perfect_with_threshold_in_gap():
  num_pairs = 6000
  issame = np.arange(num_pairs) % 2 == 0
  emb = _embeddings_with_distances(np.where(issame, 0.5005, 1.5005))
  result = verification.evaluate_pairs(emb, issame)
  assert result['accuracy'] == 1.0
  assert result['accuracy_std'] == 0.0
  assert result['fold_accuracy'] == [1.0] * 10
  # The first grid threshold above every genuine distance (0.5005) wins the tie over the gap.
  assert result['fold_threshold'] == [ACC_THRESHOLDS[51]] * 10
  assert result['threshold'] == pytest.approx(0.51, abs=1e-12)
  assert result['num_pairs'] == 6000
  assert result['num_genuine'] == result['num_impostor'] == 3000
  assert result['protocol'] == 'insightface 10-fold, flip-sum, squared L2, thresholds 0:4:0.01'


def test_known_number_of_errors_per_fold():
  num_pairs, num_folds = 6000, 10
  fold_size = num_pairs // num_folds
  issame = np.arange(num_pairs) % 2 == 0
  dist = np.where(issame, 0.505, 1.505)
  errors = []
  for f in range(num_folds):
    start = f * fold_size
    # f genuine pairs pushed beyond the impostors and f % 3 impostors pulled inside the genuines:
    # misclassified by every threshold in the gap, which stays the best training threshold.
    dist[start:start + 2 * f:2] = 1.805
    dist[start + 1:start + 1 + 2 * (f % 3):2] = 0.305
    errors.append(f + f % 3)
  result = verification.evaluate_pairs(_embeddings_with_distances(dist), issame)
  expected = np.array([(fold_size - e) / fold_size for e in errors])
  assert result['fold_accuracy'] == expected.tolist()
  assert result['accuracy'] == float(np.mean(expected))
  assert result['accuracy_std'] == float(np.std(expected))
  assert result['fold_threshold'] == [ACC_THRESHOLDS[51]] * num_folds


@pytest.mark.parametrize('num_pairs,num_folds', [(600, 10), (500, 5)])
def test_accuracy_matches_bruteforce_loop(num_pairs, num_folds):
  rng = np.random.default_rng(num_pairs)
  emb, issame = _random_pair_embeddings(rng, num_pairs)
  result = verification.evaluate_pairs(emb, issame, num_folds=num_folds)
  dist = np.sum(np.square(emb[0::2] - emb[1::2]), axis=1)
  accuracies, thresholds = _reference_accuracy(dist, issame, num_folds)
  # Sanity check that the data is not trivially separable, so thresholds and ties matter.
  assert 0.6 < np.mean(accuracies) < 0.97
  assert result['fold_accuracy'] == accuracies
  assert result['fold_threshold'] == [float(t) for t in thresholds]
  assert result['accuracy'] == float(np.mean(accuracies))
  assert result['accuracy_std'] == float(np.std(accuracies))


# ----------------------------------------------------------------------------------------------
# VAL@FAR.
# ----------------------------------------------------------------------------------------------


def test_val_interpolates_between_far_steps():
  num_pairs = 6000
  issame = np.arange(num_pairs) % 2 == 0
  emb = _embeddings_with_distances(np.where(issame, 0.5005, 1.5005))
  result = verification.evaluate_pairs(emb, issame)
  # Training FAR is 0 up to the grid threshold 1.500 and 1 from 1.501: the target 1e-3 is reached
  # 1e-3 of the way along that step, at 1.500001; the test folds then accept every genuine pair
  # and no impostor.
  assert result['fold_val_threshold'] == pytest.approx([1.500001] * 10, abs=1e-12)
  assert result['val_at_far'] == 1.0
  assert result['val_at_far_std'] == 0.0
  assert result['far'] == 0.0
  assert result['far_target'] == 1e-3


def test_val_is_zero_when_target_far_is_unreachable():
  num_pairs = 600
  issame = np.arange(num_pairs) % 2 == 0
  # Impostors beyond the last threshold (3.999): the training FAR never reaches 1e-3.
  emb = _embeddings_with_distances(np.where(issame, 0.5005, 3.9995))
  result = verification.evaluate_pairs(emb, issame)
  assert result['fold_val_threshold'] == [0.0] * 10
  assert result['val_at_far'] == 0.0
  assert result['far'] == 0.0
  assert result['accuracy'] == 1.0


def test_legacy_interpolation_rule():
  thresholds = np.arange(8.0)
  far = np.array([0.0, 0.0, 0.0, 0.2, 0.2, 0.5, 1.0, 1.0])
  rule = verification._legacy_slinear_threshold  # pylint: disable=protected-access
  assert rule(far, thresholds, 0.1) == 2.5  # Last index of FAR 0 -> first index of FAR 0.2.
  assert rule(far, thresholds, 0.2) == 4.0  # Exact hit: last index with that FAR.
  assert rule(far, thresholds, 0.35) == 4.5
  assert rule(far, thresholds, 1.0) == 7.0
  for target in (0.05, 0.1, 0.2, 0.3, 0.5, 0.75):
    assert rule(far, thresholds, target) == pytest.approx(
        _legacy_interp1d_slinear(far, thresholds, target), abs=1e-12)


@pytest.mark.parametrize('far_target', [1e-3, 1 / 270, 0.05])
def test_val_matches_bruteforce_loop(far_target):
  rng = np.random.default_rng(7)
  emb, issame = _random_pair_embeddings(rng, 600, noise=1.5)
  # Balanced folds: 270 training impostors each, so 1/270 hits a FAR step exactly.
  result = verification.evaluate_pairs(emb, issame, far_target=far_target)
  dist = np.sum(np.square(emb[0::2] - emb[1::2]), axis=1)
  vals, fars, thresholds = _reference_val(dist, issame, 10, far_target)
  assert result['fold_val_threshold'] == pytest.approx(thresholds, rel=1e-12)
  assert result['fold_val'] == vals
  assert result['fold_far'] == fars
  assert result['val_at_far'] == float(np.mean(vals))
  assert result['val_at_far_std'] == float(np.std(vals))
  assert result['far'] == float(np.mean(fars))
  assert 0.0 < result['val_at_far'] < 1.0


# ----------------------------------------------------------------------------------------------
# Pooled ROC, AUC, TAR@FAR.
# ----------------------------------------------------------------------------------------------


def test_tar_at_far_known_answer():
  impostor = np.arange(1.0, 1001.0)  # 1, 2, ..., 1000
  genuine = np.arange(1000) + 0.5  # 0.5, 1.5, ..., 999.5
  dist = np.concatenate([genuine, impostor])
  issame = np.r_[np.ones(1000, bool), np.zeros(1000, bool)]
  tars, thresholds = verification.tar_at_far(dist, issame)
  # FAR f allows floor(1000 f) impostors: threshold = the next impostor distance.
  assert tars == {'1e-06': None, '1e-05': None, '0.0001': None,
                  '0.001': 0.002, '0.01': 0.011, '0.1': 0.101}
  assert thresholds == {'1e-06': None, '1e-05': None, '0.0001': None,
                        '0.001': 2.0, '0.01': 11.0, '0.1': 101.0}


def test_tar_at_far_never_exceeds_far_on_ties():
  dist = np.r_[np.full(10, 1.0), np.full(100, 5.0)]
  issame = np.r_[np.ones(10, bool), np.zeros(100, bool)]
  tars, thresholds = verification.tar_at_far(dist, issame, fars=(0.1,))
  # All impostors tie at 5.0: accepting any would accept all, so none is, and the genuines pass.
  assert thresholds == {'0.1': 5.0}
  assert tars == {'0.1': 1.0}


def test_auc_exact_cases():
  sep = np.r_[np.zeros(5), np.ones(7)]
  labels = np.r_[np.ones(5, bool), np.zeros(7, bool)]
  assert verification.roc_auc(sep, labels) == 1.0
  assert verification.roc_auc(np.full(12, 0.7), labels) == 0.5
  # Genuine {1, 3} vs impostor {2, 4}: 3 of the 4 combinations are ordered correctly.
  assert verification.roc_auc(np.array([1.0, 3.0, 2.0, 4.0]),
                              np.array([True, True, False, False])) == 0.75
  fpr, tpr, _ = verification.roc_curve(np.full(12, 0.7), labels)
  assert fpr.tolist() == [0.0, 1.0] and tpr.tolist() == [0.0, 1.0]


def test_auc_equals_trapezoid_under_roc_with_ties():
  rng = np.random.default_rng(3)
  issame = rng.random(2000) < 0.4
  # Rounded distances create many ties between genuine and impostor pairs.
  dist = np.round(np.where(issame, rng.normal(1.0, 0.3, 2000), rng.normal(1.4, 0.3, 2000)), 1)
  fpr, tpr, thresholds = verification.roc_curve(dist, issame)
  assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
  assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
  assert np.all(np.diff(thresholds) > 0)
  assert verification.roc_auc(dist, issame) == pytest.approx(np.trapezoid(tpr, fpr), abs=1e-12)


def test_pooled_metrics_in_evaluate_pairs():
  num_pairs = 6000
  issame = np.arange(num_pairs) % 2 == 0
  result = verification.evaluate_pairs(
      _embeddings_with_distances(np.where(issame, 0.5005, 1.5005)), issame)
  assert result['auc'] == 1.0
  # 3,000 impostors resolve FARs down to 1/3000 only.
  assert result['tar_at_far'] == {'1e-06': None, '1e-05': None, '0.0001': None,
                                  '0.001': 1.0, '0.01': 1.0, '0.1': 1.0}
  assert result['min_resolvable_far'] == 1 / 3000
  assert result['roc_fpr'] == [0.0, 0.0, 1.0] and result['roc_tpr'] == [0.0, 1.0, 1.0]
  json.dumps(result, allow_nan=False)


def test_roc_is_downsampled_and_result_is_json():
  rng = np.random.default_rng(0)
  emb, issame = _random_pair_embeddings(rng, 6000, dim=32)
  result = verification.evaluate_pairs(emb.astype(np.float32), issame)
  fpr, tpr = np.array(result['roc_fpr']), np.array(result['roc_tpr'])
  assert 500 < len(fpr) <= 1000
  assert fpr[0] == tpr[0] == 0.0 and fpr[-1] == tpr[-1] == 1.0
  assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
  # The low-FAR end is kept for log-scale plots: the smallest positive FPR is 1/num_impostor.
  assert fpr[fpr > 0].min() == 1 / result['num_impostor']
  text = json.dumps(result, allow_nan=False)
  assert json.loads(text)['accuracy'] == result['accuracy']


@pytest.mark.parametrize('rows,labels,folds,match', [
    (7, 3, 10, 'odd number'),
    (20, 9, 10, 'issame length mismatch'),
    (24, 12, 10, 'not divisible'),
])
def test_evaluate_pairs_rejects_bad_shapes(rows, labels, folds, match):
  emb = np.eye(rows, 4)
  with pytest.raises(ValueError, match=match):
    verification.evaluate_pairs(emb, np.arange(labels) % 2 == 0, num_folds=folds)


def test_evaluate_pairs_rejects_nan_and_single_label():
  issame = np.arange(10) % 2 == 0
  emb = _embeddings_with_distances(np.ones(10))
  emb[3, 1] = np.nan
  with pytest.raises(ValueError, match='NaN'):
    verification.evaluate_pairs(emb, issame)
  with pytest.raises(ValueError, match='genuine and impostor'):
    verification.evaluate_pairs(_embeddings_with_distances(np.ones(10)), np.ones(10, bool))


# ----------------------------------------------------------------------------------------------
# Embedding with flips and padded batches.
# ----------------------------------------------------------------------------------------------


def _linear_embed_fn(shape, dim=7, seed=0):
  """A jitted linear map of the flattened image (not flip-invariant) and its numpy twin."""
  weights = np.random.default_rng(seed).normal(size=(int(np.prod(shape)), dim))
  fn = jax.jit(lambda x: x.reshape(x.shape[0], -1) @ jnp.asarray(weights, jnp.float32))
  return fn, lambda x: x.reshape(x.shape[0], -1) @ weights


def _unit(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_compute_embeddings_sums_flipped_embeddings():
  rng = np.random.default_rng(0)
  images = rng.integers(0, 256, size=(10, 6, 5, 3), dtype=np.uint8)  # H != W catches axis mixups.
  embed_fn, numpy_fn = _linear_embed_fn(images.shape[1:])
  x = (images.astype(np.float64) / 255.0 - 0.5) / 0.5
  expected = _unit(numpy_fn(x) + numpy_fn(x[:, :, ::-1, :]))
  got = verification.compute_embeddings(embed_fn, images, batch_size=4)
  assert got.dtype == np.float32 and got.shape == (10, 7)
  np.testing.assert_allclose(got, expected, atol=2e-5)
  # The map is not flip-invariant, so the flip actually matters.
  no_flip = verification.compute_embeddings(embed_fn, images, batch_size=4, flip=False)
  np.testing.assert_allclose(no_flip, _unit(numpy_fn(x)), atol=2e-5)
  assert np.abs(no_flip - got).max() > 0.1


def test_compute_embeddings_padding_does_not_change_results():
  rng = np.random.default_rng(1)
  images = rng.integers(0, 256, size=(10, 4, 4, 3), dtype=np.uint8)
  jitted, _ = _linear_embed_fn(images.shape[1:], seed=1)
  shapes = []

  def embed_fn(x):
    shapes.append(x.shape)
    return jitted(x)

  padded = verification.compute_embeddings(embed_fn, images, batch_size=4)
  # Three batches (4, 4, 2 + 2 padding), each embedded twice, always at the full batch size.
  assert shapes == [(4, 4, 4, 3)] * 6
  whole = verification.compute_embeddings(jitted, images, batch_size=10)
  larger = verification.compute_embeddings(jitted, images, batch_size=64)
  np.testing.assert_allclose(padded, whole, atol=1e-6)
  np.testing.assert_allclose(larger, whole, atol=1e-6)


def test_compute_embeddings_rejects_bad_inputs():
  fn, _ = _linear_embed_fn((2, 2, 3))
  with pytest.raises(ValueError, match='N, H, W, C'):
    verification.compute_embeddings(fn, np.zeros((2, 2, 3), np.uint8))
  with pytest.raises(ValueError, match='must return'):
    verification.compute_embeddings(lambda x: x[0], np.zeros((2, 2, 2, 3), np.uint8))


def test_verify_is_compute_then_evaluate():
  rng = np.random.default_rng(2)
  num_pairs = 40
  images = rng.integers(0, 256, size=(2 * num_pairs, 4, 4, 3), dtype=np.uint8)
  issame = np.arange(num_pairs) % 2 == 0
  images[1::2][issame] = images[0::2][issame]  # Genuine pairs: identical images.
  embed_fn, _ = _linear_embed_fn(images.shape[1:], dim=32, seed=2)
  result = verification.verify(embed_fn, images, issame, batch_size=16)
  expected = verification.evaluate_pairs(
      verification.compute_embeddings(embed_fn, images, batch_size=16), issame)
  assert result == expected
  no_flip = verification.verify(embed_fn, images, issame, batch_size=16, flip=False)
  assert no_flip['protocol'] == 'insightface 10-fold, no flip, squared L2, thresholds 0:4:0.01'


def test_verify_checks_labels_before_embedding():
  def embed_fn(x):
    raise AssertionError('embed_fn must not run on a malformed pair set')

  with pytest.raises(ValueError, match='issame length mismatch'):
    verification.verify(embed_fn, np.zeros((10, 2, 2, 3), np.uint8), np.ones(4, bool))
