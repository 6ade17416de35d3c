"""Look-alike identities in the synthetic benchmark: training families, the sllfw / cplfw / calfw
pair sets, and the partition that spreads a family over different clients."""

import numpy as np
import pytest

from fedjax_face.data import partition
from fedjax_face.data.synthetic import benchmark, identities, pairs, render

SMALL = dict(seed=3, num_identities=12, images_per_identity=3, image_size=32,
             num_test_identities=40, num_pairs=200, num_folds=2)


@pytest.fixture(scope='module')
def families():
  return benchmark.make_benchmark(**SMALL, lookalike_family_size=3,
                                  pair_sets=pairs.ALL_PAIR_SET_NAMES)


def _pixels(ps):
  x = ps.images.reshape(ps.images.shape[0], -1).astype(np.float32)
  x -= x.mean(axis=1, keepdims=True)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return np.sum(x[0::2] * x[1::2], axis=1)


def test_family_size_one_is_the_default_benchmark_and_other_sets_do_not_change_it(families):
  plain = benchmark.make_benchmark(**SMALL)
  again = benchmark.make_benchmark(**SMALL, lookalike_family_size=1,
                                   pair_sets=pairs.ALL_PAIR_SET_NAMES)
  np.testing.assert_array_equal(again.train_images, plain.train_images)
  np.testing.assert_array_equal(again.train_families, np.arange(12))
  for name in pairs.PAIR_SET_NAMES:   # rendering more sets leaves these bit for bit
    np.testing.assert_array_equal(again.pair_sets[name].images, plain.pair_sets[name].images)
    np.testing.assert_array_equal(families.pair_sets[name].images, plain.pair_sets[name].images)
  assert set(plain.pair_sets) == set(pairs.PAIR_SET_NAMES)


def test_members_blend_towards_their_own_draw_and_take_discrete_traits_whole():
  rng = np.random.default_rng(0)
  centres = identities.sample_identities(rng, 2)
  draws = identities.sample_identities(rng, 4)
  family = np.array([0, 0, 1, 1])
  members = identities.lookalike_members(centres, draws, family, 0.25, np.random.default_rng(1))
  for key, value in members.items():
    centre, own = centres[key][family], draws[key]
    if key in identities.DISCRETE_TRAITS:
      is_own = np.all(value == own, axis=tuple(range(1, own.ndim)))
      is_centre = np.all(value == centre, axis=tuple(range(1, own.ndim)))
      assert np.all(is_own | is_centre), key
    else:
      np.testing.assert_allclose(value, 0.75 * centre + 0.25 * own, rtol=1e-6, atol=1e-7)
  # Spread 1 gives the independent draws themselves.
  same = identities.lookalike_members(centres, draws, family, 1.0, np.random.default_rng(1))
  for key in members:
    np.testing.assert_array_equal(same[key], draws[key])


