"""IJB-B and IJB-C meta files (insightface's `recognition/_evaluation_/ijb/` layout and FedFR's).

One root per set, images in `<root>/loose_crop/<name>`, meta files in `<root>/meta/` (insightface)
or `<root>/meta/<SET>_meta/` (FedFR), each named `<set>_...` with the set in lower case:

  <set>_face_tid_mid.txt        `name template_id media_id`, one line per image
  <set>_name_5pts_score.txt     `name x1 y1 ... x5 y5 faceness`, the same images in the same order
                                (left eye, right eye, nose, left and right mouth corner)
  <set>_template_pair_label.txt `template1 template2 label` (1 genuine), the 1:1 protocol
  <set>_1N_gallery_G1.csv       1:N galleries and probes: a header line, then rows whose first two
  <set>_1N_gallery_G2.csv       columns are the template id and the subject id (one row per image
  <set>_1N_probe_mixed.csv      of the template; only those two columns are read)

The 1:N files are optional (1:1 runs without them). Every line is checked: a malformed line, a pair
or 1:N template the image list does not hold, or an image missing from loose_crop is an error
naming the file and the line.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import align
from fedjax_face.data.formats import recordio

SETS = ('IJBB', 'IJBC')
LAYOUTS = ('insightface', 'fedfr')
GALLERIES = ('G1', 'G2')


class IJBFormatError(checks.UsageError):
  """A missing or malformed meta file, or an image it names that is not there."""


class Protocol(NamedTuple):
  """What an IJB set's meta files say."""
  root: str
  names: np.ndarray          # str [N] image names under loose_crop/
  templates: np.ndarray      # int64 [N] template of each image
  medias: np.ndarray         # int64 [N] media (photo or video) of each image
  landmarks: np.ndarray      # float32 [N, 5, 2] (x, y) pixel coordinates
  faceness: np.ndarray       # float32 [N] detector score
  pairs: np.ndarray          # int64 [P, 2] template pairs of the 1:1 protocol
  labels: np.ndarray         # bool [P] genuine
  galleries: dict            # 'G1' / 'G2' -> (templates int64 [G], subjects int64 [G]), or {}
  probes: tuple | None       # (templates int64 [Q], subjects int64 [Q]) of probe_mixed, or None


def meta_dir(root: str, ijb_set: str, layout: str) -> str:
  """Where the meta files of `ijb_set` ('IJBB' | 'IJBC') lie in `layout`."""
  if ijb_set not in SETS:
    raise ValueError(f'IJB set {ijb_set!r}; expected one of {SETS}')
  if layout not in LAYOUTS:
    raise ValueError(f'IJB layout {layout!r}; expected one of {LAYOUTS}')
  return os.path.join(root, 'meta') if layout == 'insightface' else os.path.join(
      root, 'meta', f'{ijb_set}_meta')


def meta_path(root: str, ijb_set: str, layout: str, kind: str) -> str:
  """The path of meta file `kind` ('face_tid_mid.txt', '1N_gallery_G1.csv', ...)."""
  return os.path.join(meta_dir(root, ijb_set, layout), f'{ijb_set.lower()}_{kind}')


def _lines(path: str, skip_header: bool = False):
  """(line number, fields) of every non-empty line; a missing file is named."""
  if not os.path.isfile(path):
    raise IJBFormatError(f'{path}: no such meta file')
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      if skip_header and number == 1:
        continue
      line = line.strip()
      if line:
        yield number, line.split(',' if path.endswith('.csv') else None)


def _ints(path: str, number: int, fields: list[str], what: str) -> list[int]:
  try:
    return [int(v) for v in fields]
  except ValueError:
    raise IJBFormatError(f'{path}:{number}: {fields!r}; expected {what}') from None


