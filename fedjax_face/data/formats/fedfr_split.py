"""FedFR's pre-split federated data: one RecordIO set per client, as the authors' split script
writes MS1M (REFERENCE_NOTES §10), read without MXNet.

  <root>/split_train_i<N>c<K>/client_XXXX/train.rec, train.idx   one set per client
  <root>/split_pretrain_<K_g>/client_0000/train.rec, train.idx    the public identities
  <root>/local_veri_<N>/test.rec, test.idx, idx_id_pair.txt       the clients' identities' held-out
                                                                  images (personalized 1:1 / 1:N)
  <root>/local_gallery_<N>/test.rec, test.idx                     the clients' training images

Record 0 of every set is a header and nothing else: flag 3, labels (end, num_ids, id_base), in a
client set (its identities are id_base .. id_base + num_ids - 1 of the verification and gallery
sets, labelled 0 .. num_ids - 1 inside the client); flag 2, labels (end, num_ids), in the others.
Image records are keys 1 .. end - 1, each labelled with its identity; there are no identity
records and no `property` file (insightface's own layout, `recordio.InsightfaceDataset`, has
both). `idx_id_pair.txt` is a header line `idx id`, then `<key> <identity>` per image of the
verification set.
"""

from __future__ import annotations

import glob
import os
from typing import NamedTuple

import numpy as np

from fedjax_face.data.formats import recordio


class SplitSet(NamedTuple):
  """One set of the layout, its images by record key."""
  path: str                  # the .rec file
  keys: np.ndarray           # int64 [n] image record keys, 1 .. end - 1
  labels: np.ndarray         # int64 [n] identity of each image (client-local in a client set)
  num_ids: int
  id_base: int | None        # a client set's first identity in the shared numbering; else None


def read_header(file: recordio.RecordFile) -> tuple[int, int, int | None]:
  """(end, num_ids, id_base or None) of record 0, or a RecordIOError saying what it is instead."""
  if 0 not in file:
    raise recordio.RecordIOError(file.path, 0, 'no header record 0; expected FedFR\'s header '
                                 '(flag 2 or 3: end, num_ids[, id_base])')
  header, _ = recordio.unpack_header(file.read_prefix(0, recordio.HEADER_SIZE + 16))
  if header.flag not in (2, 3):
    raise recordio.RecordIOError(
        file.path, 0, f'header record has flag {header.flag}; expected FedFR\'s layout (flag 2: '
        'end, num_ids; flag 3: end, num_ids, id_base), or, for insightface\'s layout (flag 2: '
        'a, b, with identity records and a property file), data.source=\'insightface\'')
  try:
    values = [recordio._integral(v, 'a header label')  # pylint: disable=protected-access
              for v in header.label[:header.flag]]
  except ValueError as e:
    raise recordio.RecordIOError(file.path, 0, str(e)) from None
  end, num_ids = values[:2]
  if end < 1 or num_ids < 1:
    raise recordio.RecordIOError(file.path, 0, f'header (end, num_ids) = ({end}, {num_ids}); '
                                 'expected end >= 1 and num_ids >= 1')
  return end, num_ids, values[2] if header.flag == 3 else None


def read_set(directory: str, prefix: str) -> SplitSet:
  """The image keys and labels of `<directory>/<prefix>.rec` (headers only, no image decoded).

  Raises:
    RecordIOError: a missing file, a header of neither layout, an image key the header announces
      but the index lacks, or a label that is not an identity 0 .. num_ids - 1 (naming the record).
  """
  path = os.path.join(directory, prefix + '.rec')
  if not os.path.isfile(path):
    raise recordio.RecordIOError(path, None, 'no such file (a FedFR split set holds '
                                 f'{prefix}.rec and {prefix}.idx)')
  with recordio.RecordFile(path) as file:
    end, num_ids, id_base = read_header(file)
    keys = np.arange(1, end, dtype=np.int64)
    missing = [k for k in keys.tolist() if k not in file]
    if missing:
      raise recordio.RecordIOError(file.path_idx, missing[0], f'header record 0 says images are '
                                   f'keys 1..{end - 1} but this key is not in the index')
    labels = np.empty(len(keys), np.int64)
    for i, key in enumerate(keys.tolist()):
      header, _ = recordio.unpack_header(file.read_prefix(key, recordio.HEADER_SIZE + 4), 1)
      try:
        labels[i] = recordio.class_label(header)
      except ValueError as e:
        raise recordio.RecordIOError(path, key, str(e)) from None
      if not 0 <= labels[i] < num_ids:
        raise recordio.RecordIOError(path, key, f'label {labels[i]}; the header announces '
                                     f'{num_ids} identities (0..{num_ids - 1})')
  return SplitSet(path=path, keys=keys, labels=labels, num_ids=num_ids, id_base=id_base)


def read_image(path: str, key: int) -> np.ndarray:
  """The decoded image of record `key` of `path`."""
  with recordio.RecordFile(path) as file:
    _, data = recordio.unpack(file.read(key))
  return recordio.decode_image(data)


def find_one(root: str, pattern: str, what: str, required: bool = True) -> str | None:
  """The one directory of `root` matching `pattern` (e.g. 'split_train_*'), None when absent and
  not `required`."""
  found = sorted(p for p in glob.glob(os.path.join(root, pattern)) if os.path.isdir(p))
  if len(found) > 1:
    names = ', '.join(os.path.basename(p) for p in found)
    raise ValueError(f'{root} holds {len(found)} {what} directories ({names}); name one in the '
                     'config')
  if not found:
    if required:
      raise FileNotFoundError(f'{root} holds no {pattern} directory ({what})')
    return None
  return found[0]


def client_dirs(train_dir: str) -> list[str]:
  """`client_XXXX` directories of a split, in order."""
  dirs = sorted(glob.glob(os.path.join(train_dir, 'client_*')))
  if not dirs:
    raise FileNotFoundError(f'{train_dir} holds no client_XXXX directory')
  return dirs


def read_idx_id_pairs(path: str) -> dict[int, int]:
  """{record key: identity} of a verification set's `idx_id_pair.txt`."""
  pairs = {}
  with open(path, encoding='utf-8') as f:
    for number, line in enumerate(f, start=1):
      fields = line.split()
      if number == 1 and fields == ['idx', 'id']:
        continue
      if not fields:
        continue
      try:
        key, identity = (int(v) for v in fields)
      except ValueError:
        raise ValueError(f'{path}:{number}: {line.strip()!r}; expected "<idx> <id>"') from None
      pairs[key] = identity
  return pairs
