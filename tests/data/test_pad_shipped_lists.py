"""The MCIO layout as FLIP and FedSIS ship it (issue 56, item 8b): one `txt/` folder holding every
data set's lists, paths relative to `frame/` (`data/MCIO`: CASIA, MSU, OULU, Idiap and
CelebA-Spoof's training-only lists; `data/WCS`: WMCA, CeFA, SURF, one frame a line), read as one
root with the data set named in the config. The tree is written here with this file's own writer
(8x8 frames, each its own pixels), and every frame, label and video read is checked. WCS's three
leave-one-out protocols (two sets the data centers, the third the target) load through the same
reader, each with its protocol string; CelebA-Spoof's lists are a '+' (training-only) source in
it. A bad list stops `fedjax_face.main` with one line, exit status 2 and no workdir (item 9)."""

import os
import re
import zlib

import numpy as np
import pytest

from fedjax_face.data import sources
from fedjax_face.data.formats import pad_lists as formats
from tests import main_in_process
from tests.config_files import config_path, load_config

MCIO = ('casia', 'msu', 'oulu', 'replay')
WCS = ('cefa', 'surf', 'wmca')


def _pixels(rel: str) -> np.ndarray:
  """The frame written at `rel`: random, seeded by its path, so that no two frames are equal."""
  return np.random.default_rng(zlib.crc32(rel.encode())).integers(0, 256, (8, 8, 3), np.uint8)


def _write_list(path: str, rows: list[str]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.write(''.join(f'{row}\n' for row in rows))


def _frame(root: str, rel: str) -> None:
  formats.save_image(os.path.join(root, 'frame', rel), _pixels(rel))


def _mcio_tree(root) -> str:
  """FLIP's `data/MCIO`: per data set and split, two live and two attack videos of two frames
  (`<ds>/<split>/<real|fake>/<video>_frame{0,1}.png`, frame0 listed, lines in no order), FLIP's
  few-shot `_shot.txt` lists beside them (not read), and CelebA-Spoof's training lists of single
  images (`celeb/<real|fake>/<n>_<live|spoof>_<id>.jpg`)."""
  root = str(root)
  for ds in MCIO:
    for split in ('train', 'test'):
      for kind in ('real', 'fake'):
        frame0 = [f'{ds}/{split}/{kind}/{v}_frame0.png' for v in ('2_1', '1_HR_1')]
        for rel in frame0:
          _frame(root, rel)
          _frame(root, formats.frame1_path(rel))
        _write_list(os.path.join(root, 'txt', f'{ds}_{kind}_{split}.txt'), frame0)
        _write_list(os.path.join(root, 'txt', f'{ds}_{kind}_shot.txt'), frame0[:1])
  for kind, word in (('real', 'live'), ('fake', 'spoof')):
    rows = [f'celeb/{kind}/{n}_{word}_{n * 7:06d}.jpg' for n in (12, 3)]
    for rel in rows:
      _frame(root, rel)
    _write_list(os.path.join(root, 'txt', f'celeb_{kind}_train.txt'), rows)
  return root


def _wcs_tree(root) -> str:
  """FLIP's `data/WCS`: each line one frame (`<ds>/<split>/<real|fake>/<name>_<nn>.jpg`)."""
  root = str(root)
  for ds in WCS:
    for split in ('train', 'test'):
      for kind in ('real', 'fake'):
        rows = [f'{ds}/{split}/{kind}/3_2{n}_1_1_1_0{n}.jpg' for n in (5, 1)]
        for rel in rows:
          _frame(root, rel)
        _write_list(os.path.join(root, 'txt', f'{ds}_{kind}_{split}.txt'), rows)
  return root


def _relative(frames, root) -> list[str]:
  return [os.path.relpath(p, os.path.join(root, 'frame')) for p in frames.paths]


@pytest.fixture
def mcio(tmp_path):
  return _mcio_tree(tmp_path / 'MCIO')


def test_the_shipped_mcio_tree_reads_the_named_data_set(mcio):
  frames = formats.read_mcio(mcio, 'train', name='casia')
  assert _relative(frames, mcio) == [
      'casia/train/fake/1_HR_1_frame0.png', 'casia/train/fake/1_HR_1_frame1.png',
      'casia/train/real/1_HR_1_frame0.png', 'casia/train/real/1_HR_1_frame1.png',
      'casia/train/fake/2_1_frame0.png', 'casia/train/fake/2_1_frame1.png',
      'casia/train/real/2_1_frame0.png', 'casia/train/real/2_1_frame1.png']
  np.testing.assert_array_equal(frames.live, [0, 0, 1, 1, 0, 0, 1, 1])
  np.testing.assert_array_equal(frames.video, [0, 0, 1, 1, 2, 2, 3, 3])
  assert frames.videos == ['casia/train/fake/1_HR_1', 'casia/train/real/1_HR_1',
                           'casia/train/fake/2_1', 'casia/train/real/2_1']
  assert frames.origins[2] == f"{os.path.join(mcio, 'txt', 'casia_real_train.txt')}:2"
  for path, rel in zip(frames.paths, _relative(frames, mcio)):
    np.testing.assert_array_equal(formats.load_image(path, '', 8), _pixels(rel))
  # The `txt/` folder itself as the root reads the same (its paths from `frame/` beside it).
  txt = formats.read_mcio(os.path.join(mcio, 'txt'), 'train', name='casia')
  assert (txt.paths, txt.origins, txt.videos) == (frames.paths, frames.origins, frames.videos)
  np.testing.assert_array_equal(txt.video, frames.video)
  test = formats.read_mcio(mcio, 'test', name='msu')
  assert _relative(test, mcio)[:2] == ['msu/test/fake/1_HR_1_frame0.png',
                                       'msu/test/fake/1_HR_1_frame1.png']


def test_an_unnamed_data_set_in_the_shipped_tree_asks_for_its_name(mcio):
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{os.path.join(mcio, 'txt')}: expected one <ds>_real_train.txt (MCIO lists), found "
      "['casia', 'celeb', 'msu', 'oulu', 'replay']; name the data set of each root "
      '(data.pad_lists.datasets, target_dataset).') + '$'):
    formats.read_mcio(mcio, 'train')
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{os.path.join(mcio, 'txt', 'siw_real_train.txt')}: no such list file (MCIO lists of "
      "data set 'siw'); the lists there: ['casia', 'celeb', 'msu', 'oulu', 'replay'].") + '$'):
    formats.read_mcio(mcio, 'train', name='siw')


