"""Per-image nuisance of the embedded face benchmark: every image renders one identity under
draws of pose (yaw/pitch/roll), alignment jitter, illumination, expression, age drift, appearance
changes (hair, facial hair, glasses), occlusion, blur, sensor noise, background and clothes, at
the strengths of a named profile (`PROFILES`: the training set's, and each side of each pair
set's)."""

from __future__ import annotations

import dataclasses

import numpy as np

PROFILES = ('train', 'lfw', 'cfp_frontal', 'cfp_profile', 'agedb', 'cplfw_pose')

# Occluder kinds stored in nuisance['occluder'].
OCC_NONE, OCC_RECT, OCC_SUNGLASSES, OCC_HAND, OCC_MASK = 0, 1, 2, 3, 4


@dataclasses.dataclass(frozen=True)
class _Profile:
  """Nuisance strengths of one sampling profile at difficulty 1 (see sample_nuisance)."""
  yaw_sd: float  # rad, near-frontal images
  profile_frac: float  # share of profile-ish (large yaw) images
  pitch_sd: float = 0.1  # rad
  roll_sd: float = 0.06  # rad
  shift_sd: float = 0.03  # alignment jitter, image half-widths
  scale_sd: float = 0.04  # log scale
  light: float = 1.0  # illumination strength multiplier
  expression: float = 1.0
  age_sd: float = 5.0  # years
  occlusion: float = 0.1  # probability of an occluder
  blur_max: float = 0.6  # max gaussian sigma, pixels of a 32x32 image
  noise_max: float = 0.035  # max sensor noise std
  grey_frac: float = 0.03  # share of greyscale / faded images
  restyle: float = 1.2  # hair / facial-hair change multiplier


_PROFILES = {
    # Broad "in the wild" variation, a few profile views (as in MS1M-like training data).
    'train': _Profile(yaw_sd=0.3, profile_frac=0.05, pitch_sd=0.12, roll_sd=0.08,
                      shift_sd=0.04, scale_sd=0.05, age_sd=7.0, occlusion=0.15,
                      blur_max=0.7, noise_max=0.04, grey_frac=0.05),
    'lfw': _Profile(yaw_sd=0.25, profile_frac=0.0),
    'cfp_frontal': _Profile(yaw_sd=0.07, profile_frac=0.0, pitch_sd=0.06, roll_sd=0.04,
                            shift_sd=0.025, scale_sd=0.03, expression=0.7,
                            age_sd=3.0, occlusion=0.05, blur_max=0.5, noise_max=0.03,
                            grey_frac=0.0),
    'cfp_profile': _Profile(yaw_sd=0.0, profile_frac=1.0, pitch_sd=0.06, roll_sd=0.04,
                            shift_sd=0.025, scale_sd=0.03, expression=0.7,
                            age_sd=3.0, occlusion=0.05, blur_max=0.5, noise_max=0.03,
                            grey_frac=0.0),
    # Old photos: more blur / noise / greyscale, and hairstyles change over the years.
    'agedb': _Profile(yaw_sd=0.2, profile_frac=0.0, blur_max=0.9, noise_max=0.05,
                      grey_frac=0.3, restyle=1.5),
    # In the wild like 'lfw', every view turned away (|yaw| 0.7..1.35 rad): cplfw's other side.
    'cplfw_pose': _Profile(yaw_sd=0.25, profile_frac=1.0),
}
assert tuple(_PROFILES) == PROFILES


