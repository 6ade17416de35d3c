"""FedFR's pre-split RecordIO (`data.source='fedfr_split'`) on a fixture of the tests' own writer
(tests/fedfr_split_files.py): the given clients, the public set and the held-out images read as
written, every pre-training folder read with its labels shifted, and every bad file or folder
named by the config check, before an image record is read. FedFR end to end on the layout, and
equal to the in-memory run: tests/tools/test_export_fedfr_split.py."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.data import sources, stores
from fedjax_face.data.formats import fedfr_split, recordio
from tests import config_files, fedfr_split_files


@pytest.fixture(scope='module')
def written(tmp_path_factory):
  root = tmp_path_factory.mktemp('ms1m_split')
  return root, fedfr_split_files.write_split(root)


def _config(root, name='fedfr/fedfr', public=3):
  config = config_files.load_config(name)
  config.data.source = 'fedfr_split'
  config.data.fedfr_split.root = str(root)
  config.data.public_identities = public
  config.data.private_test_fraction = 0.0
  config.federated.num_clients = 3
  return config


def test_the_given_clients_public_set_and_held_out_images_read_as_written(written):
  root, out = written
  config = _config(root)
  sources.check_config(config)
  data = sources.load(config)
  # Public 0..2, then client k's identities 3 + 2k, 3 + 2k + 1; the held-out images last.
  expected_labels = np.concatenate(
      [out.public_labels] + [3 + 2 * k + out.client_labels[k] for k in range(3)]
      + [3 + out.veri_labels])
  np.testing.assert_array_equal(data.train_labels, expected_labels)
  assert data.num_identities == 9
  assert [ids.tolist() for ids in data.client_identities] == [[3, 4], [5, 6], [7, 8]]
  images, _ = stores.take(data.train_images, np.arange(len(data.train_labels)))
  np.testing.assert_array_equal(images, np.concatenate(
      [out.public_images, *out.client_images, out.veri_images]))   # PNG: lossless
  fed_view, trained = sources.get('fedfr_split').training_views(config, data, one_client=False)
  assert fed_view is trained and fed_view.num_clients == 3
  for k in range(3):
    held = data.train_labels[fed_view.client_indices[k]]
    assert sorted(set(held.tolist())) == [3 + 2 * k, 4 + 2 * k]
    assert len(held) == len(out.client_labels[k])
  np.testing.assert_array_equal(fed_view.public_indices, np.arange(12))
  np.testing.assert_array_equal(data.train_labels[fed_view.test_indices], 3 + out.veri_labels)
  for centralized_on, num_images in (('public', 12), ('all', 12 + 24)):   # never the held-out
    config.data.centralized_on = centralized_on
    _, central = sources.get('fedfr_split').training_views(config, data, one_client=True)
    assert central.num_clients == 1 and len(central.client_indices[0]) == num_images
  experiment.validate(config)   # the personalized evaluator takes the verification set


def _rewrite_header(path_dir: str, prefix: str, header_labels) -> None:
  """The set's record 0 replaced (its payload is written at offset 0, header only)."""
  rec = os.path.join(path_dir, prefix + '.rec')
  with recordio.RecordFile(rec) as f:
    keys = f.keys().tolist()
    payloads = [f.read(k) for k in keys]
  payloads[0] = fedfr_split_files.payload(header_labels, 0.0, 0, b'')
  fedfr_split_files.write_rec(path_dir, prefix, list(zip(keys, payloads)))


