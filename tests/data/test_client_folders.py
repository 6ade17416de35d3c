"""One image folder per client (`data.source='client_folders'`), on folders the test writes from
embedded-benchmark faces: the given clients read as written, a run end to end, bad input named."""

import os

import numpy as np
import pytest
from PIL import Image

from fedjax_face import experiment
from fedjax_face.data import sources, stores
from tests import config_files, fedfr_split_files


def _write_folders(root, clients=('alice_lab', 'bob_lab', 'carol_lab'), ids=(2, 3, 2), per=3):
  """client/<identity>/<n>.png; the same identity folder name in two clients on purpose."""
  rng = np.random.default_rng(0)
  images, labels = fedfr_split_files.render(sum(ids), per, 16, rng)
  written, label = [], 0
  for client, n in zip(clients, ids):
    for j in range(n):
      folder = os.path.join(root, client, f'person_{j}')
      os.makedirs(folder)
      for i, image in enumerate(images[labels == label]):
        Image.fromarray(image).save(os.path.join(folder, f'{i}.png'))
        written.append((image, label))
      label += 1
  return written


def _config(root):
  config = config_files.load_config('fedgc')
  config.data.source = 'client_folders'
  config.data.client_folders.root = str(root)
  config.federated.num_clients = 3
  del config.evals.verification, config.evals.identification   # no pair sets in the folders
  return config


def test_the_folders_are_the_clients_and_a_run_trains_on_them(tmp_path):
  written = _write_folders(tmp_path / 'data')
  config = _config(tmp_path / 'data')
  sources.check_config(config)
  data = sources.load(config)
  np.testing.assert_array_equal(data.train_labels, [label for _, label in written])
  images, _ = stores.take(data.train_images, np.arange(len(written)))
  np.testing.assert_array_equal(images, np.stack([image for image, _ in written]))
  assert [ids.tolist() for ids in data.client_identities] == [[0, 1], [2, 3, 4], [5, 6]]
  fed, _ = sources.get('client_folders').training_views(config, data, one_client=False)
  assert [sorted(set(data.train_labels[i].tolist())) for i in fed.client_indices] == [
      [0, 1], [2, 3, 4], [5, 6]]
  results = experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert results['rounds'] == config.num_rounds


def test_bad_folders_are_named(tmp_path):
  _write_folders(tmp_path / 'data')
  config = _config(tmp_path / 'data')
  config.federated.num_clients = 4
  with pytest.raises(ValueError, match=r'federated.num_clients=4; .* holds 3 client folders: '
                                       'expected 3'):
    sources.check_config(config)
  config = _config(tmp_path / 'missing')
  with pytest.raises(FileNotFoundError, match=r"client_folders.root=.*missing' is not a directory"):
    sources.check_config(config)
  config = _config(tmp_path / 'data')
  config.data.private_test_fraction = 0.4
  with pytest.raises(ValueError, match=r'the client folders already place: expected 0 and 0'):
    sources.check_config(config)
