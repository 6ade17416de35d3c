"""Tests for fedjax_face.data.formats.recordio: the MXNet RecordIO / insightface training-set format.

The first fixture is assembled byte by byte from the format specification with struct.pack (not
with the module's writer), so a reader and writer that agree with each other but not with the
format fail here.
"""

import io
import logging
import os
import pickle
import struct

import numpy as np
from PIL import Image
import pytest

from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import benchmark

MAGIC = 0xCED7230A
H = W = 8


# ------------------------------------------------------------------------------------------------
# The specification, written out independently of the module.
# ------------------------------------------------------------------------------------------------


def spec_part(cflag, data):
  """One dmlc part: magic, lrecord (cflag in the top 3 bits), data, zero padding to 4 bytes."""
  return (struct.pack('<II', MAGIC, (cflag << 29) | len(data)) + data +
          b'\0' * (-len(data) % 4))


def spec_header(flag, label, id1, id2, labels=()):
  """'IfQQ' little-endian header, then `flag` float32 labels."""
  assert flag == len(labels)
  return struct.pack('<IfQQ', flag, label, id1, id2) + struct.pack(f'<{len(labels)}f', *labels)


def png(image):
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format='PNG')
  return buf.getvalue()


def spec_image(seed, h=H, w=W):
  return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def spec_records(images):
  """key -> framed bytes of the spec fixture: meta, 3 images (one multi-label, one split), 2 ids.

  Identity 0 = keys 1, 2 (label 0); identity 1 = key 3 (label 1). Record 3's header has
  id = id2 = MAGIC, so the magic number sits at payload offsets 8 and 16 (both 4-aligned): the
  dmlc writer splits it into a start part [0:8], a middle part [12:16] and an end part [20:].
  """
  payload3 = spec_header(0, 1.0, MAGIC, MAGIC) + png(images[3])
  words = np.frombuffer(payload3[:len(payload3) // 4 * 4], '<u4')
  assert np.flatnonzero(words == MAGIC).tolist() == [2, 4]  # offsets 8 and 16 only
  return {
      0: spec_part(0, spec_header(2, 0.0, 0, 0, (4.0, 6.0))),  # a=4, b=6
      1: spec_part(0, spec_header(0, 0.0, 1, 0) + png(images[1])),
      2: spec_part(0, spec_header(3, 0.0, 2, 0, (0.0, 7.5, -1.0)) + png(images[2])),
      3: spec_part(1, payload3[:8]) + spec_part(2, payload3[12:16]) + spec_part(3, payload3[20:]),
      4: spec_part(0, spec_header(2, 0.0, 4, 0, (1.0, 3.0))),
      5: spec_part(0, spec_header(2, 0.0, 5, 0, (3.0, 4.0))),
  }


def write_spec(root, records, *, prop='2,8,8', idx_order=(3, 0, 5, 1, 4, 2), offsets=None):
  """Writes train.rec (records in key order), train.idx (lines in idx_order), property."""
  os.makedirs(root, exist_ok=True)
  rec = b''
  pos = {}
  for key in sorted(records):
    pos[key] = len(rec)
    rec += records[key]
  pos.update(offsets or {})
  with open(os.path.join(root, 'train.rec'), 'wb') as f:
    f.write(rec)
  with open(os.path.join(root, 'train.idx'), 'w') as f:
    f.write(''.join(f'{k}\t{pos[k]}\n' for k in idx_order if k in pos))
  with open(os.path.join(root, 'property'), 'w') as f:
    f.write(prop)
  return pos


@pytest.fixture
def spec_images():
  return {k: spec_image(k) for k in (1, 2, 3)}


@pytest.fixture
def spec_root(tmp_path, spec_images):
  root = str(tmp_path / 'spec')
  write_spec(root, spec_records(spec_images))
  return root


# ------------------------------------------------------------------------------------------------
# Reading the hand-built fixture.
# ------------------------------------------------------------------------------------------------


def test_spec_fixture_record_file(spec_root, spec_images):
  with recordio.RecordFile(os.path.join(spec_root, 'train.rec')) as f:
    assert len(f) == 6
    np.testing.assert_array_equal(f.keys(), np.arange(6))
    # Each key's byte offset, as a scan of the frames from the front finds them.
    scanned = [offset for offset, _ in recordio.iter_records(os.path.join(spec_root, 'train.rec'))]
    np.testing.assert_array_equal(f.offsets(), scanned)
    assert 5 in f and 6 not in f
    header, rest = recordio.unpack(f.read(0))
    assert header.flag == 2 and rest == b''
    np.testing.assert_array_equal(header.label, [4.0, 6.0])
    # Multi-label header: label field ignored, three float32 labels, then the image.
    header, rest = recordio.unpack(f.read(2))
    assert (header.flag, header.id, header.id2) == (3, 2, 0)
    np.testing.assert_array_equal(header.label, np.array([0.0, 7.5, -1.0], np.float32))
    assert rest == png(spec_images[2])
    assert recordio.class_label(header) == 0
    # The continuation-split record comes back whole, magic numbers restored.
    payload = f.read(3)
    assert payload == spec_header(0, 1.0, MAGIC, MAGIC) + png(spec_images[3])
    header, rest = recordio.unpack(payload)
    assert header == recordio.IRHeader(0, 1.0, MAGIC, MAGIC)
    for n in (1, 8, 10, 12, 13, 16, 18, 20, 30, len(payload), len(payload) + 5):
      assert f.read_prefix(3, n) == payload[:n], n


def test_spec_fixture_dataset(spec_root, spec_images):
  with recordio.InsightfaceDataset(spec_root) as ds:
    assert ds.num_classes == 2
    assert ds.image_shape == (8, 8, 3)
    np.testing.assert_array_equal(ds.image_keys, [1, 2, 3])
    np.testing.assert_array_equal(ds.identity_ranges, [[1, 3], [3, 4]])
    assert list(ds.identity_keys(0)) == [1, 2] and list(ds.identity_keys(1)) == [3]
    keys, labels = ds.labels()
    np.testing.assert_array_equal(keys, [1, 2, 3])
    np.testing.assert_array_equal(labels, [0, 0, 1])
    for key, image in spec_images.items():
      decoded = ds.decode(key)
      assert decoded.dtype == np.uint8 and decoded.shape == (8, 8, 3)
      np.testing.assert_array_equal(decoded, image)
    chunk = ds.read_chunk([3, 1])
    np.testing.assert_array_equal(chunk.labels, [1, 0])
    np.testing.assert_array_equal(chunk.images, np.stack([spec_images[3], spec_images[1]]))


def test_writer_reproduces_spec_bytes(tmp_path, spec_images):
  """The module's framing and index equal the hand-built bytes."""
  records = spec_records(spec_images)
  payloads = {}
  with recordio.RecordFile(write_spec_path(tmp_path, records)) as f:
    for key in range(6):
      payloads[key] = f.read(key)
  for key, payload in payloads.items():
    assert recordio.frame(payload) == records[key], key
  path = str(tmp_path / 'w.rec')
  with recordio.RecordWriter(path) as w:
    offsets = [w.write(key, payloads[key]) for key in range(6)]
  with open(path, 'rb') as f:
    assert f.read() == b''.join(records[k] for k in range(6))
  with open(str(tmp_path / 'w.idx')) as f:
    assert f.read() == ''.join(f'{k}\t{o}\n' for k, o in enumerate(offsets))
  assert [off for off, _ in recordio.iter_records(path)] == offsets
  assert [p for _, p in recordio.iter_records(path)] == [payloads[k] for k in range(6)]
  # pack() agrees with the spec header layout, for a scalar and for a multi-label header.
  assert recordio.pack(recordio.IRHeader(0, 1.0, MAGIC, MAGIC), png(spec_images[3])) == (
      payloads[3])
  assert recordio.pack(recordio.IRHeader(3, [0.0, 7.5, -1.0], 2, 0), png(spec_images[2])) == (
      payloads[2])


def write_spec_path(tmp_path, records):
  root = str(tmp_path / 'spec_w')
  write_spec(root, records)
  return os.path.join(root, 'train.rec')


def test_lrecord_and_framing_edge_cases():
  assert recordio.encode_lrecord(3, 5) == (3 << 29) | 5
  assert recordio.decode_lrecord((2 << 29) | 123) == (2, 123)
  m = struct.pack('<I', MAGIC)
  cases = [
      b'',
      b'abc',
      m,  # the whole payload is the magic: start part of 0 bytes, end part of 0 bytes
      m + m + b'xy',  # start (0 bytes), middle (0 bytes), end
      b'x' + m + b'abc',  # unaligned magic: not split
      b'abcd' + m + b'efgh' + m,  # magic at the very end
  ]
  expected = [
      spec_part(0, b''),
      spec_part(0, b'abc'),
      spec_part(1, b'') + spec_part(3, b''),
      spec_part(1, b'') + spec_part(2, b'') + spec_part(3, b'xy'),
      spec_part(0, b'x' + m + b'abc'),
      spec_part(1, b'abcd') + spec_part(2, b'efgh') + spec_part(3, b''),
  ]
  for payload, framed in zip(cases, expected):
    assert recordio.frame(payload) == framed, payload
    data = framed + spec_part(0, b'next')
    got, end = recordio._read_framed(  # pylint: disable=protected-access
        lambda n, o, d=data: d[o:o + n], len(data), 0)
    assert (got, end) == (payload, len(framed))


# ------------------------------------------------------------------------------------------------
# Round trips through the writer.
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope='module')
def faces():
  bench = benchmark.make_benchmark(seed=1, num_identities=5, images_per_identity=4,
                                   image_size=32, num_test_identities=2, num_pairs=2,
                                   num_folds=1, images_per_identity_sigma=0.5)
  return bench.train_images, bench.train_labels


def test_png_round_trip_exact_with_unsorted_labels(tmp_path, faces, monkeypatch):
  monkeypatch.setattr(recordio, '_LABEL_BLOCK', 5)  # labels() crosses block boundaries
  images, labels = faces
  perm = np.random.default_rng(0).permutation(len(labels))
  images, labels = images[perm], labels[perm]
  order = recordio.write_insightface(str(tmp_path), images, labels, image_format='png')
  np.testing.assert_array_equal(labels[order], np.sort(labels))
  with open(tmp_path / 'property') as f:
    assert f.read().strip() == '5,32,32'
  n = len(labels)
  with recordio.InsightfaceDataset(str(tmp_path)) as ds:
    assert ds.num_images == n and ds.num_classes == 5
    np.testing.assert_array_equal(ds.image_keys, np.arange(1, n + 1))
    counts = np.bincount(labels)
    ends = 1 + np.cumsum(counts)
    np.testing.assert_array_equal(ds.identity_ranges, np.stack([ends - counts, ends], 1))
    keys, got_labels = ds.labels()
    np.testing.assert_array_equal(keys, np.arange(1, n + 1))
    np.testing.assert_array_equal(got_labels, labels[order])
    chunks = list(ds.iter_chunks(chunk_size=7))
    assert [len(c.keys) for c in chunks] == [7] * (n // 7) + ([n % 7] if n % 7 else [])
    np.testing.assert_array_equal(np.concatenate([c.images for c in chunks]), images[order])
    np.testing.assert_array_equal(np.concatenate([c.labels for c in chunks]), labels[order])
    header, _ = recordio.unpack(ds._file.read(3))  # pylint: disable=protected-access
    assert header == recordio.IRHeader(0, float(labels[order][2]), 3, 0)
    assert ds.num_skipped == 0


def test_jpeg_round_trip_headers_exact_images_close(tmp_path, faces):
  images, labels = faces
  order = recordio.write_insightface(str(tmp_path), images, labels, image_format='jpeg',
                                     quality=95)
  np.testing.assert_array_equal(order, np.arange(len(labels)))  # already sorted: identity
  with recordio.InsightfaceDataset(str(tmp_path)) as ds:
    np.testing.assert_array_equal(ds.labels()[1], labels)
    decoded = np.concatenate([c.images for c in ds.iter_chunks(8)])
  assert decoded.shape == images.shape
  # Close to the originals (4:2:0 chroma subsampling + sensor noise at 32x32: ~5 levels)...
  err = np.abs(decoded.astype(np.int32) - images.astype(np.int32))
  assert err.mean() < 8.0, err.mean()
  # ... and exactly what PIL's own JPEG encode + decode at the same quality gives.
  for i in (0, len(images) - 1):
    buf = io.BytesIO()
    Image.fromarray(images[i]).save(buf, format='JPEG', quality=95)
    np.testing.assert_array_equal(decoded[i], np.asarray(Image.open(buf).convert('RGB')))
  with open(tmp_path / 'train.rec', 'rb') as f:
    assert f.read(4) == struct.pack('<I', MAGIC)


def test_record_zero_without_meta_means_all_keys_are_images(tmp_path):
  images = [spec_image(s) for s in range(3)]
  records = {0: spec_part(0, spec_header(0, 1.0, 0, 0) + png(images[0])),
             1: spec_part(0, spec_header(0, 0.0, 1, 0) + png(images[1])),
             2: spec_part(0, spec_header(0, 1.0, 2, 0) + png(images[2]))}
  root = str(tmp_path)
  write_spec(root, records, idx_order=(0, 1, 2))
  with recordio.InsightfaceDataset(root) as ds:
    assert ds.identity_ranges is None
    np.testing.assert_array_equal(ds.image_keys, [0, 1, 2])
    np.testing.assert_array_equal(ds.labels()[1], [1, 0, 1])
    np.testing.assert_array_equal(ds.decode(2), images[2])


# ------------------------------------------------------------------------------------------------
# Bad inputs: every error names the file and the record key.
# ------------------------------------------------------------------------------------------------


def _raises(fn, *fragments):
  with pytest.raises(recordio.RecordIOError) as info:
    fn()
  for fragment in fragments:
    assert fragment in str(info.value), (fragment, str(info.value))
  return info.value


def test_truncated_record(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  write_spec(root, records)
  rec = os.path.join(root, 'train.rec')
  size = os.path.getsize(rec)
  # Cut inside the last record's payload (key 5): the index offset is valid, the data is not.
  with open(rec, 'r+b') as f:
    f.truncate(size - len(records[5]) + 12)
  _raises(lambda: recordio.InsightfaceDataset(root), rec, 'record 5', 'truncated')
  # Cut inside the continuation record (key 3, now the last one): between its parts.
  write_spec(root, {k: records[k] for k in range(4)}, idx_order=range(4))
  offset3 = sum(len(records[k]) for k in range(3))
  with open(rec, 'r+b') as f:
    f.truncate(offset3 + len(spec_part(1, b'12345678')) + 4)
  with recordio.RecordFile(rec) as f:
    _raises(lambda: f.read(3), rec, 'record 3', 'truncated')


def test_bad_magic(tmp_path, spec_images):
  root = str(tmp_path)
  pos = write_spec(root, spec_records(spec_images))
  rec = os.path.join(root, 'train.rec')
  with open(rec, 'r+b') as f:
    f.seek(pos[2])
    f.write(b'\xde\xad\xbe\xef')
  with recordio.InsightfaceDataset(root) as ds:
    err = _raises(ds.labels, rec, 'record 2', 'bad magic 0xefbeadde', f'0x{MAGIC:08x}')
    assert err.key == 2 and err.path == rec
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_index_offset_past_end(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  size = sum(map(len, records.values()))
  write_spec(root, records, offsets={4: size + 100})
  idx = os.path.join(root, 'train.idx')
  _raises(lambda: recordio.RecordFile(os.path.join(root, 'train.rec')), idx, 'record 4',
          f'offset {size + 100}', 'past the end')


def test_malformed_index_line(tmp_path, spec_images):
  root = str(tmp_path)
  write_spec(root, spec_records(spec_images))
  idx = os.path.join(root, 'train.idx')
  with open(idx, 'a') as f:
    f.write('7\tseven\n')
  _raises(lambda: recordio.read_index(idx), idx, 'line 7', 'key<TAB>offset')


def test_meta_keys_missing_from_index(tmp_path, spec_images):
  root = str(tmp_path)
  write_spec(root, spec_records(spec_images), idx_order=(0, 1, 2, 3, 4))  # no key 5
  _raises(lambda: recordio.InsightfaceDataset(root), 'train.idx', 'record 5',
          'identity records are keys 4..5')


def test_property_disagrees_with_identity_records(tmp_path, spec_images):
  root = str(tmp_path)
  write_spec(root, spec_records(spec_images), prop='3,8,8')
  _raises(lambda: recordio.InsightfaceDataset(root), os.path.join(root, 'train.rec'),
          'record 0', 'says 3 classes', '2 identity records (keys 4..5)')
  with open(os.path.join(root, 'property'), 'w') as f:
    f.write('2,8')
  _raises(lambda: recordio.InsightfaceDataset(root), os.path.join(root, 'property'),
          'num_classes,H,W')


def test_label_exceeds_property_classes(tmp_path):
  root = str(tmp_path)
  records = {0: spec_part(0, spec_header(0, 0.0, 0, 0) + png(spec_image(0))),
             1: spec_part(0, spec_header(0, 5.0, 1, 0) + png(spec_image(1)))}
  write_spec(root, records, idx_order=(0, 1))
  with recordio.InsightfaceDataset(root) as ds:
    _raises(ds.labels, 'train.rec', 'record 1', 'label 5 is outside [0, 2)', 'property')
    _raises(lambda: ds.decode(1), 'record 1', 'label 5')


def test_label_disagrees_with_identity_range(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[1] = spec_part(0, spec_header(0, 1.0, 1, 0) + png(spec_images[1]))
  write_spec(root, records)
  with recordio.InsightfaceDataset(root) as ds:
    _raises(ds.labels, 'record 1', "identity 0's key range [1, 3)", 'label is 1')
  with recordio.InsightfaceDataset(root, check_identity_labels=False) as ds:
    np.testing.assert_array_equal(ds.labels()[1], [1, 0, 1])


def test_empty_identity(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[5] = spec_part(0, spec_header(2, 0.0, 5, 0, (3.0, 3.0)))
  write_spec(root, records)
  _raises(lambda: recordio.InsightfaceDataset(root), 'train.rec', 'record 5',
          'identity 1 is empty', '[3, 3)')


def test_overlapping_identity_ranges(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[5] = spec_part(0, spec_header(2, 0.0, 5, 0, (2.0, 4.0)))
  write_spec(root, records)
  _raises(lambda: recordio.InsightfaceDataset(root), 'record 5', 'identity 1',
          'expected 3 <= start < end <= 4')


def test_corrupt_jpeg(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  buf = io.BytesIO()
  Image.fromarray(spec_images[1]).save(buf, format='JPEG')
  jpeg = buf.getvalue()
  records[1] = spec_part(0, spec_header(0, 0.0, 1, 0) + jpeg[:len(jpeg) // 2])  # truncated
  records[2] = spec_part(0, spec_header(0, 0.0, 2, 0) + b'\xff\xd8 not a jpeg')
  write_spec(root, records)
  with recordio.InsightfaceDataset(root) as ds:
    _raises(lambda: ds.decode(1), 'train.rec', 'record 1', 'cannot decode image')
    _raises(lambda: ds.decode(2), 'train.rec', 'record 2', 'cannot decode image')


def test_image_of_wrong_size(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[1] = spec_part(0, spec_header(0, 0.0, 1, 0) + png(spec_image(1, h=8, w=9)))
  write_spec(root, records)
  with recordio.InsightfaceDataset(root) as ds:
    _raises(lambda: ds.decode(1), 'train.rec', 'record 1', 'image is 8x9', 'expected 8x8',
            'property')
    _raises(lambda: ds.read_chunk([1, 2]), 'record 1', 'expected 8x8')


def test_header_flag_longer_than_payload(tmp_path, spec_images):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[2] = spec_part(0, struct.pack('<IfQQ', 1000, 0.0, 2, 0) + b'\0' * 8)
  write_spec(root, records)
  with recordio.InsightfaceDataset(root) as ds:
    _raises(lambda: ds.decode(2), 'record 2', 'flag 1000')


def test_skip_bad_records_counts_and_logs(tmp_path, spec_images, caplog):
  root = str(tmp_path)
  records = spec_records(spec_images)
  records[2] = spec_part(0, spec_header(0, 0.0, 2, 0) + b'garbage!')
  pos = write_spec(root, records)
  with open(os.path.join(root, 'train.rec'), 'r+b') as f:
    f.seek(pos[3])
    f.write(b'\0\0\0\0')  # bad magic on the split record
  with recordio.InsightfaceDataset(root) as strict:
    with pytest.raises(recordio.RecordIOError):
      list(strict.iter_chunks(2))
  caplog.set_level(logging.WARNING)
  with recordio.InsightfaceDataset(root, skip_bad_records=True) as ds:
    chunks = list(ds.iter_chunks(2))
    np.testing.assert_array_equal(np.concatenate([c.keys for c in chunks]), [1])
    np.testing.assert_array_equal(chunks[0].images[0], spec_images[1])
    assert chunks[1].images.shape == (0, 8, 8, 3)
    assert ds.num_skipped == 2
    assert [k for k, _ in ds.skipped] == [2, 3]
    assert 'cannot decode image' in ds.skipped[0][1] and 'bad magic' in ds.skipped[1][1]
    keys, labels = ds.labels()  # header of record 2 is fine; record 3's framing is not
    np.testing.assert_array_equal(keys, [1, 2])
    np.testing.assert_array_equal(labels, [0, 0])
    assert ds.num_skipped == 3
  text = caplog.text
  assert 'skipped' in text and 'record 3' in text and 'skipped 1 bad records' in text


def test_writer_argument_errors(tmp_path):
  images = np.zeros((3, 4, 4, 3), np.uint8)
  with pytest.raises(ValueError, match='class 1 has no images'):
    recordio.write_insightface(str(tmp_path), images, [0, 2, 2])
  with pytest.raises(ValueError, match=r'labels must lie in \[0, 2\)'):
    recordio.write_insightface(str(tmp_path), images, [0, 1, 2], num_classes=2)
  with pytest.raises(ValueError, match='3 images and 2 labels'):
    recordio.write_insightface(str(tmp_path), images, [0, 1])
