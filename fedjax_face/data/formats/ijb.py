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

The files are also checked against each other, since a list cut short at a line boundary is
well-formed line by line (issue 56: a pair list cut to 15 of its 28 lines scored AUC 1.0 where the
whole list gives 0.927): every image of the image list has a landmark line, and every template of
the image list is in some pair. A list cut after the last pair of some template passes both, so
`read_protocol` also takes the number of pairs to expect: the real sets' published counts are
PUBLISHED_PAIRS (the evaluator passes them unless `evals.ijb.check_pair_count` is off).
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
# Lines of `<set>_template_pair_label.txt` in the released sets: IJB-B's 1:1 protocol is 10,270
# genuine and 8,000,000 impostor pairs, IJB-C's 19,557 and 15,638,932.
PUBLISHED_PAIRS = {'IJBB': 8_010_270, 'IJBC': 15_658_489}
SHOWN = 5   # ids named in a message about a set of them; the count names the rest


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


def _first(values) -> str:
  """The first SHOWN of `values`, for a message that also gives their count."""
  values = [str(v) for v in values]
  return ', '.join(values[:SHOWN]) + (', ...' if len(values) > SHOWN else '')


def check_landmark_lines(tid_path: str, lmk_path: str, names: np.ndarray,
                         lmk_names: np.ndarray, lmk_numbers: np.ndarray) -> None:
  """Every image of the image list has a landmark line, and the landmark list is the image
  list's images in its order (the two are read row by row together)."""
  missing = names[~np.isin(names, lmk_names)]
  if missing.size:
    raise IJBFormatError(f'{lmk_path}: no landmark line for {missing.size:,} of the {len(names):,} '
                         f'images of {tid_path} (first: {_first(missing)}); expected one line '
                         'per image')
  extra = ~np.isin(lmk_names, names)
  if extra.any():
    first = np.argmax(extra)
    raise IJBFormatError(f'{lmk_path}:{lmk_numbers[first]}: {lmk_names[first]}, an image '
                         f'{tid_path} does not hold ({int(extra.sum()):,} such lines: '
                         f'{_first(lmk_names[extra])}); expected only its images')
  if len(lmk_names) != len(names) or (lmk_names != names).any():
    common = min(len(names), len(lmk_names))
    differ = np.flatnonzero(lmk_names[:common] != names[:common])
    line = (lmk_numbers[differ[0]] if differ.size else
            lmk_numbers[-1] + 1 if len(lmk_names) < len(names) else lmk_numbers[common])
    raise IJBFormatError(f'{lmk_path}:{line}: the landmark list does not follow {tid_path} '
                         f'({len(lmk_names)} and {len(names)} images; expected the same images in '
                         'the same order)')


def check_pairs_cover(pair_path: str, tid_path: str, known: np.ndarray, pairs: np.ndarray,
                      expected_pairs: int | None = None) -> None:
  """The pair list holds `expected_pairs` pairs (None: any number) and names every template of
  the image list (`known`, ascending): a list cut short at a line boundary fails one or both."""
  if expected_pairs is not None and len(pairs) != expected_pairs:
    raise IJBFormatError(f'{pair_path}: {len(pairs):,} pairs; expected {expected_pairs:,} (a list '
                         'cut short? a protocol of other pairs turns this check off: '
                         'evals.ijb.check_pair_count=False)')
  unpaired = known[~np.isin(known, pairs)]
  if unpaired.size:
    raise IJBFormatError(f'{pair_path}: no pair names {unpaired.size:,} of the {len(known):,} '
                         f'templates of {tid_path} (first: {_first(unpaired)}); expected every '
                         'template in some pair (a list cut short?)')


def read_protocol(root: str, ijb_set: str = 'IJBC', layout: str = 'insightface', *,
                  check_images: bool = True, expected_pairs: int | None = None) -> Protocol:
  """Reads and cross-checks an IJB set's meta files (1:N ones when present).

  `expected_pairs`: the number of lines the pair list must hold (PUBLISHED_PAIRS[ijb_set] for a
  released set), or None to take any number.

  Raises:
    IJBFormatError: a missing meta file or image, a malformed line, an image without a landmark
      line or image lists that disagree otherwise, a template the image list does not hold, one
      it holds that no pair names, a pair count other than `expected_pairs`.
  """
  root = os.fspath(root)
  path = lambda kind: meta_path(root, ijb_set, layout, kind)
  tid_path = path('face_tid_mid.txt')
  names, templates, medias, numbers = read_tid_mid(tid_path)
  if not len(names):
    raise IJBFormatError(f'{tid_path}: no images; expected "image_name template_id media_id" '
                         'lines')
  lmk_names, landmarks, faceness, lmk_numbers = read_landmarks(path('name_5pts_score.txt'))
  check_landmark_lines(tid_path, path('name_5pts_score.txt'), names, lmk_names, lmk_numbers)
  known = np.unique(templates)
  pairs, labels = read_pairs(path('template_pair_label.txt'), known)
  check_pairs_cover(path('template_pair_label.txt'), tid_path, known, pairs, expected_pairs)
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
