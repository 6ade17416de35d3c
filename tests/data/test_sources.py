"""Real-data sources: the synthetic benchmark exported to insightface files / image folders / TFDS
and read back must give the same arrays, the same rounds and the same trained model as the
in-memory path; bad input is named; TFDS works without TensorFlow where TFDS does."""

import dataclasses
import gc
import glob
import io
import json
import os

import jax
import numpy as np
from PIL import Image
import pytest

from fedjax_face import config_lib, experiment
from tests import config_files, saved_checkpoints
from fedjax_face.data import federated, sources, stores, views
from fedjax_face.data.sources import files as source_files
from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import pairs as synthetic_pairs
from fedjax_face.data.formats import tfds_source
from fedjax_face.data.formats import verification_bin


# The fields every source shares (`config.data.<field>`); a source's own are in
# `config.data.<source>.<field>`.
SHARED_DATA_FIELDS = ('source', 'image_size', 'public_identities', 'private_test_fraction',
                      'centralized_on', 'prefetch', 'decode_threads')


def runlocal_config(**data):
  """FedPE runlocal on `data['source']` (default synthetic): the shared fields set in
  `config.data`, the others in the source's section."""
  config = config_files.load_config('fedpe')
  del config.evals.identification
  config.evals.verification.pair_sets = synthetic_pairs.PAIR_SET_NAMES   # the three .bin analogues
  for key, value in data.items():
    if key in SHARED_DATA_FIELDS:
      config.data[key] = value
  for key, value in data.items():
    if key not in SHARED_DATA_FIELDS:
      config.data[config.data.source][key] = value
  return config


def with_pair_sets(config, data):
  """`data` with the pair sets of `evals.verification.pair_sets`, as the verification evaluator
  gets them from the source (a loaded `FaceBenchmark` carries none)."""
  names = tuple(config.evals.verification.pair_sets)
  return dataclasses.replace(
      data, pair_sets=sources.get(config.data.source).pair_sets(config, data, names))


@pytest.fixture(scope='module')
def bench():
  config = runlocal_config()
  return with_pair_sets(config, sources.load(config))


def export_insightface(root, bench, image_format='png'):
  recordio.write_insightface(root, bench.train_images, bench.train_labels,
                             image_format=image_format)
  for name, pairs in bench.pair_sets.items():
    verification_bin.write_bin(os.path.join(root, f'{name}.bin'), pairs.images, pairs.issame)
  return root


@pytest.fixture(scope='module')
def rec_root(bench, tmp_path_factory):
  return export_insightface(str(tmp_path_factory.mktemp('webface')), bench)


def assert_same_rounds(fed_a, fed_b, rounds=3):
  cohort = np.arange(fed_a.num_clients, dtype=np.int32)
  for r in range(rounds):
    a = federated.sample_round(fed_a, cohort, round_index=r, seed=0, steps=2, batch_size=8)
    b = federated.sample_round(fed_b, cohort, round_index=r, seed=0, steps=2, batch_size=8)
    for key in a:
      np.testing.assert_array_equal(a[key], b[key], err_msg=f'round {r} {key}')


def assert_same_benchmark(config, got, bench):
  """`got`, loaded with `config`, and its pair sets as the source gives them equal `bench`."""
  assert isinstance(got.train_images, stores.DecodedImageStore)
  got = with_pair_sets(config, got)
  assert got.num_identities == bench.num_identities
  np.testing.assert_array_equal(got.train_labels, bench.train_labels)
  np.testing.assert_array_equal(got.train_images[:], bench.train_images)
  assert sorted(got.pair_sets) == sorted(bench.pair_sets)
  for name, pairs in bench.pair_sets.items():
    assert got.pair_sets[name].name == name
    np.testing.assert_array_equal(got.pair_sets[name].images, pairs.images)
    np.testing.assert_array_equal(got.pair_sets[name].issame, pairs.issame)


# ------------------------------------------------------------------------------------------------
# insightface: the round trip.
# ------------------------------------------------------------------------------------------------