def test_celeba_spoof_reads_for_training_and_refuses_a_test_split(mcio):
  frames = formats.read_mcio(mcio, 'train', name='celeb')
  # One image a line, each its own video (FLIP's loader groups only frame0 / frame1).
  assert _relative(frames, mcio) == ['celeb/real/12_live_000084.jpg',
                                     'celeb/fake/12_spoof_000084.jpg',
                                     'celeb/real/3_live_000021.jpg',
                                     'celeb/fake/3_spoof_000021.jpg']
  np.testing.assert_array_equal(frames.live, [1, 0, 1, 0])
  np.testing.assert_array_equal(frames.video, [0, 1, 2, 3])
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{os.path.join(mcio, 'txt', 'celeb_real_test.txt')}: CelebA-Spoof ('celeb') ships "
      'training lists only (celeb_{real,fake}_train.txt); expected it as a data center, never '
      'a target.') + '$'):
    formats.read_mcio(mcio, 'test', name='celeb')


def test_the_shipped_wcs_tree_reads_one_frame_a_line(tmp_path):
  wcs = _wcs_tree(tmp_path / 'WCS')
  frames = formats.read_mcio(wcs, 'test', name='wmca')
  assert _relative(frames, wcs) == [
      'wmca/test/fake/3_21_1_1_1_01.jpg', 'wmca/test/real/3_21_1_1_1_01.jpg',
      'wmca/test/fake/3_25_1_1_1_05.jpg', 'wmca/test/real/3_25_1_1_1_05.jpg']
  np.testing.assert_array_equal(frames.live, [0, 1, 0, 1])
  np.testing.assert_array_equal(frames.video, [0, 1, 2, 3])
  for path, rel in zip(frames.paths, _relative(frames, wcs)):
    np.testing.assert_array_equal(formats.load_image(path, '', 8), _pixels(rel))
  assert len(formats.read_mcio(wcs, 'train', name='cefa').paths) == 4
  assert len(formats.read_mcio(wcs, 'train', name='surf').paths) == 4


def test_a_missing_frame_of_the_shipped_tree_names_its_list_line(mcio):
  os.remove(os.path.join(mcio, 'frame', 'oulu/test/real/2_1_frame1.png'))
  with pytest.raises(formats.PadListError, match='^' + re.escape(
      f"{os.path.join(mcio, 'txt', 'oulu_real_test.txt')}:1: the frame "
      f"{os.path.join(mcio, 'frame', 'oulu/test/real/2_1_frame1.png')} does not exist.") + '$'):
    formats.read_mcio(mcio, 'test', name='oulu')


# -- the source: one root for every data center -------------------------------------------------

