"""insightface verification pair sets (`lfw.bin`, `cfp_fp.bin`, `agedb_30.bin`, ...), read safely.

A `.bin` file is a pickle of `(bins, issame_list)` (docs/references.md, verification-bin):
`bins` holds 2N encoded images (pair p is `bins[2p]`, `bins[2p + 1]`), `issame_list` N booleans.
The public files were written by Python 2, so their images are py2 `str` objects: Python 3 reads
them with `encoding='bytes'`.

A pickle can import and call anything, so these files are read with
`io.safe_pickle.RestrictedUnpickler`, which admits no real global at all. Plain containers,
bytes, str, bool, int, float and None need no global. Some `.bin` files hold numpy arrays or
numpy bools (e.g. `issame_list` as a bool ndarray, images as uint8 ndarrays), and Python 3
pickles of protocol < 3 spell `bytes` as
`_codecs.encode(str, 'latin1')`; for those exactly these names are admitted, each mapped to a
stand-in written here that checks its arguments and builds the value itself (the real numpy
functions never see the file's data):

* `numpy.core.multiarray._reconstruct` / `numpy._core.multiarray._reconstruct` with
  `numpy.ndarray` and a state `(version, shape, dtype, is_fortran, raw bytes)`: arrays of dtype
  bool or uint8 only;
* `numpy.dtype`: only `'b1'` (bool) and `'u1'` (uint8), with a plain state;
* `numpy.core.numeric._frombuffer` / `numpy._core.numeric._frombuffer` (protocol 5 arrays), bool
  or uint8;
* `numpy.core.multiarray.scalar` / `numpy._core.multiarray.scalar`: numpy bool / uint8 scalars;
* `_codecs.encode` with a str and the 'latin1' / 'latin-1' encoding.

The stand-ins are frozen objects (BUILD cannot set attributes on them) and return holders rather
than real ndarrays, so no numpy `__setstate__` ever runs on the file's data. Every other global is
refused with `UnsafePickleError` naming the file and the global, before anything is imported or
called. Persistent ids and out-of-band buffers are refused too.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import Sequence

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data.formats import recordio
from fedjax_face.data.types import PairSet
from fedjax_face.io import safe_pickle

_DTYPES = {'b1': np.dtype(np.bool_), 'u1': np.dtype(np.uint8)}


class BinFormatError(checks.UsageError):
  """A `.bin` file that is not a well-formed insightface pair set; the message names the file."""


class UnsafePickleError(BinFormatError):
  """The pickle tried to load a global that is not admitted; nothing was imported or called."""


class _DtypeSpec:
  """Stand-in for `numpy.dtype(spec, align, copy)`: bool or uint8 only."""

  __slots__ = ('dtype',)

  def __init__(self, spec, align=False, copy=False):
    del align, copy
    spec = safe_pickle.text(spec)
    if not isinstance(spec, str) or spec not in _DTYPES:
      raise safe_pickle.Refused(f'numpy.dtype({spec!r}): only {sorted(_DTYPES)} (bool, uint8) '
                                'are admitted')
    self.dtype = _DTYPES[spec]

  def __setstate__(self, state):
    # Version 3/4 state: (version, byteorder, subarray, names, fields, elsize, alignment, flags).
    # One-byte types have no byte order; anything structured is refused.
    if (not isinstance(state, tuple) or len(state) < 5 or
        safe_pickle.text(state[1]) not in ('|', '<', '>', '=') or
        any(s is not None for s in state[2:5])):
      raise safe_pickle.Refused(f'numpy.dtype state {state!r} is not a plain bool/uint8 dtype')


def _array(shape, dtype: _DtypeSpec, raw, order: str = 'C') -> np.ndarray:
  if not isinstance(dtype, _DtypeSpec):
    raise safe_pickle.Refused(f'array dtype is {type(dtype).__name__}, expected numpy.dtype')
  if (not isinstance(shape, tuple) or
      not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
    raise safe_pickle.Refused(f'array shape {shape!r} is not a tuple of non-negative ints')
  if isinstance(raw, str):  # protocol-0/1 pickles of py3 numpy hold latin-1 text
    raw = raw.encode('latin1')
  if not isinstance(raw, (bytes, bytearray)):
    raise safe_pickle.Refused(f'array data is {type(raw).__name__}, expected bytes')
  if len(raw) != int(np.prod(shape, dtype=np.int64)):
    raise safe_pickle.Refused(f'array data has {len(raw)} bytes, shape {shape} needs '
                   f'{int(np.prod(shape, dtype=np.int64))}')
  array = np.frombuffer(bytes(raw), np.uint8).reshape(shape, order=safe_pickle.text(order))
  # Via uint8 so that a bool byte other than 0/1 still reads as a proper True.
  return array != 0 if dtype.dtype == np.bool_ else array.copy()


class _ArrayBuilder:
  """Holds an array built by a stand-in; never a real numpy object while unpickling.

  `_reconstruct` returns an empty one and the pickle's BUILD opcode fills it in through
  `__setstate__`; `_frombuffer` and `_scalar` return filled ones. Keeping real ndarrays out of
  the unpickler's reach means a BUILD opcode can never call numpy's own `__setstate__`.
  """

  __slots__ = ('array',)

  def __init__(self, array: np.ndarray | None = None):
    self.array = array

  def __setstate__(self, state):
    if self.array is not None:
      raise safe_pickle.Refused('ndarray state applied twice')
    # Version 1: (1, shape, dtype, is_fortran, raw); version 0 omits the version number.
    if isinstance(state, tuple) and len(state) == 5 and state[0] == 1:
      state = state[1:]
    if not isinstance(state, tuple) or len(state) != 4:
      raise safe_pickle.Refused(f'ndarray state of type {type(state).__name__} is not (shape, '
                                'dtype, is_fortran, raw)')
    shape, dtype, fortran, raw = state
    self.array = _array(shape, dtype, raw, 'F' if fortran else 'C')


def _refuse_ndarray(*args, **kwargs):
  del args, kwargs
  raise safe_pickle.Refused('calling numpy.ndarray is not admitted')


# numpy.ndarray only appears as the marker first argument of _reconstruct.
_NDARRAY = safe_pickle.StandIn('numpy.ndarray', _refuse_ndarray)


def _reconstruct(cls, shape, typecode):
  del shape, typecode
  if cls is not _NDARRAY:
    raise safe_pickle.Refused('_reconstruct of anything but numpy.ndarray is not admitted')
  return _ArrayBuilder()


def _frombuffer(buf, dtype, shape, order):
  return _ArrayBuilder(_array(shape, dtype, buf, order))


def _scalar(dtype, data=None):
  if isinstance(data, str):
    data = data.encode('latin1')
  if not isinstance(data, (bytes, bytearray)) or len(data) != 1:
    raise safe_pickle.Refused(f'numpy scalar data {data!r} is not one byte')
  return _ArrayBuilder(_array((), dtype, data))


def _latin1_encode(text, encoding='utf-8', errors='strict'):
  del errors
  if not isinstance(text, str) or encoding not in ('latin1', 'latin-1'):
    raise safe_pickle.Refused(f'_codecs.encode is admitted only for str with latin1, got '
                   f'{type(text).__name__}, {encoding!r}')
  return text.encode('latin1')


def _admitted() -> dict[tuple[str, str], safe_pickle.StandIn]:
  table = {}
  for module in ('numpy.core.multiarray', 'numpy._core.multiarray'):
    table[module, '_reconstruct'] = safe_pickle.StandIn('numpy.ndarray reconstruct', _reconstruct)
    table[module, 'scalar'] = safe_pickle.StandIn('numpy scalar', _scalar)
  for module in ('numpy.core.numeric', 'numpy._core.numeric'):
    table[module, '_frombuffer'] = safe_pickle.StandIn('numpy frombuffer', _frombuffer)
  table['numpy', 'ndarray'] = _NDARRAY
  table['numpy', 'dtype'] = safe_pickle.StandIn('numpy.dtype', _DtypeSpec)
  table['_codecs', 'encode'] = safe_pickle.StandIn('_codecs.encode', _latin1_encode)
  return table


_ADMITTED = _admitted()


def _unwrap(obj):
  return obj.array if isinstance(obj, _ArrayBuilder) else obj


def _image_bytes(item, path: str, index: int) -> bytes:
  item = _unwrap(item)
  if isinstance(item, (bytes, bytearray)):
    return bytes(item)
  if isinstance(item, np.ndarray) and item.dtype == np.uint8 and item.ndim == 1:
    return item.tobytes()
  raise BinFormatError(f'{path}: image {index} is a {type(item).__name__}, expected encoded '
                       'image bytes')


def _bools(issame, path: str) -> np.ndarray:
  issame = _unwrap(issame)
  if isinstance(issame, np.ndarray):
    if issame.dtype != np.bool_ and not (issame.dtype == np.uint8 and (issame <= 1).all()):
      raise BinFormatError(f'{path}: issame_list has dtype {issame.dtype}, expected bool')
    return issame.reshape(-1).astype(bool)
  if not isinstance(issame, (list, tuple)):
    raise BinFormatError(f'{path}: issame_list is a {type(issame).__name__}, expected a list')
  issame = [_unwrap(v) for v in issame]
  for i, v in enumerate(issame):
    if isinstance(v, np.ndarray) and v.ndim == 0:
      v = v[()]
      issame[i] = v
    if not (isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1))):
      raise BinFormatError(f'{path}: issame_list[{i}] is {v!r}, expected a bool')
  return np.array([bool(v) for v in issame], dtype=bool)


def load_pairs(path: str | os.PathLike) -> tuple[list[bytes], np.ndarray]:
  """Reads a `.bin` with the restricted unpickler: (2N encoded images, bool `[N]` issame).

  Raises:
    UnsafePickleError: the pickle references a global other than the admitted stand-ins.
    BinFormatError: not a pickle of (bins, issame_list), an odd number of images, or
      len(bins) != 2 * len(issame_list).
  """
  path = os.fspath(path)
  with open(path, 'rb') as f:
    # In memory (a .bin is ~100 MB at most): a forged length cannot make read() preallocate.
    data = f.read()
  try:
    obj = safe_pickle.RestrictedUnpickler(
        io.BytesIO(data), _ADMITTED, holds='a verification .bin holds only lists of bytes and '
        'bools').load()
  except safe_pickle.Refused as e:
    raise UnsafePickleError(safe_pickle.refusal(path, e)) from None
  except Exception as e:  # pylint: disable=broad-except
    # Whatever a malformed stream raises (UnpicklingError, EOFError, TypeError, ...).
    raise BinFormatError(f'{path}: not a readable pickle: {type(e).__name__}: {e}') from None
  if not isinstance(obj, (tuple, list)) or len(obj) != 2:
    raise BinFormatError(f'{path}: the pickle holds a {type(obj).__name__}, expected a '
                         '(bins, issame_list) pair')
  bins, issame = obj
  if isinstance(bins, _ArrayBuilder) or not isinstance(bins, (list, tuple)):
    raise BinFormatError(f'{path}: bins is a {type(bins).__name__}, expected a list')
  images = [_image_bytes(item, path, i) for i, item in enumerate(bins)]
  issame = _bools(issame, path)
  if len(images) % 2:
    raise BinFormatError(f'{path}: {len(images)} images, expected an even number (pairs are '
                         'consecutive images)')
  if len(images) != 2 * len(issame):
    raise BinFormatError(f'{path}: {len(images)} images ({len(images) // 2} pairs) but '
                         f'issame_list has {len(issame)} entries; expected one per pair')
  return images, issame


def _hw(image_size) -> tuple[int, int] | None:
  if image_size is None:
    return None
  if isinstance(image_size, (int, np.integer)):
    return int(image_size), int(image_size)
  h, w = image_size
  return int(h), int(w)


def read_bin(path: str | os.PathLike, image_size: int | tuple[int, int] | None = None, *,
             name: str | None = None) -> PairSet:
  """Reads and decodes a verification `.bin` into a PairSet.

  Args:
    path: the `.bin` file.
    image_size: required image size, an int (square) or (H, W); None = whatever the first image
      has (all images must then share it). Images are never resized.
    name: PairSet name (default: the file name without `.bin`).

  Returns:
    PairSet with uint8 `[2N, H, W, 3]` RGB images and bool `[N]` issame.

  Raises:
    UnsafePickleError, BinFormatError: see `load_pairs`; also an image that cannot be decoded or
      has the wrong size (the message names the image index).
  """
  path = os.fspath(path)
  bins, issame = load_pairs(path)
  hw = _hw(image_size)
  images = None
  for i, data in enumerate(bins):
    try:
      image = recordio.decode_image(data, hw)
    except recordio.ImageDecodeError as e:
      source = 'the requested image_size' if image_size is not None else 'the size of image 0'
      note = f' ({source})' if isinstance(e, recordio.ImageSizeError) else ''
      raise BinFormatError(f'{path}: image {i}: {e}{note}') from None
    if images is None:
      hw = image.shape[:2]
      images = np.empty((len(bins),) + image.shape, np.uint8)
    images[i] = image
  if images is None:
    images = np.zeros((0,) + (hw or (0, 0)) + (3,), np.uint8)
  if name is None:
    name = os.path.splitext(os.path.basename(path))[0]
  return PairSet(name=name, images=images, issame=issame)


def write_bin(path: str | os.PathLike, images: np.ndarray | Sequence[np.ndarray],
              issame: np.ndarray | Sequence[bool], *, image_format: str = 'png',
              quality: int = 95, protocol: int = 4) -> None:
  """Writes a `.bin` pickle of (list of encoded images, list of bools).

  Args:
    path: output file.
    images: uint8 `[2N, H, W, 3]`, pair p = images 2p and 2p + 1.
    issame: bool `[N]`.
    image_format: 'png' (lossless) or 'jpeg' (as the public files).
    quality: JPEG quality.
    protocol: pickle protocol; >= 3 stores bytes without any global, 2 is what the public
      (Python 2) files use.
  """
  issame = np.asarray(issame)
  if issame.ndim != 1 or len(images) != 2 * len(issame):
    raise ValueError(f'got {len(images)} images and {issame.shape} issame; expected [2N] images '
                     'and [N] issame')
  bins = [recordio.encode_image(np.asarray(img), image_format, quality) for img in images]
  with open(path, 'wb') as f:
    pickle.dump((bins, [bool(v) for v in issame]), f, protocol=protocol)
