"""PyTorch state dicts (`torch.save(module.state_dict(), 'backbone.pth')`), read without PyTorch.

The format is torch.save's zip format (PyTorch >= 1.6, the default since): a zip archive whose
entries sit under one top-level folder (`archive/`, or the name the file was saved under):

  <folder>/data.pkl     a pickle of the state dict (an OrderedDict of name -> tensor)
  <folder>/data/<key>   the raw bytes of each storage, in the byte order of <folder>/byteorder
                        ('little' when the entry is absent, as every file before it was)
  <folder>/version      the format version

Inside data.pkl a tensor is `torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, backward_hooks[, metadata])`, and its storage a persistent id
`('storage', torch.<Type>Storage, key, location, numel)`. The pickle is read with
`io.safe_pickle.RestrictedUnpickler`: the only globals admitted are those names, each mapped to a
stand-in here that builds a numpy array from the storage bytes itself (no torch, nothing of the
file executed), and `collections.OrderedDict`. Anything else is refused with `UnsafePickleError`.

The older format (a bare pickle stream, `_use_new_zipfile_serialization=False`) is refused with a
message saying how to re-save the file.

`state_dict_bytes` writes the zip format (protocol-2 pickle, storages little-endian, version 3),
as torch.save does, for `python -m fedjax_face.export` and the tests' fixtures.
"""

from __future__ import annotations

import collections
import io
import os
import struct
import zipfile
from typing import NamedTuple

import ml_dtypes
import numpy as np

from fedjax_face.core import checks
from fedjax_face.io import safe_pickle

# torch.<name> storage classes (as pickled in a persistent id) -> the numpy dtype of their bytes.
STORAGE_DTYPES = {
    'DoubleStorage': np.dtype(np.float64), 'FloatStorage': np.dtype(np.float32),
    'HalfStorage': np.dtype(np.float16), 'BFloat16Storage': np.dtype(ml_dtypes.bfloat16),
    'LongStorage': np.dtype(np.int64), 'IntStorage': np.dtype(np.int32),
    'ShortStorage': np.dtype(np.int16), 'CharStorage': np.dtype(np.int8),
    'ByteStorage': np.dtype(np.uint8), 'BoolStorage': np.dtype(np.bool_),
}
# The first bytes of the pre-1.6 format: a pickled magic number (0x1950a86a20f9469cfc6c).
_LEGACY_MAGIC = b'\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.'


class TorchFormatError(checks.UsageError):
  """A file that is not a readable PyTorch state dict; the message names the file."""


class UnsafePickleError(TorchFormatError):
  """data.pkl asked for a global that is not admitted; nothing was imported or called."""


class _StorageType:
  """Stand-in for a `torch.<Type>Storage` class: only ever a marker inside a persistent id."""

  __slots__ = ('name', 'dtype')

  def __init__(self, name: str):
    self.name, self.dtype = name, STORAGE_DTYPES[name]

  def __call__(self, *args, **kwargs):
    raise safe_pickle.Refused(f'calling torch.{self.name} is not admitted')


class _Storage:
  """A storage's elements, as a flat numpy array read from its zip entry."""

  __slots__ = ('values',)

  def __init__(self, values: np.ndarray):
    self.values = values


def _int_tuple(value, what: str) -> tuple[int, ...]:
  if (not isinstance(value, tuple) or
      not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)):
    raise safe_pickle.Refused(f'tensor {what} {value!r} is not a tuple of non-negative ints')
  return value


def _rebuild_tensor(storage, offset, size, stride, requires_grad=False, backward_hooks=None,
                    metadata=None) -> np.ndarray:
  """Stand-in for `torch._utils._rebuild_tensor_v2`: the tensor's elements as a numpy array."""
  del requires_grad, backward_hooks, metadata
  if not isinstance(storage, _Storage):
    raise safe_pickle.Refused(f'a tensor of a {type(storage).__name__}, expected a storage')
  size, stride = _int_tuple(size, 'size'), _int_tuple(stride, 'stride')
  if len(size) != len(stride) or not isinstance(offset, int) or offset < 0:
    raise safe_pickle.Refused(f'tensor size {size}, stride {stride}, offset {offset!r} do not '
                              'describe a tensor')
  values = storage.values
  if 0 not in size:
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= len(values):
      raise safe_pickle.Refused(f'tensor of size {size}, stride {stride} at offset {offset} '
                                f'reads element {last} of a storage of {len(values)}')
  if not size:   # a scalar (as_strided reads an empty shape as "keep the input's")
    return np.array(values[offset])
  view = np.lib.stride_tricks.as_strided(
      values[offset:] if 0 not in size else values[:0], shape=size,
      strides=[s * values.itemsize for s in stride])
  return np.array(view)


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None) -> np.ndarray:
  """Stand-in for `torch._utils._rebuild_parameter` (an nn.Parameter saved as such)."""
  del requires_grad, backward_hooks
  if not isinstance(data, np.ndarray):
    raise safe_pickle.Refused(f'a parameter of a {type(data).__name__}, expected a tensor')
  return data


