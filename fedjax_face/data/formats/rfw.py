"""RFW (Racial Faces in-the-Wild) test set: four race subsets, each a pair list and its images.

The layout of RFW's `test.tar.gz` (the RFW site, http://whdeng.cn/RFW/testing.html, as the public
readers use it: bioidiap/bob.bio.face `bob/bio/face/database/rfw.py` (`_load_metadata`,
`_make_sampleset`) and RafaelMMamede/Fairness_OCFR `src/extract_xSSAB.sh`):

  <root>/txts/<Race>/<Race>_pairs.txt          the 1:1 protocol (read here)
  <root>/txts/<Race>/<Race>_images.txt, _lmk.txt, _people.txt   (not read)
  <root>/data/<Race>/<identity>/<identity>_<nnnn>.jpg           the images

`<root>` is the archive's `test/` folder; Race is one of RACES. The images may come from an aligned
copy of `data/` in the same layout (Fairness_OCFR reads `test_aligned/data/<Race>/`): `read_race`
takes its folder apart from `root`.

A pair line is LFW's `pairs.txt` line without LFW's header line, fields separated by tabs:
`<identity> <i> <j>` for a genuine pair (images i and j of one identity) and
`<identity_a> <i> <identity_b> <j>` for an impostor pair; image i of an identity is
`<identity>_<i:04d>.jpg`, LFW's naming (bob.bio.face builds the name as `_000{i}`, the same
name while i < 10). The released lists hold PUBLISHED_PAIRS pairs per race, 10 contiguous
folds of 300 genuine then 300 impostor pairs (the RFW site's description: "10 disjoint splits of
image pairs are given, and each contains 300 positive pairs and 300 negative pairs similar to
LFW").

Every line is checked while the list is read: a line of another shape, an identity that has no
folder under the race's images, an image that is not there, and a list of another length than the
one expected are each a RFWFormatError naming the file and line.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data.formats import recordio

RACES = ('African', 'Asian', 'Caucasian', 'Indian')
# Pairs of each race's released list: 10 folds of 300 genuine and 300 impostor pairs.
PUBLISHED_PAIRS = 6000


class RFWFormatError(checks.UsageError):
  """A missing or malformed RFW pair list, or an identity or image it names that is not there."""


class RacePairs(NamedTuple):
  """One race's pair list: pair i is images[2 i] and images[2 i + 1]."""
  race: str
  images: list[str]     # paths relative to the images folder: <Race>/<identity>/<file>
  issame: np.ndarray    # bool [P]
  lines: np.ndarray     # int [P] the line of the pair list each pair is on


def pairs_path(root: str, race: str) -> str:
  """`<root>/txts/<Race>/<Race>_pairs.txt`."""
  return os.path.join(root, 'txts', race, f'{race}_pairs.txt')


def image_name(race: str, identity: str, number: int) -> str:
  """`<Race>/<identity>/<identity>_<number:04d>.jpg`, relative to the images folder."""
  return f'{race}/{identity}/{identity}_{number:04d}.jpg'


def _number(field: str) -> int | None:
  return int(field) if field.isdigit() and int(field) > 0 else None


def parse_line(fields: Sequence[str]) -> tuple[tuple[str, int], tuple[str, int], bool] | None:
  """((identity, i), (identity, j), genuine) of one pair line's fields, None when malformed."""
  if len(fields) == 3 and _number(fields[1]) and _number(fields[2]):
    return (fields[0], int(fields[1])), (fields[0], int(fields[2])), True
  if len(fields) == 4 and _number(fields[1]) and _number(fields[3]):
    return (fields[0], int(fields[1])), (fields[2], int(fields[3])), False
  return None


def read_pairs(root: str, race: str, images_dir: str, *, check_images: bool = True,
               expected_pairs: int | None = PUBLISHED_PAIRS) -> RacePairs:
  """Reads `race`'s pair list under `root` and checks the images it names under `images_dir`.

  Raises:
    RFWFormatError: the list is missing or empty, a line is malformed, names an identity without
      a folder `<images_dir>/<Race>/<identity>` or (with `check_images`) an image not there, or
      the list holds other than `expected_pairs` pairs (None: any number).
  """
  path = pairs_path(root, race)
  if not os.path.isfile(path):
    raise RFWFormatError(f'{path}: no such pair list; expected RFW\'s test/ folder '
                         '(txts/<Race>/<Race>_pairs.txt) as the root')
  race_dir = os.path.join(images_dir, race)
  if not os.path.isdir(race_dir):
    raise RFWFormatError(f'{race_dir}: no such folder; expected the images of {race} as '
                         '<images>/<Race>/<identity>/<identity>_<nnnn>.jpg')
  known = set(os.listdir(race_dir))
  images, issame, lines = [], [], []
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      fields = line.split()
      if not fields:
        continue
      pair = parse_line(fields)
      if pair is None:
        raise RFWFormatError(f'{path}:{number}: {line.strip()[:100]!r}; expected "<identity> <i> '
                             '<j>" (genuine) or "<identity_a> <i> <identity_b> <j>" (impostor), '
                             'i and j positive integers')
      for identity, i in pair[:2]:
        if identity not in known:
          raise RFWFormatError(f'{path}:{number}: identity {identity}, which {race_dir} does '
                               'not hold (no folder of that name)')
        name = image_name(race, identity, i)
        if check_images and not os.path.isfile(os.path.join(images_dir, name)):
          raise RFWFormatError(f'{path}:{number}: image {i} of {identity}, '
                               f'{os.path.join(images_dir, name)}, is not there')
        images.append(name)
      issame.append(pair[2])
      lines.append(number)
  if not issame:
    raise RFWFormatError(f'{path}: no pairs; expected tab-separated LFW-style pair lines')
  if expected_pairs is not None and len(issame) != expected_pairs:
    raise RFWFormatError(f'{path}: {len(issame):,} pairs; expected {expected_pairs:,} (a list cut '
                         'short? a protocol of other pairs turns this check off: '
                         'evals.rfw.check_pair_count=False)')
  return RacePairs(race=race, images=images, issame=np.asarray(issame, bool),
                   lines=np.asarray(lines))


def write_race(root: str, race: str, pairs: Sequence[tuple], images: dict,
               images_dir: str | None = None, image_format: str = 'jpeg') -> None:
  """Writes one race in RFW's layout: the pair list and every image (the tests' fixtures).

  Args:
    root: the `test/` folder; the list goes to `txts/<Race>/<Race>_pairs.txt`.
    race: one of RACES.
    pairs: `(identity, i, j)` genuine and `(identity_a, i, identity_b, j)` impostor pairs, in the
      list's order.
    images: (identity, i) -> uint8 [H, W, 3], written to `<images_dir>/<Race>/<identity>/
      <identity>_<i:04d>.jpg`.
    images_dir: default `<root>/data`.
    image_format: the bytes in the .jpg files: 'jpeg' as released, or 'png' (lossless).
  """
  images_dir = images_dir or os.path.join(root, 'data')
  os.makedirs(os.path.dirname(pairs_path(root, race)), exist_ok=True)
  with open(pairs_path(root, race), 'w', encoding='utf-8') as f:
    for pair in pairs:
      f.write('\t'.join(str(v) for v in pair) + '\n')
  for (identity, i), image in images.items():
    path = os.path.join(images_dir, image_name(race, identity, i))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as f:
      f.write(recordio.encode_image(np.asarray(image, np.uint8), image_format))
