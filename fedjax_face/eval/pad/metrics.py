"""Face presentation-attack detection (PAD, anti-spoofing) metrics: AUC, EER and HTER.

The reading of FedGPAD (Shao et al., TNNLS 2022, Sec. IV-A3) and of its authors' code
(rshaojimmy/FedGPAD, `misc/metrics_utils.py`; docs/references.md, pad-metrics):

- A score is the probability of LIVE (the sigmoid of the classifier's logit). Label 1 = live
  (bona fide), 0 = spoof (presentation attack). A sample is accepted as live when
  `score >= threshold`, as in sklearn's `roc_curve`, which the authors' code calls.
- The scoring unit is the caller's: every function here takes one score per unit. SSDG and FLIP
  average frame scores per video first (`video_scores`); the FedGPAD code scores every frame on
  its own (per-frame sigmoid scores written to .h5). The 'pad' evaluator's
  `evals.pad.scoring_unit` picks one.
- FAR (false acceptance rate) = fraction of spoof accepted (score >= t) = FPR;
  FRR (false rejection rate) = fraction of live rejected (score < t) = 1 - TPR.
- AUC: area under the ROC with live as the positive class, ties between a live and a spoof score
  counted as half (the Mann-Whitney statistic U / (P N), equal to the trapezoid area of `roc` and
  to sklearn's `roc_auc_score`), computed from integer counts so it is exact.
- EER: the error rate where FAR = FRR, interpolated linearly on the ROC segment that crosses
  FAR = FRR (`eer`).
- HTER = (FAR + FRR) / 2 at one threshold, which is where the paper and the code part ways. The
  rules:
    'test'       chosen on the test scores themselves where |TPR + FPR - 1| (= |FAR - FRR|) is
                 smallest over EVERY distinct score, in exact integer arithmetic, ties to the
                 lower threshold (`balanced_threshold`): the EER-like point of the test ROC;
    'authors'    the authors' code exactly (`performances_ZeroShot`, `get_err_threhold`): the
                 same criterion on the test scores, but over sklearn's DEFAULT ROC
                 (`drop_intermediate=True` drops collinear intermediate points, so the
                 minimiser inside a vertical or horizontal run is not a candidate) in float64,
                 the first minimiser of `np.argmin` in descending threshold order
                 (`authors_threshold`, `sklearn_roc`);
    'validation' the paper's text ("thresholds ... are determined based on the data in all data
                 centers", following Liu et al. CVPR 2019): `balanced_threshold` of validation
                 scores from the training data centers, then applied to the test scores;
    'fixed'      an explicit number.
  A table must name its rule; `pad_metrics` records it as 'threshold_rule'.

Everything is numpy on host arrays: a PAD test set is a few thousand videos (a few hundred
thousand frames).
"""

from typing import Any, Optional

import numpy as np
import numpy.typing as npt

LIVE, SPOOF = 1, 0
RULES = ('test', 'validation', 'fixed', 'authors')
# Offending values or ids quoted in an error message, at most.
_MAX_QUOTED = 5


def _quoted(values) -> str:
  values = [v.item() if isinstance(v, np.generic) else v for v in values]
  more = f', ... ({len(values)} in all)' if len(values) > _MAX_QUOTED else ''
  return ', '.join(repr(v) for v in values[:_MAX_QUOTED]) + more


def _checked_labels(labels: np.ndarray, what: str) -> np.ndarray:
  if not (np.issubdtype(labels.dtype, np.number) or labels.dtype == np.bool_):
    raise ValueError(f'{what}labels must be 0 (spoof) or 1 (live), got dtype {labels.dtype}')
  bad = np.setdiff1d(np.unique(labels), [SPOOF, LIVE])
  if bad.size:
    raise ValueError(f'{what}labels must be 0 (spoof) or 1 (live); got {_quoted(bad)}')
  return labels.astype(np.int64)