def _ordered_dict(*args):
  if args:
    raise safe_pickle.Refused('collections.OrderedDict is admitted only empty (then filled)')
  return collections.OrderedDict()


def _admitted() -> dict:
  table = {('torch', name): _StorageType(name) for name in STORAGE_DTYPES}
  table['torch._utils', '_rebuild_tensor_v2'] = safe_pickle.StandIn('torch tensor',
                                                                    _rebuild_tensor)
  table['torch._utils', '_rebuild_parameter'] = safe_pickle.StandIn('torch parameter',
                                                                    _rebuild_parameter)
  table['collections', 'OrderedDict'] = safe_pickle.StandIn('collections.OrderedDict',
                                                            _ordered_dict)
  return table


_ADMITTED = _admitted()


def _folder(names: list[str], path: str) -> str:
  """The archive's top-level folder, the one holding data.pkl."""
  pickles = [n for n in names if n.endswith('/data.pkl') and n.count('/') == 1]
  if len(pickles) != 1:
    raise TorchFormatError(f'{path}: a zip archive with {len(pickles)} <folder>/data.pkl entries; '
                           'expected one (a file written by torch.save)')
  return pickles[0][:-len('data.pkl')]


def _byteorder(archive: zipfile.ZipFile, folder: str, path: str) -> str:
  name = folder + 'byteorder'
  if name not in archive.namelist():
    return '<'
  order = archive.read(name).decode('ascii', 'replace').strip()
  if order not in ('little', 'big'):
    raise TorchFormatError(f'{path}: {name} says {order!r}; expected little or big')
  return '<' if order == 'little' else '>'


def read_state_dict(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Reads a `.pth` state dict: {name: numpy array}, in the file's order.

  Raises:
    TorchFormatError: a missing or unreadable file, the pre-1.6 format, a zip archive that is not
      torch.save's, a storage entry of the wrong size, or a pickle that does not hold a dict of
      tensors (the message names the file and the entry or key).
    UnsafePickleError: data.pkl references a global that is not admitted.
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise TorchFormatError(f'{path}: no such file (expected a PyTorch state dict, .pth)')
  with open(path, 'rb') as f:
    head = f.read(len(_LEGACY_MAGIC))
  if head == _LEGACY_MAGIC:
    raise TorchFormatError(
        f'{path}: PyTorch\'s legacy (pre-1.6) serialization; re-save it in the zip format: '
        "torch.save(torch.load(path), 'new.pth') with torch >= 1.6")
  if not zipfile.is_zipfile(path):
    raise TorchFormatError(f'{path}: not a zip archive; expected a state dict written by '
                           'torch.save (PyTorch >= 1.6)')
  with zipfile.ZipFile(path) as archive:
    names = archive.namelist()
    folder = _folder(names, path)
    order = _byteorder(archive, folder, path)
    storages = {}

    def load_storage(pid) -> _Storage:
      if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != 'storage' or
          not isinstance(pid[1], _StorageType) or not isinstance(pid[2], str) or
          not isinstance(pid[4], int)):
        raise safe_pickle.Refused(f'persistent id {pid!r} is not a torch storage')
      _, kind, key, _, numel = pid
      if key not in storages:
        entry = f'{folder}data/{key}'
        if entry not in names:
          raise TorchFormatError(f'{path}: storage {key!r} has no entry {entry}')
        raw = archive.read(entry)
        dtype = kind.dtype.newbyteorder(order) if kind.dtype.itemsize > 1 else kind.dtype
        if len(raw) != numel * dtype.itemsize:
          raise TorchFormatError(f'{path}: {entry} holds {len(raw)} bytes; {numel} elements '
                                 f'of {kind.name} need {numel * dtype.itemsize}')
        storages[key] = _Storage(np.frombuffer(raw, dtype).astype(kind.dtype))
      return storages[key]

    try:
      state = safe_pickle.RestrictedUnpickler(
          io.BytesIO(archive.read(folder + 'data.pkl')), _ADMITTED,
          holds='a state dict holds only tensors', persistent_load=load_storage,
          encoding='utf-8').load()
    except safe_pickle.Refused as e:
      raise UnsafePickleError(safe_pickle.refusal(f'{path} ({folder}data.pkl)', e)) from None
    except TorchFormatError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # Whatever a malformed stream raises (UnpicklingError, EOFError, TypeError, ...).
      raise TorchFormatError(f'{path}: {folder}data.pkl is not a readable pickle: '
                             f'{type(e).__name__}: {e}') from None
  if not isinstance(state, dict):
    raise TorchFormatError(f'{path}: holds a {type(state).__name__}; expected a state dict '
                           '(torch.save(module.state_dict(), path))')
  for key, value in state.items():
    if not isinstance(key, str) or not isinstance(value, np.ndarray):
      raise TorchFormatError(f'{path}: entry {key!r} is a {type(value).__name__}; expected a '
                             'tensor (a state dict of a module)')
  return dict(state)


