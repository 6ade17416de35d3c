"""FedFR's pre-split federated data: one RecordIO set per client, as the authors' split scripts
write MS1M (docs/references.md, fedfr-split-layout; github.com/jackie840129/FedFR,
`split_dataset/`), read without MXNet.

  <root>/split_train_i<N>c<K>/client_XXXX/train.rec, train.idx   one set per client
  <root>/split_pretrain_<K_g>/client_XXXX/train.rec, train.idx   the public identities, in
                                                                  several folders
  <root>/local_veri_<N>/test.rec, test.idx, idx_id_pair.txt       the clients' identities' held-out
                                                                  images (personalized 1:1 / 1:N)
  <root>/local_gallery_<N>/test.rec, test.idx                     the clients' training images

Client folders are named `'client_%04d' % i`, i = 0 .. n - 1, in both splits (`client_dirs`
refuses a gap or another name). `split_pretrain.py` writes `--num_client` (default 10) of them:
its K_g identities in consecutive groups (folder i holds K_g // n identities, one more when
i < K_g % n), each folder labelled 0 .. num_ids - 1 again (unless `--dis_relabel`, which keeps
MS1M's labels and is refused here as out of range). The public identities are all the folders'
together, folder i's labels shifted by the identities of folders 0 .. i - 1 (`public_bases`).

Record 0 of every set is a header: flag 3, labels (end, num_ids, id_base), in a client set of the
training split (its identities are id_base .. id_base + num_ids - 1 of the verification and
gallery sets, labelled 0 .. num_ids - 1 inside the client; `split_FL.py` passes flag 2 with
three labels and MXNet's `pack` sets the flag to the label count); flag 2, labels (end, num_ids),
in the others (`split_pretrain.py` packs its last image after that header and writes record 0
last; nothing reads the image). A flag-3 pre-training header is accepted when its id_base is the
folder's shift. Image records are keys
1 .. end - 1, each labelled with its identity; there are no identity records and no `property`
file (insightface's own layout, `recordio.InsightfaceDataset`, has both). `idx_id_pair.txt` is a
header line `idx id`, then `<key> <identity>` per image of the verification set.

Every check of a set's header and size (`check_set`) reads record 0, the index and the frame of
the record that lies last in the file, no image record, so a source can check every set of a
split before it reads any. Bad input raises `recordio.RecordIOError` (a file) or `SplitError` (a
folder), both usage errors naming the path.
"""

from __future__ import annotations

import glob
import os
import re
from typing import NamedTuple

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data.formats import recordio

# The authors' folder names ('client_%04d' % i); only this spelling of a number is one.
_CLIENT = re.compile(r'client_(\d+)')


class SplitError(checks.UsageError):
  """A folder of the layout missing, misnumbered or at odds with another; the message names it."""


class SetHeader(NamedTuple):
  """Record 0 of a set, checked against its index and file size."""
  path: str                  # the .rec file
  end: int                   # image records are keys 1 .. end - 1
  num_ids: int
  id_base: int | None        # a flag-3 header's first identity in the shared numbering; else None


class SplitSet(NamedTuple):
  """One set of the layout, its images by record key."""
  path: str                  # the .rec file
  keys: np.ndarray           # int64 [n] image record keys, 1 .. end - 1
  labels: np.ndarray         # int64 [n] identity of each image (folder-local in a client folder)
  num_ids: int
  id_base: int | None        # a flag-3 header's first identity in the shared numbering; else None


def read_header(file: recordio.RecordFile) -> tuple[int, int, int | None]:
  """(end, num_ids, id_base or None) of record 0, or a RecordIOError saying what it is instead."""
  if 0 not in file:
    raise recordio.RecordIOError(file.path, 0, 'no header record 0; expected FedFR\'s header '
                                 '(flag 2 or 3: end, num_ids[, id_base])')
  prefix = file.read_prefix(0, recordio.HEADER_SIZE + 16)
  try:
    header, _ = recordio.unpack_header(prefix)
  except ValueError as e:   # a payload shorter than its header says
    raise recordio.RecordIOError(file.path, 0, str(e)) from None
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


def _rec_path(directory: str, prefix: str) -> str:
  path = os.path.join(directory, prefix + '.rec')
  if not os.path.isfile(path):
    raise recordio.RecordIOError(path, None, 'no such file (a FedFR split set holds '
                                 f'{prefix}.rec and {prefix}.idx)')
  return path


