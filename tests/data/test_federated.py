"""Partitions and per-round sampling: exact sizes, masks, determinism, clear errors."""

import numpy as np
import pytest

from fedjax_face.data import federated, partition


def test_balanced_partition_sizes_and_exclusivity():
  rng = np.random.default_rng(0)
  clients = partition.identity_exclusive(37, 4, 'balanced', rng)
  assert sorted(len(c) for c in clients) == [9, 9, 9, 10]
  all_ids = np.concatenate(clients)
  assert sorted(all_ids.tolist()) == list(range(37))   # every identity exactly once


def test_lognormal_partition_is_unbalanced_and_complete():
  sizes = partition.client_sizes(1000, 36, 'lognormal', np.random.default_rng(0))
  assert sizes.sum() == 1000 and sizes.min() >= 1
  assert sizes.max() > 3 * np.median(sizes)   # ln X ~ N(0, 1) has a long right tail


def test_more_clients_than_identities_is_refused():
  with pytest.raises(ValueError, match=r'num_clients=10 but there are only 5 training identities'):
    partition.identity_exclusive(5, 10, 'balanced', np.random.default_rng(0))


def test_one_per_client_gives_every_client_exactly_one_identity():
  clients = partition.identity_exclusive(7, 7, 'one_per_client', np.random.default_rng(3))
  assert [len(c) for c in clients] == [1] * 7
  assert sorted(np.concatenate(clients).tolist()) == list(range(7))


def test_one_per_client_needs_as_many_clients_as_identities():
  with pytest.raises(ValueError, match=r"one_per_client' needs one client per training identity: "
                                       r'federated.num_clients=6 but there are 7 identities'):
    partition.identity_exclusive(7, 6, 'one_per_client', np.random.default_rng(0))


def test_unknown_partition_is_refused():
  with pytest.raises(ValueError, match=r"expected one of \('balanced', 'lognormal', 'one_per_client'\)"):
    partition.client_sizes(10, 2, 'dirichlet', np.random.default_rng(0))


def _toy(num_identities=6, per_identity=(3, 5, 2, 4, 6, 1)):
  labels = np.repeat(np.arange(num_identities), per_identity).astype(np.int32)
  images = np.arange(len(labels), dtype=np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)
  return federated.build(images, labels, [np.array([0, 2]), np.array([1, 3, 5]), np.array([4])])


def test_build_tables():
  fed = _toy()
  np.testing.assert_array_equal(fed.identity_table, [[0, 2, -1], [1, 3, 5], [4, -1, -1]])
  np.testing.assert_array_equal(fed.num_examples, [3 + 2, 5 + 4 + 1, 6])
  np.testing.assert_array_equal(fed.client_local_labels[0], [0, 0, 0, 1, 1])
  assert fed.num_identities == 6


def test_sample_round_shapes_labels_and_padding_client():
  fed = _toy()
  cohort = federated.pad_cohort(np.array([0, 2], np.int32), 4, fed.num_clients)
  np.testing.assert_array_equal(cohort, [0, 2, 3, 3])
  data = federated.sample_round(fed, cohort, round_index=0, seed=0, steps=3, batch_size=4)
  assert data['images'].shape == (4, 3, 4, 2, 2, 3) and data['images'].dtype == np.uint8
  assert data['mask'][:2].all() and not data['mask'][2:].any()
  # Pixel value = global image index: its local label must match the client's identity table.
  global_index = data['images'][0, :, :, 0, 0, 0].astype(np.int64)
  labels_global = np.repeat(np.arange(6), (3, 5, 2, 4, 6, 1))[global_index]
  np.testing.assert_array_equal(fed.identity_table[0][data['labels'][0]], labels_global)
  np.testing.assert_array_equal(data['class_mask'][:2], fed.class_mask[[0, 2]])


