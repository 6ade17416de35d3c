"""PyTorch state dicts read without PyTorch: the tests' own writer (tests/torch_files.py), every
dtype and stride torch.save writes, and each bad file named."""

import os
import zipfile

import ml_dtypes
import numpy as np
import pytest

from fedjax_face.io import torch_state_dict as tsd
from tests import torch_files


def _state():
  rng = np.random.default_rng(0)
  return {
      'conv.weight': rng.normal(size=(4, 3, 3, 3)).astype(np.float32),
      'bn.running_var': rng.uniform(size=(4,)).astype(np.float64),
      'bn.num_batches_tracked': np.array(7, np.int64),
      'half': rng.normal(size=(2, 5)).astype(np.float16),
      'bf16': rng.normal(size=(3,)).astype(ml_dtypes.bfloat16),
      'mask': np.array([True, False, True]),
      'bytes': np.arange(6, dtype=np.uint8).reshape(2, 3),
      'ints': np.arange(-3, 3, dtype=np.int32),
      'empty': np.zeros((0, 4), np.float32),
  }


@pytest.mark.parametrize('byteorder', ['little', 'big', None])
def test_a_state_dict_round_trips_in_order_and_bit_for_bit(tmp_path, byteorder):
  state = _state()
  path = tmp_path / 'backbone.pth'
  torch_files.write_pth(path, state, folder='backbone', byteorder=byteorder)
  read = tsd.read_state_dict(path)
  assert list(read) == list(state)
  for key, value in state.items():
    assert read[key].dtype == value.dtype and read[key].shape == value.shape, key
    np.testing.assert_array_equal(read[key], value)


def test_strided_views_share_a_storage_as_torch_saves_them(tmp_path):
  # A transposed tensor and a row of another, both views of one 3x4 storage at an offset.
  base = np.arange(12, dtype=np.float32)
  state = {'t': torch_files.Tensor(base, 0, (4, 3), (1, 4)),
           'row': torch_files.Tensor(base, 4, (4,), (1,))}
  torch_files.write_pth(tmp_path / 'v.pth', state)
  read = tsd.read_state_dict(tmp_path / 'v.pth')
  np.testing.assert_array_equal(read['t'], base.reshape(3, 4).T)
  np.testing.assert_array_equal(read['row'], base[4:8])


def test_a_global_that_would_execute_code_is_refused_and_nothing_runs(tmp_path):
  marker = tmp_path / 'ran'
  path = tmp_path / 'evil.pth'
  torch_files.write_pth(path, {'x': torch_files.Call('os', 'getcwd')})
  with pytest.raises(tsd.UnsafePickleError, match=r'evil.pth \(archive/data.pkl\): the pickle '
                     r'tries to load the global os.getcwd .*refused, nothing was imported or '
                     'executed'):
    tsd.read_state_dict(path)
  assert not marker.exists()
  # A storage class is a marker, never a callable.
  torch_files.write_pth(path, {'x': torch_files.Call('torch', 'FloatStorage')})
  with pytest.raises(tsd.UnsafePickleError, match='calling torch.FloatStorage is not admitted'):
    tsd.read_state_dict(path)


def test_bad_files_are_named(tmp_path):
  with pytest.raises(tsd.TorchFormatError, match=r'missing.pth: no such file'):
    tsd.read_state_dict(tmp_path / 'missing.pth')
  legacy = tmp_path / 'legacy.pth'
  legacy.write_bytes(b'\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.' + b'rest')
  with pytest.raises(tsd.TorchFormatError, match=r"legacy.pth: PyTorch's legacy \(pre-1.6\) "
                     'serialization; re-save it'):
    tsd.read_state_dict(legacy)
  text = tmp_path / 'text.pth'
  text.write_text('not a checkpoint')
  with pytest.raises(tsd.TorchFormatError, match='text.pth: not a zip archive'):
    tsd.read_state_dict(text)
  good = tmp_path / 'good.pth'
  torch_files.write_pth(good, {'w': np.ones((2, 2), np.float32)})
  # A storage entry cut short.
  short = tmp_path / 'short.pth'
  with zipfile.ZipFile(good) as src, zipfile.ZipFile(short, 'w') as dst:
    for name in src.namelist():
      data = src.read(name)
      dst.writestr(name, data[:-4] if name == 'archive/data/0' else data)
  with pytest.raises(tsd.TorchFormatError, match=r'short.pth: archive/data/0 holds 12 bytes; 4 '
                     'elements of FloatStorage need 16'):
    tsd.read_state_dict(short)
  # A storage entry missing.
  gone = tmp_path / 'gone.pth'
  with zipfile.ZipFile(good) as src, zipfile.ZipFile(gone, 'w') as dst:
    for name in src.namelist():
      if name != 'archive/data/0':
        dst.writestr(name, src.read(name))
  with pytest.raises(tsd.TorchFormatError, match=r"gone.pth: storage '0' has no entry "
                     'archive/data/0'):
    tsd.read_state_dict(gone)
  # A zip that torch.save did not write.
  other = tmp_path / 'other.pth'
  with zipfile.ZipFile(other, 'w') as z:
    z.writestr('readme.txt', 'hi')
  with pytest.raises(tsd.TorchFormatError, match=r'other.pth: a zip archive with 0 '
                     r'<folder>/data.pkl entries'):
    tsd.read_state_dict(other)
  # A truncated pickle.
  cut = tmp_path / 'cut.pth'
  with zipfile.ZipFile(good) as src, zipfile.ZipFile(cut, 'w') as dst:
    for name in src.namelist():
      data = src.read(name)
      dst.writestr(name, data[:20] if name.endswith('data.pkl') else data)
  with pytest.raises(tsd.TorchFormatError, match=r'cut.pth: archive/data.pkl is not a readable '
                     'pickle'):
    tsd.read_state_dict(cut)
  # A tensor reaching past its storage.
  past = tmp_path / 'past.pth'
  torch_files.write_pth(past, {'w': torch_files.Tensor(np.zeros(4, np.float32), 2, (3,), (1,))})
  with pytest.raises(tsd.UnsafePickleError, match=r'reads element 4 of a storage of 4'):
    tsd.read_state_dict(past)


def test_a_file_written_by_torch_reads_the_same(tmp_path):
  torch = pytest.importorskip('torch')
  module = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, bias=False), torch.nn.BatchNorm2d(4),
                               torch.nn.PReLU(4), torch.nn.Flatten(), torch.nn.Linear(4, 2))
  state = module.state_dict()
  state['transposed'] = torch.arange(6, dtype=torch.float16).reshape(2, 3).t()
  torch.save(state, os.fspath(tmp_path / 'm.pth'))
  read = tsd.read_state_dict(tmp_path / 'm.pth')
  assert list(read) == list(state)
  for key, value in state.items():
    np.testing.assert_array_equal(read[key], value.numpy())
