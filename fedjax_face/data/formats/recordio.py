"""MXNet RecordIO (`train.rec` / `train.idx` / `property`) read and written without MXNet.

This is the insightface training-set format (docs/references.md, insightface-recordio),
implemented here from the dmlc recordio specification so that no MXNet is needed:

* Framing (dmlc recordio). A record is one or more parts; each part is `uint32 magic = 0xced7230a`,
  `uint32 lrecord` (low 29 bits: part length, top 3 bits: continuation flag), the part bytes, and
  zero padding to a multiple of 4. The dmlc writer splits a payload wherever the magic number sits
  at a 4-aligned offset of it (so that a reader can resynchronise on the magic) and drops those 4
  bytes: flag 0 = whole record, 1 = first part, 2 = middle part, 3 = last part. The reader joins
  the parts with the magic number put back. All integers are little-endian.
* `train.idx`: text, one `key<TAB>byte_offset` line per record. The reader seeks to one record
  at a time and never loads the whole `.rec` (MS1M: 5.8M images); only the index is in memory.
* Payload: header struct `'IfQQ'` (flag uint32, label float32, id uint64, id2 uint64). If
  flag > 0, `flag` float32 labels follow and `label` is ignored; the rest is the encoded image.
* Record 0 is a meta record: if its flag > 0 its labels `(a, b)` say image records are keys
  `1..a-1` and keys `a..b-1` are identity records whose labels `(start, end)` are that identity's
  image key range `[start, end)`. With flag == 0 every key is an image.
* `property`: one line `num_classes,H,W`.

Keys and key ranges are stored as float32, which is exact only up to 2**24 (16.7M); the writer
refuses larger key ranges and the reader warns (WebFace42M-sized files need another layout).

Errors are `RecordIOError` (a `ValueError`) whose message names the file, the record key and what
was expected. `InsightfaceDataset(skip_bad_records=True)` skips a bad image record instead, counts
it (`num_skipped`, `skipped`) and logs it: never silently.
"""

from __future__ import annotations

import io
import os
import struct
import threading
from typing import Iterator, NamedTuple, Sequence

from absl import logging
import numpy as np

from fedjax_face.core import checks

MAGIC = 0xCED7230A
_MAGIC_BYTES = struct.pack('<I', MAGIC)
_FRAME = struct.Struct('<II')  # magic, lrecord
_HEADER = struct.Struct('<IfQQ')  # flag, label, id, id2
HEADER_SIZE = _HEADER.size  # 24
_LENGTH_BITS = 29
_MAX_PART_LENGTH = (1 << _LENGTH_BITS) - 1
CFLAG_WHOLE, CFLAG_START, CFLAG_MIDDLE, CFLAG_END = 0, 1, 2, 3
# float32 represents every integer up to 2**24 exactly; key ranges beyond it would be rounded.
MAX_EXACT_KEY = 1 << 24
# Individually logged skipped records; later ones are only counted in the per-call summaries.
_MAX_LOGGED_SKIPS = 10


class RecordIOError(checks.UsageError):
  """A malformed `.rec` / `.idx` / `property` file; the message names the file and record key."""

  def __init__(self, path: str, key: int | None, what: str):
    where = f'{path}' if key is None else f'{path}: record {key}'
    super().__init__(f'{where}: {what}')
    self.path = path
    self.key = key
    self.what = what

  def __reduce__(self):  # picklable across processes despite the 3-argument constructor
    return type(self), (self.path, self.key, self.what)


class ImageDecodeError(ValueError):
  """Encoded image bytes that PIL cannot decode, or that decode to an unexpected size."""


class ImageSizeError(ImageDecodeError):
  """A decodable image of a size other than the one required."""


class IRHeader(NamedTuple):
  """The insightface / MXNet image-record header.

  Attributes:
    flag: 0 for a single label, else the number of float32 labels that follow the header.
    label: the class label (flag == 0) or a float32 array of `flag` labels (flag > 0).
    id: record id (the image key in files written by this module).
    id2: second id (0 here).
  """
  flag: int
  label: float | np.ndarray
  id: int
  id2: int


# ------------------------------------------------------------------------------------------------
# Framing.
# ------------------------------------------------------------------------------------------------


def encode_lrecord(cflag: int, length: int) -> int:
  """Packs a continuation flag (0..3) and a part length (< 2**29) into `lrecord`."""
  if not 0 <= cflag <= 3 or not 0 <= length <= _MAX_PART_LENGTH:
    raise ValueError(f'cflag must be in 0..3 and length in 0..{_MAX_PART_LENGTH}, got {cflag}, '
                     f'{length}')
  return (cflag << _LENGTH_BITS) | length


def decode_lrecord(lrecord: int) -> tuple[int, int]:
  """`lrecord` -> (continuation flag, part length)."""
  return lrecord >> _LENGTH_BITS, lrecord & _MAX_PART_LENGTH


