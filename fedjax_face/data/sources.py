"""`config.data.source` -> a `FaceBenchmark`: the training images, their identities, the pair sets.

| source | training set | pair sets (`config.evals.verification.pair_sets` names) |
| --- | --- | --- |
| `synthetic` | rendered from the seed, in memory | rendered: `lfw`, `cfp_fp`, `agedb_30`, `sllfw`, `cplfw`, `calfw` |
| `insightface` | `<root>/{train.rec, train.idx, property}`, streamed | `<name>.bin` |
| `image_folder` | `<root>/<identity>/*.jpg`, streamed | `<name>.bin` or a `<name>.txt` list |
| `tfds` | TFDS `data.tfds_name` in data_dir `<root>`, streamed | `<name>.bin` or `<name>.txt` |

Pair-set files are looked up in `data.verification_dir` (default `data.root`). For the real
sources `FaceBenchmark.train_images` is a `stores.DecodedImageStore`: only record keys / file
paths and labels are in memory, and the identity -> client partition works from the labels
(for RecordIO, from the identity records' key ranges, without reading an image). Images are
cropped to the central square (`data.center_crop`) and resized to `data.image_size` when they
have another size; the insightface 112x112 crops at `image_size=112` are used as stored.
"""

from __future__ import annotations

import concurrent.futures
import os
import weakref
from typing import Sequence

from absl import logging
import numpy as np

from fedjax_face.data import stores
from fedjax_face.data.formats import image_folder
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import faces
from fedjax_face.data.formats import tfds_source
from fedjax_face.data.formats import verification_bin
from fedjax_face.data.types import FaceBenchmark, PairSet

SOURCES = ('synthetic', 'insightface', 'image_folder', 'tfds', 'pad')


def load(config, pair_sets: tuple[str, ...] = ()) -> FaceBenchmark:
  """The benchmark named by `config.data.source` (see the module docstring).

  `pair_sets`: the pair sets to render (synthetic; its three by default) or to read from
  `<name>.bin` / `<name>.txt` (real data).
  """
  d = config.data
  if d.source == 'synthetic':
    return faces.make_benchmark(
        seed=config.seed, num_identities=d.num_identities,
        images_per_identity=d.images_per_identity, image_size=d.image_size,
        num_test_identities=d.num_test_identities, num_pairs=d.num_pairs,
        difficulty=d.difficulty, images_per_identity_sigma=d.images_per_identity_sigma,
        pair_sets=tuple(pair_sets) or faces.PAIR_SET_NAMES,
        lookalike_family_size=d.lookalike_family_size, lookalike_spread=d.lookalike_spread)
  if d.source == 'pad':
    return pad_benchmark.load(config)
  if d.source not in SOURCES:
    raise ValueError(f'config.data.source={d.source!r}; expected one of {SOURCES}.')
  store, labels = _TRAINING[d.source](d)
  index, labels, num_identities = select_identities(labels, d.min_images_per_identity,
                                                    d.max_identities)
  if len(index) != len(store):
    store = store.subset(index)
  pair_sets = load_pair_sets(tuple(pair_sets), d.verification_dir or d.root,
                             image_size=d.image_size, center_crop=d.center_crop,
                             num_threads=d.decode_threads)
  return FaceBenchmark(train_images=store, train_labels=labels.astype(np.int32),
                       num_identities=num_identities, pair_sets=pair_sets)


def select_identities(labels: np.ndarray, min_images: int = 1, max_identities: int = 0
                      ) -> tuple[np.ndarray, np.ndarray, int]:
  """Keeps the identities with >= min_images images, the first max_identities of them (0 = all).

  Returns:
    (int64 indices of the kept samples in their original order, their labels renumbered
    0..M-1 in the original identity order, M).
  """
  labels = np.asarray(labels, np.int64)
  counts = np.bincount(labels) if len(labels) else np.zeros(0, np.int64)
  kept = np.flatnonzero(counts >= max(1, min_images))
  if max_identities:
    kept = kept[:max_identities]
  if not len(kept):
    raise ValueError(f'no identity has data.min_images_per_identity={min_images} images '
                     f'(the largest has {counts.max() if len(counts) else 0})')
  new_id = np.full(len(counts), -1, np.int64)
  new_id[kept] = np.arange(len(kept))
  index = np.flatnonzero(new_id[labels] >= 0)
  return index, new_id[labels[index]], len(kept)


# ------------------------------------------------------------------------------------------------
# Training sets.
# ------------------------------------------------------------------------------------------------


def insightface_labels(ds: recordio.InsightfaceDataset) -> tuple[np.ndarray, np.ndarray]:
  """(image keys, labels) of an insightface set, from the identity key ranges when it has them.

  With the meta record no image record is read: identity j's images are its key range. Image keys
  outside every range (none in insightface's own files) and files without a meta record fall
  back to reading record headers (never the images).
  """
  if ds.identity_ranges is None:
    return ds.labels()
  starts, ends = ds.identity_ranges[:, 0], ds.identity_ranges[:, 1]
  lengths = ends - starts
  offsets = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
  keys = np.arange(int(lengths.sum()), dtype=np.int64) + offsets
  labels = np.repeat(np.arange(len(starts), dtype=np.int64), lengths)
  outside = np.setdiff1d(ds.image_keys, keys)
  if len(outside):
    logging.warning('%s: %d image records lie outside every identity range; reading their '
                    'labels from the record headers', ds.path, len(outside))
    more_keys, more_labels = ds.labels(outside)
    keys, labels = np.concatenate([keys, more_keys]), np.concatenate([labels, more_labels])
    order = np.argsort(keys, kind='stable')
    keys, labels = keys[order], labels[order]
  return keys, labels


