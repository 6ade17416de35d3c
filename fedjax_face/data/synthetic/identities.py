"""Identities of the embedded face benchmark: parametric faces drawn from a prior, look-alike
families around shared centres, and partners matched on a key.

Every identity is a parametric face (head shape, eyes, brows, nose, mouth, ears, skin tone, hair,
facial hair, glasses, a mole ...) drawn from a prior (`sample_identities`); `render` draws it.

Look-alike identities (`sample_families`): families of g consecutive identities around a shared
centre drawn from the prior. Each member's continuous traits sit `spread` of the way from the
centre towards an independent draw, and each discrete trait (iris colour, glasses, mole, facial
hair) is that draw's with probability `spread`, else the centre's. Spread 1 gives independent
identities, 0 clones.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

# Traits a look-alike family member takes whole (from the centre or its own draw), not blended.
DISCRETE_TRAITS = ('iris_color', 'glasses', 'glasses_color', 'mole', 'beard', 'moustache')
# Default spread of a look-alike family around its centre (docs/fedgc.md, "The embedded benchmark
# and look-alike identities").
LOOKALIKE_SPREAD = 0.35

# Skin tones from light to dark; identities interpolate along this ramp so that neighbouring
# tones (and hence look-alike identities) are common, as in real populations.
_SKIN_RAMP = np.array([
    [0.97, 0.83, 0.72],
    [0.90, 0.72, 0.60],
    [0.80, 0.60, 0.46],
    [0.66, 0.46, 0.33],
    [0.50, 0.34, 0.24],
    [0.34, 0.23, 0.17],
])
_HAIR_PALETTE = np.array([
    [0.07, 0.06, 0.06],  # black
    [0.18, 0.12, 0.08],  # dark brown
    [0.35, 0.23, 0.14],  # brown
    [0.55, 0.42, 0.28],  # light brown
    [0.80, 0.67, 0.45],  # blond
    [0.52, 0.24, 0.11],  # auburn
])
_HAIR_WEIGHTS = np.array([0.4, 0.28, 0.13, 0.07, 0.08, 0.04])
_IRIS_PALETTE = np.array([
    [0.22, 0.13, 0.07],  # brown
    [0.12, 0.08, 0.05],  # dark brown
    [0.30, 0.45, 0.62],  # blue
    [0.33, 0.42, 0.25],  # green / hazel
])
_IRIS_WEIGHTS = np.array([0.45, 0.3, 0.15, 0.1])


def _truncnorm(rng: np.random.Generator, mean: float, sd: float, n: int, lo: float,
               hi: float) -> np.ndarray:
  # Clipping (rather than rejection) keeps the number of draws fixed, hence the streams stable.
  return np.clip(rng.normal(mean, sd, n), lo, hi)


def sample_identities(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
  """Draws `n` identities from the face prior.

  Args:
    rng: numpy random generator (consumed).
    n: number of identities.

  Returns:
    Dict of float32 arrays with leading dimension `n` (`[n]` or `[n, 3]` for colours). Lengths in
    head units (average head half-width ~0.64); ages in years.
  """
  if n < 0:
    raise ValueError(f'n must be >= 0, got {n}')
  # Every entry is one draw per identity; the renderer documents their meaning where used.
  p = {}
  p['head_w'] = _truncnorm(rng, 0.64, 0.04, n, 0.52, 0.77)
  p['head_h'] = _truncnorm(rng, 0.95, 0.05, n, 0.8, 1.1)
  p['jaw'] = _truncnorm(rng, 0.32, 0.1, n, 0.05, 0.6)  # lower-face taper: high = pointed chin
  p['eye_dx'] = _truncnorm(rng, 0.27, 0.022, n, 0.2, 0.34)
  p['eye_y'] = _truncnorm(rng, 0.0, 0.035, n, -0.1, 0.1)
  p['eye_w'] = _truncnorm(rng, 0.085, 0.012, n, 0.055, 0.12)
  p['eye_h'] = _truncnorm(rng, 0.04, 0.008, n, 0.022, 0.06)
  p['eye_tilt'] = _truncnorm(rng, 0.0, 0.12, n, -0.35, 0.35)
  p['iris_color'] = _IRIS_PALETTE[rng.choice(len(_IRIS_PALETTE), n, p=_IRIS_WEIGHTS)]
  p['brow_gap'] = _truncnorm(rng, 0.095, 0.02, n, 0.05, 0.15)
  p['brow_thick'] = _truncnorm(rng, 0.036, 0.011, n, 0.015, 0.07)
  p['brow_angle'] = _truncnorm(rng, 0.05, 0.13, n, -0.3, 0.4)
  p['brow_len'] = _truncnorm(rng, 0.115, 0.02, n, 0.07, 0.16)
  p['brow_dark'] = rng.uniform(0.35, 0.8, n)  # brow colour = hair colour * brow_dark
  p['nose_len'] = _truncnorm(rng, 0.35, 0.035, n, 0.26, 0.45)
  p['nose_w'] = _truncnorm(rng, 0.075, 0.014, n, 0.045, 0.12)
  p['nose_depth'] = _truncnorm(rng, 0.16, 0.035, n, 0.08, 0.26)
  p['mouth_y'] = _truncnorm(rng, 0.57, 0.035, n, 0.47, 0.68)
  p['mouth_w'] = _truncnorm(rng, 0.19, 0.025, n, 0.13, 0.26)
  p['lip_thick'] = _truncnorm(rng, 0.036, 0.01, n, 0.015, 0.065)
  p['ear_y'] = _truncnorm(rng, 0.14, 0.04, n, 0.04, 0.25)
  p['ear_h'] = _truncnorm(rng, 0.17, 0.025, n, 0.11, 0.24)
  p['ear_out'] = rng.uniform(0.2, 1.0, n)  # how far the ears stick out
  # Skin: position on the light->dark ramp plus a small independent hue jitter.
  tone = rng.beta(1.6, 2.2, n) * (len(_SKIN_RAMP) - 1)
  lo = np.floor(tone).astype(int).clip(0, len(_SKIN_RAMP) - 2)
  frac = (tone - lo)[:, None]
  skin = _SKIN_RAMP[lo] * (1 - frac) + _SKIN_RAMP[lo + 1] * frac
  p['skin_color'] = np.clip(skin * np.exp(rng.normal(0, 0.02, (n, 3))), 0, 1)
  p['lip_color'] = np.clip(skin * np.array([0.92, 0.62, 0.62]) *
                           np.exp(rng.normal(0, 0.06, (n, 3))), 0, 1)
  hair = _HAIR_PALETTE[rng.choice(len(_HAIR_PALETTE), n, p=_HAIR_WEIGHTS)]
  p['hair_color'] = np.clip(hair * np.exp(rng.normal(0, 0.08, (n, 1)) +
                                          rng.normal(0, 0.03, (n, 3))), 0, 1)
  # Hairline (texture y of the forehead edge): mostly normal, some fringes, a few bald.
  kind = rng.random(n)
  hairline = np.where(kind < 0.15, rng.uniform(-0.45, -0.2, n),
                      np.where(kind > 0.94, rng.uniform(-1.1, -0.95, n),
                               rng.normal(-0.68, 0.07, n)))
  p['hairline'] = hairline
  p['hairline_curve'] = rng.normal(0.35, 0.2, n)
  p['hair_volume'] = np.clip(np.abs(rng.normal(0.05, 0.06, n)), 0, 0.25)
  length_kind = rng.random(n)
  p['hair_length'] = np.where(length_kind < 0.55, rng.uniform(-0.35, 0.1, n),
                              np.where(length_kind < 0.75, rng.uniform(0.1, 0.7, n),
                                       rng.uniform(0.7, 1.8, n)))
  p['recede'] = np.where(rng.random(n) < 0.4, rng.random(n), 0.0)
  p['grey_onset'] = rng.normal(50.0, 8.0, n)
  p['base_age'] = rng.uniform(25.0, 60.0, n)
  p['weight_drift'] = rng.normal(0.0, 1.0, n)  # face width change per 30 years, in units of 6%
  beard_kind = rng.random(n)
  p['beard'] = np.where(beard_kind < 0.18, rng.uniform(0.45, 0.95, n),
                        np.where(beard_kind < 0.3, rng.uniform(0.12, 0.3, n), 0.0))
  p['moustache'] = np.where((p['beard'] > 0.4) & (rng.random(n) < 0.8), rng.uniform(0.6, 1.0, n),
                            np.where(rng.random(n) < 0.08, rng.uniform(0.5, 0.95, n), 0.0))
  p['glasses'] = (rng.random(n) < 0.15).astype(float)
  p['glasses_size'] = rng.uniform(0.85, 1.2, n)
  p['glasses_color'] = np.where(rng.random((n, 1)) < 0.7,
                                rng.uniform(0.02, 0.2, (n, 1)) * np.ones((1, 3)),
                                rng.uniform(0.3, 0.8, (n, 3)))
  p['mole'] = (rng.random(n) < 0.3).astype(float)
  p['mole_x'] = rng.uniform(-0.4, 0.4, n)
  p['mole_y'] = rng.uniform(-0.25, 0.7, n)
  return {k: np.asarray(v, np.float32) for k, v in p.items()}


def take(params: Mapping[str, np.ndarray], idx: np.ndarray) -> dict[str, np.ndarray]:
  """The parameters of the identities `idx` (e.g. one row per image to render)."""
  return {k: v[idx] for k, v in params.items()}


def lookalike_members(centres: Mapping[str, np.ndarray], draws: Mapping[str, np.ndarray],
                      family: np.ndarray, spread: float,
                      rng: np.random.Generator) -> dict[str, np.ndarray]:
  """Family members around their centres (module docstring: look-alike identities).

  Args:
    centres: identity parameters of the family centres (`sample_identities`).
    draws: one independent prior draw per member (`sample_identities`, leading dim = members).
    family: int `[members]`, each member's row of `centres`.
    spread: in (0, 1]: how far a member sits from its centre towards its own draw.
    rng: decides, per member and discrete trait, whether the draw's value replaces the centre's.
  """
  out = {}
  for key, centre in centres.items():
    centre, own = centre[family], draws[key]
    if key in DISCRETE_TRAITS:
      use_own = rng.random(len(family)) < spread
      out[key] = np.where(use_own.reshape((-1,) + (1,) * (own.ndim - 1)), own, centre)
    else:
      out[key] = (1 - spread) * centre + spread * own   # spread 1: exactly the own draw
  return {k: np.asarray(v, np.float32) for k, v in out.items()}


def sample_families(rng: np.random.Generator, num_identities: int, family_size: int,
                    spread: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
  """(identity parameters, int32 family of each identity): families of `family_size` consecutive
  identities (the last may be smaller) around centres drawn from the prior."""
  family = (np.arange(num_identities) // family_size).astype(np.int32)
  centres = sample_identities(rng, int(family[-1]) + 1 if num_identities else 0)
  draws = sample_identities(rng, num_identities)
  return lookalike_members(centres, draws, family, spread, rng), family


def matched_partners(rng: np.random.Generator, id_a: np.ndarray, keys: np.ndarray) -> np.ndarray:
  """For each of `id_a`, a uniformly random other identity with the same key (from all others
  when its key group has no other member)."""
  everyone = np.arange(len(keys))
  out = np.empty_like(id_a)
  for p, a in enumerate(id_a):
    pool = everyone[(keys == keys[a]) & (everyone != a)]
    if not len(pool):
      pool = everyone[everyone != a]
    out[p] = pool[rng.integers(len(pool))]
  return out