def _pad4(n: int) -> int:
  return (n + 3) & ~3


def frame(payload: bytes) -> bytes:
  """Frames one payload as the dmlc writer does (split at aligned magic numbers, padded).

  Args:
    payload: record bytes, shorter than 2**29.

  Returns:
    The bytes to append to a `.rec` file (a multiple of 4 long).
  """
  n = len(payload)
  if n > _MAX_PART_LENGTH:
    raise ValueError(f'a record holds at most {_MAX_PART_LENGTH} bytes, got {n}')
  words = np.frombuffer(payload, '<u4', count=n // 4)
  splits = 4 * np.flatnonzero(words == MAGIC)
  out = []
  start = 0
  for i in splits.tolist():
    # The magic bytes at i are dropped here and restored by the reader.
    cflag = CFLAG_MIDDLE if out else CFLAG_START
    out += [_FRAME.pack(MAGIC, encode_lrecord(cflag, i - start)), payload[start:i]]
    start = i + 4
  last = CFLAG_END if out else CFLAG_WHOLE
  out += [_FRAME.pack(MAGIC, encode_lrecord(last, n - start)), payload[start:],
          b'\0' * (_pad4(n - start) - (n - start))]
  return b''.join(out)


class _FrameError(Exception):
  """Framing problem at a byte position; the caller adds the file and key."""


def _read_framed(pread, size: int, offset: int,
                 limit: int | None = None) -> tuple[bytes, int]:
  """Reads the record starting at byte `offset`, joining continuation parts.

  Args:
    pread: `(num_bytes, offset) -> bytes`.
    size: file size in bytes.
    offset: byte offset of the record's first part.
    limit: read only the first `limit` payload bytes (a cheap header peek); None = all.

  Returns:
    (payload, or its first `limit` bytes; byte offset just past the record, or past the part
    where reading stopped).

  Raises:
    _FrameError: truncated record, bad magic or an impossible continuation flag.
  """
  parts = []
  got = 0
  pos = offset
  first = True
  while True:
    if pos + _FRAME.size > size:
      raise _FrameError(f'truncated: a part header at byte {pos} needs {_FRAME.size} bytes but '
                        f'the file ends at byte {size}')
    # A header peek reads the part header and the wanted bytes in one system call.
    ahead = 0 if limit is None else max(0, min(limit - got, size - pos - _FRAME.size))
    head = pread(_FRAME.size + ahead, pos)
    if len(head) < _FRAME.size:  # the file shrank under us
      raise _FrameError(f'truncated: read {len(head)} of {_FRAME.size} header bytes at byte {pos}')
    magic, lrecord = _FRAME.unpack_from(head)
    if magic != MAGIC:
      raise _FrameError(f'bad magic 0x{magic:08x} at byte {pos}, expected 0x{MAGIC:08x}')
    cflag, length = decode_lrecord(lrecord)
    expected = (CFLAG_WHOLE, CFLAG_START) if first else (CFLAG_MIDDLE, CFLAG_END)
    if cflag not in expected:
      raise _FrameError(f'continuation flag {cflag} at byte {pos}, expected one of {expected} '
                        f'({"first part" if first else "after a start/middle part"})')
    start = pos + _FRAME.size
    if start + length > size:
      raise _FrameError(f'truncated: a part of {length} bytes at byte {start} runs past the end '
                        f'of the file (byte {size})')
    take = length if limit is None else min(length, limit - got)
    if take:
      chunk = head[_FRAME.size:_FRAME.size + take] if take <= ahead else pread(take, start)
      if len(chunk) != take:  # the file shrank under us
        raise _FrameError(f'truncated: read {len(chunk)} of {take} bytes at byte {start}')
      parts.append(chunk)
      got += take
    # A missing final padding at the very end of the file loses no data: tolerated.
    pos = min(start + _pad4(length), size)
    if cflag in (CFLAG_WHOLE, CFLAG_END):
      return b''.join(parts), pos
    parts.append(_MAGIC_BYTES)
    got += len(_MAGIC_BYTES)
    if limit is not None and got >= limit:
      return b''.join(parts)[:limit], pos
    first = False


def _make_pread(fd: int):
  if hasattr(os, 'pread'):  # atomic: one file may be read from several threads
    return lambda n, offset: os.pread(fd, n, offset)
  lock = threading.Lock()

  def pread(n, offset):
    with lock:
      os.lseek(fd, offset, os.SEEK_SET)
      return os.read(fd, n)

  return pread


def iter_records(path_rec: str | os.PathLike) -> Iterator[tuple[int, bytes]]:
  """Scans a `.rec` file front to back, yielding (byte offset, payload); needs no `.idx`."""
  path = os.fspath(path_rec)
  fd = os.open(path, os.O_RDONLY)
  try:
    size = os.fstat(fd).st_size
    pread = _make_pread(fd)
    pos = 0
    while pos < size:
      try:
        payload, end = _read_framed(pread, size, pos)
      except _FrameError as e:
        raise RecordIOError(path, None, f'record at byte {pos}: {e}') from None
      yield pos, payload
      pos = end
  finally:
    os.close(fd)


# ------------------------------------------------------------------------------------------------
# Index.
# ------------------------------------------------------------------------------------------------


def read_index(path_idx: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
  """Parses a `.idx` file into (keys, byte offsets), both int64, in file order.

  Raises:
    RecordIOError: a malformed line or a duplicated key (the message names the line).
  """
  path = os.fspath(path_idx)
  try:
    with open(path, 'rb') as f:
      text = f.read()
  except OSError as e:
    raise RecordIOError(path, None, f'cannot read the index file: {e}') from None
  tokens = text.split()
  try:
    if len(tokens) % 2:
      raise ValueError
    table = np.array(tokens, dtype=np.int64).reshape(-1, 2)
  except ValueError:
    # Slow path, only to name the offending line.
    for n, line in enumerate(text.splitlines(), 1):
      fields = line.split()
      if fields and (len(fields) != 2 or not all(t.isdigit() for t in fields)):
        raise RecordIOError(path, None, f'line {n} is {line[:80]!r}, expected "key<TAB>offset" '
                            'with two non-negative integers') from None
    raise RecordIOError(path, None, 'malformed index (expected "key<TAB>offset" lines)') from None
  keys, offsets = table[:, 0], table[:, 1]
  if (keys < 0).any() or (offsets < 0).any():
    raise RecordIOError(path, None, 'negative key or offset; expected non-negative integers')
  uniq, counts = np.unique(keys, return_counts=True)
  if (counts > 1).any():
    raise RecordIOError(path, int(uniq[counts > 1][0]), 'key appears more than once in the index')
  return keys, offsets


class RecordFile:
  """Random access to the records of a `.rec` file through its `.idx`, by seeking.

  Only the index (two int64 per record) is held in memory. Reads use `os.pread`, so one
  RecordFile may be shared by threads.

  Example:
    with RecordFile('train.rec') as f:
      payload = f.read(1)
  """

  def __init__(self, path_rec: str | os.PathLike, path_idx: str | os.PathLike | None = None):
    """Opens `path_rec`; `path_idx` defaults to the same path with the `.idx` extension.

    Raises:
      RecordIOError: unreadable files, malformed index, or an index offset past the end of the
        `.rec` file.
    """
    self.path = os.fspath(path_rec)
    self.path_idx = (os.path.splitext(self.path)[0] + '.idx' if path_idx is None
                     else os.fspath(path_idx))
    keys, offsets = read_index(self.path_idx)
    try:
      self._fd = os.open(self.path, os.O_RDONLY)
    except OSError as e:
      raise RecordIOError(self.path, None, f'cannot open the record file: {e}') from None
    self._size = os.fstat(self._fd).st_size
    self._pread = _make_pread(self._fd)
    past = offsets + _FRAME.size > self._size
    if past.any():
      i = int(np.flatnonzero(past)[0])
      self.close()
      raise RecordIOError(self.path_idx, int(keys[i]),
                          f'index offset {int(offsets[i])} is past the end of {self.path} '
                          f'({self._size} bytes); expected offset + {_FRAME.size} <= file size')
    order = np.argsort(keys, kind='stable')
    self._keys, self._offsets = keys[order], offsets[order]
    # Usual case keys 0..n-1: direct indexing instead of a binary search.
    self._dense = bool(len(keys) and self._keys[-1] - self._keys[0] == len(keys) - 1)

  def __len__(self) -> int:
    return len(self._keys)

  def __contains__(self, key) -> bool:
    i = np.searchsorted(self._keys, key)
    return bool(i < len(self._keys) and self._keys[i] == key)

  def keys(self) -> np.ndarray:
    """All keys, sorted, int64."""
    return self._keys.copy()

  def offsets(self) -> np.ndarray:
    """The byte offset of each record of `keys()`, int64 (the record that starts last is the one a
    truncated file cuts, whatever its key)."""
    return self._offsets.copy()

  @property
  def file_size(self) -> int:
    return self._size

  def offset(self, key: int) -> int:
    """Byte offset of record `key` (RecordIOError if the index has no such key)."""
    key = int(key)
    if self._dense:
      i = key - int(self._keys[0]) if len(self._keys) else -1
      if 0 <= i < len(self._keys):
        return int(self._offsets[i])
    else:
      i = int(np.searchsorted(self._keys, key))
      if i < len(self._keys) and self._keys[i] == key:
        return int(self._offsets[i])
    raise RecordIOError(self.path_idx, key, 'key not in the index')

  def read(self, key: int) -> bytes:
    """The payload of record `key` (continuation parts joined)."""
    return self._read(key, None)

  def read_prefix(self, key: int, num_bytes: int) -> bytes:
    """The first `num_bytes` bytes of record `key`'s payload (all of it if shorter)."""
    return self._read(key, num_bytes)

  def _read(self, key: int, limit: int | None) -> bytes:
    if self._fd is None:
      raise ValueError(f'{self.path}: read from a closed RecordFile')
    offset = self.offset(key)
    try:
      return _read_framed(self._pread, self._size, offset, limit)[0]
    except _FrameError as e:
      raise RecordIOError(self.path, int(key), f'(index offset {offset}) {e}') from None

  def close(self) -> None:
    fd, self._fd = getattr(self, '_fd', None), None
    if fd is not None:
      os.close(fd)

  def __enter__(self) -> RecordFile:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  def __del__(self):
    try:
      self.close()
    except Exception:  # pylint: disable=broad-except
      pass  # at interpreter exit `os` may already be torn down; the OS closes the fd anyway


# ------------------------------------------------------------------------------------------------
# Record payloads.
# ------------------------------------------------------------------------------------------------


def unpack_header(buf: bytes, max_labels: int | None = None) -> tuple[IRHeader, int]:
  """Parses the header (and labels) at the start of a payload or payload prefix.

  Args:
    buf: the payload, or at least its first `24 + 4 * min(flag, max_labels)` bytes.
    max_labels: parse at most this many of the extra labels (None = all `flag` of them).

  Returns:
    (header, byte offset of the image data in the full payload).

  Raises:
    ValueError: `buf` is too short for what the header announces.
  """
  if len(buf) < HEADER_SIZE:
    raise ValueError(f'payload of {len(buf)} bytes is shorter than the {HEADER_SIZE}-byte '
                     "'IfQQ' header")
  flag, label, id1, id2 = _HEADER.unpack_from(buf)
  if flag == 0:
    return IRHeader(0, float(label), id1, id2), HEADER_SIZE
  count = flag if max_labels is None else min(flag, max_labels)
  if len(buf) < HEADER_SIZE + 4 * count:
    raise ValueError(f'header flag {flag} announces {flag} float32 labels but the payload has '
                     f'only {len(buf) - HEADER_SIZE} bytes after the header')
  labels = np.frombuffer(buf, '<f4', count=count, offset=HEADER_SIZE).astype(np.float32)
  return IRHeader(flag, labels, id1, id2), HEADER_SIZE + 4 * flag


def unpack(payload: bytes) -> tuple[IRHeader, bytes]:
  """Payload -> (header, encoded image bytes), as `mx.recordio.unpack`."""
  header, start = unpack_header(payload)
  if start > len(payload):
    raise ValueError(f'header flag {header.flag} announces {header.flag} labels but the payload '
                     f'is only {len(payload)} bytes')
  return header, payload[start:]


def pack(header: IRHeader, image_bytes: bytes = b'') -> bytes:
  """(header, image bytes) -> payload, as `mx.recordio.pack`.

  A scalar `header.label` is written with flag 0; a sequence of labels is written with
  flag = its length after the header (and the header's own label field set to 0), whatever
  `header.flag` says.
  """
  label = header.label
  if np.ndim(label) == 0:
    head = _HEADER.pack(0, float(label), header.id, header.id2)
    return head + bytes(image_bytes)
  labels = np.asarray(label, '<f4').reshape(-1)
  if labels.size == 0:
    raise ValueError('a label sequence must not be empty (flag 0 means a scalar label)')
  return (_HEADER.pack(labels.size, 0.0, header.id, header.id2) + labels.tobytes() +
          bytes(image_bytes))


def _integral(value: float, what: str) -> int:
  value = float(value)
  if not value.is_integer():  # also False for inf and nan
    raise ValueError(f'{what} is {value!r}, expected an integer')
  return int(value)


def class_label(header: IRHeader) -> int:
  """The class id of an image record: `label`, or `label[0]` when the header has several."""
  value = header.label if header.flag == 0 else float(header.label[0])
  return _integral(value, 'the class label')


# ------------------------------------------------------------------------------------------------
# Images.
# ------------------------------------------------------------------------------------------------


def decode_image(data: bytes, expected_hw: tuple[int, int] | None = None) -> np.ndarray:
  """Encoded JPEG/PNG bytes -> uint8 `[H, W, 3]` RGB.

  Args:
    data: the encoded image.
    expected_hw: if given, the (height, width) the image must have; checked from the image
      header before decoding the pixels.

  Raises:
    ImageDecodeError: PIL cannot decode the data (corrupt, truncated, not an image), or
      ImageSizeError (a subclass): the size differs from `expected_hw`.
  """
  from PIL import Image  # pylint: disable=g-import-not-at-top

  try:
    with Image.open(io.BytesIO(data)) as img:
      if expected_hw is not None and (img.height, img.width) != tuple(expected_hw):
        raise ImageSizeError(f'image is {img.height}x{img.width} (HxW), expected '
                               f'{expected_hw[0]}x{expected_hw[1]}')
      img.load()  # corrupt or truncated data raises here, not in open()
      rgb = img if img.mode == 'RGB' else img.convert('RGB')
      return np.array(rgb, dtype=np.uint8)
  except ImageDecodeError:
    raise
  except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as e:
    raise ImageDecodeError(f'cannot decode image ({len(data)} bytes): '
                           f'{type(e).__name__}: {e}') from None


def encode_image(image: np.ndarray, image_format: str = 'png', quality: int = 95) -> bytes:
  """uint8 `[H, W, 3]` -> PNG (lossless) or JPEG (`quality` 1..100) bytes."""
  from PIL import Image  # pylint: disable=g-import-not-at-top

  image = np.asarray(image)
  if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
    raise ValueError(f'image must be uint8 [H, W, 3], got {image.dtype} {image.shape}')
  fmt = image_format.lower()
  buf = io.BytesIO()
  if fmt == 'png':
    Image.fromarray(image).save(buf, format='PNG')
  elif fmt in ('jpeg', 'jpg'):
    if not 1 <= quality <= 100:
      raise ValueError(f'quality must be in 1..100, got {quality}')
    Image.fromarray(image).save(buf, format='JPEG', quality=int(quality))
  else:
    raise ValueError(f"image_format must be 'png' or 'jpeg', got {image_format!r}")
  return buf.getvalue()


# ------------------------------------------------------------------------------------------------
# The insightface data set.
# ------------------------------------------------------------------------------------------------


def read_property(path: str | os.PathLike) -> tuple[int, int, int]:
  """`property` file -> (num_classes, H, W)."""
  path = os.fspath(path)
  try:
    with open(path, 'r', encoding='ascii') as f:
      text = f.read().strip()
  except (OSError, UnicodeDecodeError) as e:
    raise RecordIOError(path, None, f'cannot read the property file: {e}') from None
  fields = text.split(',')
  if len(fields) != 3 or not all(t.strip().isdigit() for t in fields):
    raise RecordIOError(path, None, f'content is {text[:80]!r}, expected "num_classes,H,W"')
  num_classes, h, w = (int(t) for t in fields)
  if min(num_classes, h, w) < 1:
    raise RecordIOError(path, None, f'content is {text!r}, expected positive integers')
  return num_classes, h, w


class Chunk(NamedTuple):
  """Decoded image records: keys int64 `[n]`, images uint8 `[n, H, W, 3]`, labels int64 `[n]`."""
  keys: np.ndarray
  images: np.ndarray
  labels: np.ndarray


# Keys per block of `InsightfaceDataset.labels`.
_LABEL_BLOCK = 1 << 16


class InsightfaceDataset:
  """An insightface training set `<root>/{train.rec, train.idx, property}`, streamed.

  Opening reads the property file, the index, the meta record and the identity records (about
  32 bytes each); no image is decoded. `labels()` reads only record headers; images are decoded
  by `decode`, `read_chunk` and `iter_chunks`, a chunk at a time.

  Attributes:
    root: the directory.
    num_classes: from `property`.
    image_shape: (H, W, 3) from `property`.
    image_keys: int64 keys of the image records (1..a-1 with a meta record, else all keys).
    identity_ranges: int64 `[num_classes, 2]` (start, end) image key range of each identity, or
      None when record 0 has no meta labels.
    skipped: (key, reason) of every image record skipped so far (skip_bad_records=True only).
  """

  def __init__(self, root: str | os.PathLike, *, prefix: str = 'train',
               skip_bad_records: bool = False, check_identity_labels: bool = True):
    """Opens the data set.

    Args:
      root: directory holding `<prefix>.rec`, `<prefix>.idx` and `property`.
      prefix: file name stem of the record and index files.
      skip_bad_records: if True, image records that cannot be read (truncated, bad magic, bad
        header, label out of range, corrupt or wrongly sized image) are skipped by `labels`,
        `read_chunk` and `iter_chunks`, counted and logged. Structural problems (property,
        index, meta and identity records) always raise.
      check_identity_labels: check that an image in identity j's key range has label j (as in
        files written by insightface and by `write_insightface`).

    Raises:
      RecordIOError: see the module docstring.
    """
    self.root = os.fspath(root)
    self.skip_bad_records = skip_bad_records
    self.check_identity_labels = check_identity_labels
    self.skipped: list[tuple[int, str]] = []
    prop = os.path.join(self.root, 'property')
    self.num_classes, h, w = read_property(prop)
    self.image_shape = (h, w, 3)
    self._file = RecordFile(os.path.join(self.root, prefix + '.rec'),
                            os.path.join(self.root, prefix + '.idx'))
    self.path = self._file.path
    self.image_keys, self.identity_ranges = self._read_layout(prop)

  # -- layout ------------------------------------------------------------------------------------

  def _header(self, key: int, max_labels: int = 2) -> IRHeader:
    prefix = self._file.read_prefix(key, HEADER_SIZE + 4 * max_labels)
    try:
      return unpack_header(prefix, max_labels)[0]
    except ValueError as e:
      raise RecordIOError(self.path, int(key), str(e)) from None

  def _missing(self, keys: np.ndarray) -> np.ndarray:
    file_keys = self._file._keys  # pylint: disable=protected-access
    i = np.minimum(np.searchsorted(file_keys, keys), max(len(file_keys) - 1, 0))
    return keys[file_keys[i] != keys] if len(file_keys) else keys

  def _read_layout(self, prop: str) -> tuple[np.ndarray, np.ndarray | None]:
    if 0 not in self._file:
      return self._file.keys(), None
    meta = self._header(0)
    if meta.flag == 0:
      return self._file.keys(), None
    if meta.flag < 2:
      raise RecordIOError(self.path, 0, f'meta record has flag {meta.flag}, expected 0 or >= 2 '
                          'labels (a, b)')
    try:
      a = _integral(float(meta.label[0]), 'meta label a')
      b = _integral(float(meta.label[1]), 'meta label b')
    except ValueError as e:
      raise RecordIOError(self.path, 0, str(e)) from None
    if not 1 <= a <= b:
      raise RecordIOError(self.path, 0, f'meta labels (a, b) = ({a}, {b}), expected 1 <= a <= b')
    if b > MAX_EXACT_KEY:
      logging.warning('%s: key range up to %d exceeds 2**24; float32 labels may have rounded '
                      'the identity ranges', self.path, b)
    image_keys = np.arange(1, a, dtype=np.int64)
    id_keys = np.arange(a, b, dtype=np.int64)
    for what, keys in (('image', image_keys), ('identity', id_keys)):
      missing = self._missing(keys)
      if len(missing):
        raise RecordIOError(self._file.path_idx, int(missing[0]),
                            f'meta record 0 says {what} records are keys {int(keys[0])}..'
                            f'{int(keys[-1])} but this key is not in the index')
    if b - a != self.num_classes:
      raise RecordIOError(self.path, 0, f'{prop} says {self.num_classes} classes but the meta '
                          f'record announces {b - a} identity records (keys {a}..{b - 1})')
    ranges = np.empty((b - a, 2), np.int64)
    prev_end = 1
    for j, key in enumerate(id_keys.tolist()):
      header = self._header(key)
      try:
        if header.flag < 2:
          raise ValueError(f'flag {header.flag}, expected >= 2 labels (start, end)')
        start = _integral(float(header.label[0]), 'start')
        end = _integral(float(header.label[1]), 'end')
      except ValueError as e:
        raise RecordIOError(self.path, key, f'identity {j} record: {e}') from None
      if start == end:
        raise RecordIOError(self.path, key, f'identity {j} is empty (key range [{start}, {end})); '
                            'expected at least one image')
      if not prev_end <= start < end <= a:
        raise RecordIOError(self.path, key, f'identity {j} has key range [{start}, {end}), '
                            f'expected {prev_end} <= start < end <= {a} (sorted, non-overlapping '
                            'ranges of image keys)')
      ranges[j] = start, end
      prev_end = end
    return image_keys, ranges

  # -- access ------------------------------------------------------------------------------------

  @property
  def num_images(self) -> int:
    return len(self.image_keys)

  @property
  def num_skipped(self) -> int:
    return len(self.skipped)

  def identity_keys(self, identity: int) -> range:
    """Image keys of one identity (needs the meta record)."""
    if self.identity_ranges is None:
      raise ValueError(f'{self.path}: record 0 has no identity ranges')
    start, end = self.identity_ranges[identity]
    return range(int(start), int(end))

  def _expected_labels(self, keys: np.ndarray) -> np.ndarray | None:
    """Identity index whose range holds each key, -1 outside every range; None if unchecked."""
    if self.identity_ranges is None or not self.check_identity_labels:
      return None
    j = np.searchsorted(self.identity_ranges[:, 0], keys, side='right') - 1
    inside = (j >= 0) & (keys < self.identity_ranges[np.maximum(j, 0), 1])
    return np.where(inside, j, -1)

  def _check_label(self, key: int, header: IRHeader, expected: int) -> int:
    try:
      label = class_label(header)
    except ValueError as e:
      raise RecordIOError(self.path, key, str(e)) from None
    if not 0 <= label < self.num_classes:
      raise RecordIOError(self.path, key, f'label {label} is outside [0, {self.num_classes}) '
                          'given by the property file')
    if expected >= 0 and label != expected:
      s, e = self.identity_ranges[expected]
      raise RecordIOError(self.path, key, f'record lies in identity {expected}\'s key range '
                          f'[{s}, {e}) but its label is {label}')
    return label

  def _skip(self, key: int, err: RecordIOError) -> None:
    self.skipped.append((int(key), str(err)))
    if len(self.skipped) <= _MAX_LOGGED_SKIPS:
      logging.warning('skip_bad_records: skipped %s', err)

  def _log_skips(self, where: str, count: int) -> None:
    if count:
      logging.warning('%s: %s skipped %d bad records (%d in total so far)', self.path, where,
                      count, self.num_skipped)

  def labels(self, keys: Sequence[int] | np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Class labels from the record headers; no image is decoded.

    Args:
      keys: image keys to read (default: all `image_keys`).

    Returns:
      (keys, labels), both int64. Equal to the requested keys unless skip_bad_records dropped
      some (those are in `skipped`).
    """
    keys = self.image_keys if keys is None else np.asarray(keys, np.int64).reshape(-1)
    out = np.empty(len(keys), np.int64)
    ok = np.ones(len(keys), bool)
    before = self.num_skipped
    # Blocks bound the Python-int lists (~60 bytes per key) for a multi-million-key set.
    for s in range(0, len(keys), _LABEL_BLOCK):
      block = keys[s:s + _LABEL_BLOCK]
      expected = self._expected_labels(block)
      expected = [-1] * len(block) if expected is None else expected.tolist()
      for i, key in enumerate(block.tolist()):
        try:
          out[s + i] = self._check_label(key, self._header(key, 1), expected[i])
        except RecordIOError as e:
          if not self.skip_bad_records:
            raise
          self._skip(key, e)
          ok[s + i] = False
    self._log_skips('labels()', self.num_skipped - before)
    return keys[ok], out[ok]

  def read_example(self, key: int) -> tuple[int, np.ndarray]:
    """(label, uint8 `[H, W, 3]` image) of one image record; raises on a bad record."""
    expected = self._expected_labels(np.array([key], np.int64))
    return self._example(key, -1 if expected is None else int(expected[0]))

  def _example(self, key: int, expected: int) -> tuple[int, np.ndarray]:
    payload = self._file.read(key)
    try:
      header, data = unpack(payload)
    except ValueError as e:
      raise RecordIOError(self.path, int(key), str(e)) from None
    label = self._check_label(int(key), header, expected)
    try:
      image = decode_image(data, self.image_shape[:2])
    except ImageDecodeError as e:
      note = ' (H, W of the property file)' if isinstance(e, ImageSizeError) else ''
      raise RecordIOError(self.path, int(key), f'{e}{note}') from None
    return label, image

  def decode(self, key: int) -> np.ndarray:
    """uint8 `[H, W, 3]` RGB image of record `key`."""
    return self.read_example(key)[1]

  def read_chunk(self, keys: Sequence[int] | np.ndarray) -> Chunk:
    """Reads and decodes the given image records (bad ones skipped if skip_bad_records)."""
    keys = np.asarray(keys, np.int64).reshape(-1)
    expected = self._expected_labels(keys)
    expected = [-1] * len(keys) if expected is None else expected.tolist()
    images = np.empty((len(keys),) + self.image_shape, np.uint8)
    labels = np.empty(len(keys), np.int64)
    ok = np.ones(len(keys), bool)
    before = self.num_skipped
    for i, key in enumerate(keys.tolist()):
      try:
        labels[i], images[i] = self._example(key, expected[i])
      except RecordIOError as e:
        if not self.skip_bad_records:
          raise
        self._skip(key, e)
        ok[i] = False
    self._log_skips(f'read_chunk(keys {keys[0]}..{keys[-1]})' if len(keys) else 'read_chunk',
                    self.num_skipped - before)
    if ok.all():
      return Chunk(keys, images, labels)
    return Chunk(keys[ok], images[ok], labels[ok])

  def iter_key_chunks(self, chunk_size: int,
                      keys: np.ndarray | None = None) -> Iterator[np.ndarray]:
    """Consecutive slices of `keys` (default `image_keys`), `chunk_size` at a time."""
    if chunk_size < 1:
      raise ValueError(f'chunk_size must be >= 1, got {chunk_size}')
    keys = self.image_keys if keys is None else np.asarray(keys, np.int64).reshape(-1)
    for s in range(0, len(keys), chunk_size):
      yield keys[s:s + chunk_size]

  def iter_chunks(self, chunk_size: int = 1024,
                  keys: np.ndarray | None = None) -> Iterator[Chunk]:
    """Streams decoded chunks in key order; only one chunk of images is in memory at a time."""
    for chunk_keys in self.iter_key_chunks(chunk_size, keys):
      yield self.read_chunk(chunk_keys)

  def close(self) -> None:
    self._file.close()

  def __enter__(self) -> InsightfaceDataset:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


# ------------------------------------------------------------------------------------------------
# Writing.
# ------------------------------------------------------------------------------------------------


class RecordWriter:
  """Writes a `.rec` file and its `.idx` (`key<TAB>offset` lines), dmlc framing."""

  def __init__(self, path_rec: str | os.PathLike, path_idx: str | os.PathLike | None = None):
    self.path = os.fspath(path_rec)
    self.path_idx = (os.path.splitext(self.path)[0] + '.idx' if path_idx is None
                     else os.fspath(path_idx))
    self._rec = open(self.path, 'wb')
    self._idx = open(self.path_idx, 'w', encoding='ascii')
    self._keys = set()

  def write(self, key: int, payload: bytes) -> int:
    """Appends record `key`; returns its byte offset."""
    key = int(key)
    if key < 0 or key in self._keys:
      raise ValueError(f'{self.path}: key {key} is negative or already written')
    offset = self._rec.tell()
    self._rec.write(frame(payload))
    self._idx.write(f'{key}\t{offset}\n')
    self._keys.add(key)
    return offset

  def close(self) -> None:
    for f in (self._rec, self._idx):
      if not f.closed:
        f.close()

  def __enter__(self) -> RecordWriter:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


def write_property(path: str | os.PathLike, num_classes: int, height: int, width: int) -> None:
  with open(path, 'w', encoding='ascii') as f:
    f.write(f'{num_classes},{height},{width}\n')


def write_insightface(root: str | os.PathLike, images: np.ndarray | Sequence[np.ndarray],
                      labels: np.ndarray | Sequence[int], *, num_classes: int | None = None,
                      image_format: str = 'jpeg', quality: int = 95,
                      prefix: str = 'train') -> np.ndarray:
  """Writes `<root>/{<prefix>.rec, <prefix>.idx, property}` in the identity-grouped layout.

  Key 0 is the meta record (labels (a, b)); keys 1..N the images grouped by label (stable
  order); keys a..b-1 one identity record per class with its image key range (start, end).

  Args:
    root: output directory (created if needed).
    images: uint8 `[N, H, W, 3]` (an array or a sequence of equally sized images).
    labels: int `[N]` class ids in 0..num_classes-1.
    num_classes: default max(labels) + 1; every class must have at least one image.
    image_format: 'jpeg' (as the public data sets) or 'png' (lossless round trips).
    quality: JPEG quality.
    prefix: stem of the record and index file names.

  Returns:
    int64 `[N]` order: record key k + 1 holds `images[order[k]]`.
  """
  labels = np.asarray(labels)
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f'labels must be a 1-D integer array, got {labels.dtype} {labels.shape}')
  n = len(labels)
  if len(images) != n or n == 0:
    raise ValueError(f'got {len(images)} images and {n} labels; expected as many, at least one')
  num_classes = int(labels.max()) + 1 if num_classes is None else int(num_classes)
  if labels.min() < 0 or labels.max() >= num_classes:
    raise ValueError(f'labels must lie in [0, {num_classes}), got [{labels.min()}, '
                     f'{labels.max()}]')
  counts = np.bincount(labels, minlength=num_classes)
  if (counts == 0).any():
    raise ValueError(f'class {int(np.flatnonzero(counts == 0)[0])} has no images; the format '
                     'cannot hold an empty identity')
  a, b = n + 1, n + 1 + num_classes
  if b > MAX_EXACT_KEY:
    raise ValueError(f'{b} records exceed 2**24: key ranges stored as float32 would be rounded')
  shape = np.shape(images[0])
  if len(shape) != 3 or shape[-1] != 3:
    raise ValueError(f'images must be [N, H, W, 3], got first image shape {shape}')
  order = np.argsort(labels, kind='stable')
  ends = 1 + np.cumsum(counts)
  starts = ends - counts
  os.makedirs(root, exist_ok=True)
  with RecordWriter(os.path.join(root, prefix + '.rec'),
                    os.path.join(root, prefix + '.idx')) as writer:
    writer.write(0, pack(IRHeader(2, np.array([a, b], np.float32), 0, 0)))
    for k, i in enumerate(order.tolist(), 1):
      image = np.asarray(images[i])
      if image.shape != shape:
        raise ValueError(f'image {i} has shape {image.shape}, expected {shape} like image 0')
      writer.write(k, pack(IRHeader(0, float(labels[i]), k, 0),
                           encode_image(image, image_format, quality)))
    for j in range(num_classes):
      writer.write(a + j, pack(IRHeader(2, np.array([starts[j], ends[j]], np.float32), a + j,
                                        0)))
  write_property(os.path.join(root, 'property'), num_classes, shape[0], shape[1])
  return order.astype(np.int64)
