"""The ISO/IEC 30107-3 error rates of a PAD decision, per attack species, and FLIP's TPR@FPR.

Conventions as in `metrics` (its module docstring): a score is the probability of live (bona
fide), label 1 = live, 0 = attack, and a presentation is classified bona fide when
`score >= threshold`. Every function takes one score per unit (frame or video; `video_species`
gives a video's species). The threshold is the caller's (`metrics.choose_threshold`).

The definitions (docs/pad.md, "Metrics"):

- APCER of one presentation attack instrument species (PAIS), ISO/IEC 30107-3: the proportion
  of that species' attack presentations classified bona fide. `apcer_per_species` gives it for
  every species the set holds, and `iso_metrics` the worst (the largest over the species), the
  figure the standard reports for a set of species.
- The pooled APCER as FLIP computes it (koushiksrivats/FLIP, `utils/statistic.py`:
  `eval_state` counts with `predict = probs >= thr`, then `calculate` has
  APCER = FP / (FP + TN)): every attack presentation in one proportion, whatever its species.
  FLIP's `calculate` fixes thr = 0.5, and its `utils/evaluate.py` imports it without calling
  it (the numbers FLIP prints are HTER, AUC and TPR@FPR); here the threshold is the caller's.
  This equals `metrics.error_rates`' FAR at the same threshold, bit for bit.
- BPCER (ISO/IEC 30107-3; FLIP's `calculate` calls it NPCER, FN / (FN + TP)): the proportion of
  bona fide presentations classified as attacks, `metrics.error_rates`' FRR.
- ACER = (APCER + BPCER) / 2, the average OULU-NPU's protocols report (Boulkenafet et al., FG
  2017), whose APCER is the WORST species' (print or replay there). So `iso_metrics`' 'acer' uses
  the worst species' APCER; with the pooled APCER the same average is FLIP's `calculate` ACER,
  which is the HTER at that threshold ('acer_pooled').
- TPR@FPR = 1 % as FLIP reports it (`utils/evaluate.py`, `eval`): on
  `sklearn.metrics.roc_curve(label_list, prob_list)` with its defaults (intermediate collinear
  points dropped), the TPR of the LAST ROC point with `fpr <= 1 / 100`: no interpolation between
  points. The score is `softmax(cls_out)[:, 1]` averaged over a video's frames, and label 1 is
  live (`utils/dataset.py`, `FASDataset`: the `_fake_` lists labelled 0, the `_real_` lists 1;
  `utils/utils.py`, `sample_frames`), so live is the positive class. `metrics.sklearn_roc` is
  that ROC; `tpr_at_fpr` takes the point.

Species codes are `PadSet.attack`'s (data/synthetic/pad_benchmark.py): `LIVE_SPECIES` (-1) on a
live sample, an index into the caller's species names on an attack of known species, and any
other negative code (data/sources/pad_lists.py writes -2) on an attack whose species the data
does not say. Where some attacks' species is unknown, the per-species APCERs cover the known
ones, and the worst species' APCER and the ACER are None: an unlabelled attack may belong to a
species that does worse. The pooled APCER, BPCER and TPR@FPR never need species.
"""

from typing import Any, Optional, Sequence

import numpy as np
import numpy.typing as npt

from fedjax_face.eval.pad import metrics

LIVE_SPECIES = -1   # `PadSet.attack` of a live frame (pad_benchmark.LIVE)
FLIP_FPR = 1 / 100  # FLIP's `tpr[fpr <= 1 / 100]`


def _checked_species(species: np.ndarray, labels: np.ndarray, names: Sequence[str],
                     what: str) -> np.ndarray:
  """int64 species codes that agree with the labels and index `names` (module docstring)."""
  if species.dtype == np.bool_ or not np.issubdtype(species.dtype, np.integer):
    raise ValueError(f'{what}species must be integer codes (-1 live, an index into the species '
                     f'names, another negative code for an unknown species), got dtype '
                     f'{species.dtype}')
  species = species.astype(np.int64)
  live = labels == metrics.LIVE
  bad = np.flatnonzero(live & (species != LIVE_SPECIES))
  if bad.size:
    raise ValueError(f'{what}sample {bad[0]} is live (label 1) but its species is '
                     f'{species[bad[0]]}; expected {LIVE_SPECIES} on every live sample (samples '
                     f'{metrics._quoted(bad)})')
  bad = np.flatnonzero(~live & (species == LIVE_SPECIES))
  if bad.size:
    raise ValueError(f'{what}sample {bad[0]} is an attack (label 0) but its species is '
                     f'{LIVE_SPECIES} (live); expected a species index or a negative unknown code '
                     f'other than {LIVE_SPECIES} (samples {metrics._quoted(bad)})')
  bad = np.flatnonzero(species >= len(names))
  if bad.size:
    raise ValueError(f'{what}species {species[bad[0]]} at sample {bad[0]} is not an index into '
                     f'the {len(names)} species names ({metrics._quoted(list(names))})')
  return species


