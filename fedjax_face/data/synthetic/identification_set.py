"""Synthetic open-set 1:N identification sets (the MegaFace / IJB-C 1:N analogue).

An identification set is a gallery of enrolled identities plus distractor identities, and two kinds
of probes: *mated* probes (other images of enrolled identities) and *non-mated* probes (images of
identities that are not in the gallery). `fedjax_face.eval.recognition.identification` turns it into rank-N
(CMC) accuracy and TPIR at fixed FPIR.

`make_identification_set` builds one from the parametric faces of `fedjax_face.data.synthetic`:

* Gallery images (enrolled and distractor identities alike) are enrollment-style photos: the
  near-frontal, controlled 'cfp_frontal' nuisance profile. Enrolled and distractor images share one
  distribution so that nothing but identity tells them apart.
* Probes (mated and non-mated alike) are harder, in the spirit of MegaFace's FaceScrub / FG-NET
  probes and IJB-C's in-the-wild media: the 'lfw' profile with the yaw spread and the age drift
  widened (`PROBE_YAW_SD`, `PROBE_AGE_SD`).

Label layout (int32): enrolled identities are `0 .. E-1`, distractors `E .. E+D-1`, non-mated probe
identities `E+D .. E+D+M-1`. Gallery rows are the enrolled images (by identity) then the
distractor images; probe rows are the mated probes (by identity) then the non-mated probes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedjax_face.data.synthetic import benchmark, identities, nuisance as nuisance_lib, render

# Nuisance profile of every gallery image (enrollment photos: near frontal, controlled).
GALLERY_PROFILE = 'cfp_frontal'
# Base nuisance profile of every probe image; yaw and age are then redrawn wider (below).
PROBE_PROFILE = 'lfw'
# Probe yaw standard deviation in radians at difficulty 1 ('lfw' uses 0.25, 'cfp_frontal' 0.07),
# clipped to +-PROBE_MAX_YAW (the range of the generator's profile-ish 'train' views).
PROBE_YAW_SD = 0.5
PROBE_MAX_YAW = 1.35
# Probe age offset standard deviation in years at difficulty 1 ('lfw' uses 5, 'cfp_frontal' 3).
PROBE_AGE_SD = 12.0

# Random streams, seeded as SeedSequence([seed, _STREAM_TAG, k]). make_benchmark seeds its streams
# as SeedSequence([seed, s]) with s in 1..7, which SeedSequence mixes exactly like
# [seed, s, 0]; the third word here is never 0, so for any seed below 2**32 (larger seeds are split
# into several words) no stream of this module coincides with a stream of make_benchmark. One
# stream per group keeps e.g. the enrolled gallery and its mated probes unchanged when the number of
# distractors changes (MegaFace reports rank-1 against a growing distractor set).
_STREAM_TAG = 0x1D5E7
_STREAM_ENROLLED_IDS = 1
_STREAM_ENROLLED_GALLERY = 2
_STREAM_MATED_PROBES = 3
_STREAM_DISTRACTOR_IDS = 4
_STREAM_DISTRACTOR_GALLERY = 5
_STREAM_NON_MATED_IDS = 6
_STREAM_NON_MATED_PROBES = 7


@dataclasses.dataclass(frozen=True)
class IdentificationSet:
  """An open-set 1:N identification set.

  Attributes:
    gallery_images: uint8 `[G, H, W, 3]`, enrolled and distractor images.
    gallery_labels: int `[G]` identity of each gallery image; an identity with several images is
      enrolled as one template (the normalised mean of their embeddings).
    probe_images: uint8 `[P, H, W, 3]`.
    probe_labels: int `[P]` identity of each probe.
    probe_is_mated: bool `[P]`; True when the probe's identity is in the gallery.
    name: a short name for reports.
    identity_params: synthetic identity parameters, row i = label i; None for real data.
    gallery_nuisance: the nuisance draws of the gallery images; None for real data.
    probe_nuisance: the nuisance draws of the probe images; None for real data.
  """
  gallery_images: np.ndarray
  gallery_labels: np.ndarray
  probe_images: np.ndarray
  probe_labels: np.ndarray
  probe_is_mated: np.ndarray
  name: str = 'synthetic_1n'
  identity_params: dict[str, np.ndarray] | None = None
  gallery_nuisance: dict[str, np.ndarray] | None = None
  probe_nuisance: dict[str, np.ndarray] | None = None

  def __post_init__(self):
    for kind in ('gallery', 'probe'):
      images = np.asarray(getattr(self, f'{kind}_images'))
      labels = np.asarray(getattr(self, f'{kind}_labels'))
      if images.ndim != 4:
        raise ValueError(f'{kind}_images must be [N, H, W, C], got shape {images.shape}')
      if labels.shape != images.shape[:1]:
        raise ValueError(f'{kind}_labels must have shape ({images.shape[0]},) to match '
                         f'{kind}_images, got {labels.shape}')
    is_mated = np.asarray(self.probe_is_mated)
    if is_mated.dtype != np.bool_ or is_mated.shape != np.shape(self.probe_labels):
      raise ValueError(f'probe_is_mated must be bool {np.shape(self.probe_labels)}, got '
                       f'{is_mated.dtype} {is_mated.shape}')

  @property
  def num_gallery_identities(self) -> int:
    return int(np.unique(self.gallery_labels).size)

  @property
  def num_enrolled(self) -> int:
    """Gallery identities that some mated probe searches for."""
    mated = np.unique(np.asarray(self.probe_labels)[self.probe_is_mated])
    return int(np.isin(mated, self.gallery_labels).sum())

  @property
  def num_distractors(self) -> int:
    """Gallery identities that no probe searches for."""
    return self.num_gallery_identities - self.num_enrolled

  @property
  def num_mated(self) -> int:
    return int(np.sum(self.probe_is_mated))

  @property
  def num_non_mated(self) -> int:
    return int(np.size(self.probe_is_mated) - np.sum(self.probe_is_mated))


def _stream(seed: int, k: int) -> np.random.Generator:
  return np.random.default_rng(np.random.SeedSequence([seed, _STREAM_TAG, k]))


def probe_nuisance(rng: np.random.Generator, n: int, difficulty: float) -> dict[str, np.ndarray]:
  """Nuisance of `n` probe images: the 'lfw' profile with wider yaw and age drift.

  Like every incidental nuisance of the generator, the widened yaw and age spreads scale with
  `difficulty` (0 gives canonical frontal images at the identity's base age).

  Args:
    rng: numpy random generator (consumed).
    n: number of images.
    difficulty: see `nuisance.sample_nuisance`.

  Returns:
    A nuisance dict as from `nuisance.sample_nuisance`.
  """
  nuisance = nuisance_lib.sample_nuisance(rng, n, PROBE_PROFILE, difficulty)
  yaw = np.clip(rng.normal(0.0, PROBE_YAW_SD * difficulty, n), -PROBE_MAX_YAW, PROBE_MAX_YAW)
  nuisance['yaw'] = yaw.astype(np.float32)
  nuisance['age'] = rng.normal(0.0, PROBE_AGE_SD * difficulty, n).astype(np.float32)
  return nuisance


def _render_group(params: dict[str, np.ndarray], per_identity: int, rng: np.random.Generator,
                  nuisance_fn, image_size: int) -> tuple[np.ndarray, np.ndarray, dict]:
  """`per_identity` images of each identity of `params`, identity-major.

  Returns:
    `(images, local identity index per image, nuisance)`.
  """
  num = params['head_w'].shape[0]
  local = np.repeat(np.arange(num), per_identity)
  nuisance = nuisance_fn(rng, local.shape[0])
  images = render.render_faces({k: v[local] for k, v in params.items()}, nuisance, image_size)
  return images, local, nuisance


def _concat(dicts) -> dict[str, np.ndarray]:
  return {k: np.concatenate([d[k] for d in dicts]) for k in dicts[0]}


def make_identification_set(seed: int,
                            *,
                            image_size: int = 32,
                            num_enrolled: int = 100,
                            num_distractors: int = 1000,
                            num_non_mated: int = 200,
                            gallery_per_identity: int = 1,
                            probes_per_identity: int = 2,
                            difficulty: float = 1.0) -> IdentificationSet:
  """Builds a synthetic open-set identification set.

  Identities are fresh draws from the generator's face prior (`identities.sample_identities`) on
  random streams of their own (see `_STREAM_TAG`), never the training or pair-set identities of
  `make_benchmark`: those come from different streams, so for the same or any other seed the
  identities here are independent draws. As with make_benchmark's held-out identities,
  "disjoint" means distinct parameter vectors drawn independently from the same prior, not a
  minimum distance: an occasional look-alike of a training identity is possible, as in real data.

  Args:
    seed: non-negative integer; the same arguments always give identical arrays. The enrolled
      gallery and mated probes depend only on (seed, image_size, num_enrolled,
      gallery_per_identity, probes_per_identity, difficulty), not on the distractor or non-mated
      counts.
    image_size: square image size in pixels (>= 16).
    num_enrolled: enrolled identities (>= 1); each has gallery and mated-probe images.
    num_distractors: distractor identities in the gallery (>= 0), never probed.
    num_non_mated: non-mated probes (>= 1), one image each of a distinct identity that is in
      neither the gallery nor the training set.
    gallery_per_identity: gallery images per enrolled or distractor identity (>= 1).
    probes_per_identity: mated probes per enrolled identity (>= 1).
    difficulty: scales all incidental nuisance, as in `nuisance.sample_nuisance`.

  Returns:
    The IdentificationSet (labels int32, layout in the module docstring).

  Raises:
    ValueError: an argument is out of range; the message names it.
  """
  seed = benchmark.check_int('seed', seed, 0)
  image_size = benchmark.check_int('image_size', image_size, 16)
  num_enrolled = benchmark.check_int('num_enrolled', num_enrolled, 1)
  num_distractors = benchmark.check_int('num_distractors', num_distractors, 0)
  num_non_mated = benchmark.check_int('num_non_mated', num_non_mated, 1)
  gallery_per_identity = benchmark.check_int('gallery_per_identity', gallery_per_identity, 1)
  probes_per_identity = benchmark.check_int('probes_per_identity', probes_per_identity, 1)
  if not (np.isfinite(difficulty) and difficulty >= 0):
    raise ValueError(f'difficulty must be a finite number >= 0, got {difficulty}')

  def gallery_fn(rng, n):
    return nuisance_lib.sample_nuisance(rng, n, GALLERY_PROFILE, difficulty)

  def probe_fn(rng, n):
    return probe_nuisance(rng, n, difficulty)

  enrolled = identities.sample_identities(_stream(seed, _STREAM_ENROLLED_IDS), num_enrolled)
  distractors = identities.sample_identities(_stream(seed, _STREAM_DISTRACTOR_IDS),
                                             num_distractors)
  non_mated = identities.sample_identities(_stream(seed, _STREAM_NON_MATED_IDS), num_non_mated)

  enrolled_images, enrolled_local, enrolled_nz = _render_group(
      enrolled, gallery_per_identity, _stream(seed, _STREAM_ENROLLED_GALLERY), gallery_fn,
      image_size)
  distractor_images, distractor_local, distractor_nz = _render_group(
      distractors, gallery_per_identity, _stream(seed, _STREAM_DISTRACTOR_GALLERY), gallery_fn,
      image_size)
  mated_images, mated_local, mated_nz = _render_group(
      enrolled, probes_per_identity, _stream(seed, _STREAM_MATED_PROBES), probe_fn, image_size)
  non_mated_images, non_mated_local, non_mated_nz = _render_group(
      non_mated, 1, _stream(seed, _STREAM_NON_MATED_PROBES), probe_fn, image_size)

  # Global labels: enrolled, then distractors, then non-mated identities.
  distractor_offset = num_enrolled
  non_mated_offset = num_enrolled + num_distractors
  gallery_labels = np.concatenate([enrolled_local, distractor_local + distractor_offset])
  probe_labels = np.concatenate([mated_local, non_mated_local + non_mated_offset])
  probe_is_mated = np.r_[np.ones(mated_local.size, bool), np.zeros(non_mated_local.size, bool)]
  return IdentificationSet(
      gallery_images=np.concatenate([enrolled_images, distractor_images]),
      gallery_labels=gallery_labels.astype(np.int32),
      probe_images=np.concatenate([mated_images, non_mated_images]),
      probe_labels=probe_labels.astype(np.int32),
      probe_is_mated=probe_is_mated,
      identity_params=_concat([enrolled, distractors, non_mated]),
      gallery_nuisance=_concat([enrolled_nz, distractor_nz]),
      probe_nuisance=_concat([mated_nz, non_mated_nz]))