def _checked_scores(scores: np.ndarray, what: str) -> np.ndarray:
  if not np.issubdtype(scores.dtype, np.number) or np.issubdtype(scores.dtype, np.complexfloating):
    raise ValueError(f'{what}scores must be real numbers (probabilities of live), got dtype '
                     f'{scores.dtype}')
  scores = scores.astype(np.float64)
  bad = np.flatnonzero(~np.isfinite(scores))
  if bad.size:
    raise ValueError(f'{what}scores must be finite probabilities of live; got {bad.size} '
                     f'non-finite (nan/inf) at indices {_quoted(bad)}')
  return scores


def _one_dimensional(**arrays: npt.ArrayLike) -> list[np.ndarray]:
  out = []
  for name, array in arrays.items():
    array = np.asarray(array)
    if array.ndim != 1:
      raise ValueError(f'{name} must be one-dimensional (one entry per sample), got shape '
                       f'{array.shape}')
    out.append(array)
  lengths = {name: array.size for name, array in zip(arrays, out)}
  if len(set(lengths.values())) > 1:
    raise ValueError(f'{" and ".join(lengths)} differ in length: '
                     f'{", ".join(f"{n} {name}" for name, n in lengths.items())}; expected one '
                     f'of each per sample')
  return out


def _checked(scores: npt.ArrayLike, labels: npt.ArrayLike,
             what: str = '') -> tuple[np.ndarray, np.ndarray]:
  """Float64 scores and int64 labels of a set holding both classes; `what` prefixes messages."""
  scores, labels = _one_dimensional(**{f'{what}scores': scores, f'{what}labels': labels})
  labels = _checked_labels(labels, what)
  scores = _checked_scores(scores, what)
  num_live = int(np.sum(labels == LIVE))
  num_spoof = labels.size - num_live
  if num_live == 0 or num_spoof == 0:
    # AUC, EER and HTER all divide by both class sizes.
    missing = 'live (label 1)' if num_live == 0 else 'spoof (label 0)'
    raise ValueError(f'{what or "the "}set is all-one-class: {num_live} live and {num_spoof} '
                     f'spoof samples, no {missing}; AUC, EER and HTER need both live and spoof')
  return scores, labels


