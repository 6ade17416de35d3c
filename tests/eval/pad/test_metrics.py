"""Tests of the PAD metrics in `fedjax_face.eval.pad.metrics`, against hand-computed values.

Convention throughout: a score is the probability of live, label 1 = live, 0 = spoof, and a
sample is accepted as live when score >= threshold.
"""

import json

import numpy as np
import pytest

from fedjax_face.eval.pad import metrics

# Live and spoof share the scores 0.6 and 0.4 (ties across classes).
TIED_SCORES = [0.8, 0.6, 0.4, 0.6, 0.4, 0.2]
TIED_LABELS = [1, 1, 1, 0, 0, 0]


def _scores_labels(live, spoof):
  return list(live) + list(spoof), [1] * len(live) + [0] * len(spoof)


def _brute_force_auc(scores, labels):
  """Every (live, spoof) pair: 1 if live scores higher, 1/2 on a tie; O(n^2)."""
  scores, labels = np.asarray(scores), np.asarray(labels)
  total = 0.0
  for live in scores[labels == 1]:
    for spoof in scores[labels == 0]:
      total += 1.0 if live > spoof else 0.5 if live == spoof else 0.0
  return total / (np.sum(labels == 1) * np.sum(labels == 0))


# ------------------------------------------------------------------------------------------ AUC


def test_auc_with_ties_is_mann_whitney():
  # Live 0.8 beats all 3 spoof: 3. Live 0.6 ties spoof 0.6 (1/2), beats 0.4 and 0.2: 2.5.
  # Live 0.4 loses to 0.6, ties 0.4 (1/2), beats 0.2: 1.5. U = 7 of 3 x 3 = 9 pairs.
  assert metrics.auc(TIED_SCORES, TIED_LABELS) == 7 / 9


def test_auc_extremes():
  assert metrics.auc(*_scores_labels([0.9, 0.8, 0.7], [0.3, 0.1])) == 1.0
  assert metrics.auc(*_scores_labels([0.3, 0.1], [0.9, 0.8, 0.7])) == 0.0
  # Every pair tied: each counts 1/2.
  assert metrics.auc([0.5] * 5, [1, 0, 1, 0, 0]) == 0.5


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_auc_equals_brute_force_pairwise_count(seed):
  rng = np.random.default_rng(seed)
  # One decimal: 200 scores over at most 11 values, so most pairs are tied or ordered by ties.
  labels = rng.integers(0, 2, size=200)
  scores = np.round(np.clip(rng.normal(0.5 + 0.15 * labels, 0.2), 0.0, 1.0), 1)
  expected = _brute_force_auc(scores, labels)
  assert 0.5 < expected < 1.0  # the draw is neither degenerate nor separable
  assert metrics.auc(scores, labels) == pytest.approx(expected, rel=0, abs=1e-15)
  # The same area as the trapezoids under the ROC, whose diagonal segments are the ties.
  fpr, tpr, _ = metrics.roc(scores, labels)
  assert np.trapezoid(tpr, fpr) == pytest.approx(expected, rel=0, abs=1e-12)


# ------------------------------------------------------------------------------------------ ROC


def test_roc_by_hand():
  fpr, tpr, thresholds = metrics.roc(TIED_SCORES, TIED_LABELS)
  # Thresholds descending from +inf over the distinct scores 0.8 > 0.6 > 0.4 > 0.2.
  np.testing.assert_array_equal(thresholds, [np.inf, 0.8, 0.6, 0.4, 0.2])
  # Accepted (score >= t): live {}, {0.8}, {0.8, 0.6}, all three, all three;
  # spoof {}, {}, {0.6}, {0.6, 0.4}, all three.
  np.testing.assert_allclose(tpr, [0, 1 / 3, 2 / 3, 1, 1], rtol=0, atol=1e-15)
  np.testing.assert_allclose(fpr, [0, 0, 1 / 3, 2 / 3, 1], rtol=0, atol=1e-15)