def test_insightface_round_trip_gives_the_same_arrays_and_client_batches(bench, rec_root):
  config = runlocal_config(source='insightface', root=rec_root)
  config_lib.validate(config)
  got = sources.load(config)
  assert_same_benchmark(config, got, bench)
  clients = views.client_partition(config, got.num_identities)
  fed_mem = federated.build(bench.train_images, bench.train_labels, clients)
  fed_rec = federated.build(got.train_images, got.train_labels, clients)
  for k in range(fed_mem.num_clients):
    np.testing.assert_array_equal(fed_rec.client_indices[k], fed_mem.client_indices[k])
    np.testing.assert_array_equal(fed_rec.client_local_labels[k], fed_mem.client_local_labels[k])
  np.testing.assert_array_equal(fed_rec.identity_table, fed_mem.identity_table)
  assert_same_rounds(fed_mem, fed_rec)


def test_insightface_train_and_evaluate_equals_in_memory(rec_root, tmp_path):
  """Same verification accuracy and bit-identical final state; prefetch off vs on (depth 2)."""
  memory = experiment.train_and_evaluate(runlocal_config(prefetch=0), str(tmp_path / 'mem'))
  streamed = experiment.train_and_evaluate(
      runlocal_config(source='insightface', root=rec_root, prefetch=2), str(tmp_path / 'rec'))
  assert set(streamed['verification']) == {'lfw', 'cfp_fp', 'agedb_30'}
  for name, res in memory['verification'].items():
    for metric in ('accuracy', 'accuracy_std', 'threshold', 'val_at_far', 'auc'):
      assert streamed['verification'][name][metric] == res[metric], (name, metric)
  states = [saved_checkpoints.restore(tmp_path / run, 2) for run in ('mem', 'rec')]
  jax.tree.map(np.testing.assert_array_equal, *states)


@pytest.mark.parametrize('check_labels', [True, False])
def test_identity_ranges_give_labels_without_reading_images(rec_root, bench, monkeypatch,
                                                             check_labels):
  reads = []
  original = recordio.RecordFile._read  # pylint: disable=protected-access

  def counting(self, key, limit):
    reads.append((int(key), limit))
    return original(self, key, limit)

  monkeypatch.setattr(recordio.RecordFile, '_read', counting)
  store, labels = source_files.insightface_store(rec_root, image_size=16,
                                                 check_labels=check_labels)
  np.testing.assert_array_equal(labels, bench.train_labels)
  n = len(bench.train_labels)
  # Record 0 (meta), the identity records and, checked, every image record: header prefixes
  # only, no image decoded.
  opened = [0] + list(range(n + 1, n + 1 + bench.num_identities))
  assert sorted(k for k, _ in reads) == sorted(opened + (list(range(1, n + 1)) if check_labels
                                                         else []))
  assert all(limit is not None for _, limit in reads)
  reads.clear()
  federated.build(store, labels, [np.arange(bench.num_identities)])
  assert not reads
  store[3]
  assert reads == [(4, None)]  # image 3 is record key 4


def _swap_offsets(root, key_a, key_b):
  """Rewrites train.idx with the offsets of records key_a and key_b exchanged."""
  path = os.path.join(root, 'train.idx')
  keys, offsets = recordio.read_index(path)
  a, b = np.flatnonzero(keys == key_a)[0], np.flatnonzero(keys == key_b)[0]
  offsets[[a, b]] = offsets[[b, a]]
  with open(path, 'w') as f:
    f.writelines(f'{k}\t{o}\n' for k, o in zip(keys, offsets))


def test_an_index_pointing_at_another_identitys_record_is_found_at_load(bench, tmp_path, caplog):
  root = export_insightface(str(tmp_path), bench)
  first_of_1 = int(np.flatnonzero(bench.train_labels == 1)[0]) + 1   # image i is record key i + 1
  _swap_offsets(root, first_of_1 - 1, first_of_1)                     # across identities 0 | 1
  config = runlocal_config(source='insightface', root=root)
  with pytest.raises(recordio.RecordIOError,
                     match=rf"train\.rec: record {first_of_1 - 1}: record lies in identity 0's key "
                     rf"range \[1, {first_of_1}\) but its label is 1"):
    sources.load(config)
  # Skipping bad records drops both at load, each logged; the rest load as written.
  config.data.insightface.skip_bad_records = True
  with caplog.at_level('WARNING'):
    got = sources.load(config)
  keep = np.ones(len(bench.train_labels), bool)
  keep[[first_of_1 - 2, first_of_1 - 1]] = False
  np.testing.assert_array_equal(got.train_labels, bench.train_labels[keep])
  assert f'record {first_of_1 - 1}:' in caplog.text and f'record {first_of_1}:' in caplog.text
  # Unchecked, the labels come from the key ranges and the swap is met only when decoded.
  config.data.insightface.skip_bad_records = False
  config.data.insightface.check_record_labels = False
  np.testing.assert_array_equal(sources.load(config).train_labels, bench.train_labels)