def test_bad_splits_are_named(written, tmp_path):
  root, _ = written
  bad = tmp_path / 'bad'
  shutil.copytree(root, bad)
  client = os.path.join(bad, 'split_train_i0006c0003', 'client_0001')
  # A header of neither layout (flag 1).
  _rewrite_header(client, 'train', [9])
  with pytest.raises(recordio.RecordIOError, match=r"client_0001/train.rec.*record 0.*flag 1; "
                     r"expected FedFR's layout"):
    sources.load(_config(bad))
  # A label beyond the identities the header announces.
  _rewrite_header(client, 'train', [9, 1, 2])
  with pytest.raises(recordio.RecordIOError, match=r'client_0001/train.rec.*label 1; the header '
                     r'announces 1 identities'):
    sources.load(_config(bad))
  _rewrite_header(client, 'train', [9, 2, 2])
  sources.load(_config(bad))   # restored
  # Counts the files fix.
  config = _config(bad)
  config.federated.num_clients = 4
  with pytest.raises(ValueError, match=r'federated.num_clients=4; the split .* holds 3 clients: '
                                       'expected 3'):
    sources.check_config(config)
  config = _config(bad)
  config.data.public_identities = 5
  with pytest.raises(ValueError, match=r'data.public_identities=5; the pre-training set .* holds 3 '
                                       'identities: expected 3'):
    sources.check_config(config)
  # A verification list that disagrees with its records.
  pairs = os.path.join(bad, 'local_veri_6', 'idx_id_pair.txt')
  lines = open(pairs).read().splitlines()
  lines[1] = '1 5'
  open(pairs, 'w').write('\n'.join(lines) + '\n')
  with pytest.raises(ValueError, match=r'idx_id_pair.txt: record 1 is identity 5 there and 0 in'):
    sources.load(_config(bad))


def test_a_client_set_without_its_identity_base_is_named(written, tmp_path):
  root, _ = written
  bad = tmp_path / 'bad'
  shutil.copytree(root, bad)
  client = os.path.join(bad, 'split_train_i0006c0003', 'client_0002')
  _rewrite_header(client, 'train', [9, 2])   # a verification set's header
  with pytest.raises(recordio.RecordIOError, match=r"client_0002/train.rec.*a client set's header "
                     r'has flag 2 \(end, num_ids\); expected flag 3'):
    sources.load(_config(bad))


def test_every_pretraining_folder_is_read_with_its_labels_shifted(tmp_path):
  out = fedfr_split_files.write_split(tmp_path, public=7, pretrain_folders=3)
  # split_pretrain.py's split of 7 identities over 3 folders: 3, 2, 2, each labelled from 0.
  assert [labels.tolist() for labels in out.public_folder_labels] == [
      [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2], [0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1]]
  config = _config(tmp_path, public=7)
  sources.check_config(config)
  data = sources.load(config)
  public = data.eval_sets['public']
  # Folder 1 shifted by 3 (folder 0's identities), folder 2 by 3 + 2.
  np.testing.assert_array_equal(data.train_labels[public], [
      0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6])
  np.testing.assert_array_equal(public, np.arange(28))
  assert data.num_identities == 7 + 6
  assert [ids.tolist() for ids in data.client_identities] == [[7, 8], [9, 10], [11, 12]]
  images, _ = stores.take(data.train_images, public)
  np.testing.assert_array_equal(images, out.public_images)
  fed_view, _ = sources.get('fedfr_split').training_views(config, data, one_client=False)
  assert fed_view.num_public == 7
  np.testing.assert_array_equal(fed_view.public_labels, np.repeat(np.arange(7), 4))
  # client_0000 alone holds 3 of the 7.
  config.data.public_identities = 3
  with pytest.raises(ValueError, match=r'data.public_identities=3; the pre-training set \S*'
                     r'split_pretrain_7 \(3 client folders\) holds 7 identities: expected 7'):
    sources.check_config(config)


def test_a_pretraining_header_with_flag_3_must_say_the_folders_shift(tmp_path):
  fedfr_split_files.write_split(tmp_path, public=7, pretrain_folders=3)
  folder = os.path.join(tmp_path, 'split_pretrain_7', 'client_0001')
  _rewrite_header(folder, 'train', [9, 2, 0])
  _assert_named(recordio.RecordIOError, lambda: sources.check_config(_config(tmp_path, public=7)),
                os.path.join(folder, 'train.rec'), r'record 0: header id_base 0; the pre-training '
                r'folders before it hold 3 identities: expected 3')
  _rewrite_header(folder, 'train', [9, 2, 3])
  sources.check_config(_config(tmp_path, public=7))