def _checked(scores: npt.ArrayLike, labels: npt.ArrayLike, species: npt.ArrayLike,
             names: Sequence[str], what: str = '') -> tuple[np.ndarray, ...]:
  if len(set(names)) != len(names):
    raise ValueError(f'species names must be distinct, got {metrics._quoted(list(names))}')
  scores, labels, species = metrics._one_dimensional(
      **{f'{what}scores': scores, f'{what}labels': labels, f'{what}species': species})
  scores, labels = metrics._checked(scores, labels, what)
  return scores, labels, _checked_species(species, labels, names, what)


def _accepted_share(scores: np.ndarray, threshold: float) -> float:
  # Classified bona fide: score >= threshold (FLIP's `eval_state`, `metrics.error_rates`).
  return float(np.mean(scores >= threshold))


def _rejected_share(scores: np.ndarray, threshold: float) -> float:
  # Counted, not 1 - `_accepted_share` (which rounds twice), so it is `metrics.error_rates`' FRR.
  return float(np.mean(scores < threshold))


def _species_apcers(scores, labels, species, names, threshold) -> dict[str, float]:
  attack = labels == metrics.SPOOF
  return {names[code]: _accepted_share(scores[attack & (species == code)], threshold)
          for code in np.unique(species[attack]) if code >= 0}


def apcer_per_species(scores: npt.ArrayLike, labels: npt.ArrayLike, species: npt.ArrayLike,
                      names: Sequence[str], threshold: float) -> dict[str, float]:
  """ISO/IEC 30107-3's APCER of every species the set holds, in the order of `names`.

  APCER_PAIS = (attacks of species PAIS with score >= threshold) / (attacks of species PAIS).
  A species absent from the set has no entry; attacks of unknown species are in none.

  Raises:
    ValueError: as `metrics.pad_metrics` on the scores and labels; on species that are not
      integer codes, that disagree with a label (live without -1, an attack with -1), or that
      index past `names`; on repeated names; on a threshold that is not a finite real number.
  """
  scores, labels, species = _checked(scores, labels, species, names)
  return _species_apcers(scores, labels, species, names, metrics._checked_threshold(threshold))


def species_apcer(scores: npt.ArrayLike, labels: npt.ArrayLike, species: npt.ArrayLike,
                  names: Sequence[str], threshold: float, name: str) -> float:
  """APCER of the one species `name` (see `apcer_per_species`).

  Raises:
    ValueError: as `apcer_per_species`; on a name not in `names`, or a species with no attack
      sample in the set (its APCER would divide by zero).
  """
  scores, labels, species = _checked(scores, labels, species, names)
  if name not in names:
    raise ValueError(f'species {name!r} is not one of the species names '
                     f'{metrics._quoted(list(names))}')
  apcers = _species_apcers(scores, labels, species, names, metrics._checked_threshold(threshold))
  if name not in apcers:
    raise ValueError(f'species {name!r} has no attack samples in this set (it holds '
                     f'{metrics._quoted(list(apcers)) or "no labelled species"}); its APCER '
                     'would divide by zero')
  return apcers[name]


def apcer_pooled(scores: npt.ArrayLike, labels: npt.ArrayLike, threshold: float) -> float:
  """FLIP's APCER: FP / (FP + TN) over every attack, whatever its species (module docstring).

  Raises:
    ValueError: as `metrics.error_rates`.
  """
  scores, labels = metrics._checked(scores, labels)
  return _accepted_share(scores[labels == metrics.SPOOF], metrics._checked_threshold(threshold))


def bpcer(scores: npt.ArrayLike, labels: npt.ArrayLike, threshold: float) -> float:
  """BPCER: bona fide presentations classified as attacks (score < threshold) / bona fide.

  Raises:
    ValueError: as `metrics.error_rates`.
  """
  scores, labels = metrics._checked(scores, labels)
  return _rejected_share(scores[labels == metrics.LIVE], metrics._checked_threshold(threshold))


