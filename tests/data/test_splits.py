"""Public / private identities and the private identities' held-out images (data/splits.py), and
the views a run trains on (sources.training_views: views.identity_views)."""

import numpy as np
import pytest

from fedjax_face.data import sources, splits
from tests.config_files import load_config


def test_split_by_role():
  labels = np.repeat(np.arange(5), [4, 3, 5, 5, 2])   # identities 0, 1 public
  got = splits.split_identities(labels, num_public=2, test_fraction=0.4, seed=0)
  np.testing.assert_array_equal(got.public, np.arange(7))
  # floor(0.4 n) held out of identities 2, 3, 4 (5, 5, 2 images): 2, 2, 0.
  assert np.bincount(labels[got.private_test], minlength=5).tolist() == [0, 0, 2, 2, 0]
  assert np.bincount(labels[got.private_train], minlength=5).tolist() == [0, 0, 3, 3, 2]
  every = np.sort(np.concatenate([got.public, got.private_train, got.private_test]))
  np.testing.assert_array_equal(every, np.arange(len(labels)))   # each image exactly once
  again = splits.split_identities(labels, num_public=2, test_fraction=0.4, seed=0)
  np.testing.assert_array_equal(again.private_test, got.private_test)   # seeded


@pytest.mark.parametrize('num_public,fraction,match', [
    (5, 0.0, r'public_identities=5 of 5 training identities'),
    (0, 1.0, r'private_test_fraction=1.0; expected a fraction in \[0, 1\)'),
])
def test_split_errors(num_public, fraction, match):
  with pytest.raises(ValueError, match=match):
    splits.split_identities(np.repeat(np.arange(5), 3), num_public, fraction, seed=0)


class _Benchmark:
  def __init__(self, labels):
    self.train_labels = labels
    self.train_images = np.zeros((len(labels), 2, 2, 3), np.uint8)
    self.num_identities = int(labels.max()) + 1
    self.train_families = None   # every identity its own family


def test_training_views_deal_private_training_images_and_share_public_ones():
  config = load_config('fedfr')   # runlocal: 8 public of 16 identities, 4 clients, 0.4 held out
  labels = np.repeat(np.arange(16), 5)
  fed_view, fed = sources.training_views(config, _Benchmark(labels), one_client=False)
  assert fed is fed_view and fed.num_clients == 4 and fed.num_public == 8
  np.testing.assert_array_equal(fed.public_indices, np.arange(40))
  held = sorted(int(i) for ids in fed.client_indices for i in ids)
  assert all(labels[i] >= 8 for i in held) and len(held) == 8 * 3   # 3 of 5 images trained on
  assert sorted(fed.identity_table.reshape(-1).tolist()) == list(range(8, 16))
  pretrain = load_config('pretrain')
  _, public_only = sources.training_views(pretrain, _Benchmark(labels), one_client=True)
  assert public_only.num_clients == 1 and public_only.num_identities == 8
  np.testing.assert_array_equal(np.sort(public_only.client_indices[0]), np.arange(40))
  pretrain.data.centralized_on = 'all'
  _, upper = sources.training_views(pretrain, _Benchmark(labels), one_client=True)
  assert upper.num_identities == 16 and len(upper.client_indices[0]) == 40 + 8 * 3
