"""CelebA-Spoof in its own layout: the JSON label files the dataset ships (facts from its public
repository, ZhangYuanhan-AI/CelebA-Spoof, README.md "Annotation in Json File" and
intra_dataset_code/client.py: docs/references.md, pad-list-layouts), read as one more
data-center layout of `data.pad_lists` (`LAYOUT`), beside FLIP's `celeb_{real,fake}_train.txt`
lists that `pad_lists.read_mcio` reads.

A root is the dataset's folder `CelebA_Spoof/`. Its intra-dataset protocol is
`metas/intra_test/train_label.json` ('train') and `metas/intra_test/test_label.json` ('test'):
each a JSON object from an image path, relative to the root (`Data/<split>/<subject>/<live|
spoof>/<n>.<ext>`, as client.py's `read_image` joins it to its root), to a list of 44 ints.
Per the README, [0:40] are CelebA's face attributes, [40] the spoof type, [41] the illumination,
[42] the environment and [43] the live/spoof label. Which value of [43] is live the README does
not say; client.py does: its TPR@FPR counts label 0 as live and 1 as spoof, and so does this
reader. The spoof type codes (README, "Annotation Detail"): 0 Live, 1 Photo, 2 Poster, 3 A4,
4 Face Mask, 5 Upper Body Mask, 6 Region Mask, 7 PC, 8 Pad, 9 Phone, 10 3D Mask.

Frames: one image is one frame and its own video, as FLIP's loader treats CelebA-Spoof's
images; the order, depth maps and checks are those of every layout
(`pad_lists.sorted_frames`). Each image is cropped to the face box of the `<n>_BB.txt` beside it
(its first line `x y w h score`, in the pixels of a 224x224 image) exactly as client.py's
`read_image` crops (`pad_lists.scaled_box`), then resized to the run's size as every layout's
frames are.

Attack species (`Frames.species`, for per-species APCER), in the project's vocabulary
(`pad_benchmark.ATTACKS`), our reading of the ten types: Photo, Poster and A4 are printed
photos ('print'); the three paper masks are printed photos cut to a shape ('cut', the embedded
benchmark's cut print); PC, Pad and Phone show CelebA's still photos on a screen ('display',
the benchmark's still image on a screen; its 'replay' is a video); 3D Mask is '3d_mask', a
species the embedded benchmark lacks.

Bad input stops with a `pad_lists.PadListError` naming the file and the entry's key (a missing
or non-JSON file: the file, and the line for JSON): a value that is not 44 integers, a
live/spoof label other than 0 / 1, a spoof type outside 0..10, a label and a spoof type that
disagree (live with a spoof type, or spoof typed Live), a missing or malformed `_BB.txt`
(named by its own path and line), a missing image, a box that leaves no pixels; with
`skip_bad_records` the bad entries are dropped and counted in one log line.
"""

from __future__ import annotations

import json
import os

from fedjax_face.data.formats import pad_lists

LAYOUT = 'celeba_spoof'
LABEL_FILES = {'train': 'metas/intra_test/train_label.json',
               'test': 'metas/intra_test/test_label.json'}
NUM_LABELS = 44
SPOOF_TYPE, LIVE_SPOOF = 40, 43          # README, "Annotation in Json File"
LIVE_LABEL = 0                           # client.py: label 0 scores are the live ones
SPOOF_TYPES = ('Live', 'Photo', 'Poster', 'A4', 'Face Mask', 'Upper Body Mask', 'Region Mask',
               'PC', 'Pad', 'Phone', '3D Mask')   # README, "Annotation Detail": code = index
SPECIES = {1: 'print', 2: 'print', 3: 'print', 4: 'cut', 5: 'cut', 6: 'cut', 7: 'display',
           8: 'display', 9: 'display', 10: '3d_mask'}   # the reading in the module docstring
BOX_SUFFIX = '_BB.txt'                   # client.py: image_path[:-4] + '_BB.txt'


def label_file(root: str, split: str) -> str:
  return os.path.join(root, LABEL_FILES[split])


def box_file(image: str) -> str:
  """The face box file beside an image: its path without the extension, then `_BB.txt`."""
  return os.path.splitext(image)[0] + BOX_SUFFIX


