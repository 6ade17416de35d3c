"""The host input pipeline: image stores, the round prefetcher, the host-side transform."""

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.data import federated, pipeline, preprocess, stores


def _images(n=40, size=6, seed=0):
  return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _store(images, *, bad=(), skip=False, threads=2, calls=None):
  """A DecodedImageStore over an array; indices in `bad` raise BadRecordError."""
  lock = threading.Lock()

  def load(i):
    if calls is not None:
      with lock:
        calls.append(i)
    if i in bad:
      raise stores.BadRecordError(f'fake.rec: record {i + 1}: cannot decode image')
    return images[i]

  return stores.DecodedImageStore(len(images), images.shape[1:], load, description='fake.rec',
                                  skip_bad_records=skip, num_threads=threads)


# ------------------------------------------------------------------------------------------------
# Stores.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('threads', [1, 2, 3])
def test_decoded_store_equals_the_array_and_decodes_each_index_once(threads):
  images = _images()
  calls = []
  store = _store(images, threads=threads, calls=calls)
  idx = np.array([5, 3, 5, 39, 0, 3, 3] + list(range(10, 30)))
  got, ok = stores.take(store, idx)
  np.testing.assert_array_equal(got, images[idx])
  assert ok.all() and ok.shape == idx.shape
  assert sorted(calls) == sorted(set(idx.tolist()))  # duplicates decoded once
  assert store.shape == images.shape and store.dtype == np.uint8 and len(store) == 40
  np.testing.assert_array_equal(store[::7], images[::7])
  np.testing.assert_array_equal(store[4], images[4])
  np.testing.assert_array_equal(store[np.array([2, 1])], images[[2, 1]])
  with pytest.raises(IndexError, match=r'fake.rec: image index out of range \[0, 40\)'):
    store.take(np.array([40]))
  store.close()


def test_array_store_is_plain_indexing():
  images = _images()
  got, ok = stores.take(images, np.array([3, 3, 1]))
  np.testing.assert_array_equal(got, images[[3, 3, 1]])
  assert ok.all()


def test_bad_record_raises_with_its_name_unless_skipped(caplog):
  images = _images()
  with pytest.raises(stores.BadRecordError, match=r'fake.rec: record 8: cannot decode'):
    _store(images, bad={7, 20}).take(np.arange(30))
  store = _store(images, bad={7, 20}, skip=True)
  with caplog.at_level('WARNING'):
    got, ok = store.take(np.array([7, 1, 7, 20]))
  np.testing.assert_array_equal(ok, [False, True, False, False])
  assert not got[[0, 2, 3]].any()  # zeros for the bad ones
  np.testing.assert_array_equal(got[1], images[1])
  assert sorted(store.bad) == [7, 20] and store.num_masked == 3
  assert 'record 8' in caplog.text and '2 bad records masked' in caplog.text
  store.take(np.array([7]))  # known bad: counted, not decoded again
  assert store.num_masked == 4


def test_sample_round_masks_skipped_records_and_stays_deterministic():
  images = _images(24)
  labels = np.repeat(np.arange(6), 4)
  clients = [np.array([0, 1, 2]), np.array([3, 4, 5])]
  fed_mem = federated.build(images, labels, clients)
  fed = federated.build(_store(images, bad={2}, skip=True), labels, clients)
  ids = np.array([0, 1], np.int32)
  a = federated.sample_round(fed, ids, round_index=1, seed=3, steps=3, batch_size=4)
  b = federated.sample_round(fed, ids, round_index=1, seed=3, steps=3, batch_size=4)
  ref = federated.sample_round(fed_mem, ids, round_index=1, seed=3, steps=3, batch_size=4)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k])
  # The draw is the in-memory one; image 2's samples are masked out (client 0 holds it).
  drew_2 = (ref['images'] == images[2]).all(axis=(-3, -2, -1))
  assert drew_2.any()
  np.testing.assert_array_equal(a['mask'], ref['mask'] & ~drew_2)
  np.testing.assert_array_equal(a['images'][~drew_2], ref['images'][~drew_2])
  np.testing.assert_array_equal(a['labels'], ref['labels'])


def test_fit_image_crops_the_centre_and_resizes():
  image = np.zeros((218, 178, 3), np.uint8)
  image[20:198] = 255  # the central 178x178 square is white, the bands above / below black
  out = stores.fit_image(image, 32)
  assert out.shape == (32, 32, 3) and out.dtype == np.uint8 and (out == 255).all()
  same = _images(1, 16)[0]
  np.testing.assert_array_equal(stores.fit_image(same, 16), same)
  half = stores.fit_image(np.pad(same, ((8, 8), (8, 8), (0, 0))), 16, center_crop=0.5)
  np.testing.assert_array_equal(half, same)


# ------------------------------------------------------------------------------------------------
# Prefetcher.
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize('depth', [0, 1, 3])
def test_prefetcher_serves_make_r_in_order(depth):
  made = []
  rounds = pipeline.Prefetcher(lambda r: made.append(r) or r * r, range(2, 9), depth=depth)
  assert [rounds.get(r) for r in range(2, 9)] == [r * r for r in range(2, 9)]
  assert made == list(range(2, 9))
  rounds.close()
  with pytest.raises(ValueError, match=r'rounds are served in order; expected none'):
    rounds.get(9)


def test_prefetcher_reraises_in_the_round_that_failed():
  def make(r):
    if r == 3:
      raise FileNotFoundError('train.rec: gone')
    return r

  rounds = pipeline.Prefetcher(make, range(6), depth=2)
  assert [rounds.get(r) for r in range(3)] == [0, 1, 2]
  with pytest.raises(FileNotFoundError, match='train.rec: gone'):
    rounds.get(3)
  with pytest.raises(ValueError, match='expected 0'):
    pipeline.Prefetcher(make, range(6), depth=0).get(1)


def test_prefetcher_close_stops_a_blocked_producer():
  rounds = pipeline.Prefetcher(lambda r: r, range(1000), depth=1)
  assert rounds.get(0) == 0
  thread = rounds._thread  # pylint: disable=protected-access
  rounds.close()
  assert not thread.is_alive()


def test_rounds_are_identical_with_prefetch_on_and_off():
  images = _images(60)
  labels = np.repeat(np.arange(12), 5)
  clients = [np.arange(k, 12, 3) for k in range(3)]
  fed = federated.build(_store(images), labels, clients)
  cohort = federated.pad_cohort(np.array([0, 2], np.int32), 4, fed.num_clients)

  def make(r):
    return federated.sample_round(fed, cohort, round_index=r, seed=7, steps=2, batch_size=6,
                                  local_epochs=0.5)

  on = pipeline.Prefetcher(make, range(5), depth=2)
  off = pipeline.Prefetcher(make, range(5), depth=0)
  for r in range(5):
    a, b = on.get(r), off.get(r)
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  on.close()


# ------------------------------------------------------------------------------------------------
# The host-side transform.
# ------------------------------------------------------------------------------------------------


def test_augment_is_the_training_transform():
  images = _images(16, 8)
  rng = np.random.default_rng(5)
  flips = np.random.default_rng(5).random(16) < 0.5
  out = pipeline.augment(images, rng)
  expected = np.asarray(preprocess.normalize(jnp.asarray(images)))
  expected = np.where(flips[:, None, None, None],
                      np.asarray(preprocess.horizontal_flip(jnp.asarray(expected))), expected)
  assert out.dtype == np.float32 and 0 < flips.sum() < 16
  np.testing.assert_allclose(out, expected, atol=1e-6)
  assert out.min() >= -1.0 and out.max() <= 1.0
