"""Open-set 1:N face identification (MegaFace / IJB-B/C 1:N style).

The FedGC paper reports Rank-1 identification against a large distractor set (MegaFace, Table 6)
and TPIR / Rank-1 on IJB-B/C (Table 7). This module computes the same quantities on embeddings:

1. Images are embedded exactly as in the 1:1 protocol (`verification.compute_embeddings`: image and
   mirror embedded, summed, L2-normalised).
2. Gallery images are grouped by identity into one template each: the mean of the identity's
   embeddings, L2-normalised (`templates`). Gallery identities that no probe searches for are the
   distractors.
3. Every probe is scored against every template by cosine similarity (float64).
4. Closed set (CMC, `rank_n`): over the mated probes, the fraction whose true identity is among
   the n most similar templates.
5. Open set (`tpir_at_fpir`): at a threshold t, TPIR is the fraction of mated probes whose top
   template is the true identity with score >= t, and FPIR the fraction of non-mated probes whose
   top score is >= t. TPIR is reported at fixed FPIRs, the threshold being set on the non-mated
   scores (`tpir_at_fpir_from_scores`).

Ties are resolved against the probe: the rank of the true identity is 1 + the number of OTHER
templates scoring at least as high as it (>=). A probe tied with an impostor template for the top
score is therefore not a rank-1 hit. This rule is deterministic, independent of the gallery order,
and gives a degenerate embedding (all scores equal) rank-1 accuracy 0 rather than a lucky
tie-break.
"""

import math
from typing import Any, Sequence

import numpy as np

from fedjax_face.core import arrays
from fedjax_face.eval.recognition import verification

# Closed-set ranks and open-set FPIRs reported by default (IJB-C tables use FPIR 1e-1 and 1e-2).
RANKS = (1, 5, 10)
FPIRS = (1e-1, 1e-2)

PROTOCOL = ('open-set 1:N, {flip}, cosine to L2-normalised mean templates, ties count against '
            'the probe')

# Probes are scored against the gallery in blocks of about this many similarities (float64, so
# ~128 MB), keeping memory bounded for large distractor sets.
_BLOCK_ELEMENTS = 1 << 24


def _check_embeddings(name: str, embeddings) -> np.ndarray:
  """float64 `[N, d]` copy of `embeddings`; raises on a wrong rank, no rows or NaN / inf."""
  embeddings = np.asarray(embeddings)
  if embeddings.ndim != 2:
    raise ValueError(f'{name} must be [N, d], got shape {embeddings.shape}')
  if embeddings.shape[0] == 0:
    raise ValueError(f'{name} is empty')
  bad_rows = np.flatnonzero(~np.all(np.isfinite(embeddings), axis=1))
  if bad_rows.size:
    raise ValueError(f'NaN or inf in {bad_rows.size} rows of {name} (first: {bad_rows[:5]})')
  return embeddings.astype(np.float64)


def _check_labels(name: str, labels, num: int) -> np.ndarray:
  """Integer `[num]` labels; raises on a wrong shape or a non-integer dtype."""
  labels = np.asarray(labels)
  if labels.shape != (num,):
    raise ValueError(f'{name} must have shape ({num},) (one per embedding), got {labels.shape}')
  if not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f'{name} must be integers, got dtype {labels.dtype}')
  return labels


def _check_gallery(gallery_emb, gallery_labels,
                   probe_dim: int) -> tuple[np.ndarray, np.ndarray]:
  """Gallery templates sorted by identity; raises unless there is one template per identity."""
  gallery = _check_embeddings('gallery_emb', gallery_emb)
  labels = _check_labels('gallery_labels', gallery_labels, gallery.shape[0])
  if gallery.shape[1] != probe_dim:
    raise ValueError(f'embedding sizes differ: probes have d={probe_dim}, gallery d='
                     f'{gallery.shape[1]}')
  order = np.argsort(labels, kind='stable')
  labels = labels[order]
  duplicated = np.unique(labels[1:][labels[1:] == labels[:-1]])
  if duplicated.size:
    raise ValueError(f'gallery_labels must be unique (one template per identity); '
                     f'{duplicated.size} identities repeat (first: {duplicated[:5]}). Build '
                     f'templates with templates(embeddings, labels) first')
  return gallery[order], labels