def video_scores(scores: npt.ArrayLike, video_ids: npt.ArrayLike,
                 labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  """Averages frame scores per video, the unit every PAD metric counts.

  Args:
    scores: `[F]` frame scores, probabilities of live.
    video_ids: `[F]` the video of each frame (any sortable values: ints, strings).
    labels: `[F]` frame labels, 1 = live, 0 = spoof; every frame of a video carries its label.

  Returns:
    `(mean_scores [V] float64, labels [V] int64)`, one row per distinct video id in sorted id
    order (`np.unique(video_ids)`).

  Raises:
    ValueError: on arrays of different lengths, labels outside {0, 1}, non-finite scores, or a
      video whose frames carry different labels (naming it).
  """
  scores, video_ids, labels = _one_dimensional(scores=scores, video_ids=video_ids, labels=labels)
  labels = _checked_labels(labels, '')
  scores = _checked_scores(scores, '')
  ids, index = np.unique(video_ids, return_inverse=True)
  frames = np.bincount(index, minlength=ids.size)
  live_frames = np.bincount(index, weights=labels, minlength=ids.size)
  mixed = ids[(live_frames > 0) & (live_frames < frames)]
  if mixed.size:
    raise ValueError(f'video {_quoted(mixed[:1])} has frames labelled both live (1) and spoof '
                     f'(0); expected one label per video (mixed videos: {_quoted(mixed)})')
  means = np.bincount(index, weights=scores, minlength=ids.size) / frames
  return means, (live_frames > 0).astype(np.int64)


def _operating_points(scores: np.ndarray,
                      labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
  """Thresholds (descending, +inf first) and the live / spoof counts accepted at each.

  Every distinct score is a threshold: the rates only change there, and any threshold between
  two distinct scores accepts what the next higher one does.
  """
  live = np.sort(scores[labels == LIVE])
  spoof = np.sort(scores[labels == SPOOF])
  thresholds = np.concatenate([[np.inf], np.unique(scores)[::-1]])
  true_accepts = live.size - np.searchsorted(live, thresholds, side='left')
  false_accepts = spoof.size - np.searchsorted(spoof, thresholds, side='left')
  return thresholds, true_accepts, false_accepts, live.size, spoof.size


def _balance_gap(true_accepts, false_accepts, num_live, num_spoof) -> np.ndarray:
  # (TPR + FPR - 1) * P * N = (FAR - FRR) * P * N in integers, so equal distances compare equal
  # (ties are decided by the stated rule, not by rounding). Strictly increasing as the threshold
  # falls: each lower distinct score accepts at least one more sample.
  return (true_accepts.astype(np.int64) * num_spoof + false_accepts.astype(np.int64) * num_live
          - num_live * num_spoof)


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
  live = scores[labels == LIVE]
  spoof = np.sort(scores[labels == SPOOF])
  below = np.searchsorted(spoof, live, side='left')  # spoof < live score: a won pair
  not_above = np.searchsorted(spoof, live, side='right')  # spoof <= live score: won or tied
  # Twice the Mann-Whitney U = 2 wins + ties, an integer; one division rounds it once.
  twice_u = int(np.sum(below, dtype=np.int64) + np.sum(not_above, dtype=np.int64))
  return twice_u / (2 * live.size * spoof.size)


def auc(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
  """Area under the ROC (live positive), ties counted half: Mann-Whitney U / (P N).

  Equals the trapezoid area under `roc` and sklearn's `roc_auc_score(labels, scores)`, exactly
  (integer pair counts, one division).

  Raises:
    ValueError: see `pad_metrics`.
  """
  return _auc(*_checked(scores, labels))


def roc(scores: npt.ArrayLike,
        labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The ROC over every distinct score, with live as the positive class.

  Returns:
    `(fpr, tpr, thresholds)`, float64 `[D + 1]` for D distinct scores, in sklearn's order:
    thresholds descending from `+inf` (nothing accepted: fpr = tpr = 0) to the lowest score
    (everything accepted: fpr = tpr = 1). At threshold t, fpr = FAR = fraction of spoof with
    score >= t and tpr = 1 - FRR = fraction of live with score >= t. No point is dropped (sklearn's
    `drop_intermediate` is not applied).

  Raises:
    ValueError: see `pad_metrics`.
  """
  thresholds, true_accepts, false_accepts, num_live, num_spoof = _operating_points(
      *_checked(scores, labels))
  return false_accepts / num_spoof, true_accepts / num_live, thresholds


def _eer(scores: np.ndarray, labels: np.ndarray) -> float:
  _, true_accepts, false_accepts, num_live, num_spoof = _operating_points(scores, labels)
  gap = _balance_gap(true_accepts, false_accepts, num_live, num_spoof)
  far = false_accepts / num_spoof
  # gap[0] = -P N (+inf accepts nothing) and gap[-1] = +P N (the lowest score accepts all), so
  # the sign changes at exactly one index i >= 1.
  i = int(np.argmax(gap >= 0))
  if gap[i] == 0:
    return float(far[i])
  # FAR and FRR are both linear along the segment; where their difference is 0 they are equal.
  alpha = -gap[i - 1] / (gap[i] - gap[i - 1])
  return float(far[i - 1] + alpha * (far[i] - far[i - 1]))


def eer(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
  """Equal error rate: the error where FAR = FRR, interpolated linearly between ROC points.

  Along the ROC (thresholds descending), FAR - FRR rises strictly from -1 to +1. At the first
  point i where it is >= 0: if it is 0 there, EER = FAR_i = FRR_i; otherwise, with point i - 1 on
  the other side, the straight ROC segment between the two points is followed to where
  FAR - FRR = 0, i.e. alpha = -(FAR - FRR)_{i-1} / ((FAR - FRR)_i - (FAR - FRR)_{i-1}) and
  EER = FAR_{i-1} + alpha (FAR_i - FAR_{i-1}) (= FRR there, by construction).

  Neighbouring points differ in one rate only unless a live and a spoof score tie, so the
  interpolation changes the value only on such diagonal segments. (The SSDG-family code reports
  (FAR + FRR) / 2 at the grid threshold nearest FAR = FRR instead; that is not this.)

  Raises:
    ValueError: see `pad_metrics`.
  """
  return _eer(*_checked(scores, labels))


def _balanced_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
  thresholds, true_accepts, false_accepts, num_live, num_spoof = _operating_points(scores, labels)
  distance = np.abs(_balance_gap(true_accepts, false_accepts, num_live, num_spoof))
  # Ascending order, so argmin's first index is the lowest minimising threshold. +inf, last in
  # that order, ties at most the lowest score (both at distance P N), so it is never returned.
  return float(thresholds[::-1][np.argmin(distance[::-1])])


def balanced_threshold(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
  """The ROC threshold where |TPR + FPR - 1| (= |FAR - FRR|) is smallest.

  The candidates are the distinct scores (and +inf); on a tie the FIRST minimiser in ascending
  threshold order, i.e. the lowest threshold, is returned. Since FAR - FRR rises strictly as the
  threshold falls, a tie is between the two points on either side of FAR = FRR, and this picks the
  one with FAR > FRR. (The authors' code, `authors_threshold`, computes the distances in float64
  over sklearn's default ROC, where rounding, not the order, decides most such ties, and where
  `drop_intermediate` removes candidates.)

  Raises:
    ValueError: see `pad_metrics`.
  """
  return _balanced_threshold(*_checked(scores, labels))


def _sklearn_roc(scores: np.ndarray,
                 labels: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  thresholds, true_accepts, false_accepts, _, _ = _operating_points(scores, labels)
  # sklearn's `_binary_clf_curve`: one point per distinct score, descending (no +inf point).
  thresholds, tps, fps = thresholds[1:], true_accepts[1:], false_accepts[1:]
  if fps.size > 2:
    # `drop_intermediate`: keep a point only where the curve bends (a non-zero second difference
    # of either count), and both ends; the counts are integers, so this is sklearn's test on its
    # integer-valued float counts.
    keep = np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True]
    thresholds, tps, fps = thresholds[keep], tps[keep], fps[keep]
  # The extra (0, 0) point; its threshold is `max(score) + 1` before sklearn 1.3, np.inf since.
  tps = np.r_[0, tps].astype(np.float64)
  fps = np.r_[0, fps].astype(np.float64)
  thresholds = np.r_[thresholds[0] + 1, thresholds]
  # The float64 divisions sklearn does, so the rates are bit for bit its own.
  return fps / fps[-1], tps / tps[-1], thresholds


def sklearn_roc(scores: npt.ArrayLike,
                labels: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """`sklearn.metrics.roc_curve(labels, scores)` with its defaults, as the authors' code calls it.

  sklearn's algorithm in numpy (scikit-learn is not a dependency): the points of `roc` at the
  distinct scores, descending; then, with more than two of them, `drop_intermediate=True` keeps
  point i only where `np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True]` holds
  (fps, tps the spoof and live counts accepted): the two ends and every bend, so the inner points
  of a straight run (only live, or only spoof, accepted one distinct score after another, or
  several equal diagonal steps) are dropped; then the extra first point (0, 0).

  The extra point's threshold: sklearn before 1.3 writes `thresholds[0] + 1` (the highest score
  + 1), 1.3 and later `np.inf` (scikit-learn#26194). The FedGPAD code targets Python 3.6 and
  PyTorch 1.2 (its README), whose newest sklearn is 0.24, and names no sklearn version
  (docs/references.md, pad-metrics), so this reads it as `max(score) + 1`. It only matters when
  that point is chosen, i.e. when every score is equal: both thresholds then accept nothing
  (FAR 0, FRR 1, HTER 1/2), and this one stays finite in results.json. fpr and tpr are sklearn's
  bit for bit, the thresholds after the first are the scores themselves.

  Returns:
    `(fpr, tpr, thresholds)`, float64, thresholds descending.

  Raises:
    ValueError: see `pad_metrics`.
  """
  return _sklearn_roc(*_checked(scores, labels))


def _authors_threshold(scores: np.ndarray, labels: np.ndarray) -> float:
  fpr, tpr, thresholds = _sklearn_roc(scores, labels)
  # `get_err_threhold`: `differ_tpr_fpr_1 = tpr + fpr - 1.0`, `np.argmin(np.abs(...))`, in float64
  # in this order (rounding decides ties that exact arithmetic would call equal).
  return float(thresholds[np.argmin(np.abs(tpr + fpr - 1.0))])


def authors_threshold(scores: npt.ArrayLike, labels: npt.ArrayLike) -> float:
  """The FedGPAD code's HTER threshold: where |TPR + FPR - 1| is smallest on `sklearn_roc`.

  `misc/metrics_utils.py` (`performances_ZeroShot`, `get_err_threhold`) takes
  `roc_curve(labels, scores)`, `d = tpr + fpr - 1.0` and the threshold at `np.argmin(np.abs(d))`
  (the first minimiser, thresholds descending), and reports the HTER of that ROC point,
  `(fpr + (1 - tpr)) / 2`, which is the HTER at this threshold with `score >= threshold`
  accepted (`pad_metrics` computes it as (FAR + FRR) / 2 there, equal to the last bit or one
  rounding away). It differs from `balanced_threshold` in three ways: the candidates are the
  points sklearn keeps (`drop_intermediate`), the distances are float64 not exact, and a float tie
  goes to the higher threshold.

  Raises:
    ValueError: see `pad_metrics`.
  """
  return _authors_threshold(*_checked(scores, labels))


def _checked_threshold(threshold: Any) -> float:
  if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.number)):
    raise ValueError(f'threshold must be a finite real number, got {threshold!r}')
  if not np.isfinite(threshold):
    raise ValueError(f'threshold must be a finite real number, got {threshold!r}')
  return float(threshold)


def _error_rates(scores: np.ndarray, labels: np.ndarray, threshold: float) -> tuple[float, float]:
  accepted = scores >= threshold
  far = float(np.mean(accepted[labels == SPOOF]))
  frr = float(np.mean(~accepted[labels == LIVE]))
  return far, frr


def error_rates(scores: npt.ArrayLike, labels: npt.ArrayLike,
                threshold: float) -> tuple[float, float]:
  """`(FAR, FRR)` at `threshold`: spoof with score >= threshold, live with score < threshold.

  Raises:
    ValueError: see `pad_metrics`, or a threshold that is not a finite real number.
  """
  return _error_rates(*_checked(scores, labels), _checked_threshold(threshold))


def hter(scores: npt.ArrayLike, labels: npt.ArrayLike, threshold: float) -> float:
  """Half total error rate (FAR + FRR) / 2 at `threshold` (see `error_rates`)."""
  far, frr = error_rates(scores, labels, threshold)
  return (far + frr) / 2


def choose_threshold(rule: str,
                     test_scores: npt.ArrayLike,
                     test_labels: npt.ArrayLike,
                     *,
                     val_scores: Optional[npt.ArrayLike] = None,
                     val_labels: Optional[npt.ArrayLike] = None,
                     threshold: Optional[float] = None) -> float:
  """The HTER threshold under a named rule (module docstring).

  Args:
    rule: 'test': `balanced_threshold` of the test scores. 'authors' (the authors' code
      exactly): `authors_threshold` of the test scores. 'validation' (the paper's text):
      `balanced_threshold` of `val_scores` / `val_labels`, scores of the training data centers'
      data. 'fixed': `threshold`.
    test_scores, test_labels: the test set (checked under every rule).
    val_scores, val_labels: only with rule 'validation', where both are required.
    threshold: only with rule 'fixed', where it is required.

  Raises:
    ValueError: on an unknown rule, missing or unused validation scores or threshold, or any
      error of `pad_metrics` in the test or validation set.
  """
  if rule not in RULES:
    raise ValueError(f'unknown threshold rule {rule!r}; expected one of {_quoted(RULES)}')
  has_val = val_scores is not None or val_labels is not None
  if rule == 'validation':
    if val_scores is None or val_labels is None:
      raise ValueError("rule='validation' needs both val_scores and val_labels (scores of the "
                       'training data centers, where the paper picks the threshold); got '
                       f'val_scores={"given" if val_scores is not None else None}, '
                       f'val_labels={"given" if val_labels is not None else None}')
  elif has_val:
    # Refused rather than ignored: a caller passing them expects them to matter.
    raise ValueError(f"val_scores / val_labels are only used by rule='validation', got "
                     f'rule={rule!r}')
  if rule == 'fixed' and threshold is None:
    raise ValueError("rule='fixed' needs a threshold (a finite real number); got None")
  if rule != 'fixed' and threshold is not None:
    raise ValueError(f"threshold={threshold!r} is only used by rule='fixed', got rule={rule!r}")
  test_scores, test_labels = _checked(test_scores, test_labels, 'test ')
  if rule == 'test':
    return _balanced_threshold(test_scores, test_labels)
  if rule == 'authors':
    return _authors_threshold(test_scores, test_labels)
  if rule == 'validation':
    return _balanced_threshold(*_checked(val_scores, val_labels, 'validation '))
  return _checked_threshold(threshold)


def pad_metrics(test_scores: npt.ArrayLike,
                test_labels: npt.ArrayLike,
                *,
                rule: str = 'test',
                val_scores: Optional[npt.ArrayLike] = None,
                val_labels: Optional[npt.ArrayLike] = None,
                threshold: Optional[float] = None) -> dict[str, Any]:
  """HTER, EER and AUC of one test set (a table cell of FedGPAD Tables III-X).

  One score per scoring unit: per video (`video_scores` of the frame scores first), or per frame.
  EER and AUC depend on the test scores only; the HTER threshold comes from `rule`
  (`choose_threshold`).

  Returns:
    A JSON-able dict of plain Python values: 'hter', 'eer', 'auc' (fractions, not percent),
    'threshold', 'far', 'frr' (at that threshold, on the test set), 'threshold_rule' (the rule's
    name), 'num_live', 'num_spoof' (test samples).

  Raises:
    ValueError: naming the set ('test' or 'validation') when scores and labels differ in length
      or are not one-dimensional, labels are not in {0, 1}, a score is not finite, or the set is
      all-one-class (its message names the missing class); and on the rule errors of
      `choose_threshold`.
  """
  chosen = choose_threshold(rule, test_scores, test_labels, val_scores=val_scores,
                            val_labels=val_labels, threshold=threshold)
  test_scores, test_labels = _checked(test_scores, test_labels, 'test ')
  far, frr = _error_rates(test_scores, test_labels, chosen)
  num_live = int(np.sum(test_labels == LIVE))
  return {
      'hter': (far + frr) / 2,
      'eer': _eer(test_scores, test_labels),
      'auc': _auc(test_scores, test_labels),
      'threshold': chosen,
      'far': far,
      'frr': frr,
      'threshold_rule': rule,
      'num_live': num_live,
      'num_spoof': int(test_labels.size - num_live),
  }
