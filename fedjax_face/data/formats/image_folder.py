"""Aligned face crops in folders, `<root>/<identity>/<image>.jpg`, and verification pair lists.

Training set: every sub-directory of `root` is one identity (sorted by name: identity j is the
j-th directory); its files with an image extension are that identity's images (sorted by name).
Only the file list is read here; images are decoded when a round draws them
(`stores.DecodedImageStore`).

Pair list (`<name>.txt`), one of two layouts:

* generic: one pair per line, `<image_a> <image_b> <1|0>` (1 = same person), paths relative to
  the list's directory; blank lines and lines starting with '#' are ignored;
* LFW's `pairs.txt`: a first line of one or two integers (`10 300`), then `<name> <i> <j>` for a
  genuine pair and `<name_a> <i> <name_b> <j>` for an impostor pair, the images being
  `<list dir>/<name>/<name>_<i:04d>.jpg`.

Pairs are kept in file order: the insightface protocol's 10 folds are contiguous (LFW's
`pairs.txt` is 10 blocks of 300 genuine then 300 impostor pairs).
"""

from __future__ import annotations

import concurrent.futures
import os

import numpy as np

from fedjax_face.data import stores
from fedjax_face.data.formats import recordio
from fedjax_face.data.types import PairSet

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png', '.bmp', '.webp')


def scan(root: str) -> tuple[list[str], np.ndarray, list[str]]:
  """Lists `<root>/<identity>/<image>`: (relative paths, int64 labels, identity names).

  Raises:
    FileNotFoundError: `root` is not a directory.
    ValueError: no identity directory holds an image (the message says what was expected).
  """
  if not os.path.isdir(root):
    raise FileNotFoundError(f'data.root={root!r} is not a directory; expected '
                            '<root>/<identity>/<image>.jpg')
  names = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith('.'))
  paths, counts, kept = [], [], []
  for name in names:
    files = sorted(f.name for f in os.scandir(os.path.join(root, name))
                   if f.is_file() and f.name.lower().endswith(IMAGE_EXTENSIONS))
    if files:  # an empty directory is no identity (the partition needs >= 1 image each)
      paths += [f'{name}/{f}' for f in files]
      counts.append(len(files))
      kept.append(name)
  if not paths:
    raise ValueError(f'{root}: no images found; expected <root>/<identity>/<image> with one of '
                     f'the extensions {IMAGE_EXTENSIONS} ({len(names)} sub-directories seen)')
  labels = np.repeat(np.arange(len(kept), dtype=np.int64), counts)
  return paths, labels, kept


def read_image(path: str) -> np.ndarray:
  """uint8 `[H, W, 3]` RGB of an image file; BadRecordError naming the file on failure."""
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError as e:
    raise stores.BadRecordError(f'{path}: cannot read: {e}') from None
  try:
    return recordio.decode_image(data)
  except recordio.ImageDecodeError as e:
    raise stores.BadRecordError(f'{path}: {e}; expected a JPEG or PNG image') from None


def image_store(root: str, paths: list[str], *, image_size: int, center_crop: float = 1.0,
                skip_bad_records: bool = False, num_threads: int = 0) -> stores.DecodedImageStore:
  """A store decoding `<root>/<paths[i]>` on demand, cropped and resized to image_size."""

  def load(i: int) -> np.ndarray:
    return stores.fit_image(read_image(os.path.join(root, paths[i])), image_size, center_crop)

  return stores.DecodedImageStore(len(paths), (image_size, image_size, 3), load,
                                  description=root, skip_bad_records=skip_bad_records,
                                  num_threads=num_threads)


def _is_int(token: str) -> bool:
  return token.isdigit()


def parse_pair_list(path: str) -> tuple[list[tuple[str, str]], np.ndarray]:
  """Pair list -> ([(image_a, image_b)] as absolute paths, bool `[P]` issame).

  Raises:
    ValueError: a malformed line (the message names the file, line number and layout expected).
  """
  base = os.path.dirname(os.path.abspath(path))
  with open(path, encoding='utf-8') as f:
    lines = [(n, line.split()) for n, line in enumerate(f, 1)]
  lines = [(n, t) for n, t in lines if t and not t[0].startswith('#')]
  if not lines:
    raise ValueError(f'{path}: no pairs; expected "<image_a> <image_b> <1|0>" lines or LFW '
                     'pairs.txt')
  lfw = len(lines[0][1]) <= 2 and all(_is_int(t) for t in lines[0][1])
  if lfw:
    lines = lines[1:]
  pairs, issame = [], []
  for n, t in lines:
    if lfw and len(t) == 3 and _is_int(t[1]) and _is_int(t[2]):
      a, b, same = (t[0], int(t[1])), (t[0], int(t[2])), True
    elif lfw and len(t) == 4 and _is_int(t[1]) and _is_int(t[3]):
      a, b, same = (t[0], int(t[1])), (t[2], int(t[3])), False
    elif not lfw and len(t) == 3 and t[2] in ('0', '1'):
      pairs.append((os.path.join(base, t[0]), os.path.join(base, t[1])))
      issame.append(t[2] == '1')
      continue
    else:
      expected = ('"<name> <i> <j>" or "<name_a> <i> <name_b> <j>" (LFW pairs.txt)' if lfw
                  else '"<image_a> <image_b> <1|0>"')
      raise ValueError(f'{path}: line {n} is {" ".join(t)[:100]!r}; expected {expected}')
    pairs.append(tuple(os.path.join(base, name, f'{name}_{i:04d}.jpg') for name, i in (a, b)))
    issame.append(same)
  return pairs, np.array(issame, bool)


def read_pair_list(path: str, *, image_size: int, center_crop: float = 1.0,
                   name: str | None = None, num_threads: int = 0) -> PairSet:
  """Reads a pair list and decodes its images (cropped, resized) into a PairSet.

  Raises:
    ValueError: malformed list; BadRecordError: an image that cannot be read (named).
  """
  pairs, issame = parse_pair_list(path)
  files = [p for pair in pairs for p in pair]

  def load(i: int) -> np.ndarray:
    return stores.fit_image(read_image(files[i]), image_size, center_crop)

  with concurrent.futures.ThreadPoolExecutor(num_threads or stores.usable_cpus()) as pool:
    images = np.stack(list(pool.map(load, range(len(files)))))
  name = name or os.path.splitext(os.path.basename(path))[0]
  return PairSet(name=name, images=images, issame=issame)
