"""The one writer of a run's figures and arrays (PNG, .npz), local or gs:// (atomic via .tmp):
matplotlib figures, named arrays, and grids of face images (a sample of a training set, look-alike
families side by side)."""

import io
import math
import os
from typing import Sequence

import numpy as np

from fedjax_face.io import files


def write_figure(path: str, figure) -> None:
  """A matplotlib Figure to `path` (format from the extension, PNG by default)."""
  buffer = io.BytesIO()
  figure.savefig(buffer, format=os.path.splitext(path)[1][1:] or 'png', dpi=120,
                 bbox_inches='tight')
  files.write_bytes_atomic(path, buffer.getvalue())


def write_arrays(path: str, arrays: dict[str, np.ndarray]) -> None:
  """Named arrays to a compressed .npz at `path`."""
  buffer = io.BytesIO()
  np.savez_compressed(buffer, **arrays)
  files.write_bytes_atomic(path, buffer.getvalue())


def write_eval_outputs(workdir: str, outputs: dict) -> list[str]:
  """Every figure, array and image grid of `eval.evaluate`'s outputs into `workdir`;
  returns the figures' and grids' file names in order (report.md lists them)."""
  written = []
  for output in outputs.values():
    for name, figure in output.figures.items():
      write_figure(files.join(workdir, name), figure)
      written.append(name)
    for name, arrays in output.arrays.items():
      write_arrays(files.join(workdir, name), arrays)
    for name, grid in (getattr(output, 'images', None) or {}).items():
      write_image_grid(files.join(workdir, name), **grid)
      written.append(name)
  return written


def write_image_grid(path: str, images: np.ndarray, *, rows: int = 8, cols: int = 12,
                     labels: Sequence | None = None) -> None:
  """Writes the first rows*cols images as a PNG grid, upscaled (nearest) to >= 96 px per tile.

  Args:
    path: output .png path (local or a URI).
    images: uint8 `[N, H, W, 3]` (N may be smaller than rows*cols; the rest stays blank).
    rows: grid rows.
    cols: grid columns.
    labels: optional per-image labels, drawn in each tile's corner.
  """
  from PIL import Image, ImageDraw  # pylint: disable=g-import-not-at-top

  images = np.asarray(images)
  if images.ndim != 4 or images.shape[-1] != 3:
    raise ValueError(f'images must be [N, H, W, 3], got shape {images.shape}')
  if rows < 1 or cols < 1:
    raise ValueError(f'rows and cols must be >= 1, got {rows}, {cols}')
  if images.dtype != np.uint8:
    images = np.clip(images, 0, 255).astype(np.uint8)
  h, w = images.shape[1:3]
  zoom = max(1, math.ceil(96 / max(h, w)))
  gap = 2
  th, tw = h * zoom, w * zoom
  canvas = np.full((rows * (th + gap) + gap, cols * (tw + gap) + gap, 3), 255, np.uint8)
  count = min(len(images), rows * cols)
  for i in range(count):
    rr, cc = divmod(i, cols)
    tile = images[i].repeat(zoom, axis=0).repeat(zoom, axis=1)
    y0, x0 = gap + rr * (th + gap), gap + cc * (tw + gap)
    canvas[y0:y0 + th, x0:x0 + tw] = tile
  pil = Image.fromarray(canvas)
  if labels is not None:
    draw = ImageDraw.Draw(pil)
    for i in range(min(count, len(labels))):
      rr, cc = divmod(i, cols)
      y0, x0 = gap + rr * (th + gap), gap + cc * (tw + gap)
      text = str(labels[i])
      draw.rectangle([x0, y0, x0 + 7 * len(text) + 3, y0 + 12], fill=(0, 0, 0))
      draw.text((x0 + 2, y0 + 1), text, fill=(255, 255, 0))
  buffer = io.BytesIO()
  pil.save(buffer, format='PNG')
  files.write_bytes_atomic(path, buffer.getvalue())


def write_family_grid(path: str, images: np.ndarray, labels: np.ndarray, families: np.ndarray, *,
                      num_families: int = 8, images_per_identity: int = 3) -> None:
  """A picture of look-alike families: one row per family (the first `num_families`), then
  `images_per_identity` images of each member side by side, each tile labelled with its identity.

  Args:
    path: output .png path (local or a URI).
    images: uint8 `[N, H, W, 3]`, image i of identity `labels[i]`.
    labels: int `[N]`.
    families: int `[num_identities]`, each identity's family.
    num_families: rows.
    images_per_identity: tiles per member.
  """
  images, labels, families = np.asarray(images), np.asarray(labels), np.asarray(families)
  size = int(np.bincount(families).max())
  index, names = [], []
  for f in range(min(num_families, int(families.max()) + 1)):
    members = np.flatnonzero(families == f)
    for m in range(size):   # a smaller last family leaves blank tiles (member -1: no images)
      member = members[m] if m < len(members) else -1
      own = np.flatnonzero(labels == member)[:images_per_identity]
      blank = images_per_identity - len(own)
      index += own.tolist() + [-1] * blank
      names += [str(member)] * len(own) + [''] * blank
  index = np.asarray(index)
  picked = np.where((index >= 0)[:, None, None, None], images[np.maximum(index, 0)],
                    255).astype(np.uint8)
  write_image_grid(path, picked, rows=len(index) // (size * images_per_identity),
                   cols=size * images_per_identity, labels=names)
