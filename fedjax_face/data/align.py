"""Face alignment by five landmarks, as insightface aligns IJB's loose crops (NumPy, on the host).

The similarity transform (rotation, uniform scale, translation; no reflection) that maps the five
detected points (left eye, right eye, nose tip, left and right mouth corner) onto ArcFace's
112 x 112 template in the least-squares sense (Umeyama's closed form, as skimage's
`SimilarityTransform.estimate`), then the image warped by it with bilinear interpolation and
black (0) outside the source, as `cv2.warpAffine(image, M, (112, 112), borderValue=0)` does.
Pixel coordinates are cv2's: (x, y) = (column, row) of a pixel centre, the landmarks' convention.
Another output size scales the template with it.
"""

import functools

import numpy as np

# ArcFace's five points in a 112 x 112 crop (x, y).
ARCFACE_TEMPLATE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366],
                             [41.5493, 92.3655], [70.7299, 92.2041]], np.float64)
ARCFACE_SIZE = 112


def similarity_transform(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
  """The 2 x 3 matrix of the least-squares similarity taking points `src` [K, 2] onto `dst`."""
  src, dst = np.asarray(src, np.float64), np.asarray(dst, np.float64)
  src_mean, dst_mean = src.mean(0), dst.mean(0)
  src_c, dst_c = src - src_mean, dst - dst_mean
  covariance = dst_c.T @ src_c / len(src)
  u, s, vt = np.linalg.svd(covariance)
  d = np.ones(2)
  if np.linalg.det(u) * np.linalg.det(vt) < 0:   # the best orthogonal map would reflect
    d[-1] = -1.0
  rotation = u @ np.diag(d) @ vt
  variance = src_c.var(0).sum()
  scale = (s @ d) / variance if variance > 0 else 0.0
  matrix = np.zeros((2, 3))
  matrix[:, :2] = scale * rotation
  matrix[:, 2] = dst_mean - scale * rotation @ src_mean
  return matrix


@functools.lru_cache(maxsize=8)
def _output_pixels(size: int) -> np.ndarray:
  """float64 [3, size * size]: every output pixel's homogeneous (x, y, 1), row-major."""
  ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
  pixels = np.stack([xs.ravel(), ys.ravel(), np.ones(size * size)])
  pixels.flags.writeable = False   # shared by every call
  return pixels


def warp_affine(image: np.ndarray, matrix: np.ndarray, size: int) -> np.ndarray:
  """`image` uint8 [H, W, C] warped by the 2 x 3 `matrix` (source -> output pixel coordinates)
  into a uint8 [size, size, C] image, bilinear, 0 outside the source."""
  inverse = np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))[:2]
  sx, sy = inverse @ _output_pixels(size)
  x0, y0 = np.floor(sx), np.floor(sy)
  fx, fy = (sx - x0)[:, None], (sy - y0)[:, None]
  h, w, c = image.shape
  # A border of one black pixel, and every source pixel beyond it clipped onto the border: so
  # the four neighbours of any point are rows of the flattened padded image, 0 outside.
  padded = np.pad(image, ((1, 1), (1, 1), (0, 0))).reshape(-1, c)
  x0, y0 = x0.astype(np.int64) + 1, y0.astype(np.int64) + 1
  left, right = np.clip(x0, 0, w + 1), np.clip(x0 + 1, 0, w + 1)
  top, bottom = np.clip(y0, 0, h + 1) * (w + 2), np.clip(y0 + 1, 0, h + 1) * (w + 2)
  at = lambda index: padded[index].astype(np.float64)
  out = ((1 - fy) * ((1 - fx) * at(top + left) + fx * at(top + right))
         + fy * ((1 - fx) * at(bottom + left) + fx * at(bottom + right)))
  return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(size, size, c)


def align_face(image: np.ndarray, landmarks: np.ndarray, size: int = ARCFACE_SIZE) -> np.ndarray:
  """The uint8 [size, size, C] crop of `image` aligned by its five `landmarks` [5, 2] (x, y)."""
  template = ARCFACE_TEMPLATE * (size / ARCFACE_SIZE)
  return warp_affine(image, similarity_transform(landmarks, template), size)
