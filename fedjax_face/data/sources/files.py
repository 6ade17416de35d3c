"""What the file sources (`insightface`, `image_folder`, `tfds`) share: their common fields, the
identity selection, the verification pair sets from `<name>.bin` / `<name>.txt` files, the
insightface RecordIO store, and the identity-leakage probes from held-out images
(`identity_probes`, with `data.private_test_fraction`; `fedfr_split` uses its verification set).

For these sources `FaceBenchmark.train_images` is a `stores.DecodedImageStore`: only record keys /
file paths and labels are in memory, and the identity -> client partition works from the labels
(for RecordIO, from the identity records' key ranges, without reading an image). Images are
cropped to the central square (`center_crop`) and resized to `data.image_size` when they have
another size; the insightface 112x112 crops at `image_size=112` are used as stored. Pair-set files
are looked up in the section's `verification_dir` (default its `root`).
"""

from __future__ import annotations

import concurrent.futures
import os
import weakref
from typing import Sequence

from absl import logging
import numpy as np

import ml_collections

from fedjax_face.core import checks
from fedjax_face.data import splits, stores, views
from fedjax_face.data.formats import image_folder, recordio, verification_bin
from fedjax_face.data.types import FaceBenchmark, PairSet

TASK = 'recognition'

# Fields that change how records are read, not which (run/resume.py: a resume may change them).
RESUMABLE_FIELDS = ('skip_bad_records',)


def file_section(**own) -> ml_collections.ConfigDict:
  """The fields every file source has, then its `own` (name -> default)."""
  c = ml_collections.ConfigDict()
  c.root = ''                      # the data directory (its layout: the source's docstring)
  c.verification_dir = ''          # <name>.bin / .txt of evals.verification.pair_sets; '' = root
  c.center_crop = 1.0              # central square kept (share of the shorter side), then
                                   # resized to data.image_size when the size differs
  c.min_images_per_identity = 1    # identities with fewer images are dropped
  c.max_identities = 0             # keep the first N identities (0 = all); quick runs
  c.skip_bad_records = False       # True: mask out undecodable records, logged and counted
  for name, value in own.items():
    c[name] = value
  return c


def check_file_section(config, *, needs_root: bool = True) -> None:
  """The fields of `file_section` in `config.data.<source>`."""
  name = config.data.source
  d = config.data[name]
  if needs_root and (not isinstance(d.root, str) or not d.root):
    raise ValueError(f'config.data.{name}.root is empty; data.source={name!r} needs the data '
                     'directory.')
  if not isinstance(d.center_crop, (int, float)) or not 0.0 < d.center_crop <= 1.0:
    raise ValueError(f'config.data.{name}.center_crop={d.center_crop!r}; expected a fraction in '
                     '(0, 1].')
  checks.check_int(f'data.{name}.min_images_per_identity', d.min_images_per_identity)
  checks.check_int(f'data.{name}.max_identities', d.max_identities, allow_zero=True)
  checks.check_bool(f'data.{name}.skip_bad_records', d.skip_bad_records)


FILE_DATA_FIELDS = ('root', 'center_crop', 'min_images_per_identity', 'max_identities')


def data_fields(config, own: tuple[str, ...] = ()) -> tuple[str, ...]:
  """The fields that decide a file source's identities (the shared ones, then the source's `own`):
  `init_from` runs must agree on them."""
  name = config.data.source
  return ('data.public_identities',) + tuple(f'data.{name}.{f}' for f in FILE_DATA_FIELDS + own)


def labelled(store: stores.DecodedImageStore, labels: np.ndarray, config) -> FaceBenchmark:
  """The training data of a file source: the identities its section keeps, renumbered 0..M-1."""
  name = config.data.source
  d = config.data[name]
  index, labels, num_identities = select_identities(
      labels, d.min_images_per_identity, d.max_identities,
      field=f'data.{name}.min_images_per_identity')
  if len(index) != len(store):
    store = store.subset(index)
  return FaceBenchmark(train_images=store, train_labels=labels.astype(np.int32),
                       num_identities=num_identities)


def training_views(config, data, one_client: bool):
  return views.identity_views(config, data, one_client)


def describe(data) -> str:
  return (f'{len(data.train_images)} training images of {data.num_identities} identities '
          f'({data.train_images.description})')