# -- The writer: what torch.save(state_dict, path) writes, without torch ----------------------

# numpy dtype -> the torch.<name> storage class a tensor of it is pickled with.
STORAGE_NAMES = {dtype: name for name, dtype in STORAGE_DTYPES.items()}


class StoredTensor(NamedTuple):
  """A tensor as torch.save stores it: a flat storage, an offset into it, a size and strides
  (in elements). `of(array)` is a contiguous array's; a view (a transposed weight) saves the
  storage it views, as torch does."""
  storage: np.ndarray
  offset: int
  size: tuple[int, ...]
  stride: tuple[int, ...]

  @classmethod
  def of(cls, array) -> 'StoredTensor':
    array = np.array(array, order='C')   # np.ascontiguousarray would make a scalar 1-d
    strides = tuple(s // array.itemsize for s in array.strides)
    return cls(array.reshape(-1), 0, array.shape, strides)


# Pickle protocol 2's opcodes, as torch.save emits them (pickletools names each).
def _int(n: int) -> bytes:
  if 0 <= n < 256:
    return b'K' + bytes([n])             # BININT1
  if 0 <= n < 65536:
    return b'M' + struct.pack('<H', n)   # BININT2
  return b'J' + struct.pack('<i', n)     # BININT


def _str(text: str) -> bytes:
  data = text.encode('utf-8')
  return b'X' + struct.pack('<I', len(data)) + data   # BINUNICODE


def _global(module: str, name: str) -> bytes:
  return b'c' + f'{module}\n{name}\n'.encode('ascii')   # GLOBAL


def _tuple(items: list[bytes]) -> bytes:
  return b'(' + b''.join(items) + b't'   # MARK ... TUPLE


def state_dict_pickle(state: dict, other=None) -> tuple[bytes, list[np.ndarray]]:
  """(data.pkl's bytes, the storages in key order) of `state` ({key: array or StoredTensor}):
  an OrderedDict filled by SETITEMS, each tensor `torch._utils._rebuild_tensor_v2(storage,
  offset, size, stride, False, OrderedDict())` whose storage is the persistent id ('storage',
  torch.<Type>Storage, key, 'cpu', numel), as torch.save pickles a state dict. `other(value)`:
  the pickle opcodes of a value that is not a tensor (how the tests write a file the reader must
  refuse); without it such a value is a TypeError."""
  out = bytearray(b'\x80\x02' + _global('collections', 'OrderedDict') + b')R(')
  storages = []
  for key, value in state.items():
    out += _str(key)
    if not isinstance(value, (np.ndarray, np.generic, StoredTensor)):
      if other is None:
        raise TypeError(f'state dict entry {key!r} is a {type(value).__name__}; expected an '
                        'array')
      out += other(value)
      continue
    tensor = value if isinstance(value, StoredTensor) else StoredTensor.of(value)
    pid = _tuple([_str('storage'), _global('torch', STORAGE_NAMES[tensor.storage.dtype]),
                  _str(str(len(storages))), _str('cpu'), _int(tensor.storage.size)])
    out += _global('torch._utils', '_rebuild_tensor_v2')
    out += _tuple([pid + b'Q', _int(tensor.offset), _tuple([_int(n) for n in tensor.size]),
                   _tuple([_int(n) for n in tensor.stride]), b'\x89',   # BINPERSID; NEWFALSE
                   _global('collections', 'OrderedDict') + b')R'])
    out += b'R'   # REDUCE
    storages.append(tensor.storage)
  out += b'u.'   # SETITEMS, STOP
  return bytes(out), storages


def state_dict_bytes(state: dict, *, folder: str = 'archive', byteorder: str | None = 'little',
                     other=None) -> bytes:
  """The bytes of a `.pth` holding `state` in torch.save's zip format (module docstring;
  `state_dict_pickle` for `state` and `other`). `byteorder`: of the storages' bytes, written
  to <folder>/byteorder; None writes no such entry (files before it), little-endian."""
  data, storages = state_dict_pickle(state, other)
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, 'w', zipfile.ZIP_STORED) as archive:
    archive.writestr(f'{folder}/data.pkl', data)
    if byteorder is not None:
      archive.writestr(f'{folder}/byteorder', byteorder)
    order = '>' if byteorder == 'big' else '<'
    for key, storage in enumerate(storages):
      raw = storage.astype(storage.dtype.newbyteorder(order)) if storage.itemsize > 1 else storage
      archive.writestr(f'{folder}/data/{key}', raw.tobytes())
    archive.writestr(f'{folder}/version', '3\n')
  return buffer.getvalue()
