"""The embedded face-recognition benchmark, generated on the fly from a seed (`make_benchmark`).

It mirrors what federated face-recognition papers use: a labelled training set (identities sorted,
as in an MS1M-style record file) and verification pair sets built from *disjoint* held-out
identities (`pairs`). Look-alike training identities (`lookalike_family_size` g > 1) come in
families of g (labels f·g .. f·g + g - 1) around shared centres (`identities.sample_families`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fedjax_face.data.synthetic import identities, nuisance as nuisance_lib, pairs, render, streams
from fedjax_face.data.types import FaceBenchmark


def check_int(name: str, value, minimum: int) -> int:
  """`value` as an int, or ValueError naming the argument (`identification_set` shares the rule)."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f'{name} must be an integer, got {value!r}')
  if value < minimum:
    raise ValueError(f'{name} must be >= {minimum}, got {value}')
  return int(value)


def make_benchmark(*, seed: int, num_identities: int, images_per_identity: int,
                   image_size: int = 32, num_test_identities: int = 300, num_pairs: int = 6000,
                   num_folds: int = 10, difficulty: float = 1.0,
                   images_per_identity_sigma: float = 0.0,
                   pair_sets: Sequence[str] = pairs.PAIR_SET_NAMES, lookalike_family_size: int = 1,
                   lookalike_spread: float = identities.LOOKALIKE_SPREAD) -> FaceBenchmark:
  """Generates the training set and the verification pair sets.

  Args:
    seed: non-negative integer; the same arguments always give identical arrays. The test
      identities and pair sets depend only on (seed, num_test_identities, num_pairs, num_folds,
      image_size, difficulty), not on the training-set size.
    num_identities: training identities.
    images_per_identity: images per training identity (the median when sigma > 0); >= 2.
    image_size: square image size in pixels (>= 16; 32, 64 and 112 are the intended ones).
    num_test_identities: held-out identities for the pair sets (disjoint from training); >= 2.
    num_pairs: pairs per pair set; divisible by 2 * num_folds.
    num_folds: contiguous folds; each holds num_pairs / num_folds / 2 genuine pairs followed by
      the same number of impostor pairs (LFW layout).
    difficulty: scales all incidental nuisance (1.0 = default calibration).
    images_per_identity_sigma: if > 0, identity i gets
      max(2, round(images_per_identity * lognormal(0, sigma))) images.
    pair_sets: which of pairs.ALL_PAIR_SET_NAMES to render; each depends only on its own
      arguments (sllfw also on lookalike_spread), not on which others are rendered.
    lookalike_family_size: g; training identities come in look-alike families of g (1 = the
      independent identities of the default benchmark, bit for bit).
    lookalike_spread: in (0, 1]; how far family members sit from their centre (training
      families when g > 1, and sllfw's held-out families).

  Returns:
    The FaceBenchmark.

  Raises:
    ValueError: an argument is out of range; the message names it.
  """
  seed = check_int('seed', seed, 0)
  num_identities = check_int('num_identities', num_identities, 1)
  images_per_identity = check_int('images_per_identity', images_per_identity, 2)
  image_size = check_int('image_size', image_size, 16)
  num_test_identities = check_int('num_test_identities', num_test_identities, 2)
  num_folds = check_int('num_folds', num_folds, 1)
  num_pairs = check_int('num_pairs', num_pairs, 2 * num_folds)
  if num_pairs % (2 * num_folds):
    raise ValueError(f'num_pairs ({num_pairs}) must be divisible by 2 * num_folds '
                     f'({2 * num_folds}) so every fold is half genuine, half impostor')
  if not (np.isfinite(difficulty) and difficulty >= 0):
    raise ValueError(f'difficulty must be a finite number >= 0, got {difficulty}')
  if not (np.isfinite(images_per_identity_sigma) and images_per_identity_sigma >= 0):
    raise ValueError('images_per_identity_sigma must be a finite number >= 0, got '
                     f'{images_per_identity_sigma}')

  lookalike_family_size = check_int('lookalike_family_size', lookalike_family_size, 1)
  if not (np.isfinite(lookalike_spread) and 0 < lookalike_spread <= 1):
    raise ValueError(f'lookalike_spread must be in (0, 1] (0 would make clones), got '
                     f'{lookalike_spread}')
  unknown = [name for name in pair_sets if name not in pairs.ALL_PAIR_SET_NAMES]
  if unknown or isinstance(pair_sets, str):
    raise ValueError(f'pair_sets={pair_sets!r}; expected names from {pairs.ALL_PAIR_SET_NAMES}')

  if lookalike_family_size == 1:
    train_params = identities.sample_identities(streams.rng(seed, streams.TRAIN_IDS),
                                               num_identities)
    families = np.arange(num_identities, dtype=np.int32)
  else:
    train_params, families = identities.sample_families(
        streams.rng(seed, streams.FAMILY_MEMBERS), num_identities, lookalike_family_size,
        lookalike_spread)
  if images_per_identity_sigma > 0:
    factor = streams.rng(seed, streams.TRAIN_COUNTS).lognormal(0.0, images_per_identity_sigma,
                                                               num_identities)
    counts = np.maximum(2, np.round(images_per_identity * factor)).astype(np.int64)
  else:
    counts = np.full(num_identities, images_per_identity, np.int64)
  labels = np.repeat(np.arange(num_identities, dtype=np.int32), counts)
  nuisance = nuisance_lib.sample_nuisance(streams.rng(seed, streams.TRAIN_NUISANCE),
                                          labels.shape[0], 'train', difficulty)
  train_images = render.render_faces(identities.take(train_params, labels), nuisance, image_size)

  rendered, test_params = pairs.make_pair_sets(seed=seed, names=pair_sets,
                                               num_test_identities=num_test_identities,
                                               num_pairs=num_pairs, num_folds=num_folds,
                                               image_size=image_size, difficulty=difficulty,
                                               lookalike_spread=lookalike_spread)
  return FaceBenchmark(train_images=train_images, train_labels=labels,
                       num_identities=num_identities, pair_sets=rendered,
                       train_identity_params=train_params, test_identity_params=test_params,
                       train_families=families)
