"""`data.source='fedfr_split'`: FedFR's pre-split federated data (`data/formats/fedfr_split.py`),
streamed. The clients are the given splits, not a partition drawn here: client k is
`split_train_*/client_XXXX` in number order, so `federated.num_clients` must count them. The public
identities (`data.public_identities`, FedFR's D_g) are those of every `split_pretrain_*/client_XXXX`
folder (the authors' script writes ten), and the clients' held-out images (the personalized
evaluation's probes, and identity leakage's: `identity_probes`) are the verification set's. Pair sets come from `<name>.bin` files in
`verification_dir` (default the root).

Identities are numbered public first (0 .. K_g - 1: pre-training folder i's labels shifted by the
identities of folders 0 .. i - 1), then the clients' (K_g + id_base + the client's own label), so
that the verification set's identity i is K_g + i. The gallery set (`local_gallery_*`) holds the
clients' training images again; when present, its images per identity are checked against the
clients'.

Every set's header and size is checked (`check_files`) by the config check and again first thing
in `load`, before any image record is read; every error names the file or folder and is a usage
error (`recordio.RecordIOError`, `fedfr_split.SplitError`).
"""

from __future__ import annotations

import dataclasses
import os
import weakref

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import federated, partition, stores
from fedjax_face.data.formats import fedfr_split, recordio
from fedjax_face.data.sources import files
from fedjax_face.data.sources.files import (TASK, PAIR_SET_NAMES, describe, pair_set_title,  # pylint: disable=unused-import
                                            pair_sets)
from fedjax_face.data.types import FaceBenchmark

# The directories of the layout: config field -> the pattern found under the root when it is ''.
DIRECTORIES = {'train': 'split_train_*', 'pretrain': 'split_pretrain_*', 'veri': 'local_veri_*',
               'gallery': 'local_gallery_*'}
NONE = 'none'   # a directory field set to this: not used
GIVES_HELD_OUT_IMAGES = True   # the personalized evaluator's probes are the verification set

RESUMABLE_FIELDS = files.RESUMABLE_FIELDS


def config_section():
  return files.file_section(
      train='',      # split_train_* directory under root ('' = the only one there)
      pretrain='',   # split_pretrain_* ('' = the only one, if any; 'none' = no public set)
      veri='',       # local_veri_* ('' = the only one, if any; 'none' = no held-out images)
      gallery='')    # local_gallery_* ('' = the only one, if any; 'none' = not checked)


def directory(config, field: str) -> str | None:
  """The layout's `field` directory ('train', 'pretrain', 'veri', 'gallery'), or None."""
  d = config.data.fedfr_split
  name = d[field]
  if name == NONE:
    if field == 'train':
      raise checks.UsageError("config.data.fedfr_split.train='none'; the clients' split is "
                              'needed.')
    return None
  if name:
    path = os.path.join(d.root, name)
    if not os.path.isdir(path):
      raise fedfr_split.SplitError(f'config.data.fedfr_split.{field}={name!r}: {path} is not a '
                                   'directory')
    return path
  return fedfr_split.find_one(d.root, DIRECTORIES[field], field, required=field == 'train')


def _client_dirs(config) -> list[str]:
  return fedfr_split.client_dirs(directory(config, 'train'))


def _pretrain_dirs(config) -> list[str]:
  pretrain = directory(config, 'pretrain')
  return fedfr_split.client_dirs(pretrain) if pretrain else []


def check_files(config) -> tuple[list[fedfr_split.SetHeader], list[fedfr_split.SetHeader]]:
  """(pre-training folders', clients') headers, after every set's header and file size is checked
  (no image record read): a folder missing from a numbering, a header of the wrong flag, a
  pre-training id_base that is not the folder's shift, clients sharing identities, a truncated
  `.rec`, each named."""
  public = [fedfr_split.check_set(p, 'train') for p in _pretrain_dirs(config)]
  fedfr_split.public_bases(public)
  clients = [fedfr_split.check_set(c, 'train', client=True) for c in _client_dirs(config)]
  spans = sorted((c.id_base, c.id_base + c.num_ids, c.path) for c in clients)
  for (_, end, path), (start, _, other) in zip(spans, spans[1:]):
    if start < end:
      raise fedfr_split.SplitError(f'{other} starts at identity {start}, inside {path}\'s '
                                   'identities; expected disjoint clients')
  for field in ('veri', 'gallery'):
    path = directory(config, field)
    if path:
      fedfr_split.check_set(path, 'test')
  return public, clients


