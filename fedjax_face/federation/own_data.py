"""A data holder's own data, read by the project's own readers: the very pixels the simulator
decodes from the same files, as a federated view of one client (federation/holder.py places it
in the federation with `roster.placed`).

What the holder's `data-path` holds says how it is read; the config's `data.source` (the one the
simulator reads) names the RecordIO layout, and that source's section gives the reading fields:

| the holder's data-path holds | data.source | reader |
| --- | --- | --- |
| `train.rec`, `train.idx`, `property`: its own insightface set | `insightface` | `data/sources/files.py`'s RecordIO store (`data.insightface`: `center_crop`, `skip_bad_records`, `check_record_labels`) |
| `train.rec`, `train.idx` (header flag 3): its own client folder `client_XXXX` of FedFR's split | `fedfr_split` | `data/formats/fedfr_split.py`, decoded as `data.source='fedfr_split'` decodes (`data.fedfr_split`) |
| an image folder `<identity>/<image>` (what `federation/export.py` writes, for any source) | any recognition source | `data/formats/image_folder.py` (`data.client_folders`) |
| its data center's own root of the lists | `pad_lists` (anti-spoofing) | `data/sources/pad_lists.py`'s per-root reader (`data.pad_lists`) |

A `train.rec` under another source is refused (which RecordIO layout is meant is the source's to
say), and so is a path that is no directory.

Identities are numbered as the simulator's federated view numbers that client's classes: an
insightface set by its labels (its identity records' order), a FedFR client set by its labels
0..num_ids-1 (the header's identities id_base.. in order), an image folder by folder name. The
roster then numbers them client by client (`roster.identity_table`), as
`data.source='client_folders'` does. `fedfr_split` numbers client k's class c as
K_g + id_base_k + c: the same table less K_g when each client's id_base is the classes of the
clients before it (what FedFR's `split_FL.py` writes). The simulator of one shared insightface set
numbers each client's identities by their labels in that set (its partition's draw), a
permutation of the roster's: a method that trains per client's classes (FedPE) is bit for bit
with it, one whose server sums over identities in their order (FedGC's class table) differs by
float32 rounding (tests/federation/test_own_data.py; the bit-for-bit reference there is
`client_folders`' numbering).

A holder's identities are the ones its files hold: the fields that select identities
(`min_images_per_identity`, `max_identities`) are refused unless 1 and 0, as `client_folders`
refuses them. Every bad input (a file missing, another layout, a record whose label is not its
identity's) is one line, `data holder of client k: <the reader's line, naming the file>`, raised
when the holder is made, before it writes a file.
"""

import os
import weakref

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import federated, sources, stores
from fedjax_face.data.formats import fedfr_split, image_folder
from fedjax_face.data.sources import (fedfr_split as fedfr_source, files, pad as pad_source,
                                      pad_lists)


def read_own_data(config, path: str, client: int = 0) -> federated.FederatedData:
  """The holder's own data at `path` as a federated view of one client, in the layout the
  config's `data.source` reads (the module docstring's table).

  Raises:
    checks.UsageError: one line naming the holder and the file or field at fault.
  """
  try:
    if sources.task_of(config) == 'anti_spoofing':
      return read_own_center(config, path, client)
    return recognition_reader(config, path)(config, path)
  except (checks.UsageError, FileNotFoundError, ValueError) as e:
    raise checks.UsageError(f'data holder of client {client}: {e}') from None


def recognition_reader(config, path: str):
  """The reader of a recognition holder's `path`: RecordIO in the layout `data.source` names when
  it holds `train.rec`, else an image folder."""
  if not os.path.isdir(path):
    raise checks.UsageError(
        f'{path} is not a directory; expected its own data: an image folder <identity>/<image>, '
        "or train.rec and train.idx (data.source='insightface' or 'fedfr_split').")
  if not os.path.isfile(os.path.join(path, 'train.rec')):
    return read_own_folder
  if config.data.source not in RECORDIO_READERS:
    raise checks.UsageError(
        f'{os.path.join(path, "train.rec")}: data.source={config.data.source!r} reads no '
        "RecordIO; expected data.source='insightface' (train.rec, train.idx, property) or "
        "'fedfr_split' (a client folder of FedFR's split), or an image folder.")
  return RECORDIO_READERS[config.data.source]


def one_client(store, labels: np.ndarray, num_classes: int) -> federated.FederatedData:
  """`store`'s images, labelled 0..num_classes-1, as a federated view of one client."""
  return federated.build(store, np.asarray(labels, np.int32),
                         [np.arange(num_classes, dtype=np.int32)])


def check_own_identities(config) -> None:
  """The fields that select identities are the files': refused unless 1 and 0."""
  name = config.data.source
  d = config.data[name]
  if d.min_images_per_identity != 1 or d.max_identities:
    raise checks.UsageError(
        f'data.{name}.min_images_per_identity={d.min_images_per_identity}, '
        f'data.{name}.max_identities={d.max_identities}: a data holder trains every identity '
        'its own files hold; expected 1 and 0.')


def read_own_folder(config, folder: str) -> federated.FederatedData:
  """The holder's images (`<folder>/<identity>/<image>`, listed, none decoded), its identities
  numbered 0..C_k-1 in folder-name order, as `data.source='client_folders'` reads one client's
  folder (its section's fields)."""
  d = config.data.client_folders
  paths, labels, _ = image_folder.scan(folder)
  store = image_folder.image_store(folder, paths, image_size=config.data.image_size,
                                   center_crop=d.center_crop, skip_bad_records=d.skip_bad_records,
                                   num_threads=config.data.decode_threads)
  return one_client(store, labels, int(labels.max()) + 1)


