"""`data.source='pad_lists'` and `data/formats/pad_lists.py`: the three anti-spoofing list layouts
(the FedGPAD authors', SSDG's JSON, MCIO text), written by this file's fixtures with the
module's writers; each bad input stopped with its error; the species the 'fedgpad' `_print` /
`_video` lists give their attack frames, and the codes `PadSet.attack` gets from them; the
protocol strings beside the archived run names; and the embedded benchmark exported by
`tools/export_pad.py` in each layout trains bit for bit as the in-memory run; its command line
runs in a child forked from a process that has imported its dependencies
(tests/forked_commands.py)."""

import json
import os
import re
import types

import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.data import sources
from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.sources import pad_lists as pad_lists_source
from fedjax_face.data.synthetic.pad_benchmark import ATTACKS
from fedjax_face.eval.pad import evaluators as pad_evaluators
from fedjax_face.tools import export_pad
from tests import forked_commands
from tests.config_files import config_path, load_config


# -- fixtures written with the layouts' writers ------------------------------------------------

def _image(seed: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)


def _fedgpad_root(root, k: int = 1, videos: int = 2, frames: int = 2) -> str:
  """A FedGPAD-layout data center: `videos` live and `videos` attack videos of `frames` frames,
  paths `<video>/<frame>.png` under k - 1 extra directories, depth maps for the live ones."""
  root = str(root)
  real, fake = [], []
  for v in range(videos * 2):
    live = v < videos
    for f in range(frames):
      rel = '/'.join(['d'] * (k - 1) + [f'{"live" if live else "spoof"}{v}', f'{f}.png'])
      formats.save_image(os.path.join(root, rel), _image(10 * v + f))
      if live:
        formats.save_depth(os.path.join(root, formats.depth_path(rel, k)),
                           np.full((32, 32), 0.5, np.float32))
      (real if live else fake).append((rel, live))
  formats.save_depth(os.path.join(root, formats.FAKE_DEPTH), np.zeros((32, 32), np.float32))
  formats.write_fedgpad_list(os.path.join(root, 'image_list_real.txt'), real)
  formats.write_fedgpad_list(os.path.join(root, 'image_list_fake.txt'), fake)
  formats.write_fedgpad_list(os.path.join(root, 'image_list_all.txt'), real + fake)
  return root


def _read_fedgpad(root, **kwargs):
  return formats.read_fedgpad(root, 'train', **{'depth_dirs': 1, **kwargs})


def _lines(path) -> list[str]:
  with open(path) as f:
    return f.read().splitlines()


def _rewrite(path, lines) -> None:
  with open(path, 'w') as f:
    f.write(''.join(f'{line}\n' for line in lines))


