"""The tests' own writer of PyTorch's zip state-dict format (what `torch.save(state_dict, path)`
writes since PyTorch 1.6), opcode by opcode, so the reader is tested without PyTorch.

The pickle is protocol 2, as torch.save writes it: an OrderedDict filled by SETITEMS, each tensor
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())` with the
storage as a persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel), and each storage's
bytes in `<folder>/data/<key>`.
"""

import struct
import zipfile

import ml_dtypes
import numpy as np

STORAGE_NAMES = {np.dtype(np.float32): 'FloatStorage', np.dtype(np.float64): 'DoubleStorage',
                 np.dtype(np.float16): 'HalfStorage',
                 np.dtype(ml_dtypes.bfloat16): 'BFloat16Storage',
                 np.dtype(np.int64): 'LongStorage', np.dtype(np.int32): 'IntStorage',
                 np.dtype(np.uint8): 'ByteStorage', np.dtype(np.bool_): 'BoolStorage'}


class Tensor:
  """A tensor as torch saves it: a flat storage, an offset into it, a size and strides (in
  elements)."""

  def __init__(self, storage: np.ndarray, offset: int, size, stride):
    self.storage, self.offset = np.ascontiguousarray(storage).reshape(-1), offset
    self.size, self.stride = tuple(size), tuple(stride)

  @classmethod
  def of(cls, array: np.ndarray) -> 'Tensor':
    array = np.array(array, order='C')   # ascontiguousarray would make a scalar 1-d
    strides = tuple(s // array.itemsize for s in array.strides)
    return cls(array, 0, array.shape, strides)


class Call:
  """A value the pickle makes by calling `module.name()`: what an unsafe file holds."""

  def __init__(self, module: str, name: str):
    self.module, self.name = module, name


def _int(n: int) -> bytes:
  if 0 <= n < 256:
    return b'K' + bytes([n])
  if 0 <= n < 65536:
    return b'M' + struct.pack('<H', n)
  return b'J' + struct.pack('<i', n)


def _str(text: str) -> bytes:
  data = text.encode('utf-8')
  return b'X' + struct.pack('<I', len(data)) + data


def _global(module: str, name: str) -> bytes:
  return b'c' + f'{module}\n{name}\n'.encode('ascii')


def _tuple(items: list[bytes]) -> bytes:
  return b'(' + b''.join(items) + b't'


def state_dict_pickle(state: dict) -> tuple[bytes, list]:
  """(data.pkl bytes, storages in key order) of {key: array, Tensor or Call}."""
  out = bytearray(b'\x80\x02' + _global('collections', 'OrderedDict') + b')R(')
  storages = []
  for key, value in state.items():
    out += _str(key)
    if isinstance(value, Call):
      out += _global(value.module, value.name) + b')R'
      continue
    tensor = value if isinstance(value, Tensor) else Tensor.of(np.asarray(value))
    pid = _tuple([_str('storage'), _global('torch', STORAGE_NAMES[tensor.storage.dtype]),
                  _str(str(len(storages))), _str('cpu'), _int(tensor.storage.size)])
    out += _global('torch._utils', '_rebuild_tensor_v2')
    out += _tuple([pid + b'Q', _int(tensor.offset), _tuple([_int(n) for n in tensor.size]),
                   _tuple([_int(n) for n in tensor.stride]), b'\x89',
                   _global('collections', 'OrderedDict') + b')R'])
    out += b'R'
    storages.append(tensor.storage)
  out += b'u.'
  return bytes(out), storages


def write_pth(path, state: dict, *, folder: str = 'archive',
              byteorder: str | None = 'little') -> None:
  """Writes `state` ({key: array, Tensor or Call}) as torch.save does."""
  data, storages = state_dict_pickle(state)
  with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as archive:
    archive.writestr(f'{folder}/data.pkl', data)
    if byteorder is not None:
      archive.writestr(f'{folder}/byteorder', byteorder)
    for key, storage in enumerate(storages):
      order = '<' if byteorder in (None, 'little') else '>'
      raw = storage.astype(storage.dtype.newbyteorder(order)) if storage.itemsize > 1 else storage
      archive.writestr(f'{folder}/data/{key}', raw.tobytes())
    archive.writestr(f'{folder}/version', '3\n')
