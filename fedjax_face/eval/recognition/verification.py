"""Face verification on pair sets (LFW, CFP-FP, AgeDB-30, ...) with the insightface protocol.

The numbers this module reports are meant to be comparable with those printed by insightface's
`eval/verification.py` (the "Accuracy-Flip" line), so the protocol is reproduced exactly:

1. Every image and its horizontal mirror are embedded; the two embeddings are SUMMED and the sum is
   L2-normalised (`compute_embeddings`).
2. Pairs are consecutive rows (0-1, 2-3, ...); the score of a pair is the squared Euclidean distance
   between its two normalised embeddings, and a pair is predicted "same" when `dist < threshold`.
3. The pairs are split into 10 contiguous folds without shuffling (sklearn `KFold(10,
   shuffle=False)`). For each fold the threshold is the first maximiser of the accuracy on the other
   nine folds over `np.arange(0, 4, 0.01)`, and that fold's accuracy is measured at it.
4. VAL@FAR: same folds, thresholds `np.arange(0, 4, 0.001)`; see `evaluate_pairs` for how the
   threshold reaching the target FAR on the training folds is interpolated.

On top of the protocol, `evaluate_pairs` reports pooled (fold-free) statistics: the ROC curve, its
AUC and IJB-style TAR at fixed FARs.

Everything is vectorised over thresholds: the per-fold counts of pairs below every threshold come
from one `searchsorted` + `bincount` + `cumsum`, so the whole evaluation of 6,000 pairs takes a few
milliseconds instead of the seconds the reference double loop needs.
"""

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.core import arrays
from fedjax_face.data import preprocess

# Threshold grids of the reference implementation; `np.arange` is kept (rather than `linspace`) so
# that the grid values are bit-identical to insightface's.
ACCURACY_THRESHOLDS = np.arange(0, 4, 0.01)
VAL_THRESHOLDS = np.arange(0, 4, 0.001)
# FARs at which pooled TAR is reported (IJB-B/C tables use the same decades).
TAR_FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
# Stored ROC curves are downsampled to at most this many points.
MAX_ROC_POINTS = 1000

PROTOCOL = 'insightface {folds}-fold, {flip}, squared L2, thresholds 0:4:0.01'

EmbedFn = Callable[[jax.Array], jax.Array]

# Normalisation runs on the device, so only uint8 images cross the host-device boundary.
_normalize = jax.jit(preprocess.normalize)
_flip = jax.jit(preprocess.horizontal_flip)


def raw_embeddings(embed_fn: EmbedFn,
                   images: np.ndarray,
                   *,
                   batch_size: int = 256,
                   flip: bool = True) -> np.ndarray:
  """float32 `[N, d]` embeddings of uint8 images, not normalised; with `flip`, each is the sum of
  the embeddings of the image and of its horizontal mirror.

  Args:
    embed_fn: callable (normally jitted) mapping float32 `[batch_size, H, W, C]` images in [-1, 1]
      to `[batch_size, d]` embeddings. It is only ever called with exactly `batch_size` rows, so a
      jitted function compiles once.
    images: uint8 `[N, H, W, C]` images (RGB, HWC; see `fedjax_face.data.preprocess`).
    batch_size: rows per `embed_fn` call; the last batch is zero-padded and the padding dropped.
    flip: also embed the mirror and sum.

  Raises:
    ValueError: on malformed images, an empty image set or a non-positive batch size, or if
      `embed_fn` does not return `[batch_size, d]`.
  """
  images = np.asarray(images)
  if images.ndim != 4:
    raise ValueError(f'images must be [N, H, W, C], got shape {images.shape}')
  if images.shape[0] == 0:
    raise ValueError('images is empty')
  if batch_size < 1:
    raise ValueError(f'batch_size must be positive, got {batch_size}')

  num_images = images.shape[0]
  pending = []  # (device embeddings, number of real rows); read back only at the end.
  for start in range(0, num_images, batch_size):
    batch = images[start:start + batch_size]
    count = batch.shape[0]
    if count < batch_size:
      # Pad instead of calling embed_fn with a smaller batch, which would trigger a recompile.
      padding = np.zeros((batch_size - count,) + batch.shape[1:], dtype=batch.dtype)
      batch = np.concatenate([batch, padding])
    x = _normalize(jnp.asarray(batch))
    emb = jnp.asarray(embed_fn(x), jnp.float32)
    if emb.ndim != 2 or emb.shape[0] != batch_size:
      raise ValueError(f'embed_fn must return [{batch_size}, d], got shape {emb.shape}')
    if flip:
      emb = emb + jnp.asarray(embed_fn(_flip(x)), jnp.float32)
    # No host transfer here: JAX dispatches asynchronously, so the device keeps working on the next
    # batches while the host slices and pads them.
    pending.append((emb, count))
  return np.concatenate([np.asarray(emb)[:count] for emb, count in pending])


