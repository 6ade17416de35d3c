"""The embedded PAD benchmark: live and attack frames of the same subjects differ only in the
capture cues, domains differ from each other, live depth maps and all-zero attack maps."""

import dataclasses

import numpy as np
import pytest

from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic import pad_benchmark as pad
from fedjax_face.data.synthetic import identities, nuisance, render
from tests.config_files import load_config

SMALL = dict(subjects=4, test_subjects=1, live_videos=1, attack_videos=3, frames=2,
             image_size=32)


@pytest.fixture(scope='module')
def domains():
  return pad.make_benchmark(seed=0, **SMALL)


def test_every_domain_has_its_frames_videos_and_splits(domains):
  for name, frames in domains.items():
    n = 4 * (1 + 3) * 2
    assert frames.images.shape == (n, 32, 32, 3) and frames.images.dtype == np.uint8
    assert frames.depth.shape == (n, pad.DEPTH_SIZE, pad.DEPTH_SIZE)
    assert frames.live.sum() == 4 * 1 * 2
    # Every video is one subject, one kind and `frames` frames.
    for video in np.unique(frames.video):
      rows = frames.video == video
      assert rows.sum() == 2
      assert len(set(frames.subject[rows])) == len(set(frames.attack[rows])) == 1
    kinds = {pad.ATTACKS[a] for a in frames.attack[~frames.live]}
    assert kinds <= set(pad.DOMAINS[name].attacks)
    np.testing.assert_array_equal(frames.split, (frames.subject == 3).astype(np.int8))


def test_an_attack_photo_differs_from_the_live_scene_only_in_its_light():
  nz = nuisance.sample_nuisance(np.random.default_rng(0), 5, 'lfw', 1.0)
  photo = pad.photo_nuisance(nz)
  changed = {k for k in nz if not np.array_equal(nz[k], photo[k])}
  assert changed == set(pad.PHOTO_LIGHT)


def test_with_every_medium_effect_off_an_attack_is_its_source_photo():
  # A print with the full gamut, no halftone and no grain or bend, filling the frame, is the
  # photo itself: the medium is all that separates live from attack.
  rng = np.random.default_rng(0)
  source = rng.uniform(0.0, 1.0, (3, 16, 16, 3)).astype(np.float32)
  plain = dataclasses.replace(pad.DOMAINS['O'], print_gamut=1.0, halftone=0.0)
  printed = pad.print_medium(source, plain, _ZeroRng())
  np.testing.assert_allclose(printed, source, atol=1e-6)
  held = pad.hold(printed, np.zeros_like(source), np.zeros((3, 3), np.float32),
                  np.zeros(3, bool), _ZeroRng())
  np.testing.assert_allclose(held, source, atol=1e-6)


class _ZeroRng:
  """A generator whose normal and uniform draws are all zero (no grain, no bend)."""

  def normal(self, loc, scale, size):
    return np.zeros(size)

  def uniform(self, low, high, size):
    return np.zeros(size)


def test_live_frames_carry_depth_and_attacks_zero_maps(domains):
  for frames in domains.values():
    live = frames.depth[frames.live]
    assert np.all(live.max(axis=(1, 2)) == 1.0) and np.all(live.min(axis=(1, 2)) == 0.0)
    face = (live > 0).mean(axis=(1, 2))
    assert np.all((face > 0.1) & (face < 0.7))           # a face, not the whole frame
    assert not frames.depth[~frames.live].any()


def test_depth_follows_the_head_the_renderer_draws():
  rng = np.random.default_rng(3)
  ip = identities.sample_identities(rng, 2)
  nz = nuisance.sample_nuisance(rng, 2, 'lfw', 0.0)       # frontal, centred
  nz['shift_x'] = np.array([0.0, 0.3], np.float32)         # the second moved right
  depth = render.face_depth(ip, nz, 32)
  cols = [np.average(np.arange(32), weights=d.sum(axis=0)) for d in depth]
  assert abs(cols[0] - 15.5) < 1.0 and cols[1] - cols[0] > 3.0