def test_fedgpad_reader_reads_paths_labels_videos_and_depth_in_sorted_order(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  lists = os.path.join(root, 'image_list_real.txt')
  _rewrite(lists, _lines(lists)[::-1])          # the reader's order is not the lines'
  frames = _read_fedgpad(root)
  assert [os.path.relpath(p, root) for p in frames.paths] == [
      'live0/0.png', 'live0/1.png', 'live1/0.png', 'live1/1.png',
      'spoof2/0.png', 'spoof2/1.png', 'spoof3/0.png', 'spoof3/1.png']
  np.testing.assert_array_equal(frames.live, [1, 1, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(frames.video, [0, 0, 1, 1, 2, 2, 3, 3])
  assert frames.videos == ['live0', 'live1', 'spoof2', 'spoof3']
  assert os.path.relpath(frames.depth[1], root) == 'depth/live0/1_depth.jpg'
  assert os.path.relpath(frames.depth[5], root) == 'depth/fake_depth.jpg'
  assert frames.origins[0] == f'{lists}:4'
  np.testing.assert_array_equal(formats.load_depth(frames.depth[0], 32), 0.5)
  np.testing.assert_array_equal(formats.load_image(frames.paths[0], '', 8), _image(0))


@pytest.mark.parametrize('k, name', [(1, 'O'), (2, 'M'), (3, 'C'), (3, 'I'), (4, 'S'),
                                     (1, 'OULU'), (2, 'MSU'), (3, 'CASIA'), (3, 'idiap'),
                                     (4, 'SiW')])
def test_depth_maps_sit_under_the_first_k_directories_of_each_data_set(k, name):
  assert formats.DEPTH_DIRS[name] == k
  assert formats.depth_path('a/b/c/d/e/f.png', k) == '/'.join(
      ['depth'] + list('abcde')[:k] + ['f_depth.jpg'])


def test_eight_bit_depth_maps_are_scaled_to_one_and_resized_to_32(tmp_path):
  path = str(tmp_path / 'd_depth.jpg')
  formats.save_depth8(path, np.ones((64, 64), np.float32))
  np.testing.assert_allclose(formats.load_depth(path, 32), np.ones((32, 32)), atol=1e-6)


def test_ssdg_sampling_keeps_frames_6_plus_j_floor_n_over_k_of_each_video(tmp_path):
  root = str(tmp_path / 'C')
  entries = []
  for v, live in (('vid_live', 1), ('vid_spoof', 0)):
    for f in range(20):
      rel = f'{v}/{f}.png'
      formats.save_image(os.path.join(root, rel), _image(f))
      entries.append((rel, live))
  formats.write_ssdg_list(os.path.join(root, 'test_label.json'), entries)
  frames = formats.read_ssdg(root, 'test', frames_per_video=2)
  # n = 20, k = 2: 6 + 0 * 10 and 6 + 1 * 10, by frame number (not the name's order: 16 < 6).
  assert [os.path.relpath(p, root) for p in frames.paths] == [
      'vid_live/16.png', 'vid_live/6.png', 'vid_spoof/16.png', 'vid_spoof/6.png']
  one = formats.read_ssdg(root, 'test', frames_per_video=1)
  assert [os.path.relpath(p, root) for p in one.paths] == ['vid_live/6.png', 'vid_spoof/6.png']


def test_ssdg_video_ids_keep_every_listed_frame(tmp_path):
  root = str(tmp_path / 'C')
  entries = []
  for f in range(3):
    for v, live in (('a', 1), ('b', 0)):
      rel = f'all/{v}{f}.png'
      formats.save_image(os.path.join(root, rel), _image(f))
      entries.append((rel, live, f'video_{v}'))
  formats.write_ssdg_list(os.path.join(root, 'train_label.json'), entries)
  frames = formats.read_ssdg(root, 'train', frames_per_video=1)
  assert frames.videos == ['video_a', 'video_b']
  np.testing.assert_array_equal(frames.video, [0, 0, 0, 1, 1, 1])
  assert frames.depth == [None] * 6        # the default policy 'ones' reads no depth files


def _mcio_root(root, name='casia') -> str:
  root = str(root)
  for split in ('train', 'test'):
    for kind in ('real', 'fake'):
      frame0 = [f'{split}/{kind}/{v}_frame0.png' for v in ('1_1', '1_2')]
      for p in frame0:
        formats.save_image(os.path.join(root, p), _image(1))
        formats.save_image(os.path.join(root, formats.frame1_path(p)), _image(2))
      formats.write_mcio_list(os.path.join(root, f'{name}_{kind}_{split}.txt'), frame0)
  return root


def test_mcio_reader_names_frame1_by_substitution(tmp_path):
  root = _mcio_root(tmp_path / 'M')
  frames = formats.read_mcio(root, 'test')
  assert [os.path.relpath(p, root) for p in frames.paths] == [
      'test/fake/1_1_frame0.png', 'test/fake/1_1_frame1.png', 'test/real/1_1_frame0.png',
      'test/real/1_1_frame1.png', 'test/fake/1_2_frame0.png', 'test/fake/1_2_frame1.png',
      'test/real/1_2_frame0.png', 'test/real/1_2_frame1.png']
  np.testing.assert_array_equal(frames.live, [0, 0, 1, 1, 0, 0, 1, 1])
  np.testing.assert_array_equal(frames.video, [0, 0, 1, 1, 2, 2, 3, 3])


# -- bad input: each its own error, naming the file and the line -------------------------------

def _error(fn, message):
  with pytest.raises(formats.PadListError, match='^' + re.escape(message) + '$'):
    fn()


def test_a_line_naming_a_missing_file(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  lists = os.path.join(root, 'image_list_fake.txt')
  _rewrite(lists, _lines(lists) + ['gone/0.png 0'])
  _error(lambda: _read_fedgpad(root),
         f'{lists}:5: the frame {os.path.join(root, "gone/0.png")} does not exist.')


def test_a_label_other_than_0_or_1(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  lists = os.path.join(root, 'image_list_real.txt')
  _rewrite(lists, ['live0/0.png 2'] + _lines(lists)[1:])
  _error(lambda: _read_fedgpad(root), f"{lists}:1: label '2'; expected 0 (attack) or 1 (live).")


def test_a_live_frame_without_its_depth_map(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  depth = os.path.join(root, 'depth', 'live1', '0_depth.jpg')
  os.remove(depth)
  lists = os.path.join(root, 'image_list_real.txt')
  _error(lambda: _read_fedgpad(root),
         f"{lists}:3: the live frame live1/0.png has no depth map {depth}; "
         "data.pad_lists.depth='ones' trains on all-ones live maps instead.")
  ones = _read_fedgpad(root, depth_policy='ones')     # the opt-in reads no depth files
  assert ones.depth == [None] * 8


def test_attack_frames_without_fake_depth(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  os.remove(os.path.join(root, formats.FAKE_DEPTH))
  _error(lambda: _read_fedgpad(root),
         f"{os.path.join(root, 'image_list_fake.txt')}:1: the attack frames' depth map "
         f"{os.path.join(root, formats.FAKE_DEPTH)} does not exist; "
         "data.pad_lists.depth='ones' trains without depth files.")


def test_a_path_with_fewer_directories_than_k(tmp_path):
  root = _fedgpad_root(tmp_path / 'C')
  _error(lambda: _read_fedgpad(root, depth_dirs=3),
         f"{os.path.join(root, 'image_list_real.txt')}:1: the path live0/0.png has fewer than 3 "
         'directories; its depth map is depth/<first 3 directories>/<stem>_depth.jpg.')


@pytest.mark.parametrize('line', ['live0/0.png', 'live0/0.png 1 extra'])
def test_a_malformed_line(tmp_path, line):
  root = _fedgpad_root(tmp_path / 'O')
  lists = os.path.join(root, 'image_list_real.txt')
  _rewrite(lists, _lines(lists) + [line])
  _error(lambda: _read_fedgpad(root),
         f'{lists}:5: malformed line {line!r}; expected "<path> <label>".')


@pytest.mark.parametrize('emptied, kind', [('image_list_real.txt', 'live'),
                                           ('image_list_fake.txt', 'attack')])
def test_a_data_center_with_no_live_or_no_attack_frames(tmp_path, emptied, kind):
  root = _fedgpad_root(tmp_path / 'O')
  _rewrite(os.path.join(root, emptied), [])
  _error(lambda: _read_fedgpad(root),
         f"{os.path.join(root, 'image_list_real.txt')}, "
         f"{os.path.join(root, 'image_list_fake.txt')}: the data center at {root} has no {kind} "
         'frames in its train split.')


def test_the_print_and_video_lists_label_their_attacks_species(tmp_path):
  root = _fedgpad_root(tmp_path / 'O')
  fake = _lines(os.path.join(root, 'image_list_fake.txt'))
  _rewrite(os.path.join(root, 'image_list_print.txt'), fake[:2])
  _rewrite(os.path.join(root, 'image_list_video.txt'), fake[2:])
  assert _read_fedgpad(root).species == [None] * 8                  # '_fake' says nothing
  printed = _read_fedgpad(root, attack_list='print')
  assert printed.species == [None] * 4 + ['print'] * 2
  assert _read_fedgpad(root, attack_list='video').species == [None] * 4 + ['replay'] * 2
  # In the source: live -1, the species' index in ATTACKS, unknown -2.
  np.testing.assert_array_equal(pad_lists_source.attack_codes(printed), [-1] * 4 + [0] * 2)
  np.testing.assert_array_equal(pad_lists_source.attack_codes(_read_fedgpad(root)),
                                [-1] * 4 + [-2] * 4)
  assert (ATTACKS.index('print'), ATTACKS.index('replay')) == (0, 3)
  # The evaluation list (image_list_all.txt) labels no species.
  assert formats.read_fedgpad(root, 'test', depth_dirs=1).species == [None] * 8


def test_a_live_label_in_the_fake_list_counts_as_live(tmp_path):
  # The label decides, not the list (the authors' loader reads the label from the line).
  root = _fedgpad_root(tmp_path / 'O')
  fake = os.path.join(root, 'image_list_fake.txt')
  _rewrite(fake, [line.replace(' 0', ' 1') for line in _lines(fake)])
  _error(lambda: _read_fedgpad(root, depth_policy='ones'),
         f"{os.path.join(root, 'image_list_real.txt')}, {fake}: the data center at {root} has no "
         'attack frames in its train split.')


def test_an_unreadable_image(tmp_path, monkeypatch):
  root = _fedgpad_root(tmp_path / 'O')
  with open(os.path.join(root, 'live0', '1.png'), 'wb') as f:
    f.write(b'not an image')
  frames = _read_fedgpad(root)
  real = os.path.join(root, 'image_list_real.txt')
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{real}:2: cannot read the image {os.path.join(root, 'live0', '1.png')} (")):
    formats.load_frames(frames, 8, 32, train=True)
  logged = []
  monkeypatch.setattr(formats.logging, 'warning', lambda *args: logged.append(args))
  kept, images, depth = formats.load_frames(frames, 8, 32, train=True, skip_bad_records=True)
  assert len(kept.paths) == len(images) == len(depth) == 7 and logged[0][1] == 1
  assert os.path.join(root, 'live0', '1.png') not in kept.paths
  np.testing.assert_array_equal(depth[:3], 0.5)      # the live maps, then fake_depth's zeros
  np.testing.assert_array_equal(depth[3:], 0.0)


def test_threads_decode_the_same_frames_and_name_the_same_first_bad_line(tmp_path):
  root = _fedgpad_root(tmp_path / 'O', videos=3, frames=3)
  frames = _read_fedgpad(root)
  one = formats.load_frames(frames, 8, 32, train=True)
  for threads in (2, 5):
    many = formats.load_frames(frames, 8, 32, train=True, threads=threads)
    assert many[0].paths == one[0].paths and many[0].origins == one[0].origins
    np.testing.assert_array_equal(many[1], one[1])
    np.testing.assert_array_equal(many[2], one[2])
  for f in ('1.png', '2.png'):                 # two bad lines: the first in list order is named
    with open(os.path.join(root, 'live1', f), 'wb') as out:
      out.write(b'not an image')
  real = os.path.join(root, 'image_list_real.txt')
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{real}:5: cannot read the image {os.path.join(root, 'live1', '1.png')} (")):
    formats.load_frames(frames, 8, 32, train=True, threads=4)


def test_frames_are_decoded_on_several_threads_only_when_large(tmp_path):
  # The first file's header decides: 90x90 and up on every CPU given, smaller on one thread.
  paths = []
  for side in (89, 90, 256):
    paths.append(str(tmp_path / f'{side}.png'))
    formats.save_image(paths[-1], np.zeros((side, side, 3), np.uint8))
  assert [formats.decode_threads([p], 4) for p in paths] == [1, 4, 4]
  assert formats.decode_threads(paths[1:], 1) == 1
  bad = tmp_path / 'bad.png'
  bad.write_bytes(b'not an image')
  assert formats.decode_threads([str(bad)] + paths, 4) == 1   # load_frames names the bad line
  assert formats.decode_threads([], 4) == 1


def test_ssdg_bad_entries(tmp_path):
  root = str(tmp_path / 'C')
  formats.save_image(os.path.join(root, 'v/1.png'), _image(0))
  path = os.path.join(root, 'train_label.json')
  cases = [
      ([('v/1.png', 1, 'a'), ('v/9.png', 0, 'b')],
       f'{path}: entry 1: the frame {os.path.join(root, "v/9.png")} does not exist.'),
      ([('v/1.png', 3, 'a')], f"{path}: entry 0: label '3'; expected 0 (attack) or 1 (live)."),
  ]
  for entries, message in cases:
    formats.write_ssdg_list(path, entries)
    _error(lambda: formats.read_ssdg(root, 'train', frames_per_video=1), message)
  with open(path, 'w') as f:
    json.dump([{'photo_label': 1}], f)
  _error(lambda: formats.read_ssdg(root, 'train', frames_per_video=1),
         f"{path}: entry 0: malformed entry {{'photo_label': 1}}; expected \"photo_path\" and "
         '"photo_label".')
  formats.write_ssdg_list(path, [('v/1.png', 1)])     # one frame: SSDG's index 6 is past it
  _error(lambda: formats.read_ssdg(root, 'train', frames_per_video=1),
         f"{path}: entry 0: video v has 1 frames; SSDG's sampling keeps frames [6] "
         '(6 + j*floor(n/k), k=1).')


def test_mcio_bad_lines(tmp_path):
  root = _mcio_root(tmp_path / 'M')
  os.remove(os.path.join(root, 'test/real/1_2_frame1.png'))
  lists = os.path.join(root, 'casia_real_test.txt')
  _error(lambda: formats.read_mcio(root, 'test'),
         f"{lists}:2: the frame {os.path.join(root, 'test/real/1_2_frame1.png')} does not exist.")
  _rewrite(lists, ['test/real/1_1_frame0.png 1'])     # a label: not this layout's
  _error(lambda: formats.read_mcio(root, 'test'),
         f"{lists}:1: malformed line 'test/real/1_1_frame0.png 1'; expected one frame path.")
  _rewrite(lists, ['test/real/1_1.png'])      # one frame (WCS's lines): it must exist
  _error(lambda: formats.read_mcio(root, 'test'),
         f"{lists}:1: the frame {os.path.join(root, 'test/real/1_1.png')} does not exist.")


def test_skip_bad_records_drops_them_and_says_how_many_in_one_line(tmp_path, monkeypatch):
  root = _fedgpad_root(tmp_path / 'O')
  real = os.path.join(root, 'image_list_real.txt')
  _rewrite(real, _lines(real) + ['gone/0.png 1', 'live0/0.png 7', 'three words here'])
  os.remove(os.path.join(root, 'depth', 'live1', '1_depth.jpg'))
  logged = []
  monkeypatch.setattr(formats.logging, 'warning', lambda *args: logged.append(args))
  frames = _read_fedgpad(root, skip_bad_records=True)
  assert len(frames.paths) == 7               # 8 good frames, one without its depth map
  assert len(logged) == 1 and logged[0][1] == 4
  assert logged[0][3] == f"{real}:6: label '7'; expected 0 (attack) or 1 (live)."


# -- the source: its section's checks ----------------------------------------------------------

def _lists_config(tmp_path, layout='fedgpad', algorithm='fedpad'):
  config = load_config(f'pad/{algorithm}', 'runlocal')
  config.data.source = 'pad_lists'
  p = config.data.pad_lists
  p.roots = tuple(str(tmp_path / c) for c in p.centers)
  p.layouts = (layout,) * 3
  p.target_root, p.target_layout = str(tmp_path / 'M'), layout
  return config


def test_every_anti_spoofing_config_carries_the_section():
  config = load_config('pad/fedgpad', 'runlocal')
  assert 'pad_lists' in sources.of_task('anti_spoofing')
  assert config.data.pad_lists.depth == 'maps'


@pytest.mark.parametrize('field, value, message', [
    ('layouts', ('fedgpad', 'fedgpad'), "config.data.pad_lists.layouts=('fedgpad', 'fedgpad'); "
                                        "expected one per data center ('O', 'C', 'I')."),
    ('target_layout', 'csv', "config.data.pad_lists.target_layout='csv'; expected one of "
                             "('fedgpad', 'ssdg', 'mcio', 'celeba_spoof')."),
    ('depth', 'none', "config.data.pad_lists.depth='none'; expected one of ('maps', 'ones') "
                      "('none', no depth loss, is not supported: the PAD losses need a depth "
                      'target per frame).'),
    ('centers', ('O', 'X', 'I'), "config.data.pad_lists.depth_dirs: data center 'X' has no "
                                 'default k'),
    ('frames_per_video', (1,), 'config.data.pad_lists.frames_per_video=(1,); expected (frames '
                               'per training video, frames per evaluation video)'),
    ('attack_lists', ('print', 'fake', 'fake'), "config.data.pad_lists.attack_lists entry "
                                                "'print' (data center O, layout 'ssdg')"),
])
def test_check_config_names_the_field(tmp_path, field, value, message):
  config = _lists_config(tmp_path, layout='ssdg')
  with pytest.raises(ValueError, match='^' + re.escape(
      f"config.data.pad_lists: the roots {[str(tmp_path / c) for c in 'OCIM']} are not "
      'directories.')):
    sources.check_config(config)
  for center in 'OCIM':
    os.makedirs(tmp_path / center)
  sources.check_config(config)
  config.data.pad_lists[field] = value
  with pytest.raises(ValueError, match='^' + re.escape(message)):
    sources.check_config(config)


def test_the_protocol_names_every_training_source_and_run_name_stays(tmp_path):
  config = load_config('pad/fedpad', 'runlocal')
  assert pad_source.run_name(config) == 'O+C+I->M'          # archived runs' names
  assert pad_source.protocol(config) == 'O&C&I -> M'
  config.data.pad.pooled = True
  assert (pad_source.run_name(config), pad_source.protocol(config)) == ('pooled O+C+I->M',
                                                                        'O&C&I -> M')
  lists = _lists_config(tmp_path)
  assert pad_lists_source.protocol(lists) == 'O&C&I -> M'
  # A training-only MCIO data set (FLIP's CelebA-Spoof lists) is a '+' source.
  lists.data.pad_lists.update({'centers': ('O', 'celeb', 'C', 'I'),
                               'datasets': ('oulu', 'celeb', 'casia', 'replay')})
  assert pad_lists_source.protocol(lists) == 'O&C&I+celeb -> M'
  assert pad_lists_source.run_name(lists) == 'O+celeb+C+I->M'


def test_depth_ones_gives_all_ones_live_maps(tmp_path):
  for center in ('O', 'C', 'I', 'M'):
    _fedgpad_root(tmp_path / center, k=3)
  config = _lists_config(tmp_path)
  config.data.pad_lists.depth = 'ones'
  data = sources.load(config)
  live = data.train_labels % 2 == 1
  np.testing.assert_array_equal(data.train_targets['depth'][live], 1.0)
  np.testing.assert_array_equal(data.train_targets['depth'][~live], 0.0)
  assert data.train_images.shape == (24, 32, 32, 3)         # resized to data.image_size
  assert [c.tolist() for c in data.client_identities] == [[0, 1], [2, 3], [4, 5]]
  np.testing.assert_array_equal(data.train_labels, np.repeat([1, 0, 3, 2, 5, 4], 4))


def test_each_held_out_frame_carries_its_data_center_and_gets_its_own_models_error(tmp_path):
  # FLIP's MCIO tree, one root a data set, with CelebA-Spoof's training-only lists between O and
  # C: the lists name no subject, yet each held-out frame keeps its center's index in `centers`
  # (C is center 2, not the second held-out set), and each center's in-domain error is its own
  # personal model's (issue 61 part 5; eval/pad/evaluators.py:personal_in_domain).
  for center, name in (('O', 'oulu'), ('celeb', 'celeb'), ('C', 'casia'), ('M', 'msu')):
    _mcio_root(tmp_path / center, name)
  config = _lists_config(tmp_path, layout='mcio')
  config.data.pad_lists.update({'centers': ('O', 'celeb', 'C'),
                                'roots': tuple(str(tmp_path / c) for c in ('O', 'celeb', 'C')),
                                'layouts': ('mcio',) * 3, 'datasets': ('oulu', 'celeb', 'casia'),
                                'target_dataset': 'msu', 'depth': 'ones'})
  config.federated.num_clients = 3
  data = pad_lists_source.load(config)
  sets = pad_lists_source.pad_sets(config, data)
  validation = sets.validation
  np.testing.assert_array_equal(validation.subject, -1)
  np.testing.assert_array_equal(validation.center, np.repeat([0, 2], 8))   # 8 frames a set
  scored_by = []

  def model(k):
    def live_logits(inputs):
      scored_by.append((k, len(inputs)))
      return np.zeros(len(inputs)) if k == 0 else np.linspace(-1.0, 1.0, len(inputs))
    return live_logits
  setup = types.SimpleNamespace(fed_view=types.SimpleNamespace(num_clients=3))
  out = pad_evaluators.personal_in_domain(model, sets, setup, 64, 'video', 'test')
  got = out['in_domain_personal']
  assert scored_by == [(0, 8), (2, 8)]
  assert list(got['centers']) == ['O', 'C'] and got['without_held_out'] == ['celeb']
  # O's model scores every frame alike: one tie, AUC 1/2 (metrics.pad_metrics).
  assert got['centers']['O']['auc'] == 0.5


# -- the exported embedded benchmark, bit for bit -----------------------------------------------

def _method_config(algorithm: str):
  """The runlocal config of a method. The readers are the subject, not the network: FedPAD trains
  the Table II network (EI, C and the depth head Dep, so the depth maps are read and trained on),
  whose runs compile in a fraction of its default ResNet-18's time. The data section is the same
  for both backbones and for FedGPAD, whose further parts (ES, Dec) read nothing else."""
  arg = 'backbone=pad_net,runlocal' if algorithm == 'fedpad' else 'runlocal'
  return load_config(f'pad/{algorithm}', arg)


def _run(config, workdir) -> tuple[dict, dict]:
  results = experiment.train_and_evaluate(config, str(workdir))
  digests = workdir / 'checkpoint_digests'
  last = max(int(n[:-5]) for n in os.listdir(digests))
  return results['pad'], json.loads((digests / f'{last}.json').read_text())


@pytest.fixture(scope='module')
def in_memory(tmp_path_factory):
  runs = {}

  def get(algorithm):
    if algorithm not in runs:
      runs[algorithm] = _run(_method_config(algorithm),
                             tmp_path_factory.mktemp(f'{algorithm}_in_memory'))
    return runs[algorithm]
  return get


def _read_back(config, layout, folder):
  """The config reading its own data exported in `layout` to `folder`, after checking that what
  a run reads of it (the training frames, labels, depth maps and data centers; each evaluation
  set's frames, labels and videos) equals the in-memory data's."""
  fields = export_pad.export(config, layout, str(folder))
  memory = pad_source.load(config)
  config.data.source = 'pad_lists'
  config.data.pad_lists.update(fields)
  read = pad_lists_source.load(config)
  np.testing.assert_array_equal(read.train_images, memory.train_images)
  np.testing.assert_array_equal(read.train_labels, memory.train_labels)
  np.testing.assert_array_equal(read.train_targets['depth'], memory.train_targets['depth'])
  assert read.num_identities == memory.num_identities
  assert [c.tolist() for c in read.client_identities] == [
      c.tolist() for c in memory.client_identities]
  assert list(read.eval_sets) == list(memory.eval_sets)
  for name, expected in memory.eval_sets.items():
    got = read.eval_sets[name]
    for field in ('images', 'live', 'split'):
      np.testing.assert_array_equal(getattr(got, field), getattr(expected, field), err_msg=name)
    # The lists name their own video ids: the same frames grouped into the same videos.
    pairs = set(zip(got.video.tolist(), expected.video.tolist()))
    assert len(pairs) == len(set(got.video.tolist())) == len(set(expected.video.tolist())), name
  return config


# The ISO keys that need each attack's species (eval/pad/iso.py:iso_metrics).
SPECIES_KEYS = ('apcer_species', 'apcer_worst', 'worst_species', 'acer', 'attacks_by_species',
                'attacks_unknown_species')


def _iso_levels(metrics: dict) -> list[dict]:
  iso = metrics['iso']
  return [m for by_level in [iso['in_domain'], *iso['domains'].values()]
          for m in by_level.values()]


def _species_free(metrics: dict) -> dict:
  """`metrics` with SPECIES_KEYS left out of every 'iso' set and level."""
  out = json.loads(json.dumps(metrics))
  for m in _iso_levels(out):
    for key in SPECIES_KEYS:
      del m[key]
  return out


@pytest.mark.parametrize('algorithm, layout', [
    ('fedpad', 'fedgpad'),
    # The same equality read from the other two layouts (FEDJAX_FACE_TESTS=full): what their
    # readers give a run is checked in the suite, below.
    pytest.param('fedpad', 'ssdg', marks=pytest.mark.full),
    pytest.param('fedpad', 'mcio', marks=pytest.mark.full)])
def test_a_run_on_the_exported_lists_equals_the_in_memory_run(tmp_path, in_memory, algorithm,
                                                              layout):
  config = _read_back(_method_config(algorithm), layout, tmp_path / 'export')
  pad_metrics, digests = _run(config, tmp_path / 'run')
  expected_metrics, expected_digests = in_memory(algorithm)
  # The lists' evaluation files name no species (image_list_all.txt, SSDG's and MCIO's lists):
  # every attack's is unknown there; every other number is the in-memory run's.
  assert _species_free(pad_metrics) == _species_free(expected_metrics)
  for read, memory in zip(_iso_levels(pad_metrics), _iso_levels(expected_metrics)):
    assert (read['apcer_species'], read['acer']) == ({}, None)
    assert read['attacks_unknown_species'] == sum(memory['attacks_by_species'].values()) > 0
  assert digests == expected_digests


@pytest.mark.parametrize('layout', ['ssdg', 'mcio'])
def test_the_exported_lists_read_back_as_the_in_memory_data(tmp_path, layout):
  _read_back(_method_config('fedpad'), layout, tmp_path / 'export')


def test_the_print_and_video_lists_give_table_x_attack_types(tmp_path):
  # Read back with one attack list per data center, the full export equals the in-memory
  # benchmark with the same attack types (`attacks=print-video-print`).
  config = load_config('pad/fedpad', 'runlocal')
  fields = export_pad.export(config, 'fedgpad', str(tmp_path / 'export'))
  # One attack type per data center (print first, then video where its training subjects
  # have one).
  attacks, kinds = [], {'print': ('print', 'cut'), 'video': ('display', 'replay')}
  for i, name in enumerate(config.data.pad.sources):
    frames = pad_source.domain_frames(name, config)
    held = {ATTACKS[a] for a in frames.attack[(frames.split == 0) & ~frames.live]}
    order = ('print', 'video') if i == 0 else ('video', 'print')
    attacks.append(next(t for t in order if held & set(kinds[t])))
  assert len(set(attacks)) == 2
  config.data.pad.center_attacks = tuple('+'.join(kinds[t]) for t in attacks)
  memory = pad_source.load(config)
  config.data.source = 'pad_lists'
  config.data.pad_lists.update(fields)
  config.data.pad_lists.attack_lists = tuple(attacks)
  sources.check_config(config)
  read = pad_lists_source.load(config)
  np.testing.assert_array_equal(read.train_images, memory.train_images)
  np.testing.assert_array_equal(read.train_labels, memory.train_labels)


def test_mcio_export_needs_two_frames_a_video(tmp_path):
  config = load_config('pad/fedpad', 'runlocal')
  config.data.pad.frames = 3
  with pytest.raises(ValueError, match=re.escape(
      'config.data.pad.frames=3; the mcio layout holds two frames a video (frame0, frame1): '
      'expected 2.')):
    export_pad.export(config, 'mcio', str(tmp_path))


def test_the_export_command_prints_the_flags_that_read_it_back(tmp_path):
  command = forked_commands.run_module(
      'fedjax_face.tools.export_pad', '--layout=ssdg',
      f'--config={config_path("pad/fedpad")}:runlocal', f'--out={tmp_path}')
  assert command.returncode == 0, command.stderr
  out = command.stdout
  assert out.startswith('--config.data.source=pad_lists \\\n')
  assert f'--config.data.pad_lists.target_root={tmp_path}/M' in out
  assert sorted(os.listdir(tmp_path / 'O')) == ['depth', 'test', 'test_label.json', 'train',
                                                'train_label.json']
