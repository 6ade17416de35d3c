"""Verification pair sets of the embedded face benchmark, from held-out identities disjoint from
the training set's, laid out like the insightface `.bin` files (`make_pair_sets`):

* `lfw`: mild nuisance on both sides.
* `cfp_fp`: a near-frontal image against a large-yaw (profile-ish) image, genuine and impostor.
* `agedb_30`: the two images are ~30 years apart in age (genuine and impostor), moderate nuisance,
  a share of them greyscale like the old photos in AgeDB.

and, on request (`names=`), three harder sets in the style of the FedGC paper's other tests:

* `sllfw` (similar-looking LFW): LFW nuisance; every impostor pairs two members of one held-out
  look-alike family (families of two, drawn with `lookalike_spread`).
* `cplfw` (cross-pose): one near-frontal side against one at |yaw| 0.7..1.35 rad, in the wild,
  genuine and impostor; impostors share the skin-tone band and the facial-hair class.
* `calfw` (cross-age): in-the-wild nuisance, the sides 10..30 years apart; impostors share the age
  band and the facial-hair class. The prior has no sex parameter: facial hair is its sex-linked
  cue, so "same gender" becomes "same facial-hair class".
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Sequence

import numpy as np

from fedjax_face.data.synthetic import identities, nuisance as nuisance_lib, render, streams
from fedjax_face.data.types import PairSet

PAIR_SET_NAMES = ('lfw', 'cfp_fp', 'agedb_30')                 # rendered unless asked otherwise
LOOKALIKE_PAIR_SET_NAMES = ('sllfw', 'cplfw', 'calfw')
ALL_PAIR_SET_NAMES = PAIR_SET_NAMES + LOOKALIKE_PAIR_SET_NAMES
# Age gap of a calfw pair, years.
CALFW_GAP_YEARS = (10.0, 30.0)
# Age gap of an agedb_30 pair, in the same "years" as identity base ages and nuisance age offsets.
AGEDB_GAP_YEARS = 30.0


def _interleave(first: Mapping[str, np.ndarray],
                second: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
  """Rows a0, b0, a1, b1, ... (insightface .bin pair order)."""
  out = {}
  for k in first:
    a, b = first[k], second[k]
    z = np.empty((2 * a.shape[0],) + a.shape[1:], a.dtype)
    z[0::2], z[1::2] = a, b
    out[k] = z
  return out


def _skin_band(params: Mapping[str, np.ndarray]) -> np.ndarray:
  """Tercile of the skin's luma among these identities: 0 light .. 2 dark."""
  luma = params['skin_color'] @ render.LUMA
  return np.digitize(luma, np.quantile(luma, [1 / 3, 2 / 3]))


def _facial_hair(params: Mapping[str, np.ndarray]) -> np.ndarray:
  return ((params['beard'] > 0) | (params['moustache'] > 0)).astype(np.int64)


def _impostor_keys(name: str, params: Mapping[str, np.ndarray]) -> np.ndarray:
  """The group an impostor partner shares: cplfw skin band and facial hair, calfw age band (ten
  years of base age) and facial hair."""
  if name == 'cplfw':
    return _skin_band(params) * 2 + _facial_hair(params)
  return (params['base_age'] // 10).astype(np.int64) * 2 + _facial_hair(params)


def _make_pair_set(name: str, rng: np.random.Generator, test_params: Mapping[str, np.ndarray],
                   num_pairs: int, num_folds: int, image_size: int,
                   difficulty: float) -> PairSet:
  """Builds a pair set; each contiguous fold holds its genuine pairs, then its impostor pairs.

  For 'sllfw', `test_params` are look-alike families of two (rows 2f, 2f + 1); the returned ids
  index those rows.
  """
  n_test = test_params['head_w'].shape[0]
  per_fold = num_pairs // num_folds
  issame = np.tile(np.repeat([True, False], per_fold // 2), num_folds)
  id_a = rng.integers(0, n_test, num_pairs)
  if name == 'sllfw':
    partner = id_a ^ 1                    # the other member of the family
  elif name in ('cplfw', 'calfw'):
    partner = identities.matched_partners(rng, id_a, _impostor_keys(name, test_params))
  else:                                   # a uniformly random *other* identity
    partner = (id_a + rng.integers(1, n_test, num_pairs)) % n_test
  id_b = np.where(issame, id_a, partner)
  profiles = {'cfp_fp': ('cfp_frontal', 'cfp_profile'), 'agedb_30': ('agedb', 'agedb'),
              'cplfw': ('lfw', 'cplfw_pose')}.get(name, ('lfw', 'lfw'))
  first = nuisance_lib.sample_nuisance(rng, num_pairs, profiles[0], difficulty)
  second = nuisance_lib.sample_nuisance(rng, num_pairs, profiles[1], difficulty)
  if name in ('agedb_30', 'calfw'):
    if name == 'agedb_30':   # younger and older side ~AGEDB_GAP_YEARS apart
      young = -0.5 * AGEDB_GAP_YEARS + rng.normal(0.0, 2.0, num_pairs)
      gap = AGEDB_GAP_YEARS + np.clip(rng.normal(0.0, 1.5, num_pairs), -3.0, 3.0)
    else:
      gap = rng.uniform(*CALFW_GAP_YEARS, num_pairs)
      young = -0.5 * gap + rng.normal(0.0, 2.0, num_pairs)
    swap = rng.random(num_pairs) < 0.5   # which side is older
    first['age'] = np.where(swap, young + gap, young).astype(np.float32)
    second['age'] = np.where(swap, young, young + gap).astype(np.float32)
  nuisance = _interleave(first, second)
  ids = np.stack([id_a, id_b], axis=1).astype(np.int32)
  images = render.render_faces(identities.take(test_params, ids.reshape(-1)), nuisance, image_size)
  return PairSet(name=name, images=images, issame=issame, identities=ids, nuisance=nuisance)


def make_pair_sets(*, seed: int, names: Sequence[str], num_test_identities: int, num_pairs: int,
                   num_folds: int, image_size: int, difficulty: float,
                   lookalike_spread: float = identities.LOOKALIKE_SPREAD
                   ) -> tuple[dict[str, PairSet], dict[str, np.ndarray]]:
  """(name -> PairSet, the held-out identities' parameters) of `make_benchmark`'s pair sets,
  rendered on their own: each draws from its own streams, so they equal the ones
  `benchmark.make_benchmark` renders beside a training set, bit for bit. The arguments are
  checked there."""
  test_params = identities.sample_identities(streams.rng(seed, streams.TEST_IDS),
                                             num_test_identities)
  # sllfw's look-alikes: held-out families of two of their own, numbered after the common ones.
  lookalikes = None
  if 'sllfw' in names:
    lookalikes, _ = identities.sample_families(streams.rng(seed, streams.SLLFW_IDS),
                                               2 * max(1, num_test_identities // 2), 2,
                                               lookalike_spread)
  rendered = {}
  for name in names:
    params = lookalikes if name == 'sllfw' else test_params
    ps = _make_pair_set(name, streams.rng(seed, streams.PAIRS[name]), params, num_pairs,
                        num_folds, image_size, difficulty)
    if name == 'sllfw':
      ps = dataclasses.replace(ps, identities=ps.identities + num_test_identities)
    rendered[name] = ps
  if lookalikes is not None:
    test_params = {k: np.concatenate([v, lookalikes[k]]) for k, v in test_params.items()}
  return rendered, test_params