def test_roc_end_points():
  scores, labels = _scores_labels([0.7, 0.7, 0.2], [0.9, 0.1])
  fpr, tpr, thresholds = metrics.roc(scores, labels)
  # +inf accepts nothing; the lowest score accepts everything.
  assert (fpr[0], tpr[0], thresholds[0]) == (0.0, 0.0, np.inf)
  assert (fpr[-1], tpr[-1], thresholds[-1]) == (1.0, 1.0, 0.1)
  assert len(thresholds) == 1 + 4  # distinct scores 0.9, 0.7, 0.2, 0.1
  assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)


# ------------------------------------------------------------------------------------------ EER


def test_eer_interpolates_across_the_crossing_segment():
  # Live 0.8, 0.7, 0.6, 0.2; spoof 0.6, 0.6, 0.1, 0.05 (P = N = 4). Descending thresholds:
  #   t = 0.7: FAR = 0,   FRR = 2/4 (live 0.6, 0.2 rejected): FAR - FRR = -1/2
  #   t = 0.6: FAR = 2/4, FRR = 1/4 (live 0.2 rejected):      FAR - FRR = +1/4
  # The segment is diagonal (live 0.6 and two spoof tie at 0.6); FAR - FRR = 0 at
  # alpha = (1/2) / (3/4) = 2/3: FAR = 0 + 2/3 * 1/2 = 1/3, FRR = 1/2 - 2/3 * 1/4 = 1/3.
  scores, labels = _scores_labels([0.8, 0.7, 0.6, 0.2], [0.6, 0.6, 0.1, 0.05])
  assert metrics.eer(scores, labels) == pytest.approx(1 / 3, rel=0, abs=1e-15)
  # Not the HTER at either neighbour (1/4 at 0.7, 3/8 at 0.6), which a nearest-point EER gives.
  assert metrics.hter(scores, labels, 0.7) == 0.25
  assert metrics.hter(scores, labels, 0.6) == 0.375


@pytest.mark.parametrize('live, spoof, expected', [
    # FAR = FRR = 1/4 exactly at t = 0.6: live 0.2 rejected, spoof 0.6 accepted.
    ([0.8, 0.6, 0.6, 0.2], [0.6, 0.3, 0.1, 0.05], 1 / 4),
    # Crossing between t = 0.6 (FAR 1/4, FRR 1/3) and t = 0.5 (FAR 1/2, FRR 1/3): a horizontal
    # step, FRR constant at 1/3 along it.
    ([0.9, 0.6, 0.3], [0.7, 0.5, 0.4, 0.2], 1 / 3),
    # Separable: FAR = FRR = 0 at t = 0.8.
    ([0.9, 0.8], [0.2, 0.1], 0.0),
    # One score for all: the segment from (0, 1) at +inf to (1, 0) crosses at 1/2.
    ([0.5, 0.5], [0.5], 1 / 2),
])
def test_eer_by_hand(live, spoof, expected):
  assert metrics.eer(*_scores_labels(live, spoof)) == pytest.approx(expected, rel=0, abs=1e-15)


# ----------------------------------------------------------------------------------------- HTER