def _tpr_at_fpr(scores: np.ndarray, labels: np.ndarray, fpr: float) -> float:
  roc_fpr, roc_tpr, _ = metrics._sklearn_roc(scores, labels)
  # FLIP: `tpr_filtered = tpr[fpr <= 1 / 100]`, then its last entry (0 if none; sklearn's first
  # point is (0, 0), so there always is one). TPR rises along the ROC, so the last is the largest.
  return float(roc_tpr[roc_fpr <= fpr][-1])


def tpr_at_fpr(scores: npt.ArrayLike, labels: npt.ArrayLike, fpr: float = FLIP_FPR) -> float:
  """FLIP's TPR@FPR: the TPR of the last point of `metrics.sklearn_roc` with FPR <= `fpr`.

  Live is the positive class. The point is one sklearn keeps: where a run of equal diagonal
  steps (live and attack scores tied) crosses `fpr`, its inner points are dropped, and the
  answer is the TPR at the run's last kept point at or below `fpr`, not a value interpolated on
  the segment. FLIP applies it to per-video scores (`metrics.video_scores`).

  Raises:
    ValueError: as `metrics.roc`, or an `fpr` outside [0, 1].
  """
  if isinstance(fpr, (bool, np.bool_)) or not isinstance(fpr, (int, float, np.number)) or not (
      0.0 <= fpr <= 1.0):
    raise ValueError(f'fpr must be a real number in [0, 1], got {fpr!r}')
  return _tpr_at_fpr(*metrics._checked(scores, labels), float(fpr))


def iso_metrics(scores: npt.ArrayLike, labels: npt.ArrayLike, species: npt.ArrayLike,
                names: Sequence[str], threshold: float) -> dict[str, Any]:
  """Every error rate of this module at one threshold, JSON-able.

  Returns:
    'apcer_species' ({name: APCER} of the species the set holds, `apcer_per_species`),
    'apcer_worst' and 'worst_species' (the largest of them and its first species in `names`
    order; None where some attack's species is unknown or none is known), 'apcer_pooled'
    (FLIP's), 'bpcer', 'acer' ((apcer_worst + bpcer) / 2, OULU-NPU's; None with apcer_worst),
    'acer_pooled' ((apcer_pooled + bpcer) / 2, FLIP's `calculate`), 'tpr_at_fpr_1pct'
    (`tpr_at_fpr`, which does not depend on the threshold), 'attacks_by_species' ({name:
    count}), 'attacks_unknown_species' (count).

  Raises:
    ValueError: as `apcer_per_species`.
  """
  scores, labels, species = _checked(scores, labels, species, names)
  threshold = metrics._checked_threshold(threshold)
  attack = labels == metrics.SPOOF
  per_species = _species_apcers(scores, labels, species, names, threshold)
  unknown = int(np.sum(attack & (species < 0)))
  worst: Optional[str] = None
  if per_species and not unknown:
    worst = max(per_species, key=per_species.get)   # the first maximum in `names` order
  pooled = _accepted_share(scores[attack], threshold)
  bona_fide_error = _rejected_share(scores[~attack], threshold)
  return {
      'apcer_species': per_species,
      'apcer_worst': None if worst is None else per_species[worst],
      'worst_species': worst,
      'apcer_pooled': pooled,
      'bpcer': bona_fide_error,
      'acer': None if worst is None else (per_species[worst] + bona_fide_error) / 2,
      'acer_pooled': (pooled + bona_fide_error) / 2,
      'tpr_at_fpr_1pct': _tpr_at_fpr(scores, labels, FLIP_FPR),
      'attacks_by_species': {names[code]: int(np.sum(attack & (species == code)))
                             for code in np.unique(species[attack]) if code >= 0},
      'attacks_unknown_species': unknown,
  }


def video_species(species: npt.ArrayLike, video_ids: npt.ArrayLike) -> np.ndarray:
  """The species of each video, in `np.unique(video_ids)` order (`metrics.video_scores`' rows).

  Raises:
    ValueError: on arrays of different lengths, or a video whose frames carry different species
      (naming it).
  """
  species, video_ids = metrics._one_dimensional(species=species, video_ids=video_ids)
  ids, first, index = np.unique(video_ids, return_index=True, return_inverse=True)
  per_video = species[first]
  mixed = np.flatnonzero(species != per_video[index])
  if mixed.size:
    video = ids[index[mixed[0]]]
    raise ValueError(f'video {metrics._quoted([video])} has frames of species '
                     f'{metrics._quoted(np.unique(species[index == index[mixed[0]]]))}; '
                     'expected one species per video')
  return per_video
