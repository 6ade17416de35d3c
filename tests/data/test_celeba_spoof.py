"""CelebA-Spoof in its own JSON labels layout (`data/formats/celeba_spoof.py`, layout
'celeba_spoof' of `data.pad_lists`): a `CelebA_Spoof/` root written with the module's writer in
the dataset's layout (`metas/intra_test/{train,test}_label.json`, images under
`Data/<split>/<subject>/<live|spoof>/`), read back frame by frame with each attack's species and
each image cropped to its face box as the dataset's code crops; every bad entry stopped with one
line naming the file and the key (through `fedjax_face.main`: exit status 2, no workdir); and the
root as a data center and as the target of the source, its species in `PadSet.attack` and its
protocol string."""

import os
import re

import numpy as np
import pytest

from fedjax_face.data import sources
from fedjax_face.data.formats import celeba_spoof
from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.data.sources import pad_lists as pad_lists_source
from fedjax_face.data.synthetic.pad_benchmark import ATTACKS, LIVE
from tests import main_in_process
from tests.config_files import config_path, load_config

# (image path, spoof type) per split: live (0), Photo (1), Face Mask (4), Phone (9), 3D Mask (10).
IMAGES = {
    'train': [('Data/train/4980/live/000003.jpg', 0), ('Data/train/4980/spoof/494405.png', 1),
              ('Data/train/4980/spoof/494410.png', 4), ('Data/train/77/live/000001.jpg', 0),
              ('Data/train/77/spoof/100002.png', 9), ('Data/train/77/spoof/100001.png', 10)],
    'test': [('Data/test/6964/live/541083.png', 0), ('Data/test/6964/spoof/541090.png', 3),
             ('Data/test/7010/spoof/541201.png', 7), ('Data/test/7010/live/541200.png', 0)],
}


def _image(key: str) -> np.ndarray:
  rng = np.random.default_rng(sum(map(ord, key)))
  return rng.integers(0, 256, (8, 8, 3), np.uint8)


# Face boxes (x, y, w, h in 224x224 pixels): the whole image, but for one image 4x4 pixels of its
# 8x8 from (1, 2): 28 * 8/224 = 1, 56 * 8/224 = 2, 112 * 8/224 = 4.
WHOLE, CROPPED = (0, 0, 224, 224), 'Data/train/4980/spoof/494405.png'
BOXES = {CROPPED: (28, 56, 112, 112)}


def _root(root) -> str:
  root = str(root)
  for split, images in IMAGES.items():
    for key, _ in images:
      formats.save_image(os.path.join(root, key), _image(key))
      celeba_spoof.write_box(os.path.join(root, key), BOXES.get(key, WHOLE))
    celeba_spoof.write_labels(celeba_spoof.label_file(root, split),
                              {key: celeba_spoof.labels_of(kind) for key, kind in images})
  return root


@pytest.fixture
def root(tmp_path):
  return _root(tmp_path / 'CelebA_Spoof')