def test_hter_test_rule_by_hand():
  # Live 0.9, 0.7, 0.4; spoof 0.8, 0.3, 0.2, 0.1 (P = 3, N = 4). |TPR + FPR - 1| by threshold:
  #   0.1: |1 + 1 - 1| = 1      0.2: |1 + 3/4 - 1| = 3/4   0.3: |1 + 2/4 - 1| = 1/2
  #   0.4: |1 + 1/4 - 1| = 1/4  0.7: |2/3 + 1/4 - 1| = 1/12  0.8: |1/3 + 1/4 - 1| = 5/12
  #   0.9: |1/3 - 1| = 2/3      inf: 1
  # Smallest at 0.7: FAR = 1/4 (spoof 0.8), FRR = 1/3 (live 0.4), HTER = 7/24.
  scores, labels = _scores_labels([0.9, 0.7, 0.4], [0.8, 0.3, 0.2, 0.1])
  assert metrics.balanced_threshold(scores, labels) == 0.7
  result = metrics.pad_metrics(scores, labels, rule='test')
  assert result['threshold'] == 0.7
  assert result['far'] == 1 / 4
  assert result['frr'] == 1 / 3
  assert result['hter'] == pytest.approx(7 / 24, rel=0, abs=1e-15)
  # EER: FAR stays 1/4 from 0.7 down to 0.4 while FRR falls 1/3 -> 0, so FAR = FRR = 1/4.
  assert result['eer'] == pytest.approx(1 / 4, rel=0, abs=1e-15)
  # AUC: live 0.9 beats 4, 0.7 beats 3, 0.4 beats 3: 10 of 12.
  assert result['auc'] == pytest.approx(10 / 12, rel=0, abs=1e-15)
  assert result['threshold_rule'] == 'test'
  assert (result['num_live'], result['num_spoof']) == (3, 4)


def test_balanced_threshold_tie_goes_to_the_lower_threshold():
  # Live 0.9, 0.7, 0.4, 0.3; spoof 0.8, 0.5, 0.2 (P = 4, N = 3). TPR + FPR - 1:
  #   0.5: 2/4 + 2/3 - 1 = +1/6;   0.7: 2/4 + 1/3 - 1 = -1/6: an exact tie in |.|.
  # The first minimiser in ascending order is 0.5: FAR = 2/3, FRR = 2/4, HTER = 7/12.
  # (The authors' float64 argmin over sklearn's descending thresholds also takes 0.5, by rounding:
  # test_authors_rule_float_rounding_decides_an_exact_tie.)
  scores, labels = _scores_labels([0.9, 0.7, 0.4, 0.3], [0.8, 0.5, 0.2])
  assert metrics.balanced_threshold(scores, labels) == 0.5
  result = metrics.pad_metrics(scores, labels)
  assert (result['threshold'], result['far'], result['frr']) == (0.5, 2 / 3, 0.5)
  assert result['hter'] == pytest.approx(7 / 12, rel=0, abs=1e-15)
  assert metrics.hter(scores, labels, 0.7) == pytest.approx(5 / 12, rel=0, abs=1e-15)


def test_validation_rule_takes_the_threshold_from_validation_scores():
  test_scores, test_labels = _scores_labels([0.6, 0.7], [0.2, 0.4])
  val_scores, val_labels = _scores_labels([0.65, 0.9], [0.5, 0.3])
  # Test ROC: |TPR + FPR - 1| = 1, 1/2, 0 at 0.2, 0.4, 0.6 -> 0.6, separating test perfectly.
  on_test = metrics.pad_metrics(test_scores, test_labels, rule='test')
  assert (on_test['threshold'], on_test['far'], on_test['frr'], on_test['hter']) == (
      0.6, 0.0, 0.0, 0.0)
  # Validation ROC: 1, 1/2, 0 at 0.3, 0.5, 0.65 -> 0.65; on test, live 0.6 < 0.65 is rejected.
  on_val = metrics.pad_metrics(test_scores, test_labels, rule='validation', val_scores=val_scores,
                               val_labels=val_labels)
  assert (on_val['threshold'], on_val['far'], on_val['frr'], on_val['hter']) == (
      0.65, 0.0, 0.5, 0.25)
  assert on_val['threshold_rule'] == 'validation'
  # EER and AUC are of the test scores under either rule.
  assert (on_val['eer'], on_val['auc']) == (on_test['eer'], on_test['auc']) == (0.0, 1.0)
  assert metrics.choose_threshold('validation', test_scores, test_labels, val_scores=val_scores,
                                  val_labels=val_labels) == 0.65