def sample_nuisance(rng: np.random.Generator, n: int, profile: str,
                    difficulty: float) -> dict[str, np.ndarray]:
  """Draws per-image nuisance for `n` images.

  Args:
    rng: numpy random generator (consumed).
    n: number of images.
    profile: 'train' (broad variation incl. a few profile views), 'lfw' (in the wild, no
      profiles), 'cfp_frontal' (near frontal, controlled), 'cfp_profile' (|yaw| 1.2..1.5 rad,
      controlled), 'agedb' (old photos; age offsets are +-15 years around the identity's base age;
      `pairs` sets paired ages explicitly), 'cplfw_pose' (as 'lfw', every view at |yaw|
      0.7..1.35 rad).
    difficulty: multiplies all incidental nuisance strengths (1.0 = default calibration, 0 =
      canonical frontal, evenly lit images). The protocol-defining quantities (the yaw of
      'cfp_profile' and 'cplfw_pose', the agedb age offsets) are not scaled.

  Returns:
    Dict of arrays with leading dimension `n`: float32 except 'occluder' (int32) and
    'noise_seed' (uint32).

  Raises:
    ValueError: unknown profile or negative difficulty.
  """
  if profile not in _PROFILES:
    raise ValueError(f'profile must be one of {PROFILES}, got {profile!r}')
  if n < 0:
    raise ValueError(f'n must be >= 0, got {n}')
  if not (np.isfinite(difficulty) and difficulty >= 0):
    raise ValueError(f'difficulty must be a finite number >= 0, got {difficulty}')
  pr = _PROFILES[profile]
  d = float(difficulty)
  d1 = min(d, 1.0)
  q = {}
  # Pose. Profile-ish views: a share of 'train', all of 'cfp_profile'.
  sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
  if profile == 'cfp_profile':
    big_yaw = sign * rng.uniform(1.2, 1.5, n)
    is_profile = np.ones(n, bool)
  elif profile == 'cplfw_pose':
    big_yaw = sign * rng.uniform(0.7, 1.35, n)
    is_profile = np.ones(n, bool)
  else:
    big_yaw = sign * rng.uniform(0.7, 1.35, n) * d1
    is_profile = rng.random(n) < min(1.0, pr.profile_frac * d)
  small_yaw = rng.normal(0.0, pr.yaw_sd * d, n)
  q['yaw'] = np.clip(np.where(is_profile, big_yaw, small_yaw), -1.5, 1.5)
  q['pitch'] = np.clip(rng.normal(0.0, pr.pitch_sd * d, n), -0.5, 0.5)
  q['roll'] = np.clip(rng.normal(0.0, pr.roll_sd * d, n), -0.4, 0.4)
  q['shift_x'] = rng.normal(0.0, pr.shift_sd * d, n)
  q['shift_y'] = rng.normal(0.0, pr.shift_sd * d, n)
  q['scale'] = np.exp(rng.normal(0.0, pr.scale_sd * d, n))
  # Illumination: direction (z towards the camera), diffuse share, exposure, white balance, and
  # an intensity gradient across the frame.
  lt = pr.light * d
  q['light_x'] = rng.normal(0.0, 0.7 * lt, n)
  q['light_y'] = rng.normal(-0.2 * min(lt, 1.0), 0.35 * lt, n)
  q['light_strength'] = np.clip(rng.uniform(0.25, 0.7, n) * lt, 0.0, 0.9)
  q['gain'] = np.exp(rng.normal(0.0, 0.22 * lt, n))
  q['tint'] = np.exp(rng.normal(0.0, 0.1 * lt, (n, 3)))
  q['grad'] = rng.uniform(0.0, 0.3, n) * lt
  q['grad_angle'] = rng.uniform(0.0, 2 * np.pi, n)
  q['saturation'] = np.where(rng.random(n) < min(1.0, pr.grey_frac * d), rng.uniform(0.0, 0.3, n),
                             np.exp(rng.normal(0.0, 0.15 * lt, n)))
  # Expression.
  e = pr.expression * d
  q['smile'] = np.clip(rng.normal(0.1 * min(e, 1.0), 0.5 * e, n), -1.0, 1.2)
  q['mouth_open'] = np.clip(rng.exponential(1.0, n) * 0.35 * e * (rng.random(n) < 0.35), 0, 1)
  blink = rng.random(n) < 0.04 * min(e, 1.0)
  q['eye_open'] = np.where(blink, 0.1, np.clip(rng.normal(1.0, 0.15 * e, n), 0.2, 1.4))
  q['brow_raise'] = np.clip(rng.normal(0.0, 0.5 * e, n), -1.5, 1.5)
  # Age offset in years relative to the identity's base age.
  if profile == 'agedb':
    q['age'] = sign * 15.0 + rng.normal(0.0, 2.0, n)
  else:
    q['age'] = rng.normal(0.0, pr.age_sd * d, n)
  # Appearance changes between photos of one person: haircut, hair shade, facial hair (grown,
  # trimmed, shaved, stubble), glasses taken off.
  h = pr.restyle * d
  q['hair_length_delta'] = rng.normal(0.0, 0.15 * h, n)
  q['hair_volume_delta'] = rng.normal(0.0, 0.03 * h, n)
  q['hairline_delta'] = rng.normal(0.0, 0.04 * h, n)
  q['hair_shade'] = np.exp(rng.normal(0.0, 0.12 * h, n))
  q['beard_growth'] = np.where(rng.random(n) < min(1.0, 0.12 * h), 0.0,
                               np.clip(rng.normal(1.0, 0.25 * h, n), 0.0, 1.3))
  q['stubble'] = np.where(rng.random(n) < min(1.0, 0.1 * h), rng.uniform(0.05, 0.25, n), 0.0)
  q['glasses_on'] = (rng.random(n) >= min(1.0, 0.25 * d)).astype(float)
  # Occlusion.
  occ = np.where(rng.random(n) < min(1.0, pr.occlusion * d), rng.integers(1, 5, n), OCC_NONE)
  q['occluder'] = occ.astype(np.int32)
  q['occ_x'] = rng.uniform(-0.6, 0.6, n)
  q['occ_y'] = rng.uniform(-0.6, 0.6, n)
  q['occ_w'] = rng.uniform(0.15, 0.45, n)
  q['occ_h'] = rng.uniform(0.1, 0.4, n)
  q['occ_color'] = rng.uniform(0.0, 1.0, (n, 3))
  # Camera: gaussian blur sigma (in pixels of a 32x32 image; scaled with resolution) with a few
  # strongly blurred shots, and sensor noise std in [0, 1] intensity units.
  heavy = rng.random(n) < 0.05 * d1
  q['blur'] = np.where(heavy, rng.uniform(1.0, 1.8, n) * d, rng.uniform(0.0, pr.blur_max, n) * d)
  q['noise'] = rng.uniform(0.1, 1.0, n) * pr.noise_max * d
  q['noise_seed'] = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
  # Scene: background gradient between two colours (muted, like most real backgrounds), an
  # optional background blob, clothes.
  grey = rng.uniform(0.1, 0.9, (n, 1))
  bg1 = grey + (rng.uniform(0.0, 1.0, (n, 3)) - grey) * rng.uniform(0.0, 0.8, (n, 1))
  q['bg_color'] = bg1
  q['bg_color2'] = 0.5 * bg1 + 0.5 * rng.uniform(0.0, 1.0, (n, 3))
  q['bg_angle'] = rng.uniform(0.0, 2 * np.pi, n)
  q['blob_r'] = np.where(rng.random(n) < 0.5, rng.uniform(0.15, 0.5, n), 0.0)
  q['blob_x'] = rng.uniform(-1.0, 1.0, n)
  q['blob_y'] = rng.uniform(-1.0, 1.0, n)
  q['blob_color'] = rng.uniform(0.0, 1.0, (n, 3))
  q['clothes_color'] = rng.uniform(0.02, 0.9, (n, 3))
  out = {k: np.asarray(v, np.float32) for k, v in q.items()}
  out['occluder'] = q['occluder']
  out['noise_seed'] = q['noise_seed']
  return out