def held_out_probes(data, held_out, identity_ids, per_identity: int,
                    num_distractors: int) -> tuple[np.ndarray, np.ndarray]:
  """`identity_probes` from held-out images (indices `held_out` into `data.train_images`, images
  no client trains on): the first `per_identity` held-out images of each identity of
  `identity_ids` (an identity with none gives none), then those of the `num_distractors`
  lowest other identities that have held-out images (fewer when fewer have), labelled
  `data.num_identities + j`. A distractor here is a client's identity no template names, not a
  stranger: the real splits hold out images of the clients' identities only. Records the store
  skips as bad are left out."""
  held_out = np.asarray(held_out, np.int64)
  labels = np.asarray(data.train_labels)[held_out]
  order = np.argsort(labels, kind='stable')   # each identity's images in index order
  names, starts = np.unique(labels[order], return_index=True)
  groups = dict(zip(names.tolist(), np.split(held_out[order], starts[1:])))
  ids = np.asarray(identity_ids, np.int64).tolist()
  attacked = set(ids)
  others = [i for i in groups if i not in attacked][:num_distractors]
  wanted = [(i, i) for i in ids] + [(data.num_identities + j, i) for j, i in enumerate(others)]
  index, out = [], []
  for label, identity in wanted:   # (the probe's label, whose images)
    rows = groups.get(identity, held_out[:0])[:per_identity]
    index.append(rows)
    out.append(np.full(len(rows), label, np.int64))
  index, out = np.concatenate(index + [held_out[:0]]), np.concatenate(out + [held_out[:0]])
  images, ok = stores.take(data.train_images, index)
  return images[ok], out[ok]


def identity_probes(config, data, identity_ids, per_identity: int, num_distractors: int):
  """The identity-leakage probes of a file source (`held_out_probes`): the private identities'
  held-out images of `data.private_test_fraction`, the same split the personalized evaluation
  and `views.identity_views` make."""
  split = splits.split_identities(np.asarray(data.train_labels), config.data.public_identities,
                                  config.data.private_test_fraction, config.seed)
  return held_out_probes(data, split.private_test, identity_ids, per_identity, num_distractors)


def check_identity_probes(config, needed_by: str) -> None:
  """A file source has probes only when images of the clients' identities are held out."""
  if not config.data.private_test_fraction:
    raise ValueError(f'{needed_by} with data.source={config.data.source!r} and '
                     'data.private_test_fraction=0.0: the probes are held-out images of the '
                     "clients' identities; expected a fraction > 0 (FedFR: 0.4).")


PAIR_SET_NAMES = None   # any <name>.bin / <name>.txt stem


def pair_set_title(name: str) -> str:
  """Real pair sets keep their own name ('lfw')."""
  return name


def pair_sets(config, data, names: Sequence[str]) -> dict[str, PairSet]:
  """`<verification_dir or root>/<name>.bin` or `.txt` for each name (see load_pair_set)."""
  del data
  d = config.data[config.data.source]
  return load_pair_sets(tuple(names), d.verification_dir or d.root,
                        image_size=config.data.image_size, center_crop=d.center_crop,
                        num_threads=config.data.decode_threads)



def select_identities(labels: np.ndarray, min_images: int = 1, max_identities: int = 0, *,
                      field: str = 'min_images_per_identity'
                      ) -> tuple[np.ndarray, np.ndarray, int]:
  """Keeps the identities with >= min_images images, the first max_identities of them (0 = all);
  `field` names `min_images` in the error when none is left.

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
    raise ValueError(f'no identity has {field}={min_images} images '
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
        f'(pair-set files in {directory}: {present or "none"}); set data.<source>.verification_dir '
        'or evals.verification.pair_sets')
  return _fit_pairs(pairs, image_size, center_crop)


def load_pair_sets(names: Sequence[str], directory: str, *, image_size: int,
                   center_crop: float = 1.0, num_threads: int = 0) -> dict[str, PairSet]:
  """Every named pair set (see load_pair_set), the sets decoded in parallel."""
  workers = max(1, min(len(names), num_threads or stores.usable_cpus()))
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    loaded = pool.map(lambda n: load_pair_set(n, directory, image_size=image_size,
                                              center_crop=center_crop, num_threads=1), names)
    return dict(zip(names, loaded))