def _check_open(file: recordio.RecordFile, client: bool) -> SetHeader:
  end, num_ids, id_base = read_header(file)
  if client and id_base is None:
    raise recordio.RecordIOError(file.path, 0, 'a client set\'s header has flag 2 (end, num_ids); '
                                 'expected flag 3 (end, num_ids, id_base)')
  if id_base is not None and id_base < 0:
    raise recordio.RecordIOError(file.path, 0, f'header id_base {id_base}; expected >= 0')
  keys = file.keys()
  missing = np.setdiff1d(np.arange(1, end, dtype=np.int64), keys)
  if missing.size:
    raise recordio.RecordIOError(file.path_idx, int(missing[0]), f'header record 0 says images '
                                 f'are keys 1..{end - 1} but this key is not in the index')
  # RecordFile refuses an index offset past the end of the file; the record that starts last can
  # still be cut short (a copy stopped early): its frame says how long it is.
  file.read_prefix(int(keys[np.argmax(file.offsets())]), 0)
  return SetHeader(file.path, end, num_ids, id_base)


def check_set(directory: str, prefix: str, client: bool = False) -> SetHeader:
  """Record 0 of `<directory>/<prefix>.rec` (flag 3 when `client`), every key it announces in the
  index, and the file long enough for its last record; no image record is read.

  Raises:
    RecordIOError: naming the .rec or .idx (and record) and what was expected.
  """
  with recordio.RecordFile(_rec_path(directory, prefix)) as file:
    return _check_open(file, client)


def read_set(directory: str, prefix: str, client: bool = False) -> SplitSet:
  """The image keys and labels of `<directory>/<prefix>.rec` (headers only, no image decoded),
  after `check_set`'s checks.

  Raises:
    RecordIOError: what `check_set` refuses, a record cut short, or a label that is not an
      identity 0 .. num_ids - 1 (naming the record).
  """
  path = _rec_path(directory, prefix)
  with recordio.RecordFile(path) as file:
    end, num_ids, id_base = _check_open(file, client)[1:]
    keys = np.arange(1, end, dtype=np.int64)
    labels = np.empty(len(keys), np.int64)
    for i, key in enumerate(keys.tolist()):
      prefix = file.read_prefix(key, recordio.HEADER_SIZE + 4)
      try:
        header, _ = recordio.unpack_header(prefix, 1)
        labels[i] = recordio.class_label(header)
      except ValueError as e:
        raise recordio.RecordIOError(path, key, str(e)) from None
      if not 0 <= labels[i] < num_ids:
        raise recordio.RecordIOError(path, key, f'label {labels[i]}; the header announces '
                                     f'{num_ids} identities (0..{num_ids - 1})')
  return SplitSet(path=path, keys=keys, labels=labels, num_ids=num_ids, id_base=id_base)


def public_bases(headers: list[SetHeader] | list[SplitSet]) -> list[int]:
  """Each pre-training folder's shift into the public numbering: the identities of the folders
  before it. A flag-3 header must say the same (RecordIOError otherwise)."""
  bases = np.cumsum([0] + [h.num_ids for h in headers])[:-1].tolist()
  for h, base in zip(headers, bases):
    if h.id_base is not None and h.id_base != base:
      raise recordio.RecordIOError(h.path, 0, f'header id_base {h.id_base}; the pre-training '
                                   f'folders before it hold {base} identities: expected {base}')
  return bases


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
    raise SplitError(f'{root} holds {len(found)} {what} directories ({names}); name one in the '
                     'config')
  if not found:
    if required:
      raise SplitError(f'{root} holds no {pattern} directory ({what})')
    return None
  return found[0]


def client_dirs(split_dir: str) -> list[str]:
  """The `client_XXXX` folders of a split, client_0000 .. client_<n-1> in number order.

  Raises:
    SplitError: no client folder, one named otherwise ('client_1'), or a gap in the numbering
      (client_0000 and client_0002 only: a folder lost in a copy would otherwise pass unseen).
  """
  numbered = {}
  for name in sorted(os.listdir(split_dir)):
    if not name.startswith('client_') or not os.path.isdir(os.path.join(split_dir, name)):
      continue
    match = _CLIENT.fullmatch(name)
    if not match or name != f'client_{int(match.group(1)):04d}':
      raise SplitError(f'{os.path.join(split_dir, name)}: expected a folder named '
                       "'client_%04d' % i (client_0000, client_0001, ...)")
    numbered[int(match.group(1))] = name
  if not numbered:
    raise SplitError(f'{split_dir} holds no client_XXXX folder; expected client_0000 onwards')
  gaps = sorted(set(range(max(numbered) + 1)) - set(numbered))
  if gaps:
    raise SplitError(f'{split_dir} holds {len(numbered)} client folders up to '
                     f'{numbered[max(numbered)]} but no client_{gaps[0]:04d}; expected '
                     f'client_0000 .. {numbered[max(numbered)]} with no gap')
  return [os.path.join(split_dir, numbered[i]) for i in sorted(numbered)]


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
        raise SplitError(f'{path}:{number}: {line.strip()!r}; expected "<idx> <id>"') from None
      pairs[key] = identity
  return pairs