def test_fixed_threshold():
  test_scores, test_labels = _scores_labels([0.6, 0.7], [0.2, 0.4])
  # At 0.3 spoof 0.4 is accepted: FAR = 1/2, FRR = 0. At exactly 0.4 still accepted (>=).
  result = metrics.pad_metrics(test_scores, test_labels, rule='fixed', threshold=0.3)
  assert (result['threshold'], result['far'], result['frr'], result['hter']) == (
      0.3, 0.5, 0.0, 0.25)
  assert metrics.error_rates(test_scores, test_labels, 0.4) == (0.5, 0.0)
  assert metrics.error_rates(test_scores, test_labels, 0.41) == (0.0, 0.0)
  assert metrics.error_rates(test_scores, test_labels, 0.65) == (0.0, 0.5)


def test_pad_metrics_is_json_able():
  result = metrics.pad_metrics(TIED_SCORES, TIED_LABELS)
  assert set(result) == {'hter', 'eer', 'auc', 'threshold', 'far', 'frr', 'threshold_rule',
                         'num_live', 'num_spoof'}
  for key in ('hter', 'eer', 'auc', 'threshold', 'far', 'frr'):
    assert type(result[key]) is float, key
  assert type(result['num_live']) is int and type(result['num_spoof']) is int
  assert json.loads(json.dumps(result)) == result


# ------------------------------------------------------------------- the authors' rule (sklearn)


def test_sklearn_roc_drops_the_inner_points_of_a_vertical_run():
  # Spoof 0.95 on top, then four live 0.9 > 0.8 > 0.7 > 0.6, then spoof 0.3 > 0.2 > 0.1 (P = N = 4).
  # (spoof, live) accepted at each distinct score, descending: 0.95 (1, 0), 0.9 (1, 1), 0.8 (1, 2),
  # 0.7 (1, 3), 0.6 (1, 4), 0.3 (2, 4), 0.2 (3, 4), 0.1 (4, 4). Second differences are non-zero
  # only at 0.6 (the bend from the vertical run into the horizontal one), so sklearn keeps 0.95,
  # 0.6 and 0.1, and prepends (0, 0) at threshold 0.95 + 1.
  scores, labels = [0.95, 0.9, 0.8, 0.7, 0.6, 0.3, 0.2, 0.1], [0, 1, 1, 1, 1, 0, 0, 0]
  fpr, tpr, thresholds = metrics.sklearn_roc(scores, labels)
  np.testing.assert_array_equal(thresholds, [0.95 + 1, 0.95, 0.6, 0.1])
  np.testing.assert_array_equal(fpr, [0, 0.25, 0.25, 1])
  np.testing.assert_array_equal(tpr, [0, 0, 1, 1])
  # |TPR + FPR - 1| on those points: 1, 3/4, 1/4, 1 -> 0.6: FAR 1/4, FRR 0, HTER 1/8.
  assert metrics.authors_threshold(scores, labels) == 0.6
  authors = metrics.pad_metrics(scores, labels, rule='authors')
  assert (authors['threshold'], authors['far'], authors['frr'], authors['hter']) == (
      0.6, 0.25, 0.0, 0.125)
  assert authors['threshold_rule'] == 'authors'
  # Over every point, 0.7 (inside the dropped run) reaches 0: FAR = FRR = 1/4, HTER 1/4.
  test = metrics.pad_metrics(scores, labels, rule='test')
  assert (test['threshold'], test['far'], test['frr'], test['hter']) == (0.7, 0.25, 0.25, 0.25)
  # EER and AUC do not depend on the rule.
  assert (authors['eer'], authors['auc']) == (test['eer'], test['auc'])