def test_max_identities_keeps_the_first_identities(bench, rec_root):
  got = sources.load(runlocal_config(source='insightface', root=rec_root, max_identities=5))
  keep = bench.train_labels < 5
  gc.collect()  # the subset store must keep the record file open
  assert got.num_identities == 5
  np.testing.assert_array_equal(got.train_labels, bench.train_labels[keep])
  np.testing.assert_array_equal(got.train_images[:], bench.train_images[keep])


def test_insightface_jpeg_and_resize_to_image_size(bench, tmp_path):
  root = str(tmp_path)
  recordio.write_insightface(root, bench.train_images, bench.train_labels,
                             image_format='jpeg', quality=95)
  store, _ = source_files.insightface_store(root, image_size=8)
  assert store.shape == (len(bench.train_labels), 8, 8, 3)
  expected = np.asarray(Image.fromarray(bench.train_images[5]).resize(
      (8, 8), Image.Resampling.BILINEAR)).astype(int)
  assert np.abs(store[5].astype(int) - expected).mean() < 12


def _corrupt_image_record(root, key):
  """Overwrites the start of record `key`'s image bytes (after the 24-byte header)."""
  keys, offsets = recordio.read_index(os.path.join(root, 'train.idx'))
  offset = int(offsets[keys == key][0]) + 8 + recordio.HEADER_SIZE
  with open(os.path.join(root, 'train.rec'), 'r+b') as f:
    f.seek(offset)
    f.write(b'\0' * 16)


def test_bad_record_is_named_or_skipped_with_a_count(bench, tmp_path, caplog):
  root = export_insightface(str(tmp_path), bench)
  _corrupt_image_record(root, 7)  # image index 6, identity 1
  config = runlocal_config(source='insightface', root=root)
  got = sources.load(config)  # opening reads no image: nothing to notice yet
  clients = views.client_partition(config, got.num_identities)
  fed = federated.build(got.train_images, got.train_labels, clients)
  owner = next(k for k in range(fed.num_clients) if 6 in fed.client_indices[k])
  cohort = np.array([owner], np.int32)
  with pytest.raises(stores.BadRecordError, match=r'train\.rec: record 7: cannot decode image'):
    federated.sample_round(fed, cohort, round_index=0, seed=0, steps=4, batch_size=8)

  config.data.insightface.skip_bad_records = True
  got = sources.load(config)
  fed = federated.build(got.train_images, got.train_labels, clients)
  ref = federated.build(bench.train_images, bench.train_labels, clients)
  with caplog.at_level('WARNING'):
    data = federated.sample_round(fed, cohort, round_index=0, seed=0, steps=4, batch_size=8)
  expected = federated.sample_round(ref, cohort, round_index=0, seed=0, steps=4, batch_size=8)
  drew_6 = (expected['images'] == bench.train_images[6]).all(axis=(-3, -2, -1))
  assert drew_6.sum() >= 1
  np.testing.assert_array_equal(data['mask'], expected['mask'] & ~drew_6)
  np.testing.assert_array_equal(data['images'][~drew_6], expected['images'][~drew_6])
  assert list(got.train_images.bad) == [6] and got.train_images.num_masked == drew_6.sum()
  assert 'record 7' in caplog.text and 'data.skip_bad_records' in caplog.text