def insightface_store(root: str, *, image_size: int, center_crop: float = 1.0,
                      skip_bad_records: bool = False, num_threads: int = 0,
                      check_labels: bool = True
                      ) -> tuple[stores.DecodedImageStore, np.ndarray]:
  """(store of the images, int64 labels) of `<root>/{train.rec, train.idx, property}`.

  Opening reads the index, the identity records and, with `check_labels`, every image record's
  header (a few dozen bytes each, never the image): a label that differs from its identity's key
  range (an index whose offsets point at other records) raises RecordIOError naming the record
  at load, or, with `skip_bad_records`, drops it there, logged. Without `check_labels` the labels
  come from the identity ranges alone and such a record is found when a round first decodes it.
  Image i is record `keys[i]` (in key order), read and decoded when asked for; a header or image
  that does not match what the property file and the identity ranges promise raises
  BadRecordError naming the record.
  """
  ds = recordio.InsightfaceDataset(root, skip_bad_records=skip_bad_records)
  keys, labels = ds.labels() if check_labels else insightface_labels(ds)

  def load(i: int) -> np.ndarray:
    try:
      _, image = ds.read_example(int(keys[i]))  # checks the label against the identity range
    except recordio.RecordIOError as e:
      raise stores.BadRecordError(str(e)) from None
    return stores.fit_image(image, image_size, center_crop)

  store = stores.DecodedImageStore(len(keys), (image_size, image_size, 3), load,
                                   description=ds.path, skip_bad_records=skip_bad_records,
                                   num_threads=num_threads)
  # Closes the file with the store, or at exit while `os` still exists (RecordFile.__del__ may
  # run during interpreter teardown otherwise).
  weakref.finalize(store, ds.close)
  return store, labels


def _insightface(d) -> tuple[stores.DecodedImageStore, np.ndarray]:
  return insightface_store(d.root, image_size=d.image_size, center_crop=d.center_crop,
                           skip_bad_records=d.skip_bad_records, num_threads=d.decode_threads,
                           check_labels=d.check_record_labels)


def _image_folder(d) -> tuple[stores.DecodedImageStore, np.ndarray]:
  paths, labels, _ = image_folder.scan(d.root)
  return image_folder.image_store(d.root, paths, image_size=d.image_size,
                                  center_crop=d.center_crop,
                                  skip_bad_records=d.skip_bad_records,
                                  num_threads=d.decode_threads), labels


def _tfds(d) -> tuple[stores.DecodedImageStore, np.ndarray]:
  image_key, label_key = tfds_source.feature_keys(d.tfds_name, d.tfds_label_key)
  source = tfds_source.open_split(d.tfds_name, split=d.tfds_split, data_dir=d.root,
                                  manual_dir=d.tfds_manual_dir, image_key=image_key)
  where = f'tfds {d.tfds_name} {d.tfds_split}'
  labels, _ = tfds_source.read_labels(source, label_key, where=where)
  return tfds_source.image_store(source, image_key=image_key, where=where,
                                 image_size=d.image_size, center_crop=d.center_crop,
                                 skip_bad_records=d.skip_bad_records,
                                 num_threads=d.decode_threads), labels


_TRAINING = {'insightface': _insightface, 'image_folder': _image_folder, 'tfds': _tfds}


# ------------------------------------------------------------------------------------------------
# Verification pair sets.
# ------------------------------------------------------------------------------------------------


def _fit_pairs(pairs: PairSet, image_size: int, center_crop: float) -> PairSet:
  h, w = pairs.images.shape[1:3]
  if (h, w) == (image_size, image_size) and center_crop >= 1.0:
    return pairs
  images = np.stack([stores.fit_image(im, image_size, center_crop) for im in pairs.images])
  return PairSet(name=pairs.name, images=images, issame=pairs.issame)


def load_pair_set(name: str, directory: str, *, image_size: int, center_crop: float = 1.0,
                  num_threads: int = 0) -> PairSet:
  """`<directory>/<name>.bin` (insightface) or else `<directory>/<name>.txt` (a pair list).

  Raises:
    FileNotFoundError: neither file exists (the message lists the pair-set files present).
    verification_bin.BinFormatError, ValueError, stores.BadRecordError: a malformed file,
      named.
  """
  path_bin = os.path.join(directory, name + '.bin')
  path_txt = os.path.join(directory, name + '.txt')
  if os.path.exists(path_bin):
    pairs = verification_bin.read_bin(path_bin, name=name)
  elif os.path.exists(path_txt):
    return image_folder.read_pair_list(path_txt, image_size=image_size, center_crop=center_crop,
                                       name=name, num_threads=num_threads)
  else:
    present = sorted(f for f in os.listdir(directory) if f.endswith(('.bin', '.txt'))
                     ) if os.path.isdir(directory) else []
    raise FileNotFoundError(
        f'config.evals.verification.pair_sets names {name!r} but neither {path_bin} nor {path_txt} exists '
        f'(pair-set files in {directory}: {present or "none"}); set data.verification_dir or '
        'evals.verification.pair_sets')
  return _fit_pairs(pairs, image_size, center_crop)


def load_pair_sets(names: Sequence[str], directory: str, *, image_size: int,
                   center_crop: float = 1.0, num_threads: int = 0) -> dict[str, PairSet]:
  """Every named pair set (see load_pair_set), the sets decoded in parallel."""
  workers = max(1, min(len(names), num_threads or stores.usable_cpus()))
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    loaded = pool.map(lambda n: load_pair_set(n, directory, image_size=image_size,
                                              center_crop=center_crop, num_threads=1), names)
    return dict(zip(names, loaded))