def check_config(config) -> None:
  """The shared file fields, every set's header and size (`check_files`), and the counts the files
  fix: clients, and public identities (the pre-training folders' header records)."""
  files.check_file_section(config)
  d = config.data.fedfr_split
  for name in ('train', 'pretrain', 'veri', 'gallery'):
    if not isinstance(d[name], str):
      raise ValueError(f'config.data.fedfr_split.{name}={d[name]!r}; expected a directory name '
                       f"under root, '' (found) or '{NONE}'.")
  if d.min_images_per_identity != 1 or d.max_identities:
    raise ValueError('config.data.fedfr_split.min_images_per_identity / max_identities select '
                     'identities; the given splits fix them: expected 1 and 0.')
  if not os.path.isdir(d.root):
    raise fedfr_split.SplitError(f'config.data.fedfr_split.root={d.root!r} is not a directory')
  public_sets, clients = check_files(config)
  if config.federated.num_clients != len(clients):
    raise ValueError(f'federated.num_clients={config.federated.num_clients}; the split '
                     f'{directory(config, "train")} holds {len(clients)} clients: expected '
                     f'{len(clients)}.')
  checks.check_choice('federated.partition', config.federated.partition, ('balanced',))
  public = sum(h.num_ids for h in public_sets)
  if config.data.public_identities != public:
    raise ValueError(f'data.public_identities={config.data.public_identities}; the pre-training '
                     f'set {directory(config, "pretrain")} ({len(public_sets)} client folders) '
                     f'holds {public} identities: expected {public}.')
  if config.data.private_test_fraction:
    raise ValueError(f'data.private_test_fraction={config.data.private_test_fraction}; the '
                     "clients' held-out images are the verification set's: expected 0.")


def data_fields(config) -> tuple[str, ...]:
  return files.data_fields(config, ('train', 'pretrain', 'veri'))


class _Records:
  """Every image of several split sets as one indexable list of (file, key); each .rec is opened
  once and shared by the decode threads (RecordFile reads with os.pread)."""

  def __init__(self, sets: list[fedfr_split.SplitSet]):
    self.files = [recordio.RecordFile(s.path) for s in sets]
    self.file_of = np.concatenate([np.full(len(s.keys), j, np.int64) for j, s in enumerate(sets)])
    self.key_of = np.concatenate([s.keys for s in sets])

  def read(self, i: int) -> np.ndarray:
    file = self.files[self.file_of[i]]
    try:
      _, data = recordio.unpack(file.read(int(self.key_of[i])))
      return recordio.decode_image(data)
    except (recordio.RecordIOError, ValueError) as e:
      raise stores.BadRecordError(f'{file.path} record {int(self.key_of[i])}: {e}') from None

  def close(self):
    for file in self.files:
      file.close()


def load(config) -> FaceBenchmark:
  """The pre-training, client and verification images (record headers read, no image decoded)."""
  d = config.data.fedfr_split
  check_files(config)   # every set's header and size before a single image record is read
  public = [fedfr_split.read_set(p, 'train') for p in _pretrain_dirs(config)]
  public_bases = fedfr_split.public_bases(public)
  clients = [fedfr_split.read_set(c, 'train', client=True) for c in _client_dirs(config)]
  num_public = sum(s.num_ids for s in public)
  num_private = max(c.id_base + c.num_ids for c in clients)
  veri_dir = directory(config, 'veri')
  veri = [fedfr_split.read_set(veri_dir, 'test')] if veri_dir else []
  if veri:
    _check_veri(veri[0], os.path.join(veri_dir, 'idx_id_pair.txt'), num_private)
  gallery_dir = directory(config, 'gallery')
  if gallery_dir:
    _check_gallery(fedfr_split.read_set(gallery_dir, 'test'), clients)
  labels = np.concatenate(
      [base + s.labels for s, base in zip(public, public_bases)]
      + [num_public + c.id_base + c.labels for c in clients]
      + [num_public + s.labels for s in veri]).astype(np.int32)
  records = _Records(public + clients + veri)
  store = stores.DecodedImageStore(
      len(labels), (config.data.image_size,) * 2 + (3,),
      lambda i: stores.fit_image(records.read(i), config.data.image_size, d.center_crop),
      description=d.root, skip_bad_records=d.skip_bad_records,
      num_threads=config.data.decode_threads)
  weakref.finalize(store, records.close)
  sizes = np.cumsum([0, sum(len(s.keys) for s in public), sum(len(c.keys) for c in clients),
                     sum(len(s.keys) for s in veri)])
  return FaceBenchmark(
      train_images=store, train_labels=labels, num_identities=num_public + num_private,
      client_identities=[np.arange(num_public + c.id_base, num_public + c.id_base + c.num_ids,
                                   dtype=np.int32) for c in clients],
      eval_sets={'public': np.arange(sizes[0], sizes[1]), 'clients': np.arange(sizes[1], sizes[2]),
                 'held_out': np.arange(sizes[2], sizes[3])})