def _config(roots: dict, datasets=('oulu', 'casia', 'replay'), target=('M', 'msu')):
  """FedPAD's runlocal config reading `data.pad_lists` from `roots` (data set -> root)."""
  config = load_config('pad/fedpad', 'runlocal')
  config.data.source = 'pad_lists'
  p = config.data.pad_lists
  p.centers = ('O', 'C', 'I', 'celeb')[:len(datasets)]
  p.roots = tuple(roots[d] for d in datasets)
  p.layouts = ('mcio',) * len(datasets)
  p.target, p.target_root, p.target_layout = target[0], roots[target[1]], 'mcio'
  p.depth = 'ones'
  if any(os.path.isdir(os.path.join(r, 'txt')) for r in roots.values()):
    p.datasets, p.target_dataset = tuple(datasets), target[1]
  config.federated.num_clients = len(datasets)
  return config


def _per_set_roots(mcio: str, out) -> dict:
  """Today's workaround (docs/pad.md, before): a root per data set, holding its lists and a link
  to its frames, so that the lists' paths are relative to the root."""
  roots = {}
  for ds in MCIO + ('celeb',):
    root = roots[ds] = str(out / ds)
    os.makedirs(root)
    os.symlink(os.path.join(mcio, 'frame', ds), os.path.join(root, ds))
    for name in os.listdir(os.path.join(mcio, 'txt')):
      if name.startswith(f'{ds}_'):
        os.symlink(os.path.join(mcio, 'txt', name), os.path.join(root, name))
  return roots


def test_per_set_roots_and_the_shipped_tree_read_identically(mcio, tmp_path):
  shipped = _config({ds: mcio for ds in MCIO})
  linked = _config(_per_set_roots(mcio, tmp_path / 'linked'))
  assert tuple(linked.data.pad_lists.datasets) == ()      # today's config, unchanged
  for config in (shipped, linked):
    sources.check_config(config)
  a, b = sources.load(shipped), sources.load(linked)
  np.testing.assert_array_equal(a.train_images, b.train_images)
  np.testing.assert_array_equal(a.train_labels, b.train_labels)
  np.testing.assert_array_equal(a.train_targets['depth'], b.train_targets['depth'])
  for name in ('test', 'validation'):
    for field in ('images', 'live', 'video'):
      np.testing.assert_array_equal(getattr(a.eval_sets[name], field),
                                    getattr(b.eval_sets[name], field))
  # O, C, I: 8 frames each, live = odd label, in the lists' sorted order.
  np.testing.assert_array_equal(a.train_labels, np.repeat([0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5],
                                                           2))
  assert a.eval_sets['test'].images.shape == (8, 32, 32, 3)
  assert a.eval_sets['validation'].images.shape == (24, 32, 32, 3)


def test_celeba_spoof_is_a_training_client_without_validation_frames(mcio):
  config = _config({ds: mcio for ds in MCIO + ('celeb',)},
                   datasets=('oulu', 'casia', 'replay', 'celeb'))
  sources.check_config(config)
  data = sources.load(config)
  assert [c.tolist() for c in data.client_identities] == [[0, 1], [2, 3], [4, 5], [6, 7]]
  np.testing.assert_array_equal(data.train_labels[24:], [7, 6, 7, 6])
  assert data.eval_sets['validation'].images.shape == (24, 32, 32, 3)   # O, C, I only


def test_celeba_spoof_s_protocol_names_it_as_a_training_only_source(mcio):
  config = _config({ds: mcio for ds in MCIO + ('celeb',)},
                   datasets=('oulu', 'casia', 'replay', 'celeb'))
  data = sources.load(config)
  sets = sources.get('pad_lists').pad_sets(config, data)
  assert (sets.protocol, sets.sources) == ('O&C&I+celeb -> M', ('O', 'C', 'I', 'celeb'))
  assert sources.run_name(config) == 'O+C+I+celeb->M'


# -- WMCA / CASIA-SURF / CeFA leave-one-out from FLIP's `data/WCS` -------------------------------

WCS_NAMES = {'cefa': 'C', 'surf': 'S', 'wmca': 'W'}


@pytest.fixture(scope='module')
def wcs(tmp_path_factory):
  return _wcs_tree(tmp_path_factory.mktemp('data') / 'WCS')


@pytest.mark.parametrize('target, protocol', [('wmca', 'C&S -> W'), ('cefa', 'S&W -> C'),
                                              ('surf', 'C&W -> S')])
