"""`data.source='client_folders'`: one image folder per client, `<root>/<client>/<identity>/*.jpg`
(`data/formats/image_folder.py` in each client's folder), streamed. The clients are the given
folders, in name order, so `federated.num_clients` must count them; each client's identities are
its own (the same folder name in two clients is two identities), numbered client by client.
Pair sets from `<name>.bin` or `<name>.txt` in `verification_dir` (default the root).
"""

import os

import numpy as np

from fedjax_face.data import views
from fedjax_face.data.formats import image_folder
from fedjax_face.data.sources import files
from fedjax_face.data.sources.files import (TASK, PAIR_SET_NAMES, describe, pair_set_title,  # pylint: disable=unused-import
                                            pair_sets)
from fedjax_face.data.types import FaceBenchmark

RESUMABLE_FIELDS = files.RESUMABLE_FIELDS


def config_section():
  return files.file_section()


def client_names(root: str) -> list[str]:
  """The client folders of `root`, in name order."""
  if not os.path.isdir(root):
    raise FileNotFoundError(f'config.data.client_folders.root={root!r} is not a directory; '
                            'expected <root>/<client>/<identity>/<image>')
  names = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith('.'))
  if not names:
    raise ValueError(f'{root} holds no client folder; expected <root>/<client>/<identity>/<image>')
  return names


def check_config(config) -> None:
  """The shared file fields, and the client count the folders fix; no public set or held-out
  images (the folders hold training images only)."""
  files.check_file_section(config)
  d = config.data.client_folders
  if d.min_images_per_identity != 1 or d.max_identities:
    raise ValueError('config.data.client_folders.min_images_per_identity / max_identities select '
                     'identities; the client folders fix them: expected 1 and 0.')
  clients = client_names(d.root)
  if config.federated.num_clients != len(clients):
    raise ValueError(f'federated.num_clients={config.federated.num_clients}; {d.root} holds '
                     f'{len(clients)} client folders: expected {len(clients)}.')
  if config.data.public_identities or config.data.private_test_fraction:
    raise ValueError('data.public_identities and data.private_test_fraction split identities '
                     'and images the client folders already place: expected 0 and 0.')


def data_fields(config) -> tuple[str, ...]:
  return files.data_fields(config)


def load(config) -> FaceBenchmark:
  """Every client's images (file names listed, none decoded)."""
  d = config.data.client_folders
  paths, labels, client_identities = [], [], []
  for name in client_names(d.root):
    own_paths, own_labels, _ = image_folder.scan(os.path.join(d.root, name))
    first = sum(len(ids) for ids in client_identities)   # identities numbered client by client
    paths += [os.path.join(name, p) for p in own_paths]
    labels.append(first + own_labels)
    client_identities.append(np.arange(first, first + int(own_labels.max()) + 1, dtype=np.int32))
  store = image_folder.image_store(d.root, paths, image_size=config.data.image_size,
                                   center_crop=d.center_crop, skip_bad_records=d.skip_bad_records,
                                   num_threads=config.data.decode_threads)
  labels = np.concatenate(labels).astype(np.int32)
  return FaceBenchmark(train_images=store, train_labels=labels,
                       num_identities=sum(len(ids) for ids in client_identities),
                       client_identities=client_identities)


def training_views(config, data, one_client: bool):
  del config
  return views.own_client_views(data, one_client)