def read_own_recordio(config, root: str) -> federated.FederatedData:
  """The holder's own insightface set `<root>/{train.rec, train.idx, property}` (record headers
  read, no image decoded), read as `data.source='insightface'` reads its root: the same store,
  the same label check (`check_record_labels`), the identities kept and renumbered by
  `files.labelled` (an identity left without images drops out, as there)."""
  check_own_identities(config)
  d = config.data.insightface
  store, labels = files.insightface_store(
      root, image_size=config.data.image_size, center_crop=d.center_crop,
      skip_bad_records=d.skip_bad_records, num_threads=config.data.decode_threads,
      check_labels=d.check_record_labels)
  data = files.labelled(store, labels, config)
  return one_client(data.train_images, data.train_labels, data.num_identities)


def read_own_split_client(config, folder: str) -> federated.FederatedData:
  """The holder's own client folder of FedFR's split, `<folder>/{train.rec, train.idx}` (its
  header checked: flag 3, every announced key in the index, the file long enough; every label
  read, no image decoded), decoded record by record as `data.source='fedfr_split'` decodes its
  clients' (`sources/fedfr_split.py`'s records, cropped and resized by `stores.fit_image`)."""
  check_own_identities(config)
  own = fedfr_split.read_set(folder, 'train', client=True)
  return one_client(records_store(config, [own], folder), own.labels, own.num_ids)


def records_store(config, sets: list[fedfr_split.SplitSet], description: str):
  """The images of FedFR split `sets` as a store, decoded record by record as
  `data.source='fedfr_split'` decodes them (the source's records, `stores.fit_image`)."""
  d = config.data.fedfr_split
  records = fedfr_source._Records(sets)   # pylint: disable=protected-access  (the source's own)
  size = config.data.image_size
  store = stores.DecodedImageStore(
      len(records.key_of), (size, size, 3),
      lambda i: stores.fit_image(records.read(i), size, d.center_crop),
      description=description, skip_bad_records=d.skip_bad_records,
      num_threads=config.data.decode_threads)
  weakref.finalize(store, records.close)
  return store


def read_public_set(config) -> tuple[np.ndarray, np.ndarray] | None:
  """FedFR's public set D_g as any party reads it from its own copy (public data: the server
  pre-trained on it, and every client trains with it): (uint8 images `[n_g, S, S, 3]`, int32
  identities 0..K_g-1), the very arrays the simulator's `fed.public_indices` /
  `fed.public_labels` give FedFR's `build`; None without public identities
  (`data.public_identities=0`).

  `data.source='fedfr_split'`: the pre-training folders under `data.fedfr_split.root`
  (`split_pretrain_*`, numbered as the source numbers them), nothing else of the split read. Any
  other source: its federated view's public images, so that party reads the source itself (the
  embedded benchmark renders them from the config's seed).

  Raises:
    checks.UsageError: one line naming the file, the folder or the field (a missing pre-training
      set, a public image that cannot be read).
  """
  if not config.data.public_identities:
    return None
  try:
    if config.data.source == 'fedfr_split':
      folders = fedfr_source._pretrain_dirs(config)   # pylint: disable=protected-access
      if not folders:
        raise checks.UsageError(
            f'data.public_identities={config.data.public_identities} but '
            f'data.fedfr_split.root={config.data.fedfr_split.root!r} has no pre-training set '
            f'(data.fedfr_split.pretrain={config.data.fedfr_split.pretrain!r}); expected its '
            'split_pretrain_* folder, D_g.')
      public = [fedfr_split.read_set(folder, 'train') for folder in folders]
      bases = fedfr_split.public_bases(public)
      labels = np.concatenate([base + s.labels for s, base in zip(public, bases)])
      store = records_store(config, public, os.path.dirname(folders[0]))
      indices = np.arange(len(labels))
    else:
      source = sources.get(config.data.source)
      fed = source.training_views(config, source.load(config), False)[0]
      store, indices, labels = fed.images, fed.public_indices, fed.public_labels
    images, ok = stores.take(store, indices)
  except (checks.UsageError, FileNotFoundError, ValueError) as e:
    raise checks.UsageError(f"FedFR's public set D_g: {e}") from None
  if not ok.all():
    raise checks.UsageError(f"FedFR's public set D_g: {int((~ok).sum())} public image(s) could "
                            'not be read; expected every one (each client trains with all).')
  return images, np.asarray(labels, np.int32)


def read_own_center(config, root: str, client: int) -> federated.FederatedData:
  """Data center `client`'s training frames from its own root, in the layout, depth directory,
  attack list and data set name `config.data.pad_lists` gives it (the reader of
  `data.source='pad_lists'`, `sources/pad_lists.py`), labelled attack 0 / live 1 with their depth
  maps: the simulator's client `client` of the same lists. Its held-out split and the target are
  the evaluation's, which the server does not run yet."""
  if config.data.source != 'pad_lists':
    raise checks.UsageError(f'data.source={config.data.source!r}: a data center reads its own '
                            "lists; expected 'pad_lists' (tools/export_pad.py writes them).")
  # pylint: disable=protected-access  (the source's own per-root reader and its per-center lists)
  p = config.data.pad_lists
  depth_dirs = pad_lists._depth_dirs(p)[client]
  attack, name = pad_lists._attack_lists(p)[client], pad_lists._datasets(p)[client]
  own = pad_lists._read(config, root, p.layouts[client], 'train', depth_dirs, attack, name)
  data = pad_source.benchmark([own], {}, pooled=False)
  return pad_source.training_views(config, data, False)[0]


# data.source -> the reader of a recognition holder's own train.rec.
RECORDIO_READERS = {
    'insightface': read_own_recordio,
    'fedfr_split': read_own_split_client,
}
