"""Face alignment by five landmarks, as insightface aligns IJB's loose crops (NumPy, on the host).

The similarity transform (rotation, uniform scale, translation; no reflection) that maps the five
detected points (left eye, right eye, nose tip, left and right mouth corner) onto ArcFace's
112 x 112 template in the least-squares sense (Umeyama's closed form, as skimage's
`SimilarityTransform.estimate`), then the image warped by it with bilinear interpolation and
black (0) outside the source, as `cv2.warpAffine(image, M, (112, 112), borderValue=0)` does.
Pixel coordinates are cv2's: (x, y) = (column, row) of a pixel centre, the landmarks' convention.
Another output size scales the template with it.
"""

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


def warp_affine(image: np.ndarray, matrix: np.ndarray, size: int) -> np.ndarray:
  """`image` uint8 [H, W, C] warped by the 2 x 3 `matrix` (source -> output pixel coordinates)
  into a uint8 [size, size, C] image, bilinear, 0 outside the source."""
  inverse = np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))[:2]
  ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
  sx = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
  sy = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
  x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
  fx, fy = (sx - x0)[..., None], (sy - y0)[..., None]
  h, w = image.shape[:2]
  padded = np.pad(image.astype(np.float64), ((1, 1), (1, 1), (0, 0)))   # the black border

  def at(yy, xx):   # source pixels, 0 outside (indices shifted by the padding of one)
    inside = (yy >= -1) & (yy <= h) & (xx >= -1) & (xx <= w)
    return np.where(inside[..., None], padded[np.clip(yy + 1, 0, h + 1),
                                              np.clip(xx + 1, 0, w + 1)], 0.0)

  out = ((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x0 + 1))
         + fy * ((1 - fx) * at(y0 + 1, x0) + fx * at(y0 + 1, x0 + 1)))
  return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def align_face(image: np.ndarray, landmarks: np.ndarray, size: int = ARCFACE_SIZE) -> np.ndarray:
  """The uint8 [size, size, C] crop of `image` aligned by its five `landmarks` [5, 2] (x, y)."""
  template = ARCFACE_TEMPLATE * (size / ARCFACE_SIZE)
  return warp_affine(image, similarity_transform(landmarks, template), size)