def read_box(path: str, origin: str) -> tuple[int, int, int, int]:
  """(x, y, w, h) of a `_BB.txt`'s first line `x y w h score` (each truncated to an integer,
  as client.py does before scaling), or a PadListError naming the entry and the file."""
  if not os.path.isfile(path):
    raise pad_lists.PadListError(f'{origin}: its face box file {path} does not exist.')
  with open(path) as f:
    line = f.readline().strip()
  try:
    words = line.split()
    if len(words) != 5:
      raise ValueError
    x, y, w, h, _ = (float(v) for v in words)
  except ValueError:
    raise pad_lists.PadListError(f'{origin}: {path}:1: malformed face box {line!r}; expected '
                                 '"x y w h score".') from None
  return int(x), int(y), int(w), int(h)


def _checked_labels(value, origin: str) -> str | None:
  """Why `value` is not an entry's 44 labels, or None."""
  if (not isinstance(value, list) or len(value) != NUM_LABELS
      or any(not isinstance(v, int) or isinstance(v, bool) for v in value)):
    return f'{origin}: expected a list of {NUM_LABELS} integers, got {value!r}.'
  label, kind = value[LIVE_SPOOF], value[SPOOF_TYPE]
  if label not in (0, 1):
    return (f'{origin}: live/spoof label [{LIVE_SPOOF}] = {label}; expected 0 (live) or 1 '
            '(spoof).')
  if not 0 <= kind < len(SPOOF_TYPES):
    return (f'{origin}: spoof type [{SPOOF_TYPE}] = {kind}; expected 0..{len(SPOOF_TYPES) - 1} '
            f'{SPOOF_TYPES}.')
  if (label == LIVE_LABEL) != (kind == 0):
    return (f'{origin}: live/spoof label [{LIVE_SPOOF}] = {label} with spoof type '
            f'[{SPOOF_TYPE}] = {kind} ({SPOOF_TYPES[kind]}); expected type 0 (Live) exactly '
            'for label 0.')
  return None


def read(root: str, split: str, *, depth_dirs: int | None = None, depth_policy: str = 'ones',
         skip_bad_records: bool = False) -> pad_lists.Frames:
  """The frames of `split` ('train' | 'test') under the CelebA_Spoof folder `root`."""
  path = label_file(root, split)
  if not os.path.isfile(path):
    raise pad_lists.PadListError(f'{path}: no such label file (CelebA-Spoof\'s '
                                 f'{LABEL_FILES[split]} under its root).')
  try:
    with open(path) as f:
      labels = json.load(f)
  except json.JSONDecodeError as e:
    raise pad_lists.PadListError(f'{path}:{e.lineno}: not JSON ({e.msg}).') from None
  if not isinstance(labels, dict):
    raise pad_lists.PadListError(f'{path}: expected a JSON object from image path to its '
                                 f'{NUM_LABELS} labels.')
  records, entries = pad_lists.Records(skip_bad_records), []
  for key, value in labels.items():
    origin = f'{path}: key {key!r}'
    bad = _checked_labels(value, origin)
    if bad:
      records.bad_record(bad)
      continue
    try:
      box = read_box(box_file(os.path.join(root, key)), origin)
    except pad_lists.PadListError as e:
      records.bad_record(str(e))
      continue
    live = value[LIVE_SPOOF] == LIVE_LABEL
    entries.append((key, live, os.path.splitext(key)[0], origin,
                    None if live else SPECIES[value[SPOOF_TYPE]], box))
  return pad_lists.sorted_frames(entries, root, split, depth_policy, depth_dirs, records,
                                 [path])


# -- the writer (the tests' fixtures) -----------------------------------------------------------

def labels_of(spoof_type: int, illumination: int = 0, environment: int = 0,
              attributes=(0,) * 40) -> list[int]:
  """An entry's 44 labels: CelebA's 40 attributes, then spoof type, illumination, environment
  and the live/spoof label it implies (0 for spoof type 0, Live; else 1)."""
  return [*attributes, spoof_type, illumination, environment,
          LIVE_LABEL if spoof_type == 0 else 1 - LIVE_LABEL]


def write_box(image: str, box, score: float = 0.99) -> None:
  """The `_BB.txt` beside `image`: one line `x y w h score` (box in 224x224 pixels)."""
  with open(box_file(image), 'w') as f:
    f.write(' '.join(str(v) for v in (*box, score)) + '\n')


def write_labels(path: str, labels: dict) -> None:
  """The JSON object {image path: its labels}, one entry a line (so that the reader's line
  numbers name an entry)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  rows = [f'{json.dumps(key)}: {json.dumps(value)}' for key, value in labels.items()]
  with open(path, 'w') as f:
    f.write('{\n' + ',\n'.join(rows) + '\n}\n')