def test_each_client_sees_all_samples_before_repeating():
  fed = _toy()
  data = federated.sample_round(fed, np.array([0], np.int32), round_index=3, seed=1, steps=2,
                                batch_size=5)
  seen = data['images'][0, :, :, 0, 0, 0].reshape(-1)
  assert sorted(seen[:5].tolist()) == sorted(fed.client_indices[0].tolist())
  assert sorted(seen[5:].tolist()) == sorted(fed.client_indices[0].tolist())


def test_local_epochs_masks_the_unused_steps():
  fed = _toy()
  data = federated.sample_round(fed, np.array([1, 2], np.int32), round_index=0, seed=0, steps=4,
                                batch_size=4, local_epochs=1.0)
  # client 1 has 10 samples: 3 steps (4 + 4 + 2); client 2 has 6: 2 steps (4 + 2).
  assert data['mask'][0].sum() == 10 and data['mask'][1].sum() == 6
  np.testing.assert_array_equal(data['mask'][0].any(-1), [True, True, True, False])
  np.testing.assert_array_equal(data['mask'][1].any(-1), [True, True, False, False])


def test_sampling_is_a_pure_function_of_seed_round_client():
  fed = _toy()
  a = federated.sample_round(fed, np.array([0, 1], np.int32), round_index=5, seed=2, steps=2, batch_size=3)
  b = federated.sample_round(fed, np.array([1], np.int32), round_index=5, seed=2, steps=2, batch_size=3)
  np.testing.assert_array_equal(a['images'][1], b['images'][0])
  c = federated.sample_round(fed, np.array([1], np.int32), round_index=6, seed=2, steps=2, batch_size=3)
  assert not np.array_equal(b['images'], c['images'])


def test_select_clients():
  np.testing.assert_array_equal(federated.select_clients(4, 1.0, 0, 0), [0, 1, 2, 3])
  picked = federated.select_clients(36, 0.25, 7, 0)
  assert len(picked) == 9 and len(set(picked.tolist())) == 9
  np.testing.assert_array_equal(picked, federated.select_clients(36, 0.25, 7, 0))
  with pytest.raises(ValueError, match='participation'):
    federated.select_clients(4, 0.0, 0, 0)


def test_identity_without_images_is_refused():
  labels = np.array([0, 0, 2], np.int32)
  with pytest.raises(ValueError, match=r'identities with no images: \[1\]'):
    federated.build(np.zeros((3, 2, 2, 3), np.uint8), labels, [np.array([0, 1]), np.array([2])])


def test_balanced_batches_hold_each_class_equally_and_targets_follow_the_images():
  labels = np.array([0] * 7 + [1] * 3 + [2] * 5 + [3] * 9, np.int32)   # two clients, two classes
  images = np.arange(len(labels), dtype=np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3),
                                                                               np.uint8)
  depth = np.arange(len(labels), dtype=np.float32)[:, None, None] * np.ones((1, 4, 4), np.float32)
  fed = federated.build(images, labels, [np.array([0, 1]), np.array([2, 3])],
                        targets={'depth': depth})
  data = federated.sample_round(fed, np.array([0, 1]), round_index=3, seed=0, steps=5,
                                batch_size=4, balanced=True)
  assert (data['labels'] == 0).sum(axis=-1).tolist() == [[2] * 5] * 2
  assert (data['labels'] == 1).sum(axis=-1).tolist() == [[2] * 5] * 2
  # The depth map drawn with each image is that image's (both hold the sample index).
  np.testing.assert_array_equal(data['targets']['depth'][..., 0, 0], data['images'][..., 0, 0, 0])
  # Every sample of the rarer class is used before any repeats (3 live frames of client 0).
  live = data['images'][0, ..., 0, 0, 0][data['labels'][0] == 1]   # in drawing order
  assert sorted(live[:3].tolist()) == [7, 8, 9]
  with pytest.raises(ValueError, match=r'batch_size=3 cannot hold as many samples of each of a '
                     r"client's 2 classes; expected a multiple of 2"):
    federated.sample_round(fed, np.array([0]), round_index=0, seed=0, steps=1, batch_size=3,
                           balanced=True)
