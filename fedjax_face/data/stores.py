"""Training images behind one interface: held in memory, or decoded on demand.

`federated.sample_round` reads a round's images through `take(store, indices)`. A store is either

* a uint8 numpy array `[N, H, W, 3]`: the synthetic benchmark passes its array itself, so that
  path indexes exactly as before (bit-identical rounds); or
* a `DecodedImageStore`: N images behind a `load(i)` function (a RecordIO record, an image file,
  a TFDS example) decoded only when a round asks for them, on a thread pool (PIL releases the GIL
  while it decodes). Only the index (record keys, file paths) sits in memory: MS1M's 5.8M
  112x112 images would take 218 GB as an array.

Both present `shape`, `dtype`, `len()` and `store[int | slice | int array]`, so code that needs only
the image shape or a few images (model init, the sample grid) does not care which it holds.

A record that cannot be used raises `BadRecordError` naming the file / record and what was
expected. With `skip_bad_records=True` the store returns a zero image for it and `ok=False`
instead; `sample_round` masks that sample out of the loss. A record is bad or good for ever, so
masking keeps a round a pure function of (seed, round, client); every bad record is logged once and
counted (`bad`, `num_masked`), never dropped silently.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Callable

from absl import logging
import numpy as np

from fedjax_face.core import arrays
from fedjax_face.core.policy import usable_cpus  # re-exported: decode pools are sized by it

# Bad records logged one by one; later ones only in the per-call summary line.
_MAX_LOGGED = 10
# Indices per decode task: large enough that the pool's per-task overhead (which holds the GIL)
# stays small next to decoding one 112x112 JPEG, small enough to balance two or more threads.
_MIN_TASK = 16


class BadRecordError(ValueError):
  """One training image that cannot be used; the message names the file / record and why."""


def take(store, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Images `[n, H, W, 3]` at `indices` and bool `[n]` ok (False: a skipped bad record)."""
  if isinstance(store, np.ndarray):
    return store[indices], np.ones(len(indices), bool)
  return store.take(indices)


def fit_image(image: np.ndarray, size: int, center_crop: float = 1.0) -> np.ndarray:
  """The central square (`center_crop` of the shorter side) of an image, resized to size x size.

  Aligned crops (insightface 112x112) pass through untouched when `size` is their size. Resizing
  is PIL bilinear, which low-pass filters when shrinking, so 112 -> 32 does not alias.
  """
  h, w = image.shape[:2]
  side = min(h, w) if center_crop >= 1.0 else max(1, int(round(min(h, w) * center_crop)))
  if (h, w) != (side, side):
    top, left = (h - side) // 2, (w - side) // 2
    image = image[top:top + side, left:left + side]
  if side == size:
    return np.ascontiguousarray(image)
  from PIL import Image  # pylint: disable=g-import-not-at-top
  return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(
      (size, size), Image.Resampling.BILINEAR))


