"""The tests' own writer of FedFR's pre-split layout (docs/references.md, fedfr-split-layout):
RecordIO framed here byte by byte (magic, length word, 'IfQQ' header, float32 labels, image,
4-byte padding; the .idx as `key<TAB>offset` lines), from embedded-benchmark faces.

`write_split(root, ...)`: a pre-training set of `public` identities in `pretrain_folders` client
folders (split as FedFR's `split_pretrain.py` splits them: consecutive groups, the first
`public % pretrain_folders` one identity larger, each labelled from 0 under a flag-2 header
(end, num_ids) written last; one folder keeps the flag-3 header (end, num_ids, 0) written first),
`clients` client sets of `ids_per_client` identities (client k: identities k * ids_per_client ..),
`train` training and `held_out` verification images per private identity, and the gallery of the
training images.
"""

import os
import struct

import numpy as np

from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import identities, nuisance, render as render_lib

MAGIC = 0xCED7230A


def payload(flag_labels, label: float, key: int, image: bytes) -> bytes:
  if flag_labels is None:
    return struct.pack('<IfQQ', 0, float(label), key, 0) + image
  labels = np.asarray(flag_labels, '<f4')
  return struct.pack('<IfQQ', labels.size, 0.0, key, 0) + labels.tobytes() + image


def write_rec(directory: str, prefix: str, records: list[tuple[int, bytes]]) -> None:
  """`<directory>/<prefix>.rec` and `.idx` of (key, payload) records, in order."""
  os.makedirs(directory, exist_ok=True)
  offsets = []
  with open(os.path.join(directory, prefix + '.rec'), 'wb') as f:
    for key, payload in records:
      offsets.append((key, f.tell()))
      f.write(struct.pack('<II', MAGIC, len(payload)))   # cflag 0: the whole record
      f.write(payload + b'\0' * (-len(payload) % 4))
  with open(os.path.join(directory, prefix + '.idx'), 'w') as f:
    for key, offset in offsets:
      f.write(f'{key}\t{offset}\n')


def write_set(directory: str, prefix: str, images, labels, header_labels,
              header_last: bool = False) -> None:
  """Record 0 the header (`header_labels`), records 1.. the images with their labels. With
  `header_last`, record 0 comes last in the file and carries the last image after its labels, as
  `split_pretrain.py` writes it."""
  records = []
  for key, (image, label) in enumerate(zip(images, labels), start=1):
    records.append((key, payload(None, label, key, recordio.encode_image(image, 'png'))))
  if header_last:
    records.append((0, payload(header_labels, 0.0, 0, records[-1][1][24:])))
  else:
    records.insert(0, (0, payload(header_labels, 0.0, 0, b'')))
  write_rec(directory, prefix, records)


class Written:
  def __init__(self):
    self.public_images = self.public_labels = None   # all folders, labels 0 .. public - 1
    self.public_folder_labels = []                    # each pre-training folder's own labels
    self.client_images, self.client_labels = [], []   # client-local labels
    self.veri_images = self.veri_labels = None


def render(num_identities: int, per_identity: int, size: int, rng) -> tuple[np.ndarray, np.ndarray]:
  people = identities.sample_identities(rng, num_identities)
  labels = np.repeat(np.arange(num_identities), per_identity)
  nz = nuisance.sample_nuisance(rng, len(labels), 'train', 1.0)
  return render_lib.render_faces(identities.take(people, labels), nz, size), labels


def write_split(root, *, public: int = 3, pretrain_folders: int = 1, clients: int = 3,
                ids_per_client: int = 2, train: int = 4, held_out: int = 2, size: int = 16,
                seed: int = 0) -> Written:
  root, rng, out = os.fspath(root), np.random.default_rng(seed), Written()
  num_private = clients * ids_per_client
  out.public_images, out.public_labels = render(public, train, size, rng)
  start = 0
  for i in range(pretrain_folders):
    num_ids = public // pretrain_folders + int(public % pretrain_folders > i)
    mine = (start <= out.public_labels) & (out.public_labels < start + num_ids)
    local = out.public_labels[mine] - start
    out.public_folder_labels.append(local)
    header = [int(mine.sum()) + 1, num_ids] + ([0] if pretrain_folders == 1 else [])
    write_set(os.path.join(root, f'split_pretrain_{public}', f'client_{i:04d}'), 'train',
              out.public_images[mine], local, header, header_last=pretrain_folders > 1)
    start += num_ids
  images, labels = render(num_private, train + held_out, size, rng)
  is_held_out = np.tile(np.arange(train + held_out) < held_out, num_private)
  out.veri_images, out.veri_labels = images[is_held_out], labels[is_held_out]
  train_images, train_labels = images[~is_held_out], labels[~is_held_out]
  split = os.path.join(root, f'split_train_i{num_private:04d}c{clients:04d}')
  for k in range(clients):
    mine = train_labels // ids_per_client == k
    local = train_labels[mine] - k * ids_per_client
    out.client_images.append(train_images[mine])
    out.client_labels.append(local)
    write_set(os.path.join(split, f'client_{k:04d}'), 'train', train_images[mine], local,
              [int(mine.sum()) + 1, ids_per_client, k * ids_per_client])
  veri = os.path.join(root, f'local_veri_{num_private}')
  write_set(veri, 'test', out.veri_images, out.veri_labels,
            [len(out.veri_labels) + 1, num_private])
  with open(os.path.join(veri, 'idx_id_pair.txt'), 'w') as f:
    f.write('idx id\n')
    for key, label in enumerate(out.veri_labels, start=1):
      f.write(f'{key} {label}\n')
  write_set(os.path.join(root, f'local_gallery_{num_private}'), 'test', train_images,
            train_labels, [len(train_labels) + 1, num_private])
  return out
