"""TinyFace's identification test set: probes, the gallery of their identities, and distractors.

The layout of TinyFace's `Testing_Set` (https://qmul-tinyface.github.io/; as its public readers use
it: mk-minchul/AdaFace `validation_lq/tinyface_helper.py` (`TinyFaceTest.get_label`, `init_proto`)
and bioidiap/bob.bio.face `bob/bio/face/database/tinyface.py`):

  <root>/Probe/<identity>_<n>.jpg               the low-resolution probe faces
  <root>/Gallery_Match/<identity>_<n>.jpg       gallery faces of the probes' identities
  <root>/Gallery_Distractor/<any name>.jpg      distractors, of no probe's identity
  <root>/gallery_match_img_ID_pairs.mat, probe_img_ID_pairs.mat   (not read: see below)

`<root>` is `Testing_Set`, or an aligned copy holding the same three folders (AdaFace reads
`aligned_pad_0.1_pad_high/<folder>/`). A probe's or gallery image's identity is the integer before
the first '_' of its file name, the label AdaFace's `get_label` reads; the `.mat` files pair the
same names with the same ids (TinyFace's own evaluation script reads them there), so they are not
needed. A distractor's name carries no identity: every distractor is labelled as no probe's,
as TinyFace's script labels them -100.

Checked while read: each folder is there and holds images; a probe or gallery name without an
integer identity, and a probe whose identity no Gallery_Match image has (the protocol is closed
set: every probe is mated), are each a TinyFaceFormatError naming the file.
"""

from __future__ import annotations

import os
from typing import NamedTuple, Sequence

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data.formats import recordio

PROBE, MATCH, DISTRACTOR = 'Probe', 'Gallery_Match', 'Gallery_Distractor'
FOLDERS = (PROBE, MATCH, DISTRACTOR)
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')   # the ones AdaFace's get_all_files lists


class TinyFaceFormatError(checks.UsageError):
  """A missing or empty TinyFace folder, a file name without an identity, an unmated probe."""


class TestingSet(NamedTuple):
  """The files of a TinyFace Testing_Set, sorted by name within each folder."""
  root: str
  probes: list[str]            # paths relative to root: Probe/<name>
  probe_ids: np.ndarray        # int64 [P]
  matches: list[str]           # Gallery_Match/<name>
  match_ids: np.ndarray        # int64 [M]
  distractors: list[str]       # Gallery_Distractor/<name>


def _images(root: str, folder: str) -> list[str]:
  path = os.path.join(root, folder)
  if not os.path.isdir(path):
    raise TinyFaceFormatError(f'{path}: no such folder; expected TinyFace\'s Testing_Set (or an '
                              f'aligned copy) holding {", ".join(FOLDERS)}')
  names = sorted(e.name for e in os.scandir(path)
                 if e.is_file() and e.name.lower().endswith(IMAGE_EXTENSIONS))
  if not names:
    raise TinyFaceFormatError(f'{path}: no images; expected files ending {IMAGE_EXTENSIONS}')
  return [f'{folder}/{name}' for name in names]


def identity_of(path: str) -> int:
  """The identity of `<folder>/<identity>_<n>.<ext>`, or TinyFaceFormatError naming the file."""
  head = os.path.basename(path).split('_')[0]
  if '_' not in os.path.basename(path) or not head.isdigit():
    raise TinyFaceFormatError(f'{path}: the name does not start with an identity; expected '
                              '<identity>_<n>.jpg, identity an integer')
  return int(head)


def read_testing_set(root: str) -> TestingSet:
  """Lists and labels a Testing_Set (module docstring).

  Raises:
    TinyFaceFormatError: a missing or empty folder, a probe or gallery name without an identity,
      a probe whose identity no Gallery_Match image has.
  """
  root = os.fspath(root)
  probes, matches, distractors = (_images(root, folder) for folder in FOLDERS)
  probe_ids = np.array([identity_of(os.path.join(root, p)) for p in probes], np.int64)
  match_ids = np.array([identity_of(os.path.join(root, p)) for p in matches], np.int64)
  unmated = ~np.isin(probe_ids, match_ids)
  if unmated.any():
    first = int(np.argmax(unmated))
    raise TinyFaceFormatError(
        f'{os.path.join(root, probes[first])}: identity {probe_ids[first]}, which no '
        f'{MATCH} image has ({int(unmated.sum())} such probes); expected every probe\'s identity '
        f'in {MATCH} (the protocol is closed set)')
  return TestingSet(root=root, probes=probes, probe_ids=probe_ids, matches=matches,
                    match_ids=match_ids, distractors=distractors)


def write_testing_set(root: str, probes: Sequence[tuple[int, np.ndarray]],
                      matches: Sequence[tuple[int, np.ndarray]],
                      distractors: Sequence[np.ndarray], image_format: str = 'jpeg') -> None:
  """Writes a Testing_Set in TinyFace's layout (the tests' fixtures).

  Probe and gallery images are `(identity, uint8 [H, W, 3])`, written as `<identity>_<n>.jpg`
  with n counting that identity's images in the folder from 1; distractors as `<k>.jpg`, k from 1.
  `image_format`: the bytes in the .jpg files, 'jpeg' as released or 'png' (lossless).
  """
  def write(folder: str, name: str, image: np.ndarray) -> None:
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    with open(os.path.join(root, folder, name), 'wb') as f:
      f.write(recordio.encode_image(np.asarray(image, np.uint8), image_format))

  for folder, labelled in ((PROBE, probes), (MATCH, matches)):
    counts: dict[int, int] = {}
    for identity, image in labelled:
      counts[identity] = counts.get(identity, 0) + 1
      write(folder, f'{identity}_{counts[identity]}.jpg', image)
  for k, image in enumerate(distractors, start=1):
    write(DISTRACTOR, f'{k}.jpg', image)
  os.makedirs(os.path.join(root, DISTRACTOR), exist_ok=True)