def _check_ranks(ranks: Sequence[int]) -> tuple[int, ...]:
  ranks = tuple(ranks)
  if not ranks:
    raise ValueError('ranks is empty')
  for n in ranks:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
      raise ValueError(f'ranks must be positive integers, got {ranks}')
  return tuple(int(n) for n in ranks)


def _check_fpirs(fpirs: Sequence[float]) -> tuple[float, ...]:
  fpirs = tuple(fpirs)
  if not fpirs:
    raise ValueError('fpirs is empty')
  for f in fpirs:
    if not 0 < f <= 1:
      raise ValueError(f'fpirs must be in (0, 1], got {fpirs}')
  return fpirs


def _gallery_index(probe_labels: np.ndarray, gallery_ids: np.ndarray) -> np.ndarray:
  """Row of each probe's identity in the sorted `gallery_ids`, or -1 when it is not enrolled."""
  pos = np.searchsorted(gallery_ids, probe_labels)
  clipped = np.minimum(pos, gallery_ids.size - 1)
  return np.where(gallery_ids[clipped] == probe_labels, clipped, -1)


def templates(embeddings: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """One template per identity: the mean of its embeddings, then L2-normalised.

  Averaging first and normalising after (rather than the reverse) is the IJB template convention;
  with the unit embeddings of `compute_embeddings` it weights every image equally.

  Args:
    embeddings: float `[N, d]` (normally L2-normalised) image embeddings.
    labels: integer `[N]` identity of each row.

  Returns:
    `(templates, ids)`: float32 `[K, d]` templates (an all-zero mean stays zero) and their
    identities `[K]` (dtype of `labels`), sorted ascending.

  Raises:
    ValueError: on a shape mismatch, an empty input, non-integer labels or NaN / inf embeddings.
  """
  embeddings = _check_embeddings('embeddings', embeddings)
  labels = _check_labels('labels', labels, embeddings.shape[0])
  ids, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
  order = np.argsort(inverse, kind='stable')
  # Rows of one identity are contiguous after the sort; identity k starts at the k-th cumulative
  # count, so one reduceat sums every identity (faster than np.add.at on large galleries).
  starts = np.r_[0, np.cumsum(counts)[:-1]]
  sums = np.add.reduceat(embeddings[order], starts, axis=0)
  return arrays.l2_normalize(sums / counts[:, None]).astype(np.float32), ids


def _search(probes: np.ndarray, probe_index: np.ndarray,
            gallery: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Scores every probe against every template, block by block.

  Args:
    probes: float64 `[P, d]` unit probe embeddings.
    probe_index: int `[P]` gallery row of each probe's identity, -1 for non-mated probes.
    gallery: float64 `[G, d]` unit templates.

  Returns:
    `(true_score, num_ahead, top_score)`, each `[P]`: the score of the probe's own identity (NaN
    for non-mated probes), the number of other templates scoring >= it (0 for non-mated probes;
    the true identity's rank is 1 + num_ahead), and the highest score over all templates.
  """
  num_probes, num_gallery = probes.shape[0], gallery.shape[0]
  true_score = np.full(num_probes, np.nan)
  num_ahead = np.zeros(num_probes, np.int64)
  top_score = np.empty(num_probes)
  block = max(1, _BLOCK_ELEMENTS // num_gallery)
  for start in range(0, num_probes, block):
    rows = slice(start, start + block)
    scores = probes[rows] @ gallery.T
    top_score[rows] = scores.max(axis=1)
    index = probe_index[rows]
    mated = index >= 0
    own = scores[mated, index[mated]]
    true_score[rows][mated] = own
    # The own template always satisfies score >= own; subtract it to count the others.
    num_ahead[rows][mated] = np.sum(scores[mated] >= own[:, None], axis=1) - 1
  return true_score, num_ahead, top_score


def _prepare(probe_emb, probe_labels, gallery_emb, gallery_labels):
  """Validated unit probes, their labels, sorted unit templates and ids, gallery row per probe."""
  probes = _check_embeddings('probe_emb', probe_emb)
  labels = _check_labels('probe_labels', probe_labels, probes.shape[0])
  gallery, gallery_ids = _check_gallery(gallery_emb, gallery_labels, probes.shape[1])
  index = _gallery_index(labels, gallery_ids)
  # All-zero rows stay zero: cosine 0 with everything.
  return (arrays.l2_normalize(probes), labels, arrays.l2_normalize(gallery), gallery_ids, index)


def _check_mated(labels: np.ndarray, index: np.ndarray, is_mated: np.ndarray) -> None:
  """Raises unless exactly the mated probes have their identity in the gallery."""
  missing = is_mated & (index < 0)
  if missing.any():
    raise ValueError(f'{missing.sum()} mated probes have an identity that is not in the gallery '
                     f'(first: {labels[missing][:5]})')
  enrolled = ~is_mated & (index >= 0)
  if enrolled.any():
    raise ValueError(f'{enrolled.sum()} non-mated probes have an identity that is in the gallery '
                     f'(first: {labels[enrolled][:5]})')


def _rank_accuracy(num_ahead: np.ndarray, ranks: Sequence[int]) -> dict[int, float]:
  """CMC: fraction of probes whose true identity's rank (1 + num_ahead) is <= n, per n."""
  return {n: float(np.mean(num_ahead < n)) for n in ranks}


def rank_n(probe_emb: np.ndarray,
           probe_labels: np.ndarray,
           gallery_emb: np.ndarray,
           gallery_labels: np.ndarray,
           ranks: Sequence[int] = RANKS) -> dict[int, float]:
  """Closed-set identification accuracy at each rank (the CMC curve at `ranks`).

  A probe is correct at rank n when fewer than n other templates score at least as high as its
  true identity's template (cosine similarity; ties count against the probe, see the module
  docstring). Ranks beyond the gallery size are 1.0.

  Args:
    probe_emb: float `[P, d]` embeddings of mated probes.
    probe_labels: integer `[P]`; every label must be a gallery identity.
    gallery_emb: float `[G, d]` templates (rows are L2-normalised here).
    gallery_labels: integer `[G]`, unique (see `templates`); includes distractors.
    ranks: positive ranks.

  Returns:
    `{n: accuracy}` for every n in `ranks`.

  Raises:
    ValueError: on shape mismatches, empty inputs, NaN / inf, repeated gallery labels, a probe
      identity missing from the gallery or invalid ranks.
  """
  ranks = _check_ranks(ranks)
  probes, labels, gallery, _, index = _prepare(probe_emb, probe_labels, gallery_emb,
                                               gallery_labels)
  _check_mated(labels, index, np.ones(labels.shape, bool))
  _, num_ahead, _ = _search(probes, index, gallery)
  return _rank_accuracy(num_ahead, ranks)


def tpir_fpir(mated_scores: np.ndarray, mated_hit: np.ndarray, non_mated_scores: np.ndarray,
              thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """TPIR and FPIR at given thresholds (the open-set DET curve).

  Args:
    mated_scores: float `[Pm]` score of each mated probe's true identity.
    mated_hit: bool `[Pm]`, True when that identity is the probe's rank-1 template.
    non_mated_scores: float `[Pn]` top score of each non-mated probe.
    thresholds: float `[T]`.

  Returns:
    `(tpir, fpir)`, float64 `[T]`: the fraction of mated probes with `hit and score >= t`, and of
    non-mated probes with `score >= t`.
  """
  mated_scores = np.asarray(mated_scores, np.float64)
  mated_hit = np.asarray(mated_hit, bool)
  non_mated = np.sort(np.asarray(non_mated_scores, np.float64))
  thresholds = np.asarray(thresholds, np.float64)
  hits = np.sort(mated_scores[mated_hit])
  # #{s >= t} = n - #{s < t} = n - searchsorted(sorted s, t, 'left').
  tpir = (hits.size - np.searchsorted(hits, thresholds, side='left')) / mated_scores.size
  fpir = (non_mated.size - np.searchsorted(non_mated, thresholds, side='left')) / non_mated.size
  return tpir, fpir


def _fpir_threshold(non_mated_sorted_desc: np.ndarray, fpir: float) -> float | None:
  """The threshold of `tpir_at_fpir_from_scores`; None when the FPIR is unresolvable."""
  num = non_mated_sorted_desc.size
  # The tiny relative slack keeps products such as 1e-2 * 300 from rounding down to 2.
  allowed = math.floor(fpir * num * (1 + 1e-9))
  if allowed < 1:
    return None
  if allowed >= num:
    return -math.inf
  return float(np.nextafter(non_mated_sorted_desc[allowed], np.inf))


def tpir_at_fpir_from_scores(
    mated_scores: np.ndarray,
    mated_hit: np.ndarray,
    non_mated_scores: np.ndarray,
    fpirs: Sequence[float] = FPIRS) -> tuple[dict[str, Any], dict[str, Any]]:
  """TPIR at fixed FPIRs, with the threshold set on the non-mated scores.

  Threshold rule (the 1:N analogue of `verification.tar_at_far`): with `Pn` non-mated probes, at
  most `k = floor(fpir * Pn)` of them may raise a false alarm. Sorting the non-mated top scores in
  decreasing order `s_1 >= s_2 >= ...`, the threshold is the smallest float64 strictly above
  `s_{k+1}` (`np.nextafter(s_{k+1}, inf)`), and a probe is accepted when its score is >= the
  threshold, i.e. strictly above `s_{k+1}`. Exactly the k highest non-mated probes pass (fewer
  when `s_{k+1}` ties with higher ones), so the achieved FPIR never exceeds the target. A mated
  probe with a rank-1 hit scoring exactly `s_{k+1}` is not counted. When `k == 0` the target is
  below `1 / Pn` and cannot be resolved: TPIR and threshold are None. When `k == Pn` (FPIR 1)
  everything is accepted: TPIR is the rank-1 rate and the threshold (-inf) is reported as None.

  Args:
    mated_scores: float `[Pm]` score of each mated probe's true identity (Pm >= 1).
    mated_hit: bool `[Pm]`, True when the true identity is the rank-1 template.
    non_mated_scores: float `[Pn]` top score of each non-mated probe (Pn >= 1).
    fpirs: target FPIRs in (0, 1].

  Returns:
    `(tpir, threshold)`: dicts keyed by `str(fpir)` (e.g. '0.1', '0.01') holding a float or None.

  Raises:
    ValueError: on empty or mismatched inputs, NaN scores or invalid FPIRs.
  """
  fpirs = _check_fpirs(fpirs)
  mated_scores = np.asarray(mated_scores, np.float64)
  mated_hit = np.asarray(mated_hit)
  non_mated = np.asarray(non_mated_scores, np.float64)
  if mated_scores.ndim != 1 or mated_scores.size == 0:
    raise ValueError(f'mated_scores must be a non-empty [Pm], got shape {mated_scores.shape}')
  if mated_hit.shape != mated_scores.shape or mated_hit.dtype != np.bool_:
    raise ValueError(f'mated_hit must be bool {mated_scores.shape}, got {mated_hit.dtype} '
                     f'{mated_hit.shape}')
  if non_mated.ndim != 1 or non_mated.size == 0:
    raise ValueError(f'non_mated_scores must be a non-empty [Pn], got shape {non_mated.shape}')
  if np.isnan(mated_scores).any() or np.isnan(non_mated).any():
    raise ValueError('scores contain NaN')
  descending = np.sort(non_mated)[::-1]
  tpirs, thresholds = {}, {}
  for fpir in fpirs:
    key = str(fpir)
    threshold = _fpir_threshold(descending, fpir)
    if threshold is None:
      tpirs[key] = thresholds[key] = None
      continue
    tpir, _ = tpir_fpir(mated_scores, mated_hit, non_mated, [threshold])
    tpirs[key] = float(tpir[0])
    thresholds[key] = threshold if math.isfinite(threshold) else None
  return tpirs, thresholds


def tpir_at_fpir(probe_emb: np.ndarray,
                 probe_labels: np.ndarray,
                 probe_is_mated: np.ndarray,
                 gallery_emb: np.ndarray,
                 gallery_labels: np.ndarray,
                 fpirs: Sequence[float] = FPIRS) -> tuple[dict[str, Any], dict[str, Any]]:
  """Open-set TPIR at fixed FPIRs from probe and template embeddings.

  A mated probe is a hit when its true identity is the rank-1 template (strictly above every other
  template, ties count against it) and its score is >= the threshold; a non-mated probe is a false
  alarm when its top score is >= the threshold. Thresholds follow `tpir_at_fpir_from_scores`.

  Args:
    probe_emb: float `[P, d]`.
    probe_labels: integer `[P]`.
    probe_is_mated: bool `[P]`; mated probes must have a gallery identity, non-mated ones must not.
      At least one of each is needed.
    gallery_emb: float `[G, d]` templates (rows are L2-normalised here).
    gallery_labels: integer `[G]`, unique (see `templates`).
    fpirs: target FPIRs in (0, 1].

  Returns:
    `(tpir, threshold)` as from `tpir_at_fpir_from_scores`.

  Raises:
    ValueError: on shape mismatches, empty sets, NaN / inf, repeated gallery labels, probes whose
      mated flag contradicts the gallery, or invalid FPIRs.
  """
  fpirs = _check_fpirs(fpirs)
  probes, labels, gallery, _, index = _prepare(probe_emb, probe_labels, gallery_emb,
                                               gallery_labels)
  is_mated = _check_is_mated(probe_is_mated, labels.shape)
  _check_mated(labels, index, is_mated)
  true_score, num_ahead, top_score = _search(probes, index, gallery)
  return tpir_at_fpir_from_scores(true_score[is_mated], num_ahead[is_mated] == 0,
                                  top_score[~is_mated], fpirs)


def _check_is_mated(probe_is_mated, shape: tuple[int, ...]) -> np.ndarray:
  is_mated = np.asarray(probe_is_mated)
  if is_mated.shape != shape or is_mated.dtype != np.bool_:
    raise ValueError(f'probe_is_mated must be bool {shape}, got {is_mated.dtype} '
                     f'{is_mated.shape}')
  if not is_mated.any():
    raise ValueError('no mated probes')
  if is_mated.all():
    raise ValueError('no non-mated probes (the open-set protocol needs them to set thresholds)')
  return is_mated


def evaluate_identification(gallery_emb: np.ndarray,
                            gallery_labels: np.ndarray,
                            probe_emb: np.ndarray,
                            probe_labels: np.ndarray,
                            probe_is_mated: np.ndarray,
                            *,
                            ranks: Sequence[int] = RANKS,
                            fpirs: Sequence[float] = FPIRS) -> dict[str, Any]:
  """Every 1:N metric from per-image gallery and probe embeddings.

  Gallery images are first merged into one template per identity (`templates`); then rank-n
  accuracy over the mated probes (`rank_n`) and TPIR at each FPIR (`tpir_at_fpir`) from one pass
  over the similarities.

  Args:
    gallery_emb: float `[G, d]` gallery image embeddings (several rows per identity allowed).
    gallery_labels: integer `[G]`.
    probe_emb: float `[P, d]`.
    probe_labels: integer `[P]`.
    probe_is_mated: bool `[P]`.
    ranks: CMC ranks.
    fpirs: target FPIRs in (0, 1].

  Returns:
    A JSON-serialisable dict:
      'protocol'; 'num_gallery_images', 'num_gallery_identities' (templates), 'num_enrolled'
      (templates some mated probe searches for), 'num_distractors' (the other templates),
      'num_probes', 'num_mated', 'num_non_mated';
      'rank_{n}' for every n in `ranks`;
      'tpir_at_fpir', 'tpir_at_fpir_threshold', 'fpir_at_threshold' (the FPIR actually achieved):
        {str(fpir): float | None};
      'min_resolvable_fpir' (1 / num_non_mated).

  Raises:
    ValueError: as `templates`, `rank_n` and `tpir_at_fpir`.
  """
  ranks = _check_ranks(ranks)
  fpirs = _check_fpirs(fpirs)
  gallery_templates, gallery_ids = templates(gallery_emb, gallery_labels)
  probes, labels, gallery, _, index = _prepare(probe_emb, probe_labels, gallery_templates,
                                               gallery_ids)
  is_mated = _check_is_mated(probe_is_mated, labels.shape)
  _check_mated(labels, index, is_mated)
  true_score, num_ahead, top_score = _search(probes, index, gallery)

  mated_scores, mated_hit = true_score[is_mated], num_ahead[is_mated] == 0
  non_mated_scores = top_score[~is_mated]
  tpirs, thresholds = tpir_at_fpir_from_scores(mated_scores, mated_hit, non_mated_scores, fpirs)
  achieved = {}
  for key, threshold in thresholds.items():
    if tpirs[key] is None:
      achieved[key] = None
    else:  # A None threshold with a TPIR is the accept-all threshold (-inf).
      t = -math.inf if threshold is None else threshold
      achieved[key] = float(tpir_fpir(mated_scores, mated_hit, non_mated_scores, [t])[1][0])

  num_enrolled = int(np.unique(index[is_mated]).size)
  result = {
      'protocol': PROTOCOL.format(flip='flip-sum'),
      'num_gallery_images': int(np.shape(gallery_emb)[0]),
      'num_gallery_identities': int(gallery_ids.size),
      'num_enrolled': num_enrolled,
      'num_distractors': int(gallery_ids.size) - num_enrolled,
      'num_probes': int(labels.size),
      'num_mated': int(is_mated.sum()),
      'num_non_mated': int((~is_mated).sum()),
  }
  for n, accuracy in _rank_accuracy(num_ahead[is_mated], ranks).items():
    result[f'rank_{n}'] = accuracy
  result.update({
      'tpir_at_fpir': tpirs,
      'tpir_at_fpir_threshold': thresholds,
      'fpir_at_threshold': achieved,
      'min_resolvable_fpir': 1.0 / int((~is_mated).sum()),
  })
  return result


def identify(embed_fn: verification.EmbedFn,
             id_set,
             batch_size: int = 256,
             *,
             flip: bool = True,
             ranks: Sequence[int] = RANKS,
             fpirs: Sequence[float] = FPIRS) -> dict[str, Any]:
  """Embeds an identification set and evaluates it: the 1:N counterpart of `verification.verify`.

  Gallery and probe images are embedded with `verification.compute_embeddings` (flip-sum, as in
  the 1:1 protocol), then scored by `evaluate_identification`.

  Args:
    embed_fn: see `verification.compute_embeddings`.
    id_set: an `fedjax_face.data.synthetic.identification_set.IdentificationSet` (anything with its
      `gallery_images`, `gallery_labels`, `probe_images`, `probe_labels`, `probe_is_mated`; a
      `name` is copied into the result when present).
    batch_size: see `verification.compute_embeddings`.
    flip: see `verification.compute_embeddings`; reflected in the 'protocol' string.
    ranks: CMC ranks.
    fpirs: target FPIRs in (0, 1].

  Returns:
    The dict of `evaluate_identification`, plus 'name' when `id_set` has one.

  Raises:
    ValueError: as `evaluate_identification`; label and mated-flag errors are raised before any
      image is embedded.
  """
  gallery_labels = np.asarray(id_set.gallery_labels)
  probe_labels = np.asarray(id_set.probe_labels)
  is_mated = np.asarray(id_set.probe_is_mated)
  ranks = _check_ranks(ranks)
  fpirs = _check_fpirs(fpirs)
  # Checked before embedding so that a malformed set fails without spending device time.
  gallery_images = np.asarray(id_set.gallery_images)
  probe_images = np.asarray(id_set.probe_images)
  _check_labels('gallery_labels', gallery_labels, gallery_images.shape[0])
  _check_labels('probe_labels', probe_labels, probe_images.shape[0])
  if gallery_labels.size == 0:
    raise ValueError('the gallery is empty')
  is_mated = _check_is_mated(is_mated, probe_labels.shape)
  _check_mated(probe_labels, _gallery_index(probe_labels, np.unique(gallery_labels)), is_mated)

  gallery_emb = verification.compute_embeddings(embed_fn, gallery_images, batch_size=batch_size,
                                                flip=flip)
  probe_emb = verification.compute_embeddings(embed_fn, probe_images, batch_size=batch_size,
                                              flip=flip)
  result = evaluate_identification(gallery_emb, gallery_labels, probe_emb, probe_labels, is_mated,
                                   ranks=ranks, fpirs=fpirs)
  result['protocol'] = PROTOCOL.format(flip='flip-sum' if flip else 'no flip')
  name = getattr(id_set, 'name', None)
  if name is not None:
    result = {'name': name, **result}
  return result
