"""The one writer of a run's figures and arrays (PNG, .npz), local or gs:// (atomic via .tmp)."""

import io
import os

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
  """Every figure and array of `eval.evaluate`'s outputs into `workdir`; returns the figures'
  file names in order (report.md lists them)."""
  written = []
  for output in outputs.values():
    for name, figure in output.figures.items():
      write_figure(files.join(workdir, name), figure)
      written.append(name)
    for name, arrays in output.arrays.items():
      write_arrays(files.join(workdir, name), arrays)
  return written
