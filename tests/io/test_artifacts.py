"""Tests for fedjax_face.io.artifacts: the picture grids of face images."""

import numpy as np
from PIL import Image

from fedjax_face.io import artifacts

TILE, GAP = 96, 2   # 16-pixel images are upscaled 6x; tiles sit 2 pixels apart


def _grey_images(values) -> np.ndarray:
  """One flat 16x16 image per value."""
  return np.broadcast_to(np.asarray(values, np.uint8)[:, None, None, None],
                         (len(values), 16, 16, 3)).copy()


def _tile_centres(path, rows: int, cols: int) -> np.ndarray:
  """The red channel at the centre of every tile (below the corner label), `[rows, cols]`."""
  with Image.open(path) as picture:
    assert picture.format == 'PNG'
    assert picture.size == (cols * (TILE + GAP) + GAP, rows * (TILE + GAP) + GAP)
    pixels = np.asarray(picture)
  centre = GAP + np.arange(max(rows, cols)) * (TILE + GAP) + TILE // 2
  return pixels[centre[:rows, None], centre[None, :cols], 0]


def test_image_grid_upscales_and_leaves_the_rest_blank(tmp_path):
  path = tmp_path / 'grid.png'
  artifacts.write_image_grid(str(path), _grey_images([0, 40, 80]), rows=2, cols=2,
                             labels=['a', 'b', 'c'])
  np.testing.assert_array_equal(_tile_centres(path, 2, 2), [[0, 40], [80, 255]])


def test_family_grid_puts_a_family_on_a_row(tmp_path):
  path = tmp_path / 'families.png'
  labels = np.repeat(np.arange(5), 2)              # 5 identities, 2 images each
  families = np.array([0, 0, 1, 1, 2])             # the last family has one member
  artifacts.write_family_grid(str(path), _grey_images(20 * np.arange(10)), labels, families,
                              images_per_identity=2)
  np.testing.assert_array_equal(_tile_centres(path, 3, 4), [[0, 20, 40, 60],
                                                            [80, 100, 120, 140],
                                                            [160, 180, 255, 255]])


def test_an_evaluators_image_grids_are_written_and_listed(tmp_path):
  from fedjax_face.eval import EvalOutput   # pylint: disable=g-import-not-at-top
  grid = {'images': _grey_images([10, 20, 30, 40]), 'rows': 2, 'cols': 2}
  outputs = {'inversion': EvalOutput(results={}, scalars={}, figures={}, arrays={},
                                     images={'inversion.png': grid}),
             'verification': EvalOutput(results={}, scalars={}, figures={}, arrays={})}
  assert artifacts.write_eval_outputs(str(tmp_path), outputs) == ['inversion.png']
  np.testing.assert_array_equal(_tile_centres(tmp_path / 'inversion.png', 2, 2),
                                [[10, 20], [30, 40]])