class DecodedImageStore:
  """N images of one shape, each produced by `load(i)` when asked for, on a thread pool.

  Attributes:
    description: what the images are (a path), used in log lines.
    image_shape: (H, W, 3) of every image `load` returns.
    skip_bad_records: return zeros and ok=False for a `BadRecordError` instead of raising.
    num_threads: decode threads.
    bad: index -> reason of every bad record met so far (skip_bad_records only).
    num_masked: samples returned with ok=False so far (a bad record drawn twice counts twice).
  """

  def __init__(self, num_images: int, image_shape: tuple[int, int, int],
               load: Callable[[int], np.ndarray], *, description: str,
               skip_bad_records: bool = False, num_threads: int = 0):
    """A store of `num_images` images, none decoded yet.

    Args:
      num_images: N.
      image_shape: (H, W, 3).
      load: index in [0, N) -> uint8 `image_shape`; raises BadRecordError for a bad record. Called
        from several threads at once.
      description: for log lines.
      skip_bad_records: see the class docstring.
      num_threads: decode threads; 0 = every usable CPU.
    """
    self._n = int(num_images)
    self.image_shape = tuple(int(s) for s in image_shape)
    self._load = load
    self.description = description
    self.skip_bad_records = bool(skip_bad_records)
    self.num_threads = int(num_threads) or usable_cpus()
    self.bad: dict[int, str] = {}
    self.num_masked = 0
    self._lock = threading.Lock()
    self._pool = None

  # -- array-like surface ------------------------------------------------------------------------

  @property
  def shape(self) -> tuple[int, ...]:
    return (self._n,) + self.image_shape

  @property
  def dtype(self) -> np.dtype:
    return np.dtype(np.uint8)

  @property
  def ndim(self) -> int:
    return 4

  def __len__(self) -> int:
    return self._n

  def __getitem__(self, index) -> np.ndarray:
    if isinstance(index, (int, np.integer)):
      return self.take(np.array([index], np.int64))[0][0]
    if isinstance(index, slice):
      index = np.arange(self._n)[index]
    return self.take(np.asarray(index))[0]

  # -- decoding ----------------------------------------------------------------------------------

  def take(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decodes the images at `indices` (each distinct index once).

    Returns:
      uint8 `[n, H, W, 3]` images and bool `[n]` ok; a skipped bad record is zeros with ok=False.

    Raises:
      BadRecordError: a bad record and skip_bad_records is False (the first in index order).
      IndexError: an index outside [0, N).
    """
    indices = np.asarray(indices, np.int64).reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= self._n):
      raise IndexError(f'{self.description}: image index out of range [0, {self._n}): '
                       f'{indices.min()}..{indices.max()}')
    unique, inverse = np.unique(indices, return_inverse=True)
    images = np.zeros((len(unique),) + self.image_shape, np.uint8)
    ok = np.ones(len(unique), bool)
    errors: list[tuple[int, BadRecordError]] = []
    self._run(lambda lo, hi: self._decode_range(unique, lo, hi, images, ok, errors), len(unique))
    if errors:
      errors.sort(key=lambda e: e[0])
      if not self.skip_bad_records:
        raise errors[0][1]
      self._log_bad(errors)
    masked = ~ok[inverse]
    if masked.any():
      with self._lock:
        self.num_masked += int(masked.sum())
    return images[inverse], ok[inverse]

  def _decode_range(self, unique, lo, hi, images, ok, errors) -> None:
    for j in range(lo, hi):
      i = int(unique[j])
      if i in self.bad:  # known bad: no second decode, no second log line
        ok[j] = False
        continue
      try:
        images[j] = self._load(i)
      except BadRecordError as e:
        ok[j] = False
        with self._lock:
          errors.append((i, e))

  def _run(self, work: Callable[[int, int], None], n: int) -> None:
    """Runs `work(lo, hi)` over [0, n) in tasks of at least _MIN_TASK indices."""
    tasks = min(4 * self.num_threads, arrays.ceil_div(n, _MIN_TASK))
    if self.num_threads == 1 or tasks <= 1:
      work(0, n)
      return
    with self._lock:
      if self._pool is None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.num_threads, thread_name_prefix='decode')
    bounds = np.linspace(0, n, tasks + 1).astype(int)
    futures = [self._pool.submit(work, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    concurrent.futures.wait(futures)  # all finish before an unexpected exception propagates
    for f in futures:
      f.result()

  def _log_bad(self, errors: list[tuple[int, BadRecordError]]) -> None:
    with self._lock:
      for i, e in errors:
        if i not in self.bad:
          self.bad[i] = str(e)
          if len(self.bad) <= _MAX_LOGGED:
            logging.warning('data.skip_bad_records: masking out %s', e)
      total = len(self.bad)
    logging.warning('%s: %d bad records masked out of this batch (data.skip_bad_records); %d '
                    'distinct bad records so far', self.description, len(errors), total)

  def subset(self, index: np.ndarray) -> DecodedImageStore:
    """The store of images `index` (int indices into this one), decoded by the same `load`."""
    index = np.asarray(index, np.int64)
    # Through `self`, which keeps this store (and what it owns, e.g. an open file) alive.
    return DecodedImageStore(len(index), self.image_shape, lambda i: self._load(int(index[i])),
                             description=self.description,
                             skip_bad_records=self.skip_bad_records, num_threads=self.num_threads)

  def close(self) -> None:
    pool, self._pool = self._pool, None
    if pool is not None:
      pool.shutdown(wait=False)

  def __del__(self):
    self.close()