def test_the_json_labels_read_as_frames_with_their_species(root):
  frames = celeba_spoof.read(root, 'train')
  # One image, one video, sorted by (the video's base name, the video, the path).
  assert [os.path.relpath(p, root) for p in frames.paths] == [
      'Data/train/77/live/000001.jpg', 'Data/train/4980/live/000003.jpg',
      'Data/train/77/spoof/100001.png', 'Data/train/77/spoof/100002.png',
      'Data/train/4980/spoof/494405.png', 'Data/train/4980/spoof/494410.png']
  np.testing.assert_array_equal(frames.live, [1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(frames.video, [0, 1, 2, 3, 4, 5])
  assert frames.species == [None, None, '3d_mask', 'display', 'print', 'cut']
  path = os.path.join(root, 'metas', 'intra_test', 'train_label.json')
  assert frames.origins[2] == f"{path}: key 'Data/train/77/spoof/100001.png'"
  assert frames.depth == [None] * 6
  assert frames.boxes[4] == (28, 56, 112, 112) and frames.boxes[0] == WHOLE
  for p, box in zip(frames.paths, frames.boxes):
    key = os.path.relpath(p, root)
    if key != CROPPED:
      np.testing.assert_array_equal(formats.load_image(p, '', 8, box), _image(key))
  np.testing.assert_array_equal(formats.load_image(frames.paths[4], '', 4, frames.boxes[4]),
                                _image(CROPPED)[2:6, 1:5])
  test = celeba_spoof.read(root, 'test')
  assert test.species == [None, 'print', None, 'display']   # A4 (3) and PC (7)


def test_face_boxes_are_scaled_and_clipped_as_the_dataset_s_code_does():
  # 100x300 image, box (-56, 60, 224, 100): w = 224 * 100/224 = 100, h = int(100 * 300/224) =
  # int(133.9) = 133, x = int(-56 * 100/224) = -25, y = int(60 * 300/224) = int(80.4) = 80; the
  # left clipped to 0, the right x + w = 75 (0 + 100 does not pass 100), the bottom 80 + 133.
  assert formats.scaled_box((-56, 60, 224, 100), 100, 300) == (0, 80, 75, 213)
  # Past the right and bottom edges: the image's edge.
  assert formats.scaled_box((100, 200, 224, 100), 224, 224) == (100, 200, 224, 224)


def test_the_label_layout_is_the_readme_s():
  # [0:40] attributes, [40] spoof type, [41] illumination, [42] environment, [43] 0 live / 1 spoof.
  labels = celeba_spoof.labels_of(8, illumination=2, environment=1, attributes=range(40))
  assert labels == list(range(40)) + [8, 2, 1, 1]
  assert celeba_spoof.labels_of(0)[40:] == [0, 0, 0, 0]
  assert [celeba_spoof.SPECIES[k] for k in range(1, 11)] == [
      'print', 'print', 'print', 'cut', 'cut', 'cut', 'display', 'display', 'display', '3d_mask']


def _error(fn, message):
  with pytest.raises(formats.PadListError, match='^' + re.escape(message) + '$'):
    fn()


@pytest.mark.parametrize('value, message', [
    ([0] * 43, 'expected a list of 44 integers, got ' + repr([0] * 43) + '.'),
    ([0] * 43 + [True], 'expected a list of 44 integers, got ' + repr([0] * 43 + [True]) + '.'),
    ([0] * 40 + [1, 0, 0, 2], 'live/spoof label [43] = 2; expected 0 (live) or 1 (spoof).'),
    ([0] * 40 + [11, 0, 0, 1], "spoof type [40] = 11; expected 0..10 ('Live', 'Photo', "
                               "'Poster', 'A4', 'Face Mask', 'Upper Body Mask', 'Region Mask', "
                               "'PC', 'Pad', 'Phone', '3D Mask')."),
    ([0] * 40 + [3, 0, 0, 0], 'live/spoof label [43] = 0 with spoof type [40] = 3 (A4); '
                              'expected type 0 (Live) exactly for label 0.'),
    ([0] * 40 + [0, 0, 0, 1], 'live/spoof label [43] = 1 with spoof type [40] = 0 (Live); '
                              'expected type 0 (Live) exactly for label 0.'),
])
def test_a_bad_entry_is_named_by_its_file_and_key(root, value, message):
  path = celeba_spoof.label_file(root, 'test')
  labels = {key: celeba_spoof.labels_of(kind) for key, kind in IMAGES['test']}
  labels['Data/test/7010/spoof/541201.png'] = value
  celeba_spoof.write_labels(path, labels)
  _error(lambda: celeba_spoof.read(root, 'test'),
         f"{path}: key 'Data/test/7010/spoof/541201.png': {message}")


def test_bad_files_and_missing_images(root):
  path = celeba_spoof.label_file(root, 'test')
  os.remove(os.path.join(root, 'Data/test/7010/spoof/541201.png'))
  _error(lambda: celeba_spoof.read(root, 'test'),
         f"{path}: key 'Data/test/7010/spoof/541201.png': the frame "
         f"{os.path.join(root, 'Data/test/7010/spoof/541201.png')} does not exist.")
  image = os.path.join(root, 'Data/test/7010/live/541200.png')
  celeba_spoof.write_box(image, (224, 0, 10, 10))    # x = 8, w = 0: no pixel of the 8x8 image
  _error(lambda: formats.load_frames(celeba_spoof.read(root, 'test', skip_bad_records=True), 8,
                                     32, train=False),
         f"{path}: key 'Data/test/7010/live/541200.png': the face box (224, 0, 10, 10) leaves no "
         f'pixels of the 8x8 image {image} (crop (8, 0, 8, 0)).')
  with open(celeba_spoof.box_file(image), 'w') as f:
    f.write('1 2 3\n')
  _error(lambda: celeba_spoof.read(root, 'test'),
         f"{path}: key 'Data/test/7010/live/541200.png': {celeba_spoof.box_file(image)}:1: "
         "malformed face box '1 2 3'; expected \"x y w h score\".")
  os.remove(celeba_spoof.box_file(image))
  _error(lambda: celeba_spoof.read(root, 'test'),
         f"{path}: key 'Data/test/7010/live/541200.png': its face box file "
         f'{celeba_spoof.box_file(image)} does not exist.')
  with open(path, 'w') as f:
    f.write('{\n"Data/test/a.png": [0, 0],\n"b": \n}\n')
  _error(lambda: celeba_spoof.read(root, 'test'),
         f'{path}:4: not JSON (Expecting value).')
  with open(path, 'w') as f:
    f.write('[["Data/test/6964/live/541083.png", 0]]\n')
  _error(lambda: celeba_spoof.read(root, 'test'),
         f'{path}: expected a JSON object from image path to its 44 labels.')
  os.remove(path)
  _error(lambda: celeba_spoof.read(root, 'test'),
         f"{path}: no such label file (CelebA-Spoof's metas/intra_test/test_label.json under "
         'its root).')


def test_skip_bad_records_drops_the_bad_entries(root, monkeypatch):
  path = celeba_spoof.label_file(root, 'train')
  labels = {key: celeba_spoof.labels_of(kind) for key, kind in IMAGES['train']}
  labels['Data/train/4980/spoof/494410.png'] = [0] * 40 + [4, 0, 0, 0]
  celeba_spoof.write_labels(path, labels)
  logged = []
  monkeypatch.setattr(formats.logging, 'warning', lambda *args: logged.append(args))
  frames = celeba_spoof.read(root, 'train', skip_bad_records=True)
  assert frames.species == [None, None, '3d_mask', 'display', 'print']
  assert len(logged) == 1 and logged[0][1] == 1


# -- the source: a data center and a target in this layout --------------------------------------

def _config(root: str):
  """FedPAD's runlocal config with two data centers and the target all read from `root` (the
  wiring is the subject: which split goes where, and each frame's species)."""
  config = load_config('pad/fedpad', 'runlocal')
  config.data.source = 'pad_lists'
  p = config.data.pad_lists
  p.centers, p.roots, p.layouts = ('A', 'B'), (root, root), ('celeba_spoof',) * 2
  p.target, p.target_root, p.target_layout = 'T', root, 'celeba_spoof'
  p.depth = 'ones'
  config.federated.num_clients = 2
  return config


def test_a_celeba_spoof_root_is_a_data_center_and_a_target(root):
  config = _config(root)
  sources.check_config(config)
  data = sources.load(config)
  np.testing.assert_array_equal(data.train_labels, [1, 1, 0, 0, 0, 0, 3, 3, 2, 2, 2, 2])
  unknown = pad_lists_source.UNKNOWN_ATTACK
  test = data.eval_sets['test']
  # Sorted: 541083 (live), 541090 (A4: print), 541200 (live), 541201 (PC: display).
  np.testing.assert_array_equal(test.attack, [LIVE, ATTACKS.index('print'), LIVE,
                                              ATTACKS.index('display')])
  np.testing.assert_array_equal(test.live, [1, 0, 1, 0])
  np.testing.assert_array_equal(data.eval_sets['validation'].attack, np.tile(test.attack, 2))
  train = pad_lists_source._read(config, root, 'celeba_spoof', 'train')
  np.testing.assert_array_equal(train.attack, [LIVE, LIVE, unknown, ATTACKS.index('display'),
                                               ATTACKS.index('print'), ATTACKS.index('cut')])
  sets = pad_lists_source.pad_sets(config, data)
  assert sets.protocol == 'A&B -> T'


def test_check_config_names_the_layouts_field(root):
  config = _config(root)
  config.data.pad_lists.layouts = ('celeba_spoof', 'celeba')
  with pytest.raises(ValueError, match='^' + re.escape(
      "config.data.pad_lists.layouts[1]='celeba'; expected one of ('fedgpad', 'ssdg', 'mcio', "
      "'celeba_spoof').") + '$'):
    sources.check_config(config)


def test_a_bad_entry_stops_main_with_one_line_and_no_workdir(root, tmp_path, monkeypatch, capsys):
  path = celeba_spoof.label_file(root, 'train')
  labels = {key: celeba_spoof.labels_of(kind) for key, kind in IMAGES['train']}
  labels['Data/train/77/live/000001.jpg'] = [0] * 40 + [0, 0, 0, 2]
  celeba_spoof.write_labels(path, labels)
  workdir = tmp_path / 'run'
  code, err = main_in_process.run(
      monkeypatch, capsys, f"--config={config_path('pad/fedpad')}:runlocal",
      f'--workdir={workdir}', '--config.data.source=pad_lists',
      '--config.federated.num_clients=2', "--config.data.pad_lists.centers=('A','B')",
      f"--config.data.pad_lists.roots=('{root}','{root}')",
      "--config.data.pad_lists.layouts=('celeba_spoof','celeba_spoof')",
      '--config.data.pad_lists.target=T', f'--config.data.pad_lists.target_root={root}',
      '--config.data.pad_lists.target_layout=celeba_spoof', '--config.data.pad_lists.depth=ones')
  assert code == 2
  assert err == [f"{main_in_process.PROG}: {path}: key 'Data/train/77/live/000001.jpg': "
                 'live/spoof label [43] = 2; expected 0 (live) or 1 (spoof).'], err
  assert not workdir.exists()    # refused before the workdir is made
