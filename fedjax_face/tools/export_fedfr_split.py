r"""Writes a face-recognition config's federated data in FedFR's pre-split layout
(`data/formats/fedfr_split.py`), so the authors' code can run on the same identities.

    python -m fedjax_face.tools.export_fedfr_split --config=configs/fedfr/fedfr.py:runlocal \
        --out=/tmp/fedfr_split

What is written is the config's own partition (`data.source`'s training views): the public
identities as `split_pretrain_<K_g>/client_0000` .. (`--pretrain_folders`, default 1; FedFR's
`split_pretrain.py` writes 10: consecutive groups of identities, the first K_g % n one larger,
each relabelled from 0 under a flag-2 header (end, num_ids), as that script writes them), client
k's training images as `split_train_i<N>c<K>/client_<k>` (its identities in their order,
renumbered 0.. inside the client, id_base the identities of the clients before it), the held-out
images as `local_veri_<N>` (with `idx_id_pair.txt`), the training images again as
`local_gallery_<N>`, and the verification pair sets of `evals.verification` as `<name>.bin`.
Images are PNG (lossless), each identity's images in the data's order. It prints the flags that
read the files back; a run with them equals the in-memory run bit for bit
(tests/tools/test_export_fedfr_split.py): nothing a method computes depends on how the private identities are numbered, only on each
client's identities in order and their images in order, which the layout keeps. The public images
are read back folder after folder, so with several folders this holds when the public images come
in identity order, as every source here numbers them.
"""

import os

from absl import app, flags
from ml_collections import config_flags
import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import sources, stores
from fedjax_face.data.formats import recordio, verification_bin


def _write_set(directory: str, prefix: str, images: np.ndarray, labels: np.ndarray,
               header: list[int]) -> None:
  os.makedirs(directory, exist_ok=True)
  with recordio.RecordWriter(os.path.join(directory, prefix + '.rec')) as writer:
    writer.write(0, recordio.pack(recordio.IRHeader(len(header), header, 0, 0)))
    for key, (image, label) in enumerate(zip(images, labels), start=1):
      writer.write(key, recordio.pack(recordio.IRHeader(0, float(label), key, 0),
                                      recordio.encode_image(image, 'png')))


def export(config, out: str, pretrain_folders: int = 1) -> dict:
  """Writes the config's clients, public set (in `pretrain_folders` client folders) and held-out
  images under `out`; returns the `config.data.fedfr_split` fields and the counts that read them
  back."""
  source = sources.get(config.data.source)
  data = source.load(config)
  fed, _ = source.training_views(config, data, one_client=False)
  labels = np.asarray(data.train_labels)
  take = lambda indices: stores.take(data.train_images, np.asarray(indices))[0]
  num_public = fed.num_public
  if num_public and not 1 <= pretrain_folders <= num_public:
    raise checks.UsageError(f'--pretrain_folders={pretrain_folders}; expected 1 .. {num_public} '
                            '(the public identities, at least one per folder)')
  public_indices, public_labels = (np.asarray(fed.public_indices), np.asarray(fed.public_labels)
                                   ) if num_public else (None, None)
  start = 0
  for i in range(pretrain_folders if num_public else 0):
    num_ids = num_public // pretrain_folders + int(num_public % pretrain_folders > i)
    mine = (start <= public_labels) & (public_labels < start + num_ids)
    _write_set(os.path.join(out, f'split_pretrain_{num_public}', f'client_{i:04d}'), 'train',
               take(public_indices[mine]), public_labels[mine] - start,
               [int(mine.sum()) + 1, num_ids])
    start += num_ids
  # Private identity (global label) -> its number in the layout: client-major, in table order.
  new_id, id_base = {}, []
  for k in range(fed.num_clients):
    id_base.append(len(new_id))
    for identity in fed.identity_table[k][fed.identity_table[k] >= 0].tolist():
      if identity in new_id:
        raise ValueError(f'identity {identity} is held by several clients; FedFR\'s layout '
                         'holds identity-exclusive clients only (federated.shared_fraction=0)')
      new_id[identity] = len(new_id)
  num_private = len(new_id)
  split = os.path.join(out, f'split_train_i{num_private:04d}c{fed.num_clients:04d}')
  for k in range(fed.num_clients):
    indices = np.asarray(fed.client_indices[k])
    local = np.asarray(fed.client_local_labels[k])
    _write_set(os.path.join(split, f'client_{k:04d}'), 'train', take(indices), local,
               [len(indices) + 1, int((fed.identity_table[k] >= 0).sum()), id_base[k]])
  held_out = np.asarray(fed.test_indices if fed.test_indices is not None else [], np.int64)
  veri_ids = np.array([new_id[int(i)] for i in labels[held_out]], np.int64)
  order = np.argsort(veri_ids, kind='stable')
  veri = os.path.join(out, f'local_veri_{num_private}')
  _write_set(veri, 'test', take(held_out[order]), veri_ids[order],
             [len(held_out) + 1, num_private])
  with open(os.path.join(veri, 'idx_id_pair.txt'), 'w', encoding='ascii') as f:
    f.write('idx id\n')
    for key, identity in enumerate(veri_ids[order].tolist(), start=1):
      f.write(f'{key} {identity}\n')
  gallery = np.concatenate([np.asarray(fed.client_indices[k]) for k in range(fed.num_clients)])
  _write_set(os.path.join(out, f'local_gallery_{num_private}'), 'test', take(gallery),
             np.array([new_id[int(i)] for i in labels[gallery]]), [len(gallery) + 1, num_private])
  if 'verification' in config.evals:
    names = tuple(config.evals.verification.pair_sets)
    for name, pairs in source.pair_sets(config, data, names).items():
      verification_bin.write_bin(os.path.join(out, f'{name}.bin'), pairs.images, pairs.issame)
  return {'data.fedfr_split.root': out, 'federated.num_clients': fed.num_clients,
          'data.public_identities': num_public, 'data.private_test_fraction': 0.0}


def define_flags():
  """The command's flags, defined only when run as a program (absl refuses a flag defined twice
  in one process, and other tools define `config` too)."""
  config_flags.DEFINE_config_file('config', None, 'A face-recognition config (configs/*/*.py).')
  flags.DEFINE_string('out', None, 'The directory to write.')
  flags.DEFINE_integer('pretrain_folders', 1, 'Client folders of the public set (FedFR\'s '
                       'split_pretrain.py writes 10).')


def main(argv):
  del argv
  fields = export(flags.FLAGS.config, flags.FLAGS.out, flags.FLAGS.pretrain_folders)
  print(' \\\n  '.join(['--config.data.source=fedfr_split']
                       + [f'--config.{k}={v}' for k, v in fields.items()]))


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['config', 'out'])
  app.run(main)
