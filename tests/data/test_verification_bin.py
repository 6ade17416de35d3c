"""Tests for fedjax_face.data.formats.verification_bin: insightface `.bin` pair sets, read safely."""

import builtins
import io
import os
import pickle
import struct

import numpy as np
from PIL import Image
import pytest

from fedjax_face.data.formats import verification_bin as vb
from fedjax_face.data.types import PairSet


def png(image):
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format='PNG')
  return buf.getvalue()


def images_(n, h=8, w=8, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (n, h, w, 3), dtype=np.uint8)


def dump(path, obj, protocol):
  with open(path, 'wb') as f:
    pickle.dump(obj, f, protocol=protocol)
  return str(path)


def py2_protocol2_pickle(bins, issame):
  """(list of bytes, list of bool) as Python 2's cPickle protocol 2 writes it, opcode by opcode.

  PROTO 2; EMPTY_LIST, BINPUT, MARK, one SHORT_BINSTRING ('U', 1-byte length) or BINSTRING
  ('T', 4-byte length) + BINPUT per image, APPENDS; the same for NEWTRUE/NEWFALSE; TUPLE2; STOP.
  """
  out = [b'\x80\x02', b']q\x00(']
  memo = 1
  for data in bins:
    if len(data) < 256:
      out.append(b'U' + bytes([len(data)]) + data)
    else:
      out.append(b'T' + struct.pack('<I', len(data)) + data)
    out.append(b'r' + struct.pack('<I', memo))  # LONG_BINPUT
    memo += 1
  out.append(b'e]' + b'r' + struct.pack('<I', memo) + b'(')
  out += [b'\x88' if s else b'\x89' for s in issame]
  out.append(b'e\x86.')
  return b''.join(out)


def test_write_read_png_exact(tmp_path):
  images = images_(6)
  path = str(tmp_path / 'lfw.bin')
  vb.write_bin(path, images, [True, False, True])
  pairs = vb.read_bin(path)
  assert isinstance(pairs, PairSet)
  assert pairs.name == 'lfw' and pairs.num_pairs == 3
  assert pairs.images.dtype == np.uint8 and pairs.images.shape == (6, 8, 8, 3)
  np.testing.assert_array_equal(pairs.images, images)
  assert pairs.issame.dtype == np.bool_
  np.testing.assert_array_equal(pairs.issame, [True, False, True])
  assert pairs.identities is None and pairs.nuisance is None
  np.testing.assert_array_equal(vb.read_bin(path, image_size=(8, 8)).images, images)


def test_write_read_jpeg_close(tmp_path):
  yy, xx = np.mgrid[0:32, 0:32]
  smooth = np.stack([yy * 6, xx * 6, (yy + xx) * 3], -1).astype(np.uint8)
  images = np.stack([smooth, smooth[::-1]])
  path = str(tmp_path / 'agedb_30.bin')
  vb.write_bin(path, images, [False], image_format='jpeg', quality=95)
  pairs = vb.read_bin(path, image_size=32)
  assert pairs.images.shape == images.shape
  assert np.abs(pairs.images.astype(int) - images.astype(int)).mean() < 3.0
  np.testing.assert_array_equal(pairs.issame, [False])


def test_byte_level_python2_protocol2_pickle(tmp_path):
  images = images_(4, h=12, w=10)
  bins = [png(im) for im in images]
  bins[1] = png(np.zeros((12, 10, 3), np.uint8))  # small: SHORT_BINSTRING
  assert len(bins[1]) < 256 and len(bins[0]) >= 256
  data = py2_protocol2_pickle(bins, [True, False])
  # The hand-built stream is a valid pickle (checked with the unrestricted loader on our bytes).
  assert pickle.loads(data, encoding='bytes') == (bins, [True, False])
  path = tmp_path / 'cfp_fp.bin'
  path.write_bytes(data)
  pairs = vb.read_bin(str(path), image_size=(12, 10))
  np.testing.assert_array_equal(pairs.images[0], images[0])
  np.testing.assert_array_equal(pairs.images[1], 0)
  np.testing.assert_array_equal(pairs.images[2:], images[2:])
  np.testing.assert_array_equal(pairs.issame, [True, False])
  assert pairs.name == 'cfp_fp'


@pytest.mark.parametrize('protocol', [0, 2, 4, 5])
def test_python3_pickles_with_numpy_values(tmp_path, protocol):
  """Py3 protocol < 3 spells bytes as _codecs.encode; numpy bool arrays / scalars / uint8 arrays."""
  images = images_(4)
  bins = [png(im) for im in images]
  cases = [
      (bins, [True, False]),
      (bins, np.array([True, False])),
      (bins, [np.bool_(True), np.bool_(False)]),
      ([np.frombuffer(b, np.uint8) for b in bins], np.array([True, False])),
  ]
  for i, obj in enumerate(cases):
    path = dump(tmp_path / f'x{i}.bin', obj, protocol)
    pairs = vb.read_bin(path)
    np.testing.assert_array_equal(pairs.images, images)
    np.testing.assert_array_equal(pairs.issame, [True, False])