def test_training_families_are_consecutive_labels(families):
  np.testing.assert_array_equal(families.train_families, np.arange(12) // 3)


@pytest.mark.parametrize('spread', [0.35, 1.0])
def test_family_members_sit_as_close_as_the_spread_says(spread):
  # Two members differ by spread·(own draw difference); strangers by the blend of both centres
  # and draws: the ratio of mean distances is spread / sqrt((1 - spread)^2 + spread^2).
  params, family = identities.sample_families(np.random.default_rng(0), 600, 3, spread)
  x = np.concatenate([v.reshape(600, -1) for k, v in sorted(params.items())
                      if k not in identities.DISCRETE_TRAITS], axis=1)
  x = (x - x.mean(0)) / x.std(0)
  dist = np.linalg.norm(x[:, None] - x[None], axis=-1)
  same = family[:, None] == family[None]
  ratio = dist[same & ~np.eye(600, dtype=bool)].mean() / dist[~same].mean()
  assert ratio == pytest.approx(spread / np.hypot(1 - spread, spread), abs=0.03)


def test_sllfw_impostors_are_family_siblings_that_still_look_different(families):
  ps = families.pair_sets['sllfw']
  n = SMALL['num_test_identities']
  assert ps.identities.min() >= n and ps.identities.max() < 2 * n
  assert families.test_identity_params['head_w'].shape[0] == 2 * n
  a, b = ps.identities[~ps.issame].T
  np.testing.assert_array_equal((a - n) // 2, (b - n) // 2)
  assert np.all(a != b)
  np.testing.assert_array_equal(ps.identities[ps.issame, 0], ps.identities[ps.issame, 1])
  # Pixels: look-alike impostors sit between random impostors (lfw) and genuine pairs.
  lfw = families.pair_sets['lfw']
  lfw_cos, sllfw_cos = _pixels(lfw), _pixels(ps)
  assert lfw_cos[~lfw.issame].mean() < sllfw_cos[~ps.issame].mean() < sllfw_cos[ps.issame].mean()


def test_cplfw_is_cross_pose_with_matched_impostors(families):
  ps = families.pair_sets['cplfw']
  yaw = np.abs(ps.nuisance['yaw'])
  assert yaw[0::2].max() < 1.0           # the in-the-wild side never turned away
  assert yaw[1::2].min() >= 0.7          # the other side always is
  params = families.test_identity_params
  luma = params['skin_color'][:SMALL['num_test_identities']] @ render.LUMA
  band = np.digitize(luma, np.quantile(luma, [1 / 3, 2 / 3]))
  hair = (params['beard'] > 0) | (params['moustache'] > 0)
  a, b = ps.identities[~ps.issame].T
  assert np.all(a != b)
  np.testing.assert_array_equal(band[a], band[b])
  np.testing.assert_array_equal(hair[a], hair[b])


def test_calfw_is_cross_age_with_matched_impostors(families):
  ps = families.pair_sets['calfw']
  age = ps.nuisance['age']
  gap = np.abs(age[0::2] - age[1::2])
  assert gap.min() >= pairs.CALFW_GAP_YEARS[0] - 1e-4
  assert gap.max() <= pairs.CALFW_GAP_YEARS[1] + 1e-4
  params = families.test_identity_params
  a, b = ps.identities[~ps.issame].T
  assert np.all(a != b)
  np.testing.assert_array_equal(params['base_age'][a] // 10, params['base_age'][b] // 10)
  hair = (params['beard'] > 0) | (params['moustache'] > 0)
  np.testing.assert_array_equal(hair[a], hair[b])


def test_matched_partners_falls_back_to_anyone_when_alone():
  keys = np.array([0, 0, 1])
  out = identities.matched_partners(np.random.default_rng(0), np.array([0, 1, 2, 2, 2]), keys)
  np.testing.assert_array_equal(out[:2], [1, 0])
  assert set(out[2:]) <= {0, 1}


@pytest.mark.parametrize('overrides, words', [
    ({'lookalike_spread': 0.0}, 'lookalike_spread'),
    ({'lookalike_spread': 1.5}, 'lookalike_spread'),
    ({'lookalike_family_size': 0}, 'lookalike_family_size'),
    ({'pair_sets': ('lfw', 'ijbc')}, 'pair_sets'),
    ({'pair_sets': 'lfw'}, 'pair_sets'),
])
def test_bad_lookalike_arguments_raise(overrides, words):
  with pytest.raises(ValueError, match=words):
    benchmark.make_benchmark(**{**SMALL, **overrides})


def test_spread_families_puts_every_member_on_a_different_client():
  rng = np.random.default_rng(0)
  family = np.arange(120) // 4
  clients = partition.identity_exclusive(120, 10, 'balanced', rng)
  before = sum(len(ids) - len(set(family[ids])) for ids in clients)
  assert before > 0                       # the shuffled deal co-locates some members
  spread = partition.spread_families(clients, family, rng)
  assert [len(ids) for ids in spread] == [len(ids) for ids in clients]
  np.testing.assert_array_equal(np.sort(np.concatenate(spread)), np.arange(120))
  for ids in spread:
    assert len(set(family[ids])) == len(ids)


def test_spread_families_leaves_a_spread_partition_alone_and_refuses_the_impossible():
  family = np.arange(6) // 2
  clients = [np.array([0, 2, 4], np.int32), np.array([1, 3, 5], np.int32)]
  rng = np.random.default_rng(0)
  state = rng.bit_generator.state
  out = partition.spread_families(clients, family, rng)
  for a, b in zip(out, clients):
    np.testing.assert_array_equal(a, b)
  assert rng.bit_generator.state == state
  with pytest.raises(ValueError, match='lookalike_family_size <= federated.num_clients'):
    partition.spread_families(clients, np.zeros(6, int), rng)