def test_sklearn_roc_drops_a_point_between_equal_diagonal_steps():
  # Live 0.9, 0.6, 0.6, 0.5, 0.5; spoof 0.6, 0.5, 0.1 (P = 5, N = 3); live and spoof tie at 0.6
  # and 0.5. (spoof, live) accepted: 0.9 (0, 1), 0.6 (1, 3), 0.5 (2, 5), 0.1 (3, 5): the steps into
  # and out of 0.6 are both (+1, +2), so 0.6 lies on a straight line and is dropped.
  scores, labels = _scores_labels([0.9, 0.6, 0.6, 0.5, 0.5], [0.6, 0.5, 0.1])
  fpr, tpr, thresholds = metrics.sklearn_roc(scores, labels)
  np.testing.assert_array_equal(thresholds, [0.9 + 1, 0.9, 0.5, 0.1])
  np.testing.assert_array_equal(fpr, [0, 0, 2 / 3, 1])
  np.testing.assert_array_equal(tpr, [0, 1 / 5, 1, 1])
  # |TPR + FPR - 1|: 1, 4/5, 2/3, 1 -> 0.5: FAR 2/3, FRR 0, HTER 1/3.
  authors = metrics.pad_metrics(scores, labels, rule='authors')
  assert (authors['threshold'], authors['far'], authors['frr']) == (0.5, 2 / 3, 0.0)
  assert authors['hter'] == pytest.approx(1 / 3, rel=0, abs=1e-15)
  # The dropped 0.6 was the best point: 3/5 + 1/3 - 1 = -1/15. FAR 1/3, FRR 2/5, HTER 11/30.
  test = metrics.pad_metrics(scores, labels, rule='test')
  assert (test['threshold'], test['far'], test['frr']) == (0.6, 1 / 3, 2 / 5)
  assert test['hter'] == pytest.approx(11 / 30, rel=0, abs=1e-15)


def test_authors_rule_float_rounding_decides_an_exact_tie():
  # test_balanced_threshold_tie_goes_to_the_lower_threshold's set: live 0.9, 0.7, 0.4, 0.3; spoof
  # 0.8, 0.5, 0.2. sklearn drops 0.4 (inside the vertical run 0.5 -> 0.3) and keeps the rest.
  scores, labels = _scores_labels([0.9, 0.7, 0.4, 0.3], [0.8, 0.5, 0.2])
  fpr, tpr, thresholds = metrics.sklearn_roc(scores, labels)
  np.testing.assert_array_equal(thresholds, [0.9 + 1, 0.9, 0.8, 0.7, 0.5, 0.3, 0.2])
  np.testing.assert_array_equal(fpr, [0, 0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1])
  np.testing.assert_array_equal(tpr, [0, 1 / 4, 1 / 4, 2 / 4, 2 / 4, 1, 1])
  # Exactly, 0.7 and 0.5 are both at distance 1/6. In float64 (tpr + fpr) - 1.0 is
  # -0.16666666666666674 at 0.7 and +0.16666666666666652 at 0.5, so argmin takes 0.5, not the
  # first (higher) threshold an exact tie would give it.
  assert (0.5 + 1 / 3) - 1.0 == -0.16666666666666674
  assert (0.5 + 2 / 3) - 1.0 == 0.16666666666666652
  assert metrics.authors_threshold(scores, labels) == 0.5
  assert metrics.choose_threshold('authors', scores, labels) == 0.5


def test_authors_rule_with_one_distinct_score_takes_the_extra_point():
  # One distinct score: no point to drop, (0, 0) at 0.5 + 1 and (1, 1) at 0.5, both at distance
  # 1; argmin takes the first, which accepts nothing: FAR 0, FRR 1. (The 'test' rule takes the
  # lower, accepting everything: FAR 1, FRR 0; the HTER is 1/2 either way.)
  scores, labels = [0.5] * 4, [1, 0, 1, 0]
  fpr, tpr, thresholds = metrics.sklearn_roc(scores, labels)
  np.testing.assert_array_equal(thresholds, [1.5, 0.5])
  np.testing.assert_array_equal(fpr, [0, 1])
  np.testing.assert_array_equal(tpr, [0, 1])
  authors = metrics.pad_metrics(scores, labels, rule='authors')
  assert (authors['threshold'], authors['far'], authors['frr'], authors['hter']) == (
      1.5, 0.0, 1.0, 0.5)
  assert json.loads(json.dumps(authors)) == authors   # finite: results.json stays strict JSON
  test = metrics.pad_metrics(scores, labels, rule='test')
  assert (test['threshold'], test['far'], test['frr'], test['hter']) == (0.5, 1.0, 0.0, 0.5)