def test_old_numpy_module_names(tmp_path):
  """Files pickled by numpy 1.x name numpy.core.multiarray instead of numpy._core.multiarray."""
  bins = [png(im) for im in images_(2)]
  data = pickle.dumps((bins, np.array([True])), protocol=2)
  assert b'numpy._core.multiarray' in data
  path = tmp_path / 'old.bin'
  path.write_bytes(data.replace(b'numpy._core.multiarray', b'numpy.core.multiarray'))
  np.testing.assert_array_equal(vb.read_bin(str(path)).issame, [True])


class _System:

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return os.system, (f'touch {self.marker}',)


class _Open:

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return builtins.open, (self.marker, 'w')


@pytest.mark.parametrize('protocol', [0, 2, 4])
def test_malicious_pickle_executes_nothing(tmp_path, protocol):
  marker = str(tmp_path / 'marker')
  bins = [png(im) for im in images_(2)]
  for evil, name in ((_System(marker), f'{os.system.__module__}.system'),
                     (_Open(marker), 'open')):
    for obj in ((bins + [evil], [True]), evil):
      path = dump(tmp_path / 'evil.bin', obj, protocol)
      with pytest.raises(vb.UnsafePickleError) as info:
        vb.read_bin(path)
      msg = str(info.value)
      assert path in msg and name in msg and 'refused' in msg, msg
      assert not os.path.exists(marker)
  # The same pickle does create the marker when loaded without restriction: the test is live.
  pickle.loads(pickle.dumps(_Open(marker), protocol=protocol)).close()
  assert os.path.exists(marker)


class _Reduce:

  def __init__(self, fn, args):
    self.fn, self.args = fn, args

  def __reduce__(self):
    return self.fn, self.args


def test_admitted_names_refuse_other_uses(tmp_path):
  cases = [
      (_Reduce(np.dtype, ('O', False, True)), 'numpy.dtype'),  # object dtype
      (_Reduce(np.ndarray, ((3,), 'u1')), 'numpy.ndarray'),  # calling ndarray itself
      (np.array([1.5, 2.5]), 'numpy.dtype'),  # float array
      (np.array([1, 2], np.int64), 'numpy.dtype'),
      (_Reduce(__import__('_codecs').encode, ('x', 'rot13')), '_codecs.encode'),
  ]
  for obj, fragment in cases:
    path = dump(tmp_path / 'bad.bin', ([obj, obj], [True]), 2)
    with pytest.raises(vb.UnsafePickleError, match=fragment):
      vb.read_bin(path)
  # BUILD with a slot state tries to set an attribute on the numpy.dtype stand-in.
  data = b'\x80\x02cnumpy\ndtype\nN}X\x03\x00\x00\x00abcK\x01s\x86b.'
  (tmp_path / 'build.bin').write_bytes(data)
  with pytest.raises(vb.UnsafePickleError, match='setting numpy.dtype.abc'):
    vb.read_bin(str(tmp_path / 'build.bin'))


def test_pair_count_errors(tmp_path):
  bins = [png(im) for im in images_(4)]
  path = dump(tmp_path / 'odd.bin', (bins[:3], [True]), 4)
  with pytest.raises(vb.BinFormatError, match='3 images, expected an even number') as info:
    vb.read_bin(path)
  assert path in str(info.value)
  path = dump(tmp_path / 'mismatch.bin', (bins, [True]), 4)
  with pytest.raises(vb.BinFormatError, match='4 images .2 pairs. but issame_list has 1') as info:
    vb.read_bin(path)
  assert path in str(info.value)


def test_image_errors(tmp_path):
  bins = [png(im) for im in images_(4)]
  path = dump(tmp_path / 'ok.bin', (bins, [True, False]), 4)
  with pytest.raises(vb.BinFormatError,
                     match=r'image 0: image is 8x8 \(HxW\), expected 16x16 \(the requested'):
    vb.read_bin(path, image_size=16)
  mixed = bins[:3] + [png(images_(1, h=8, w=9)[0])]
  path = dump(tmp_path / 'mixed.bin', (mixed, [True, False]), 4)
  with pytest.raises(vb.BinFormatError, match=r'image 3: image is 8x9 .*the size of image 0') as i:
    vb.read_bin(path)
  assert path in str(i.value)
  path = dump(tmp_path / 'corrupt.bin', (bins[:1] + [b'\xff\xd8garbage'] + bins[2:], [True] * 2),
              4)
  with pytest.raises(vb.BinFormatError, match='image 1: cannot decode image') as i:
    vb.read_bin(path)
  assert path in str(i.value)
  path = dump(tmp_path / 'type.bin', (bins[:1] + ['text'] + bins[2:], [True, False]), 4)
  with pytest.raises(vb.BinFormatError, match='image 1 is a str'):
    vb.read_bin(path)


def test_structure_errors(tmp_path):
  path = dump(tmp_path / 'dict.bin', {'bins': []}, 4)
  with pytest.raises(vb.BinFormatError, match=r'holds a dict, expected a \(bins, issame_list\)'):
    vb.read_bin(path)
  path = dump(tmp_path / 'issame.bin', ([png(im) for im in images_(2)], ['yes']), 4)
  with pytest.raises(vb.BinFormatError, match=r"issame_list\[0\] is 'yes'"):
    vb.read_bin(path)
  data = pickle.dumps(([b'abc'], [True]), protocol=4)
  (tmp_path / 'cut.bin').write_bytes(data[:len(data) // 2])
  with pytest.raises(vb.BinFormatError, match='not a readable pickle'):
    vb.read_bin(str(tmp_path / 'cut.bin'))