def _assert_named(error_class, call, path: str, match: str) -> None:
  """`call()` raises exactly `error_class`, its one line naming `path` and then `match`."""
  with pytest.raises(error_class) as raised:
    call()
  assert type(raised.value) is error_class
  message = str(raised.value)
  assert '\n' not in message and message.startswith(path), message
  assert re.search(match, message[len(path):]), message


def test_a_client_header_with_the_wrong_flag_is_named_before_any_record_is_read(written,
                                                                               tmp_path):
  root, _ = written
  bad = tmp_path / 'bad'
  shutil.copytree(root, bad)
  split = os.path.join(bad, 'split_train_i0006c0003')
  _rewrite_header(os.path.join(split, 'client_0002'), 'train', [9, 2])   # a test set's header
  # client_0000's label 1 is out of its range too, but no image record is read before every
  # header has been checked.
  _rewrite_header(os.path.join(split, 'client_0000'), 'train', [9, 1, 0])
  for call in (sources.check_config, sources.load):
    _assert_named(recordio.RecordIOError, lambda: call(_config(bad)),
                  os.path.join(split, 'client_0002', 'train.rec'), r"^: record 0: a client set's "
                  r'header has flag 2 \(end, num_ids\); expected flag 3 \(end, num_ids, id_base\)$')


@pytest.mark.parametrize('folder', ['split_train_i0006c0003/client_0002',
                                    'split_pretrain_7/client_0001'])
def test_a_truncated_rec_is_named_by_the_config_check(tmp_path, folder):
  fedfr_split_files.write_split(tmp_path, public=7, pretrain_folders=3)
  directory = os.path.join(tmp_path, *folder.split('/'))
  rec, idx = os.path.join(directory, 'train.rec'), os.path.join(directory, 'train.idx')
  data = open(rec, 'rb').read()
  # The record that lies last is cut: an image record in a client, record 0 in a pre-training
  # folder (split_pretrain.py writes the header last).
  last = 0 if 'pretrain' in folder else 8
  open(rec, 'wb').write(data[:-5])
  for call in (sources.check_config, sources.load):
    _assert_named(recordio.RecordIOError, lambda: call(_config(tmp_path, public=7)), rec,
                  rf'^: record {last}: \(index offset \d+\) truncated: a part of \d+ bytes at byte '
                  rf'\d+ runs past the end of the file \(byte {len(data) - 5}\)$')
  # Cut before the last records start: the index names them.
  open(rec, 'wb').write(data[:len(data) // 2])
  _assert_named(recordio.RecordIOError, lambda: sources.check_config(_config(tmp_path, public=7)),
                idx, r'^: record \d+: index offset \d+ is past the end of ')


@pytest.mark.parametrize('split', ['split_train_i0006c0003', 'split_pretrain_7'])
def test_a_client_folder_missing_from_the_numbering_is_named(tmp_path, split):
  fedfr_split_files.write_split(tmp_path, public=7, pretrain_folders=3)
  directory = os.path.join(tmp_path, split)
  shutil.rmtree(os.path.join(directory, 'client_0001'))   # client_0000 and client_0002 left
  config = _config(tmp_path, public=7)
  for call in (sources.check_config, sources.load):
    _assert_named(fedfr_split.SplitError, lambda: call(config), directory,
                  r'^ holds 2 client folders up to client_0002 but no client_0001; expected '
                  r'client_0000 .. client_0002 with no gap$')
  os.rename(os.path.join(directory, 'client_0002'), os.path.join(directory, 'client_1'))
  _assert_named(fedfr_split.SplitError, lambda: sources.check_config(config),
                os.path.join(directory, 'client_1'),
                r"^: expected a folder named 'client_%04d' % i")
