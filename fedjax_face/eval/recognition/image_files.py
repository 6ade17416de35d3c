"""Embeddings of image files, for the evaluators that read an external set from its folders (RFW,
TinyFace): the files decoded on host threads a chunk at a time, each fitted to the model's input
size, and embedded as the 1:1 protocol embeds (`verification.compute_embeddings`: with `flip` the
image's and its mirror's embeddings summed, then L2-normalised). Only one chunk of images is held
at a time, so a set of 150,000 faces (TinyFace's distractors) needs no more memory than the
embeddings."""

from __future__ import annotations

import concurrent.futures
import os
from typing import Callable, Sequence

import numpy as np

from fedjax_face.core.policy import usable_cpus
from fedjax_face.data.formats import image_folder
from fedjax_face.eval.recognition import verification

CHUNK_BATCHES = 16   # embedding batches decoded at once


def read_fitted(root: str, paths: Sequence[str], fit: Callable[[np.ndarray], np.ndarray],
                pool: concurrent.futures.Executor) -> np.ndarray:
  """uint8 [n, S, S, 3]: `<root>/<path>` decoded (`image_folder.read_image`, which names a file
  it cannot read) and fitted by `fit`."""
  return np.stack(list(pool.map(lambda p: fit(image_folder.read_image(os.path.join(root, p))),
                                paths)))


def embed_files(embed, root: str, paths: Sequence[str], fit: Callable[[np.ndarray], np.ndarray],
                *, batch_size: int, flip: bool) -> np.ndarray:
  """float32 [N, d] unit embeddings of the files `paths` under `root`, in their order."""
  chunk = CHUNK_BATCHES * batch_size
  with concurrent.futures.ThreadPoolExecutor(usable_cpus()) as pool:
    return np.concatenate([
        verification.compute_embeddings(embed, read_fitted(root, paths[lo:lo + chunk], fit, pool),
                                        batch_size=batch_size, flip=flip)
        for lo in range(0, len(paths), chunk)])