def compute_embeddings(embed_fn: EmbedFn,
                       images: np.ndarray,
                       *,
                       batch_size: int = 256,
                       flip: bool = True) -> np.ndarray:
  """Embeds images the insightface way ("accuracy-flip"): `raw_embeddings` (with `flip`, the sum
  of the image's and its mirror's), L2-normalised.

  Returns:
    float32 `[N, d]` L2-normalised embeddings.

  Raises:
    ValueError: as `raw_embeddings`.
  """
  embeddings = raw_embeddings(embed_fn, images, batch_size=batch_size, flip=flip)
  # Normalise in float64 (the reference accumulates embeddings in float64) then store float32.
  # All-zero rows stay zero, as sklearn's `normalize` does.
  return arrays.l2_normalize(embeddings.astype(np.float64)).astype(np.float32)


def pair_distances(embeddings: np.ndarray) -> np.ndarray:
  """Squared Euclidean distance between rows 2i and 2i+1, in float64, shape `[P]`."""
  embeddings = np.asarray(embeddings)
  # Same values as `np.sum(np.square(e1 - e2), 1)` on float64 embeddings (the reference keeps them
  # in float64), without materialising a float64 copy of all 2P rows (the copy is the slow part).
  diff = np.subtract(embeddings[0::2], embeddings[1::2], dtype=np.float64)
  np.square(diff, out=diff)
  return np.sum(diff, axis=1)


