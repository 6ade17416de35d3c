r"""A config's clients written out as one folder per data holder, to federate them for real.

    python -m fedjax_face.federation.export --config=configs/fedgc/fedpe.py:runlocal \
        --out=/tmp/holders

writes `<out>/client_<k>/id_<c>/<i>.png` for every client k of the config's federated view (the
embedded benchmark, or any recognition source): its classes in its local order, its images in its
order, as lossless PNGs, so the decoded pixels are the source's. Each folder is one holder's data
(federation/holder.py reads it); the whole of `<out>` is `data.source='client_folders'`'s layout,
the simulator of the same clients, which a federation is checked against.
"""

import os
import sys

import numpy as np
from absl import app, flags
from ml_collections import config_flags
from PIL import Image

from fedjax_face import algorithms
from fedjax_face.core import checks
from fedjax_face.data import sources, stores


def holder_folder(root: str, k: int) -> str:
  """Client k's folder under `root` (zero-padded, so name order is client order)."""
  return os.path.join(root, f'client_{k:03d}')


def export(config, out: str) -> list[str]:
  """Writes every client of `config`'s training view under `out`; returns the holders' folders.

  Raises:
    checks.UsageError: `out` already holds files (nothing is overwritten), or the method trains one
      client holding every identity.
  """
  if os.path.isdir(out) and os.listdir(out):
    raise checks.UsageError(f'--out={out} is not empty; expected a new folder for the holders.')
  method = algorithms.get(config.algorithm)
  if method.ONE_CLIENT:
    raise checks.UsageError(f'algorithm={config.algorithm!r} trains one client; expected a '
                            'federated method, whose clients become the holders.')
  source = sources.get(config.data.source)
  _, fed = source.training_views(config, source.load(config), method.ONE_CLIENT)
  folders = []
  for k in range(fed.num_clients):
    folder = holder_folder(out, k)
    images, ok = stores.take(fed.images, fed.client_indices[k])
    counts = np.zeros(fed.max_classes, np.int64)
    for image, label, good in zip(images, fed.client_local_labels[k], ok):
      if not good:
        continue
      identity = os.path.join(folder, f'id_{label:05d}')
      os.makedirs(identity, exist_ok=True)
      Image.fromarray(image).save(os.path.join(identity, f'{counts[label]:05d}.png'))
      counts[label] += 1
    folders.append(folder)
  return folders


def main(argv):
  del argv
  try:
    folders = export(flags.FLAGS.config, flags.FLAGS.out)
  except checks.UsageError as error:   # one line and status 2, as the other commands
    print(error, file=sys.stderr)
    sys.exit(2)
  print(f'{len(folders)} holders written under {flags.FLAGS.out}')


if __name__ == '__main__':
  config_flags.DEFINE_config_file('config', None, 'A face-recognition config (configs/*/*.py).')
  flags.DEFINE_string('out', None, 'The new folder to write the holders into.')
  flags.mark_flags_as_required(['config', 'out'])
  app.run(main)
