"""Tests for fedjax_face.data.synthetic: shapes, determinism, protocol layout, argument checks."""

import numpy as np
import pytest

from fedjax_face.data.synthetic import benchmark, identities, nuisance, render

# Small enough to build in well under a second.
SMALL = dict(seed=3, num_identities=6, images_per_identity=3, image_size=32,
             num_test_identities=8, num_pairs=40, num_folds=2)


@pytest.fixture(scope='module')
def bench():
  return benchmark.make_benchmark(**SMALL)


def _param_matrix(params):
  return np.concatenate([v.reshape(v.shape[0], -1) for _, v in sorted(params.items())], axis=1)


def test_shapes_and_dtypes(bench):
  n = SMALL['num_identities'] * SMALL['images_per_identity']
  assert bench.train_images.shape == (n, 32, 32, 3)
  assert bench.train_images.dtype == np.uint8
  assert bench.train_labels.shape == (n,)
  assert bench.train_labels.dtype == np.int32
  assert bench.num_identities == SMALL['num_identities']
  np.testing.assert_array_equal(bench.train_labels, np.repeat(np.arange(6), 3))
  assert set(bench.pair_sets) == {'lfw', 'cfp_fp', 'agedb_30'}
  p = SMALL['num_pairs']
  for name, ps in bench.pair_sets.items():
    assert ps.name == name
    assert ps.images.shape == (2 * p, 32, 32, 3)
    assert ps.images.dtype == np.uint8
    assert ps.issame.shape == (p,)
    assert ps.issame.dtype == np.bool_
    assert ps.identities.shape == (p, 2)
    assert ps.identities.dtype == np.int32
    assert ps.identities.min() >= 0
    assert ps.identities.max() < SMALL['num_test_identities']
    for v in ps.nuisance.values():
      assert v.shape[0] == 2 * p
  # Images are not blank: real content with contrast.
  assert bench.train_images.std() > 20


def test_deterministic(bench):
  again = benchmark.make_benchmark(**SMALL)
  np.testing.assert_array_equal(again.train_images, bench.train_images)
  np.testing.assert_array_equal(again.train_labels, bench.train_labels)
  for name, ps in bench.pair_sets.items():
    np.testing.assert_array_equal(again.pair_sets[name].images, ps.images)
    np.testing.assert_array_equal(again.pair_sets[name].issame, ps.issame)
    np.testing.assert_array_equal(again.pair_sets[name].identities, ps.identities)
  other = benchmark.make_benchmark(**{**SMALL, 'seed': 4})
  assert not np.array_equal(other.train_images, bench.train_images)


def test_train_and_test_identities_disjoint(bench):
  train = _param_matrix(bench.train_identity_params)
  test = _param_matrix(bench.test_identity_params)
  assert train.shape[0] == SMALL['num_identities']
  assert test.shape[0] == SMALL['num_test_identities']
  # No held-out identity coincides with a training identity (continuous draws from separate
  # streams: every pair differs clearly).
  dist = np.abs(train[:, None, :] - test[None, :, :]).max(axis=2)
  assert dist.min() > 1e-3


def test_test_set_does_not_depend_on_training_size(bench):
  bigger = benchmark.make_benchmark(**{**SMALL, 'num_identities': 9, 'images_per_identity': 4})
  for name, ps in bench.pair_sets.items():
    np.testing.assert_array_equal(bigger.pair_sets[name].images, ps.images)


def test_pairs_balanced_per_fold(bench):
  p, folds = SMALL['num_pairs'], SMALL['num_folds']
  per_fold = p // folds
  for ps in bench.pair_sets.values():
    assert ps.issame.sum() == p // 2
    for f in range(folds):
      fold = ps.issame[f * per_fold:(f + 1) * per_fold]
      assert fold.sum() == per_fold // 2


def test_genuine_same_identity_impostor_different(bench):
  for ps in bench.pair_sets.values():
    same = ps.identities[:, 0] == ps.identities[:, 1]
    np.testing.assert_array_equal(same, ps.issame)


def test_cfp_fp_is_frontal_vs_profile(bench):
  yaw = np.abs(bench.pair_sets['cfp_fp'].nuisance['yaw'])
  assert yaw[0::2].max() < 0.4
  assert yaw[1::2].min() >= 1.2
  # LFW has no profile views.
  assert np.abs(bench.pair_sets['lfw'].nuisance['yaw']).max() < 1.0