def _counts_below(dist: np.ndarray, issame: np.ndarray, fold: np.ndarray, num_folds: int,
                  thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per fold and threshold, how many genuine / impostor pairs have `dist < threshold`.

  Args:
    dist: float `[P]` pair distances.
    issame: bool `[P]`.
    fold: int `[P]` fold of each pair.
    num_folds: number of folds.
    thresholds: ascending float `[T]`.

  Returns:
    `(genuine, impostor)`, two int64 `[num_folds, T]` arrays.
  """
  num_thresholds = len(thresholds)
  # `bin_index` = #{t <= dist}; dist < thresholds[j] exactly when bin_index <= j. The comparisons
  # happen in float64, as in the reference (float32 distances against float64 thresholds).
  bin_index = np.searchsorted(thresholds, dist, side='right')
  key = fold * (num_thresholds + 1) + bin_index
  size = num_folds * (num_thresholds + 1)

  def below(mask):
    hist = np.bincount(key[mask], minlength=size).reshape(num_folds, num_thresholds + 1)
    return np.cumsum(hist, axis=1)[:, :num_thresholds]

  return below(issame), below(~issame)


def _legacy_slinear_threshold(far: np.ndarray, thresholds: np.ndarray, target: float) -> float:
  """The threshold at which a non-decreasing FAR curve reaches `target`.

  Reproduces what `scipy.interpolate.interp1d(far, thresholds, kind='slinear')(target)` returned in
  the scipy versions the reference was written for. `far` has long runs of repeated values (it is
  a step function of the threshold); such interp1d built a degree-1 B-spline on the repeated knots,
  whose value is:

  * `thresholds[j]` for the LAST index j whose FAR equals `target` when the target is hit exactly;
  * otherwise the linear interpolation between (far[j], thresholds[j]), j the last index with
    `far[j] < target`, and (far[j+1], thresholds[j+1]), the first index above the target.

  Current scipy refuses repeated x values ("Expect x to not have duplicates"), and the usual fix,
  `np.unique(far, return_index=True)`, keeps the first index of every run, which moves the left
  end of the interpolation segment; neither is used here. The one case where the legacy B-spline
  misbehaved (a target equal to the largest FAR, evaluated on an empty last knot interval) is
  resolved with the exact-hit rule above.

  Args:
    far: non-decreasing `[T]` FAR per threshold, with `far[0] <= target <= far[-1]`.
    thresholds: ascending `[T]`.
    target: the FAR to reach.

  Returns:
    The interpolated threshold.
  """
  j = int(np.searchsorted(far, target, side='right')) - 1  # Last index with far <= target.
  if far[j] == target or j == len(far) - 1:
    return float(thresholds[j])
  x0, x1 = far[j], far[j + 1]
  y0, y1 = thresholds[j], thresholds[j + 1]
  return float(y0 + (y1 - y0) * (target - x0) / (x1 - x0))


def roc_curve(dist: np.ndarray,
              issame: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Pooled ROC of a distance score (accept as "same" when `dist <= threshold`).

  Args:
    dist: float `[P]` distances.
    issame: bool `[P]`, with at least one genuine and one impostor pair.

  Returns:
    `(fpr, tpr, thresholds)`: one point per distinct distance, ascending, preceded by the point
    (0, 0) whose threshold is `-inf`. Tied distances give a single point, so the trapezoidal area
    under the curve counts ties as half-correct.
  """
  dist = np.asarray(dist, dtype=np.float64)
  issame = np.asarray(issame, dtype=bool)
  order = np.argsort(dist, kind='stable')
  sorted_dist = dist[order]
  sorted_same = issame[order]
  true_pos = np.cumsum(sorted_same)
  false_pos = np.cumsum(~sorted_same)
  # Keep the last pair of every run of equal distances: a threshold accepts all of them or none.
  last_of_run = np.r_[sorted_dist[1:] != sorted_dist[:-1], True]
  num_genuine = true_pos[-1]
  num_impostor = false_pos[-1]
  tpr = np.r_[0.0, true_pos[last_of_run] / num_genuine]
  fpr = np.r_[0.0, false_pos[last_of_run] / num_impostor]
  thresholds = np.r_[-np.inf, sorted_dist[last_of_run]]
  return fpr, tpr, thresholds


def roc_auc(dist: np.ndarray, issame: np.ndarray) -> float:
  """Area under the pooled ROC, as the Mann-Whitney statistic.

  Equal to the trapezoidal area under `roc_curve`, but computed from integer counts: the fraction
  of (genuine, impostor) combinations where the genuine pair is closer, ties counting 1/2. This
  makes the separable (1.0) and all-tied (0.5) cases exact.

  Args:
    dist: float `[P]` distances.
    issame: bool `[P]`, with at least one genuine and one impostor pair.

  Returns:
    The AUC in [0, 1].
  """
  dist = np.asarray(dist, dtype=np.float64)
  issame = np.asarray(issame, dtype=bool)
  genuine = dist[issame]
  impostor = np.sort(dist[~issame])
  not_above = np.searchsorted(impostor, genuine, side='right')
  below = np.searchsorted(impostor, genuine, side='left')
  # Twice the U statistic, kept integral: 2 per impostor farther away, 1 per tie.
  twice_u = np.sum(2 * (len(impostor) - not_above) + (not_above - below), dtype=np.int64)
  return float(twice_u) / (2.0 * len(genuine) * len(impostor))


def tar_at_far(dist: np.ndarray,
               issame: np.ndarray,
               fars: Sequence[float] = TAR_FARS) -> tuple[dict[str, Any], dict[str, Any]]:
  """Pooled TAR at fixed FARs (IJB-style, no folds).

  For a FAR `f` with `n` impostor pairs, at most `k = floor(f * n)` impostors may be accepted. The
  threshold is the (k+1)-th smallest impostor distance and pairs with `dist < threshold` are
  accepted, so exactly the k closest impostors pass (fewer if the (k+1)-th is tied with earlier
  ones) and the FAR actually achieved never exceeds `f`. When `k == 0` the target FAR is below
  `1 / n` and cannot be resolved with this many impostors (e.g. 3,000 impostors and FAR 1e-4);
  the TAR is then reported as None instead of a number measured at FAR 0.

  Args:
    dist: float `[P]` distances.
    issame: bool `[P]`, with at least one genuine and one impostor pair.
    fars: target FARs in (0, 1].

  Returns:
    `(tar, threshold)`: dicts keyed by `str(far)` (e.g. '1e-06', '0.1') holding a float or None.
  """
  dist = np.asarray(dist, dtype=np.float64)
  issame = np.asarray(issame, dtype=bool)
  genuine = dist[issame]
  impostor = np.sort(dist[~issame])
  tars, thresholds = {}, {}
  for far in fars:
    key = str(far)
    # The tiny relative slack keeps products such as 1e-3 * 3000 from rounding down to 2.
    allowed = math.floor(far * len(impostor) * (1 + 1e-9))
    if allowed < 1:
      tars[key] = thresholds[key] = None
      continue
    threshold = impostor[allowed] if allowed < len(impostor) else np.inf
    tars[key] = float(np.mean(genuine < threshold))
    thresholds[key] = float(threshold) if np.isfinite(threshold) else None
  return tars, thresholds


def downsample_roc(fpr: np.ndarray, tpr: np.ndarray,
                    max_points: int = MAX_ROC_POINTS) -> tuple[np.ndarray, np.ndarray]:
  """At most `max_points` points of a ROC curve, kept in order.

  Half of the budget is spaced evenly along the curve, the other half geometrically in FPR (taking
  the highest TPR at each FPR), so that a log-FPR plot keeps its low-FAR detail.
  """
  num = len(fpr)
  if num <= max_points:
    return fpr, tpr
  half = (max_points - 2) // 2
  even = np.linspace(0, num - 1, half).round().astype(np.int64)
  positive = fpr[fpr > 0]
  log_grid = np.geomspace(positive.min(), 1.0, max_points - 2 - half)
  # Last point with fpr <= grid value: the top of the vertical step at that FPR.
  geometric = np.searchsorted(fpr, log_grid, side='right') - 1
  keep = np.unique(np.concatenate([[0, num - 1], even, geometric]))
  return fpr[keep], tpr[keep]


def _to_float(x) -> float | None:
  """Python float, or None for NaN / inf so that the result stays strict JSON."""
  x = float(x)
  return x if math.isfinite(x) else None


def evaluate_pairs(embeddings: np.ndarray,
                   issame: np.ndarray,
                   *,
                   num_folds: int = 10,
                   far_target: float = 1e-3) -> dict[str, Any]:
  """Verification metrics of pair embeddings under the insightface protocol.

  Accuracy: fold f (contiguous, no shuffle) is scored at the threshold among
  `np.arange(0, 4, 0.01)` that maximises accuracy on the other folds (the first one on ties, like
  `np.argmax`); "same" is predicted when `dist < threshold`.

  VAL@FAR, our reading of insightface `calculate_val`: per fold, compute the FAR on the training
  folds at every threshold of `np.arange(0, 4, 0.001)` (a non-decreasing step function of the
  threshold). If its maximum reaches `far_target`, the fold's threshold is where that curve crosses
  the target, interpolated like the reference's `interp1d(far, thresholds, kind='slinear')` with the
  scipy versions that accepted repeated FAR values (see `_legacy_slinear_threshold`: between the
  LAST threshold of the FAR step below the target and the FIRST threshold of the step above it);
  otherwise the threshold is 0 (so VAL and FAR are 0). VAL (= TAR) and FAR are then measured on the
  test fold at that threshold. A test fold without genuine (impostor) pairs has an undefined VAL
  (FAR), where the reference would divide by zero; it then propagates as None into the means.

  Pooled statistics ignore folds: the ROC over all pairs, its AUC (Mann-Whitney, ties count 1/2)
  and TAR at the FARs of `TAR_FARS` (None where there are too few impostors; see `tar_at_far`).

  Args:
    embeddings: `[2P, d]` L2-normalised embeddings, pair i being rows 2i and 2i+1.
    issame: bool `[P]`, True for genuine (same identity) pairs.
    num_folds: number of folds (at least 2); must divide P.
    far_target: target FAR of VAL, in (0, 1).

  Returns:
    A JSON-serialisable dict (Python floats, ints, lists, None for undefined values):
      'protocol': description of the protocol;
      'num_pairs', 'num_genuine', 'num_impostor', 'num_folds';
      'accuracy', 'accuracy_std' (population std over folds), 'threshold' (mean chosen
        threshold), 'fold_accuracy', 'fold_threshold' (per fold);
      'val_at_far', 'val_at_far_std', 'far' (mean test FAR), 'far_target', 'val_threshold' (mean),
        'fold_val', 'fold_far', 'fold_val_threshold';
      'auc'; 'tar_at_far' and 'tar_at_far_threshold' ({str(far): float | None});
      'min_resolvable_far' (1 / num_impostor);
      'roc_fpr', 'roc_tpr': the pooled ROC, downsampled to at most 1000 points.

  Raises:
    ValueError: if the embeddings are not 2-D, their number is odd, `issame` does not have one
      entry per pair, P is not divisible by `num_folds`, embeddings contain NaN or inf, all pairs
      have the same label, or `num_folds` / `far_target` are out of range.
  """
  embeddings = np.asarray(embeddings)
  issame = np.asarray(issame)
  if embeddings.ndim != 2:
    raise ValueError(f'embeddings must be [2P, d], got shape {embeddings.shape}')
  if embeddings.shape[0] % 2:
    raise ValueError(f'odd number of embeddings ({embeddings.shape[0]}); pairs need 2P rows')
  num_pairs = embeddings.shape[0] // 2
  if issame.ndim != 1 or issame.shape[0] != num_pairs:
    raise ValueError(f'issame length mismatch: {num_pairs} pairs ({embeddings.shape[0]} '
                     f'embeddings) but issame has shape {issame.shape}')
  if num_folds < 2:
    raise ValueError(f'num_folds must be at least 2, got {num_folds}')
  if num_pairs == 0 or num_pairs % num_folds:
    raise ValueError(f'number of pairs ({num_pairs}) is not divisible by num_folds ({num_folds})')
  if not 0 < far_target < 1:
    raise ValueError(f'far_target must be in (0, 1), got {far_target}')
  bad_rows = np.flatnonzero(~np.all(np.isfinite(embeddings), axis=1))
  if bad_rows.size:
    raise ValueError(f'NaN or inf embeddings in {bad_rows.size} rows (first: {bad_rows[:5]})')
  issame = issame.astype(bool)
  num_genuine = int(issame.sum())
  num_impostor = num_pairs - num_genuine
  if num_genuine == 0 or num_impostor == 0:
    raise ValueError(f'need both genuine and impostor pairs, got {num_genuine} genuine and '
                     f'{num_impostor} impostor')

  dist = pair_distances(embeddings)
  fold_size = num_pairs // num_folds
  fold = np.arange(num_pairs) // fold_size  # KFold(shuffle=False) with equal folds.

  # --- Accuracy at the best training threshold. ---
  gen_below, imp_below = _counts_below(dist, issame, fold, num_folds, ACCURACY_THRESHOLDS)
  gen_per_fold = np.bincount(fold[issame], minlength=num_folds)
  imp_per_fold = fold_size - gen_per_fold
  # Correct predictions at every threshold: genuine below it plus impostors not below it.
  correct_test = gen_below + (imp_per_fold[:, None] - imp_below)
  correct_train = correct_test.sum(axis=0, keepdims=True) - correct_test
  # Integer counts over a fixed training size rank thresholds exactly like the reference's float
  # accuracies, so argmax picks the same (first) maximiser.
  best = np.argmax(correct_train, axis=1)
  fold_accuracy = correct_test[np.arange(num_folds), best] / fold_size
  fold_threshold = ACCURACY_THRESHOLDS[best]

  # --- VAL at far_target. ---
  _, imp_below_val = _counts_below(dist, issame, fold, num_folds, VAL_THRESHOLDS)
  imp_train = num_impostor - imp_per_fold
  with np.errstate(divide='ignore', invalid='ignore'):
    far_train = (imp_below_val.sum(axis=0, keepdims=True) - imp_below_val) / imp_train[:, None]
  fold_val = np.zeros(num_folds)
  fold_far = np.zeros(num_folds)
  fold_val_threshold = np.zeros(num_folds)
  for f in range(num_folds):  # Ten folds; the threshold axis stays vectorised.
    if np.max(far_train[f]) >= far_target:  # False for NaN: no impostor in the training folds.
      fold_val_threshold[f] = _legacy_slinear_threshold(far_train[f], VAL_THRESHOLDS, far_target)
    test = fold == f
    accepted = dist[test] < fold_val_threshold[f]
    same = issame[test]
    fold_val[f] = np.sum(accepted & same) / gen_per_fold[f] if gen_per_fold[f] else np.nan
    fold_far[f] = np.sum(accepted & ~same) / imp_per_fold[f] if imp_per_fold[f] else np.nan

  # --- Pooled statistics. ---
  fpr, tpr, _ = roc_curve(dist, issame)
  roc_fpr, roc_tpr = downsample_roc(fpr, tpr)
  tars, tar_thresholds = tar_at_far(dist, issame, TAR_FARS)

  return {
      'protocol': PROTOCOL.format(folds=num_folds, flip='flip-sum'),
      'num_pairs': num_pairs,
      'num_genuine': num_genuine,
      'num_impostor': num_impostor,
      'num_folds': num_folds,
      'accuracy': _to_float(np.mean(fold_accuracy)),
      'accuracy_std': _to_float(np.std(fold_accuracy)),
      'threshold': _to_float(np.mean(fold_threshold)),
      'fold_accuracy': [_to_float(a) for a in fold_accuracy],
      'fold_threshold': [_to_float(t) for t in fold_threshold],
      'val_at_far': _to_float(np.mean(fold_val)),
      'val_at_far_std': _to_float(np.std(fold_val)),
      'far': _to_float(np.mean(fold_far)),
      'far_target': float(far_target),
      'val_threshold': _to_float(np.mean(fold_val_threshold)),
      'fold_val': [_to_float(v) for v in fold_val],
      'fold_far': [_to_float(v) for v in fold_far],
      'fold_val_threshold': [_to_float(t) for t in fold_val_threshold],
      'auc': roc_auc(dist, issame),
      'tar_at_far': tars,
      'tar_at_far_threshold': tar_thresholds,
      'min_resolvable_far': 1.0 / num_impostor,
      'roc_fpr': roc_fpr.tolist(),
      'roc_tpr': roc_tpr.tolist(),
  }


def verify(embed_fn: EmbedFn,
           pair_set_images: np.ndarray,
           issame: np.ndarray,
           *,
           batch_size: int = 256,
           flip: bool = True,
           num_folds: int = 10,
           far_target: float = 1e-3) -> dict[str, Any]:
  """Embeds a pair set and evaluates it: `compute_embeddings` followed by `evaluate_pairs`.

  Args:
    embed_fn: see `compute_embeddings`.
    pair_set_images: uint8 `[2P, H, W, C]`, pair i being images 2i and 2i+1.
    issame: bool `[P]`.
    batch_size: see `compute_embeddings`.
    flip: see `compute_embeddings`; reflected in the 'protocol' string.
    num_folds: see `evaluate_pairs`.
    far_target: see `evaluate_pairs`.

  Returns:
    The dict of `evaluate_pairs`.
  """
  num_images = np.shape(pair_set_images)[0]
  # Checked before embedding so that a malformed pair set fails without spending device time.
  if num_images != 2 * len(issame):
    raise ValueError(f'issame length mismatch: {num_images} images but {len(issame)} labels '
                     f'(expected {num_images / 2:g})')
  embeddings = compute_embeddings(embed_fn, pair_set_images, batch_size=batch_size, flip=flip)
  result = evaluate_pairs(embeddings, issame, num_folds=num_folds, far_target=far_target)
  result['protocol'] = PROTOCOL.format(folds=num_folds, flip='flip-sum' if flip else 'no flip')
  return result