def test_sklearn_roc_keeps_every_point_of_two():
  # Two distinct scores: nothing is dropped (sklearn only drops with more than two).
  fpr, tpr, thresholds = metrics.sklearn_roc([0.8, 0.2, 0.8], [1, 0, 0])
  np.testing.assert_array_equal(thresholds, [1.8, 0.8, 0.2])
  np.testing.assert_array_equal(fpr, [0, 0.5, 1])
  np.testing.assert_array_equal(tpr, [0, 1, 1])


def _random_tied_sets(count, seed=0):
  """`count` (scores, labels): 500-2,000 scores rounded to 2 or 3 decimals (ties within and
  across classes), live scoring higher by a random margin."""
  rng = np.random.default_rng(seed)
  for _ in range(count):
    n = int(rng.integers(500, 2001))
    labels = (rng.random(n) < rng.uniform(0.2, 0.8)).astype(np.int64)
    labels[:2] = [0, 1]
    logits = rng.normal(rng.uniform(0.0, 3.0) * labels, 1.0)
    yield np.round(1 / (1 + np.exp(-logits)), int(rng.integers(2, 4))), labels


def test_authors_rule_equals_sklearn_on_random_tied_sets():
  sklearn_metrics = pytest.importorskip('sklearn.metrics')
  for scores, labels in _random_tied_sets(200):
    fpr, tpr, thresholds = sklearn_metrics.roc_curve(labels, scores)
    ours_fpr, ours_tpr, ours_thresholds = metrics.sklearn_roc(scores, labels)
    np.testing.assert_array_equal(ours_fpr, fpr)
    np.testing.assert_array_equal(ours_tpr, tpr)
    np.testing.assert_array_equal(ours_thresholds[1:], thresholds[1:])
    # sklearn >= 1.3 writes +inf first, older max + 1 (what ours keeps).
    assert thresholds[0] in (np.inf, scores.max() + 1)
    assert ours_thresholds[0] == scores.max() + 1
    # The authors' `get_err_threhold` and HTER[right_index] on sklearn's own arrays.
    index = int(np.argmin(np.abs(tpr + fpr - 1.0)))
    assert index > 0
    result = metrics.pad_metrics(scores, labels, rule='authors')
    assert result['threshold'] == thresholds[index]
    assert result['far'] == fpr[index]
    assert result['hter'] == pytest.approx((fpr[index] + (1 - tpr[index])) / 2, rel=0, abs=1e-15)


# --------------------------------------------------------------------------------------- videos


def test_video_scores_average_frames():
  # Frames of videos 'b' (spoof), 'a' (live), 'c' (spoof), interleaved; dyadic scores so the
  # means are exact. Rows come out in sorted id order a, b, c.
  scores = [0.25, 0.75, 0.5, 1.0, 0.125, 0.375]
  ids = ['b', 'a', 'b', 'a', 'c', 'b']
  labels = [0, 1, 0, 1, 0, 0]
  means, video_labels = metrics.video_scores(scores, ids, labels)
  np.testing.assert_array_equal(means, [0.875, 0.375, 0.125])
  np.testing.assert_array_equal(video_labels, [1, 0, 0])
  assert video_labels.dtype == np.int64


def test_video_scores_refuses_a_mixed_label_video():
  with pytest.raises(ValueError, match=r"video 7 has frames labelled both live \(1\) and spoof"):
    metrics.video_scores([0.1, 0.2, 0.3, 0.4], [3, 7, 7, 3], [1, 1, 0, 1])
  with pytest.raises(ValueError, match=r"video 'clip2' has frames labelled both"):
    metrics.video_scores([0.1, 0.2], ['clip2', 'clip2'], [0, 1])