def test_wcs_leave_one_out_trains_on_two_sets_and_scores_the_third(wcs, target, protocol):
  centers = [ds for ds in WCS if ds != target]
  config = load_config('pad/fedpad', 'runlocal')
  config.data.source = 'pad_lists'
  p = config.data.pad_lists
  p.centers = tuple(WCS_NAMES[ds] for ds in centers)
  p.roots, p.layouts, p.datasets = (wcs, wcs), ('mcio', 'mcio'), tuple(centers)
  p.target, p.target_root = WCS_NAMES[target], wcs
  p.target_layout, p.target_dataset = 'mcio', target
  p.depth = 'ones'
  config.federated.num_clients = 2
  sources.check_config(config)
  data = sources.load(config)
  # Each set: 2 live and 2 attack frames a split, one frame a video, sorted by the frame's name
  # ('3_21...' before '3_25...'; fake before real): attack, live, attack, live.
  np.testing.assert_array_equal(data.train_labels, [0, 1, 0, 1, 2, 3, 2, 3])
  test = data.eval_sets['test']
  np.testing.assert_array_equal(test.live, [0, 1, 0, 1])
  np.testing.assert_array_equal(test.video, [0, 1, 2, 3])
  np.testing.assert_array_equal(test.attack, [-2, -1, -2, -1])   # WCS's lists name no species
  for image, rel in zip(test.images, [f'{target}/test/{kind}/3_2{n}_1_1_1_0{n}.jpg'
                                      for n in (1, 5) for kind in ('fake', 'real')]):
    np.testing.assert_array_equal(image, formats.load_image(os.path.join(wcs, 'frame', rel),
                                                            '', 32))
  assert data.eval_sets['validation'].images.shape == (8, 32, 32, 3)   # the two data centers'
  sets = sources.get('pad_lists').pad_sets(config, data)
  assert (sets.protocol, sets.target) == (protocol, WCS_NAMES[target])


@pytest.mark.parametrize('fields, message', [
    ({'target_dataset': 'celeb'},
     "config.data.pad_lists.target_dataset='celeb'; CelebA-Spoof ships training lists only: "
     'expected a data set with test lists (it may be a data center).'),
    ({'datasets': ('oulu', 'casia')},
     "config.data.pad_lists.datasets=('oulu', 'casia'); expected () or one per data center "
     "('O', 'C', 'I')."),
    ({'datasets': ('celeb', 'celeb', 'celeb')},
     "config.data.pad_lists.datasets=('celeb', 'celeb', 'celeb'); expected a data center with "
     "test lists (the 'validation' frames) besides ('celeb',)."),
    ({'layouts': ('fedgpad', 'mcio', 'mcio')},
     "config.data.pad_lists.datasets[0]='oulu' with layout 'fedgpad'; a data set is named only "
     "for the 'mcio' layout: expected ''."),
])
def test_check_config_names_the_data_set_field(mcio, fields, message):
  config = _config({ds: mcio for ds in MCIO})
  config.data.pad_lists.update(fields)
  with pytest.raises(ValueError, match='^' + re.escape(message) + '$'):
    sources.check_config(config)


# -- a bad list through the command line: one line, status 2, no workdir (item 9) ---------------

def test_a_label_of_2_stops_main_with_one_line_and_no_workdir(tmp_path, monkeypatch, capsys):
  roots = {}
  for center in ('O', 'C', 'I', 'M'):
    root = roots[center] = str(tmp_path / center)
    rows = []
    for v, live in (('live0', 1), ('spoof0', 0)):
      formats.save_image(os.path.join(root, v, '0.png'), _pixels(f'{center}{v}'))
      rows.append((f'{v}/0.png', live))
    formats.write_fedgpad_list(os.path.join(root, 'image_list_real.txt'), rows[:1])
    formats.write_fedgpad_list(os.path.join(root, 'image_list_fake.txt'), rows[1:])
    formats.write_fedgpad_list(os.path.join(root, 'image_list_all.txt'), rows)
  bad = os.path.join(roots['C'], 'image_list_fake.txt')
  with open(bad, 'w') as f:
    f.write('spoof0/0.png 2\n')
  workdir = tmp_path / 'run'
  code, err = main_in_process.run(
      monkeypatch, capsys, f"--config={config_path('pad/fedpad')}:runlocal",
      f'--workdir={workdir}', '--config.data.source=pad_lists',
      '--config.data.pad_lists.depth=ones',
      f"--config.data.pad_lists.roots=('{roots['O']}','{roots['C']}','{roots['I']}')",
      "--config.data.pad_lists.layouts=('fedgpad','fedgpad','fedgpad')",
      f"--config.data.pad_lists.target_root={roots['M']}",
      '--config.data.pad_lists.target_layout=fedgpad')
  assert code == 2
  assert err == [f"{main_in_process.PROG}: {bad}:1: label '2'; expected 0 (attack) or 1 "
                 '(live).'], err
  assert not workdir.exists()    # refused before the workdir is made