def test_agedb_pairs_far_apart_in_age(bench):
  age = bench.pair_sets['agedb_30'].nuisance['age']
  gap = np.abs(age[0::2] - age[1::2])
  assert gap.min() >= 27.0
  assert gap.max() <= 33.0
  # Other pair sets keep ages close.
  lfw_age = bench.pair_sets['lfw'].nuisance['age']
  assert np.abs(lfw_age[0::2] - lfw_age[1::2]).mean() < 15.0


def test_genuine_pairs_closer_in_pixel_space():
  # Identity must survive the nuisance: even raw pixels put genuine pairs closer on average.
  b = benchmark.make_benchmark(seed=1, num_identities=2, images_per_identity=2,
                               num_test_identities=50, num_pairs=200, num_folds=1)
  ps = b.pair_sets['lfw']
  x = ps.images.reshape(ps.images.shape[0], -1).astype(np.float32) / 127.5 - 1.0
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  cos = np.sum(x[0::2] * x[1::2], axis=1)
  assert cos[ps.issame].mean() > cos[~ps.issame].mean()


def test_images_per_identity_sigma_gives_unequal_counts():
  b = benchmark.make_benchmark(**{**SMALL, 'num_identities': 30, 'images_per_identity': 6,
                                  'images_per_identity_sigma': 0.6})
  counts = np.bincount(b.train_labels, minlength=30)
  assert len(set(counts.tolist())) > 3
  assert counts.min() >= 2
  assert np.all(np.diff(b.train_labels) >= 0)  # sorted by identity
  assert b.train_images.shape[0] == counts.sum()


@pytest.mark.parametrize('overrides, argument', [
    ({'images_per_identity': 1}, 'images_per_identity'),
    ({'num_identities': 0}, 'num_identities'),
    ({'num_test_identities': 1}, 'num_test_identities'),
    ({'num_pairs': 42}, 'num_pairs'),  # not divisible by 2 * num_folds
    ({'num_pairs': 0}, 'num_pairs'),
    ({'num_folds': 0}, 'num_folds'),
    ({'image_size': 8}, 'image_size'),
    ({'seed': -1}, 'seed'),
    ({'difficulty': -0.5}, 'difficulty'),
    ({'images_per_identity_sigma': -1.0}, 'images_per_identity_sigma'),
    ({'num_identities': 2.5}, 'num_identities'),
])
def test_bad_arguments_raise(overrides, argument):
  with pytest.raises(ValueError, match=argument):
    benchmark.make_benchmark(**{**SMALL, **overrides})


def test_unknown_profile_raises():
  with pytest.raises(ValueError, match='cfp_profile'):
    nuisance.sample_nuisance(np.random.default_rng(0), 3, 'frontal', 1.0)


@pytest.mark.parametrize('size', [64, 112])
def test_render_other_sizes(size):
  rng = np.random.default_rng(0)
  ids = identities.sample_identities(rng, 3)
  nz = nuisance.sample_nuisance(rng, 3, 'lfw', 1.0)
  images = render.render_faces(ids, nz, size)
  assert images.shape == (3, size, size, 3)
  assert images.dtype == np.uint8
  assert images.std() > 20


def test_render_is_independent_of_chunking():
  rng = np.random.default_rng(5)
  n = 70  # spans several chunks at 32x32
  ids = identities.sample_identities(rng, n)
  nz = nuisance.sample_nuisance(rng, n, 'train', 1.0)
  full = render.render_faces(ids, nz, 32)
  part = render.render_faces({k: v[40:45] for k, v in ids.items()},
                                {k: v[40:45] for k, v in nz.items()}, 32)
  np.testing.assert_array_equal(full[40:45], part)


def test_difficulty_zero_is_canonical_pose():
  nz = nuisance.sample_nuisance(np.random.default_rng(0), 50, 'train', 0.0)
  for key in ('yaw', 'pitch', 'roll', 'shift_x', 'blur', 'noise', 'age'):
    np.testing.assert_array_equal(nz[key], 0.0)
  assert np.all(nz['occluder'] == nuisance.OCC_NONE)