def test_video_scores_checks_lengths():
  with pytest.raises(ValueError, match='scores and video_ids and labels differ in length: 3 '
                     'scores, 2 video_ids, 3 labels'):
    metrics.video_scores([0.1, 0.2, 0.3], [1, 2], [0, 1, 1])


# --------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize('scores, labels, match', [
    ([0.1, 0.2, 0.3], [0, 1],
     r'test scores and test labels differ in length: 3 test scores, 2 test labels'),
    ([0.1, 0.2, 0.3], [0, 1, 2], r'test labels must be 0 \(spoof\) or 1 \(live\); got 2'),
    ([0.1, 0.2, 0.3], [0, 1, -1], r'test labels must be 0 \(spoof\) or 1 \(live\); got -1'),
    ([0.1, np.nan, 0.3], [0, 1, 1], r'test scores must be finite .* 1 non-finite .* indices 1'),
    ([0.1, 0.2, np.inf], [0, 1, 1], r'test scores must be finite .* 1 non-finite .* indices 2'),
    ([0.1, 0.2], [1, 1], r'test set is all-one-class: 2 live and 0 spoof samples, no spoof'),
    ([0.1, 0.2], [0, 0], r'test set is all-one-class: 0 live and 2 spoof samples, no live'),
    ([[0.1, 0.2]], [0, 1], r'test scores must be one-dimensional'),
])
def test_pad_metrics_refuses_bad_test_sets(scores, labels, match):
  with pytest.raises(ValueError, match=match):
    metrics.pad_metrics(scores, labels)


@pytest.mark.parametrize('fn', [
    metrics.auc, metrics.roc, metrics.eer, metrics.balanced_threshold,
    lambda s, l: metrics.error_rates(s, l, 0.5), lambda s, l: metrics.hter(s, l, 0.5),
])
def test_every_metric_refuses_one_class(fn):
  with pytest.raises(ValueError, match=r'the set is all-one-class: .* no spoof \(label 0\)'):
    fn([0.3, 0.7], [1, 1])
  with pytest.raises(ValueError, match=r'scores and labels differ in length: 2 scores, 1 labels'):
    fn([0.3, 0.7], [1])


def test_validation_set_errors_name_the_validation_set():
  test_scores, test_labels = _scores_labels([0.6, 0.7], [0.2, 0.4])
  with pytest.raises(ValueError, match=r'validation set is all-one-class: .* no live \(label 1\)'):
    metrics.pad_metrics(test_scores, test_labels, rule='validation', val_scores=[0.1, 0.2],
                        val_labels=[0, 0])
  with pytest.raises(ValueError, match=r'validation scores and validation labels differ'):
    metrics.pad_metrics(test_scores, test_labels, rule='validation', val_scores=[0.1, 0.2],
                        val_labels=[0])


@pytest.mark.parametrize('kwargs, match', [
    (dict(rule='validation'),
     r"rule='validation' needs both val_scores and val_labels .* got val_scores=None, "
     r'val_labels=None'),
    (dict(rule='validation', val_scores=[0.3, 0.6]),
     r"rule='validation' needs both val_scores and val_labels .* val_labels=None"),
    (dict(rule='dev'), r"unknown threshold rule 'dev'; expected one of 'test', 'validation', "
     r"'fixed'"),
    (dict(rule='test', val_scores=[0.3, 0.6], val_labels=[0, 1]),
     r"val_scores / val_labels are only used by rule='validation', got rule='test'"),
    (dict(rule='fixed'), r"rule='fixed' needs a threshold"),
    (dict(rule='test', threshold=0.5), r"threshold=0.5 is only used by rule='fixed'"),
    (dict(rule='fixed', threshold=float('nan')), r'threshold must be a finite real number'),
    (dict(rule='fixed', threshold='0.5'), r'threshold must be a finite real number'),
])
def test_pad_metrics_refuses_bad_rules(kwargs, match):
  with pytest.raises(ValueError, match=match):
    metrics.pad_metrics([0.2, 0.8], [0, 1], **kwargs)