def _check_veri(veri: fedfr_split.SplitSet, pairs_path: str, num_private: int) -> None:
  if veri.num_ids > num_private:
    raise fedfr_split.SplitError(f'{veri.path}: {veri.num_ids} identities; the clients hold '
                                 f'{num_private}')
  if os.path.isfile(pairs_path):
    pairs = fedfr_split.read_idx_id_pairs(pairs_path)
    for key, label in zip(veri.keys.tolist(), veri.labels.tolist()):
      if pairs.get(key, label) != label:
        raise fedfr_split.SplitError(f'{pairs_path}: record {key} is identity {pairs[key]} '
                                     f'there and {label} in {veri.path}')


def _check_gallery(gallery: fedfr_split.SplitSet, clients: list[fedfr_split.SplitSet]) -> None:
  ours = np.zeros(max(c.id_base + c.num_ids for c in clients), np.int64)
  for c in clients:
    np.add.at(ours, c.id_base + c.labels, 1)
  theirs = np.bincount(gallery.labels, minlength=len(ours))
  differ = np.flatnonzero(theirs != ours)
  if differ.size:
    i = int(differ[0])
    raise fedfr_split.SplitError(f'{gallery.path}: identity {i} has {theirs[i]} images; the '
                                 f'clients\' training sets hold {ours[i]} (the gallery is their '
                                 'training images)')


def identity_probes(config, data, identity_ids, per_identity: int, num_distractors: int):
  """The identity-leakage probes (`files.held_out_probes`): the verification set's held-out images
  of the clients' identities."""
  del config
  return files.held_out_probes(data, data.eval_sets['held_out'], identity_ids, per_identity,
                               num_distractors)


def check_identity_probes(config, needed_by: str) -> None:
  """The probes are the verification set's images: refused without it."""
  if directory(config, 'veri') is None:
    raise ValueError(f"{needed_by} with data.fedfr_split.veri={config.data.fedfr_split.veri!r}: "
                     "the probes are the verification set's held-out images of the clients' "
                     'identities; expected a local_veri_* directory.')


def training_views(config, data, one_client: bool):
  """The given clients over their training images; the public set shared by every client; the
  verification images as the held-out test images. A centralized method trains on the public
  identities (`data.centralized_on='public'`) or on everything but the held-out images."""
  sets = data.eval_sets
  num_public = config.data.public_identities
  train_labels = np.full_like(data.train_labels, -1)
  train_labels[sets['clients']] = data.train_labels[sets['clients']]
  fed_view = federated.build(data.train_images, train_labels, data.client_identities)
  extra = {'test_indices': sets['held_out']}
  if num_public:
    extra.update(public_indices=sets['public'], public_labels=data.train_labels[sets['public']])
  fed_view = dataclasses.replace(fed_view, **extra)
  if not one_client:
    return fed_view, fed_view
  if config.data.centralized_on == 'public':
    keep, num_trained = sets['public'], num_public
  else:
    keep, num_trained = np.concatenate([sets['public'], sets['clients']]), data.num_identities
  central = np.full_like(data.train_labels, -1)
  central[keep] = data.train_labels[keep]
  return fed_view, federated.build(data.train_images, central,
                                   partition.single_client(num_trained))