def test_truncated_bin_and_missing_pair_set_are_named(rec_root, tmp_path):
  with pytest.raises(FileNotFoundError,
                     match=r"names 'calfw' but neither .*calfw.bin nor .*calfw.txt exists "
                     r"\(pair-set files in .*: \['agedb_30.bin', 'cfp_fp.bin', 'lfw.bin'\]\)"):
    source_files.load_pair_sets(('lfw', 'calfw'), rec_root, image_size=16)
  with open(os.path.join(rec_root, 'lfw.bin'), 'rb') as f:
    data = f.read()
  with open(tmp_path / 'lfw.bin', 'wb') as f:
    f.write(data[:len(data) // 2])
  with pytest.raises(verification_bin.BinFormatError, match=r'lfw.bin: not a readable pickle'):
    source_files.load_pair_set('lfw', str(tmp_path), image_size=16)


# ------------------------------------------------------------------------------------------------
# Image folders and pair lists.
# ------------------------------------------------------------------------------------------------


def export_image_folder(root, bench):
  for i, (image, label) in enumerate(zip(bench.train_images, bench.train_labels)):
    os.makedirs(os.path.join(root, f'id{label:04d}'), exist_ok=True)
    Image.fromarray(image).save(os.path.join(root, f'id{label:04d}', f'{i:05d}.png'))
  os.makedirs(os.path.join(root, 'empty_identity'))
  with open(os.path.join(root, 'id0000', 'notes.txt'), 'w') as f:
    f.write('not an image')


def export_pair_lists(directory, bench):
  for name, pairs in bench.pair_sets.items():
    os.makedirs(os.path.join(directory, name), exist_ok=True)
    lines = ['# image_a image_b same']
    for p, same in enumerate(pairs.issame):
      files = [f'{name}/{2 * p + s}.png' for s in (0, 1)]
      for s, f in enumerate(files):
        Image.fromarray(pairs.images[2 * p + s]).save(os.path.join(directory, f))
      lines.append(f'{files[0]}\t{files[1]}\t{int(same)}')
    with open(os.path.join(directory, f'{name}.txt'), 'w') as f:
      f.write('\n'.join(lines) + '\n')


def test_image_folder_round_trip(bench, tmp_path):
  export_image_folder(str(tmp_path / 'train'), bench)
  export_pair_lists(str(tmp_path / 'pairs'), bench)
  config = runlocal_config(source='image_folder', root=str(tmp_path / 'train'),
                           verification_dir=str(tmp_path / 'pairs'))
  config_lib.validate(config)
  got = sources.load(config)
  assert_same_benchmark(config, got, bench)
  clients = views.client_partition(config, got.num_identities)
  assert_same_rounds(federated.build(bench.train_images, bench.train_labels, clients),
                     federated.build(got.train_images, got.train_labels, clients))


def test_lfw_pairs_txt_layout(tmp_path):
  rng = np.random.default_rng(0)
  faces = {}
  for name, count in (('Ann_Lee', 3), ('Bo_Chen', 2)):
    os.makedirs(tmp_path / name)
    for i in range(1, count + 1):
      faces[name, i] = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
      # PNG bytes under LFW's .jpg names (decoders look at the content): an exact comparison.
      Image.fromarray(faces[name, i]).save(tmp_path / name / f'{name}_{i:04d}.jpg', format='PNG')
  (tmp_path / 'lfw.txt').write_text('1\t2\nAnn_Lee\t1\t3\nAnn_Lee\t2\tBo_Chen\t1\n')
  pairs = source_files.load_pair_set('lfw', str(tmp_path), image_size=12)
  np.testing.assert_array_equal(pairs.issame, [True, False])
  assert pairs.images.shape == (4, 12, 12, 3)
  for got, key in zip(pairs.images, [('Ann_Lee', 1), ('Ann_Lee', 3), ('Ann_Lee', 2),
                                     ('Bo_Chen', 1)]):
    np.testing.assert_array_equal(got, faces[key])
  (tmp_path / 'lfw.txt').write_text('1\t2\nAnn_Lee\t1\nAnn_Lee\t2\tBo_Chen\t1\n')
  with pytest.raises(ValueError, match=r"lfw.txt: line 2 is 'Ann_Lee 1'; expected .*LFW"):
    source_files.load_pair_set('lfw', str(tmp_path), image_size=12)


def test_image_folder_errors_name_the_file(tmp_path):
  with pytest.raises(ValueError, match=r'no images found; expected <root>/<identity>/<image>'):
    os.makedirs(tmp_path / 'a')
    sources.load(runlocal_config(source='image_folder', root=str(tmp_path)))
  (tmp_path / 'a' / 'x.jpg').write_bytes(b'not a jpeg')
  (tmp_path / 'lfw.txt').write_text('a/x.jpg a/x.jpg 1\n')
  with pytest.raises(stores.BadRecordError, match=r'a/x.jpg: cannot decode image'):
    source_files.load_pair_set('lfw', str(tmp_path), image_size=8)


# ------------------------------------------------------------------------------------------------
# Config.
# ------------------------------------------------------------------------------------------------


def test_config_data_section_checks():
  config = runlocal_config(source='insightface', root='/data/faces_webface_112x112')
  config.evals.verification.pair_sets = ('lfw', 'cfp_fp', 'agedb_30', 'calfw', 'cplfw', 'vgg2_fp',
                                        'cfp_ff')
  experiment.validate(config)   # real set names are fine for real data ...
  rendered = runlocal_config()
  rendered.evals.verification.pair_sets = ('lfw', 'calfw', 'vgg2_fp')
  with pytest.raises(ValueError,
                     match=r"evals.verification.pair_sets\[...\]='vgg2_fp'; expected one of"):
    experiment.validate(rendered)  # ... but the synthetic benchmark renders only its six
  cases = [
      ({'source': 'mxnet'}, r"data.source='mxnet'; expected one of \('synthetic', 'insightface'"),
      ({'source': 'insightface', 'root': ''},
       r"config.data.insightface.root is empty; data.source='insightface' needs the data "
       r'directory\.'),
      ({'source': 'image_folder', 'root': '/x', 'center_crop': 0.0},
       r'config.data.image_folder.center_crop=0.0; expected a fraction in \(0, 1\]\.'),
      ({'prefetch': -1}, r'data.prefetch=-1; expected a non-negative integer'),
      ({'source': 'image_folder', 'root': '/x', 'min_images_per_identity': 0},
       r'config.data.image_folder.min_images_per_identity=0; expected a positive integer\.'),
      ({'source': 'insightface', 'root': '/x', 'max_identities': -2},
       r'config.data.insightface.max_identities=-2; expected a non-negative integer\.'),
      ({'source': 'tfds', 'name': ''},
       r"config.data.tfds.name is empty; data.source='tfds' needs a TFDS name \(lfw, celeb_a\)\."),
  ]
  for fields, match in cases:
    with pytest.raises(ValueError, match=match):
      config_lib.validate(runlocal_config(**fields))
  comma = runlocal_config(source='insightface', root='/x')
  comma.evals.verification.pair_sets = ('lfw,calfw',)   # --config.evals.verification.pair_sets=lfw,calfw
  with pytest.raises(ValueError, match=r"has 'lfw,calfw'; expected the file stem"):
    experiment.validate(comma)


def test_select_identities():
  labels = np.array([0, 0, 1, 2, 2, 2, 3, 3])
  index, new, m = source_files.select_identities(labels, min_images=2)
  np.testing.assert_array_equal(index, [0, 1, 3, 4, 5, 6, 7])
  np.testing.assert_array_equal(new, [0, 0, 1, 1, 1, 2, 2])
  assert m == 3
  index, new, m = source_files.select_identities(labels, min_images=2, max_identities=2)
  np.testing.assert_array_equal(index, [0, 1, 3, 4, 5])
  assert m == 2
  with pytest.raises(ValueError, match=r'no identity has min_images_per_identity=4'):
    source_files.select_identities(labels, min_images=4)


# ------------------------------------------------------------------------------------------------
# TFDS.
# ------------------------------------------------------------------------------------------------

tfds = pytest.importorskip('tensorflow_datasets')


def png(image):
  buf = io.BytesIO()
  Image.fromarray(image).save(buf, format='PNG')
  return buf.getvalue()


class FedjaxFaceTestFaces(tfds.core.GeneratorBasedBuilder, skip_registration=True):
  """An lfw-like TFDS data set (person-name labels) prepared without TensorFlow."""

  VERSION = tfds.core.Version('1.0.0')
  images = labels = None  # set by the test before preparing
  # TFDS 4.9.10 looks for a builder's checksums beside its package module and, for a module in a
  # package like tests/, reaches for `importlib_resources`, a backport it requires only before
  # Python 3.9 (not installed here). A top-level module name skips that lookup.
  __module__ = '__main__'

  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
        'image': tfds.features.Image(shape=(16, 16, 3)),
        'label': tfds.features.Text(),
        'index': np.int64}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {'train': self._generate_examples()}

  def _generate_examples(self):
    for i, (image, label) in enumerate(zip(self.images, self.labels)):
      # Encoded bytes: TFDS encodes numpy images with TensorFlow, bytes it stores as they are.
      yield str(i), {'image': png(image), 'label': f'person_{label:03d}', 'index': i}


def prepare_test_faces(bench, data_dir: str, file_format: str) -> str:
  FedjaxFaceTestFaces.images, FedjaxFaceTestFaces.labels = bench.train_images, bench.train_labels
  FedjaxFaceTestFaces(data_dir=data_dir, file_format=file_format).download_and_prepare()
  return data_dir


def load_test_faces(data_dir: str, rec_root: str):
  """The run's data from a prepared copy, and each example's original index (TFDS shuffles)."""
  config = runlocal_config(source='tfds', root=data_dir, name='fedjax_face_test_faces',
                           label_key='label', verification_dir=rec_root)
  config_lib.validate(config)
  data = with_pair_sets(config, sources.load(config))
  source = tfds_source.open_split('fedjax_face_test_faces', split='train', data_dir=data_dir)
  return data, np.array([source[i]['index'] for i in range(len(source))])


@pytest.fixture(scope='module')
def tfds_dir(bench, tmp_path_factory):
  return prepare_test_faces(bench, str(tmp_path_factory.mktemp('tfds')), 'array_record')


def test_tfds_array_record_reads_without_tensorflow(bench, rec_root, tfds_dir):
  """A real prepared array_record copy on disk, found by name in data_dir (no builder code)."""
  got, order = load_test_faces(tfds_dir, rec_root)
  assert sorted(order) == list(range(len(bench.train_labels)))  # TFDS shuffled them
  np.testing.assert_array_equal(got.train_images[:], bench.train_images[order])
  # person_000 < person_001 < ...: the names sort like the original ids.
  np.testing.assert_array_equal(got.train_labels, bench.train_labels[order])
  assert got.num_identities == bench.num_identities
  np.testing.assert_array_equal(got.pair_sets['lfw'].images, bench.pair_sets['lfw'].images)
  clients = views.client_partition(runlocal_config(source='tfds'), got.num_identities)
  fed = federated.build(got.train_images, got.train_labels, clients)
  ref = federated.build(bench.train_images, bench.train_labels, clients)
  for k in range(fed.num_clients):  # same samples per client, in TFDS order
    np.testing.assert_array_equal(np.sort(order[fed.client_indices[k]]),
                                  np.sort(ref.client_indices[k]))


def test_tfds_mock_lfw_and_celeb_a_features(bench):
  """tfds.testing.mock_data around the real lfw / celeb_a builders (their feature layouts)."""
  rng = np.random.default_rng(0)
  lfw = [{'image': png(rng.integers(0, 256, (250, 250, 3), dtype=np.uint8)),
          'label': name.encode()} for name in ['Zoe_Ray', 'Al_Bo', 'Zoe_Ray', 'Cy_Do']]
  celeb = [{'image': png(rng.integers(0, 256, (218, 178, 3), dtype=np.uint8)),
            'identity': {'Identity_No': np.int64(i)}} for i in (10177, 3, 3, 52)]
  examples = {'lfw': lfw, 'celeb_a': celeb}

  def as_data_source(builder, split, decoders=None, **kwargs):
    del kwargs
    assert split == 'train' and set(decoders) == {'image'}  # images stay encoded
    return examples[builder.name]

  with tfds.testing.mock_data(as_data_source_fn=as_data_source):
    for name, expected in (('lfw', [2, 0, 2, 1]), ('celeb_a', [2, 0, 0, 1])):
      config = runlocal_config(source='tfds', name=name, image_size=32, center_crop=0.5)
      data = sources.get('tfds').load(config)
      store, labels = data.train_images, data.train_labels
      np.testing.assert_array_equal(labels, expected)
      assert store.shape == (4, 32, 32, 3)
      image = recordio.decode_image(examples[name][1]['image'])
      np.testing.assert_array_equal(store[1], stores.fit_image(image, 32, 0.5))


@pytest.mark.skipif(not tfds_source.has_tensorflow(),
                    reason='needs tensorflow: TFDS writes and reads tfrecord with it')
def test_tfds_tfrecord_copy_reads_like_array_record(bench, rec_root, tfds_dir, tmp_path):
  """The default `tfds build` format (tfrecord, read once with tf.data) gives the same data."""
  tfrecord_dir = prepare_test_faces(bench, str(tmp_path / 'tfrecord'), 'tfrecord')
  assert glob.glob(os.path.join(tfrecord_dir, '*', '*', '*.tfrecord-*'))
  ar, ar_order = load_test_faces(tfds_dir, rec_root)
  tr, tr_order = load_test_faces(tfrecord_dir, rec_root)
  # The two formats may list the examples in different orders: compare them by their index.
  np.testing.assert_array_equal(tr.train_images[:][np.argsort(tr_order)],
                                ar.train_images[:][np.argsort(ar_order)])
  np.testing.assert_array_equal(tr.train_labels[np.argsort(tr_order)],
                                ar.train_labels[np.argsort(ar_order)])
  np.testing.assert_array_equal(tr.train_images[:], bench.train_images[tr_order])


def test_tfds_tfrecord_copy_without_tensorflow_says_install_it(tfds_dir, tmp_path, monkeypatch):
  import shutil
  monkeypatch.setattr(tfds_source, 'has_tensorflow', lambda: False)
  data_dir = str(tmp_path / 'tfds')
  shutil.copytree(tfds_dir, data_dir)
  info = os.path.join(data_dir, 'fedjax_face_test_faces', '1.0.0', 'dataset_info.json')
  with open(info) as f:
    meta = json.load(f)
  meta['fileFormat'] = 'tfrecord'   # as `tfds build` writes by default
  with open(info, 'w') as f:
    json.dump(meta, f)
  with pytest.raises(tfds_source.MissingTensorflowError,
                     match=r'install tensorflow to use data.source=tfds with .*tfrecord format'):
    tfds_source.open_split('fedjax_face_test_faces', split='train', data_dir=data_dir)


def test_tfds_not_prepared_is_refused_without_download(tmp_path):
  with pytest.raises(FileNotFoundError,
                     match=r"TFDS data set 'lfw' is not prepared in .* nothing is downloaded at "
                     r'run time: prepare it once \(tfds build lfw'):
    tfds_source.open_split('lfw', split='train', data_dir=str(tmp_path))
  with pytest.raises(FileNotFoundError, match=r"lacks \['lfw.tgz'\] for lfw; nothing is "
                     'downloaded'):
    tfds_source.open_split('lfw', split='train', data_dir=str(tmp_path),
                           manual_dir=str(tmp_path))


@pytest.mark.skipif(not tfds_source.has_tensorflow(),
                    reason='needs tensorflow: tfds.testing.mock_data encodes its random images '
                    'with TensorFlow when images are requested encoded (SkipDecoding)')
def test_tfds_random_mock_data(monkeypatch):
  # tfds 4.9.10's mock sets `__getitems__` on a MagicMock, which binds no `self` to it (not a
  # magic method Mock knows), so the batched read the labels use would fail inside TFDS.
  from tensorflow_datasets.testing import mocking  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(mocking, '_getitems', lambda record_keys, generator, serialized=False:
                      [generator[k] for k in record_keys])
  with tfds.testing.mock_data(num_examples=12):
    data = sources.get('tfds').load(runlocal_config(source='tfds', name='lfw'))
    store, labels = data.train_images, data.train_labels
    assert store.shape == (12, 16, 16, 3) and len(labels) == 12
    store.take(np.arange(12))