def test_domains_differ_in_their_capture_statistics(domains):
  def stats(frames):
    x = frames.images.astype(np.float32) / 255.0
    detail = np.abs(np.diff(x, axis=2)).mean()             # sharpness / noise
    return np.r_[x.mean(axis=(0, 1, 2)), x.std(), detail]
  table = {name: stats(frames) for name, frames in domains.items()}
  names = list(table)
  for i, a in enumerate(names):
    for b in names[i + 1:]:
      assert np.abs(table[a] - table[b]).max() > 0.01, (a, b, table[a], table[b])


def test_same_seed_same_frames_and_domains_have_their_own_subjects():
  a = pad.make_domain('M', seed=1, **SMALL)
  b = pad.make_domain('M', seed=1, **SMALL)
  np.testing.assert_array_equal(a.images, b.images)
  np.testing.assert_array_equal(a.depth, b.depth)
  other = pad.make_domain('C', seed=1, **SMALL)
  assert not np.array_equal(a.images[a.live], other.images[other.live])


def test_protocols_leave_one_domain_out():
  assert sorted(target for _, target in pad.PROTOCOLS.values()) == ['C', 'I', 'M', 'O']
  for sources, target in pad.PROTOCOLS.values():
    assert len(sources) == 3 and target not in sources


@pytest.mark.parametrize('kwargs, match', [
    (dict(name='X'), r"PAD domain 'X'; expected one of \('O', 'C', 'I', 'M', 'S'\)"),
    (dict(name='O', subjects=4, test_subjects=4), r'test_subjects=4 of subjects=4; expected fewer'),
    (dict(name='O', frames=0), r'frames=0; expected an integer >= 1'),
])
def test_bad_arguments_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    pad.make_domain(seed=0, **kwargs)


def test_each_data_center_trains_on_its_own_attack_types_only():
  # Table X: I keeps its print attacks, O its screen ones; every live frame stays.
  config = load_config('pad/fedpad', 'centers=IO,target=M,attacks=print-video,runlocal')
  assert tuple(config.data.pad.center_attacks) == ('print+cut', 'display+replay')
  assert pad_source.train_attacks(config.data.pad) == [('print',), ('display', 'replay')]
  bench = pad_source.load(config)
  kept = []
  for name, kinds in (('I', ('print',)), ('O', ('display', 'replay'))):
    frames = pad_source.domain_frames(name, config)
    keep = (frames.split == 0) & (frames.live | np.isin(frames.attack,
                                                        [pad.ATTACKS.index(k) for k in kinds]))
    assert (~frames.live[keep]).any() and (frames.live[keep]).sum() == (
        frames.live & (frames.split == 0)).sum()
    kept.append(frames.images[keep])
  np.testing.assert_array_equal(bench.train_images, np.concatenate(kept))


def test_extra_targets_are_scored_on_their_test_subjects():
  config = load_config('pad/single', 'center=C,runlocal')
  assert (tuple(config.data.pad.sources), config.data.pad.target) == (('C',), 'O')
  assert tuple(config.data.pad.extra_targets) == ('I', 'M', 'S')
  bench = pad_source.load(config)
  assert sorted(bench.eval_sets) == ['test', 'test:I', 'test:M', 'test:S', 'validation']
  for name in ('I', 'M', 'S'):
    frames = pad_source.domain_frames(name, config)
    np.testing.assert_array_equal(bench.eval_sets[f'test:{name}'].images,
                                  frames.images[frames.split == 1])
  config.data.pad.extra_targets = ('C', 'I')
  with pytest.raises(ValueError, match=r"extra_targets=\('C', 'I'\) with sources=\('C',\) and "
                                       r"target='O'; expected distinct domains"):
    pad_source.check_config(config)