def read_tid_mid(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(names, templates, medias, line numbers) of `<set>_face_tid_mid.txt`."""
  names, ids, numbers = [], [], []
  for number, fields in _lines(path):
    numbers.append(number)
    if len(fields) != 3:
      raise IJBFormatError(f'{path}:{number}: {len(fields)} fields; expected '
                           '"image_name template_id media_id"')
    names.append(fields[0])
    ids.append(_ints(path, number, fields[1:], 'integer template and media ids'))
  ids = np.asarray(ids, np.int64).reshape(-1, 2)
  return np.asarray(names), ids[:, 0], ids[:, 1], np.asarray(numbers)


def read_landmarks(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """(names, landmarks [N, 5, 2], faceness [N], line numbers) of `<set>_name_5pts_score.txt`."""
  names, values, numbers = [], [], []
  for number, fields in _lines(path):
    numbers.append(number)
    if len(fields) != 12:
      raise IJBFormatError(f'{path}:{number}: {len(fields)} fields; expected "image_name x1 y1 '
                           '... x5 y5 faceness" (12)')
    try:
      row = [float(v) for v in fields[1:]]
    except ValueError:
      raise IJBFormatError(f'{path}:{number}: {fields[1:]!r}; expected 11 numbers') from None
    if not np.all(np.isfinite(row)):
      raise IJBFormatError(f'{path}:{number}: a landmark or score is not finite')
    names.append(fields[0])
    values.append(row)
  values = np.asarray(values, np.float32).reshape(-1, 11)
  return np.asarray(names), values[:, :10].reshape(-1, 5, 2), values[:, 10], np.asarray(numbers)


def read_pairs(path: str, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(pairs [P, 2], genuine [P]) of `<set>_template_pair_label.txt`; every template in `known`."""
  rows = []
  for number, fields in _lines(path):
    if len(fields) != 3:
      raise IJBFormatError(f'{path}:{number}: {len(fields)} fields; expected "template1 '
                           'template2 label"')
    t1, t2, label = _ints(path, number, fields, 'integer templates and a 0/1 label')
    if label not in (0, 1):
      raise IJBFormatError(f'{path}:{number}: label {label}; expected 0 or 1')
    rows.append((t1, t2, label, number))
  rows = np.asarray(rows, np.int64).reshape(-1, 4)
  _check_known(path, rows[:, :2], rows[:, 3], known, 'the pair names template')
  return rows[:, :2], rows[:, 2] == 1


def read_subjects(path: str, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(templates, subjects), one row per template, of a 1:N gallery or probe CSV."""
  rows = []
  for number, fields in _lines(path, skip_header=True):
    if len(fields) < 2:
      raise IJBFormatError(f'{path}:{number}: {len(fields)} columns; expected TEMPLATE_ID, '
                           'SUBJECT_ID first')
    rows.append(_ints(path, number, fields[:2], 'integer TEMPLATE_ID and SUBJECT_ID') + [number])
  rows = np.asarray(rows, np.int64).reshape(-1, 3)
  _check_known(path, rows[:, :1], rows[:, 2], known, 'the row names template')
  templates, first = np.unique(rows[:, 0], return_index=True)
  subjects = rows[first, 1]
  # A template belongs to one subject.
  per_template = dict(zip(templates.tolist(), subjects.tolist()))
  for template, subject, number in rows:
    if per_template[template] != subject:
      raise IJBFormatError(f'{path}:{number}: template {template} of subject {subject}; an '
                           f'earlier row gives it subject {per_template[template]}')
  return templates, subjects


def _check_known(path: str, templates: np.ndarray, numbers: np.ndarray, known: np.ndarray,
                 what: str) -> None:
  unknown = ~np.isin(templates, known)
  if unknown.any():
    row, col = np.argwhere(unknown)[0]
    raise IJBFormatError(f'{path}:{numbers[row]}: {what} {templates[row, col]}, which the image '
                         'list (face_tid_mid) does not hold')


def read_protocol(root: str, ijb_set: str = 'IJBC', layout: str = 'insightface', *,
                  check_images: bool = True) -> Protocol:
  """Reads and cross-checks an IJB set's meta files (1:N ones when present).

  Raises:
    IJBFormatError: a missing meta file or image, a malformed line, image lists that disagree,
      a template the image list does not hold.
  """
  root = os.fspath(root)
  path = lambda kind: meta_path(root, ijb_set, layout, kind)
  names, templates, medias, numbers = read_tid_mid(path('face_tid_mid.txt'))
  lmk_names, landmarks, faceness, lmk_numbers = read_landmarks(path('name_5pts_score.txt'))
  if len(lmk_names) != len(names) or (lmk_names != names).any():
    common = min(len(names), len(lmk_names))
    differ = np.flatnonzero(lmk_names[:common] != names[:common])
    line = (lmk_numbers[differ[0]] if differ.size else
            lmk_numbers[-1] + 1 if len(lmk_names) < len(names) else lmk_numbers[common])
    raise IJBFormatError(f"{path('name_5pts_score.txt')}:{line}: the landmark list does not "
                         f"follow {path('face_tid_mid.txt')} ({len(lmk_names)} and {len(names)} "
                         'images; expected the same images in the same order)')
  known = np.unique(templates)
  pairs, labels = read_pairs(path('template_pair_label.txt'), known)
  galleries, probes = {}, None
  if os.path.isfile(path('1N_probe_mixed.csv')):
    galleries = {g: read_subjects(path(f'1N_gallery_{g}.csv'), known) for g in GALLERIES}
    probes = read_subjects(path('1N_probe_mixed.csv'), known)
  if check_images:
    image_dir = os.path.join(root, 'loose_crop')
    for i, name in enumerate(names):
      if not os.path.isfile(os.path.join(image_dir, name)):
        raise IJBFormatError(f"{path('face_tid_mid.txt')}:{numbers[i]}: template {templates[i]} "
                             f'names {name}, which is not in {image_dir}')
  return Protocol(root=root, names=names, templates=templates, medias=medias,
                  landmarks=landmarks, faceness=faceness, pairs=pairs, labels=labels,
                  galleries=galleries, probes=probes)


def read_aligned(root: str, names: np.ndarray, landmarks: np.ndarray, size: int) -> np.ndarray:
  """uint8 [n, size, size, 3]: the loose crops `names` read, decoded and aligned by their
  `landmarks` [n, 5, 2]. Top-level and light to import: the task of the evaluator's host worker
  processes (`eval/recognition/ijb.aligned_chunks`)."""
  out = np.empty((len(names), size, size, 3), np.uint8)
  for i, (name, points) in enumerate(zip(names, landmarks)):
    path = os.path.join(root, 'loose_crop', name)
    with open(path, 'rb') as f:
      data = f.read()
    try:
      image = recordio.decode_image(data)
    except recordio.ImageDecodeError as e:
      raise IJBFormatError(f'{path}: {e}') from None
    out[i] = align.align_face(image, points, size)
  return out
