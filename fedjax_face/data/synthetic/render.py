"""The renderer of the embedded face benchmark: images of identities (`identities`) under per-image
nuisance (`nuisance`), and the geometry it draws them with (`face_frame`, `face_landmarks`,
`face_depth`).

Rendering is vectorised numpy: soft signed-distance masks evaluated on a per-image warped
coordinate grid, composited as albedo layers and shaded with a Lambertian model, in fixed-size
chunks so memory stays bounded and two worker threads can share the work (numpy releases the GIL
inside its loops).

Images follow `fedjax_face.data.preprocess`: uint8 `[N, H, W, 3]` RGB.

Coordinate conventions used throughout the renderer: image coordinates `(u, v)` lie in [-1, 1]
with `v` pointing down; "head" coordinates are centred on the head with the half-width of an
average head ~0.64 and the eye line near y = 0; "texture" coordinates `(xt, yt)` are head
coordinates un-rotated by the yaw, i.e. where a point of the face surface would sit in a frontal
view, so facial features are drawn once in texture space and yaw foreshortens them for free.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
from typing import Mapping, Sequence

import numpy as np

from fedjax_face.data import stores
from fedjax_face.data.synthetic import nuisance as nuisance_lib

# Pixels rendered per chunk (128 images at 32x32, 10 at 112x112): large enough that per-call
# overhead, which holds the GIL, stays a small share and two threads scale (measured 1.5x over one
# thread vs ~1.0x at 32 images per chunk); small enough to bound memory (~50 MB per worker).
_CHUNK_PIXELS = 1 << 17

# Number of fixed sensor-noise fields images pick from (see _noise_bank).
_NOISE_BANK = 257

# Placement of the head in the image: a looser crop than the ArcFace 112x112 template so that the
# hair outline (a strong cue at 32x32) stays visible; chin near the bottom edge.
_FACE_SCALE = 0.92
_FACE_CENTER_Y = -0.04

_F32 = np.float32
# Luma weights (ITU-R BT.601): desaturation here, the skin-tone bands of `pairs`.
LUMA = np.array([0.299, 0.587, 0.114], _F32)
_COS_BACK = math.cos(1.3)  # texture angle beyond which the skull's side/back shows (hair)
_GREY_HAIR = np.array([0.78, 0.78, 0.80])  # what hair turns to past the identity's grey onset


def _soft(d: np.ndarray, inv_w) -> np.ndarray:
  """Coverage of the region `d < 0` with a linear ramp ~1/inv_w wide (cheap anti-aliasing)."""
  t = 0.5 - d * inv_w
  return np.clip(t, 0.0, 1.0, out=t)


def _round_dist(q2: np.ndarray, radius) -> np.ndarray:
  """Signed distance to a circle of `radius`, from the squared distance `q2` to its centre.

  Uses (q2 - r^2) / 2r, exact to first order at the boundary, which is all a soft mask clipped to
  about a pixel needs, and avoids a square root (several times dearer than a multiply in numpy).
  """
  return (q2 - radius * radius) * (0.5 / radius)


def _segment_dist2(x: np.ndarray, y: np.ndarray, x0, y0, x1, y1) -> np.ndarray:
  """Squared distance from points to the segment (x0, y0)-(x1, y1) (all broadcastable)."""
  dx, dy = x1 - x0, y1 - y0
  inv = 1.0 / (dx * dx + dy * dy + 1e-9)
  rx, ry = x - x0, y - y0
  t = np.clip((rx * dx + ry * dy) * inv, 0.0, 1.0)
  ex, ey = rx - t * dx, ry - t * dy
  return ex * ex + ey * ey


@functools.lru_cache(maxsize=4)
def _noise_bank(size: int) -> np.ndarray:
  """A fixed bank of uniform int8 noise fields `[_NOISE_BANK, 3, size, size]` in [-127, 127].

  Each image takes field `noise_seed % _NOISE_BANK`: a pure function of the nuisance (no rng
  argument to `render_faces`, results independent of chunking), and ~50x cheaper than hashing
  fresh per-pixel noise. Noise is independent of identity, so reusing fields does no harm.
  """
  rng = np.random.default_rng(0x5EED)
  return rng.integers(-127, 128, (_NOISE_BANK, 3, size, size), dtype=np.int8)


def _blur(img: np.ndarray, sigma: np.ndarray) -> np.ndarray:
  """Separable gaussian blur of `[k, 3, S, S]` images with per-image `sigma` (pixels).

  Written as weighted sums of edge-clamped shifted copies rather than as matmuls with blur
  matrices: small BLAS calls are slow with a multi-threaded BLAS on a busy host, and the kernels
  are short (radius 2.5 sigma, grouped so each group pays only for its own radius; symmetric taps
  share a multiply).
  """
  size = img.shape[-1]
  out = np.empty_like(img)
  radius = np.minimum(np.ceil(2.5 * sigma).astype(int), size - 1)
  for rad in np.unique(radius):
    idx = np.flatnonzero(radius == rad)
    offsets = np.arange(rad + 1, dtype=_F32)
    taps = np.exp(-offsets[None, :]**2 / (2.0 * sigma[idx, None]**2)).astype(_F32)
    taps /= 2.0 * taps.sum(axis=1, keepdims=True) - taps[:, :1]
    taps = taps.reshape(len(idx), 1, 1, 1, rad + 1)
    x = img[idx]
    for axis in (2, 3):
      first = np.take(x, [0], axis=axis).repeat(rad, axis=axis)
      last = np.take(x, [size - 1], axis=axis).repeat(rad, axis=axis)
      xp = np.concatenate([first, x, last], axis=axis)
      acc = x * taps[..., 0]
      for j in range(1, rad + 1):
        lo = [slice(None)] * 4
        hi = [slice(None)] * 4
        lo[axis] = slice(rad - j, rad - j + size)
        hi[axis] = slice(rad + j, rad + j + size)
        acc += taps[..., j] * (xp[tuple(lo)] + xp[tuple(hi)])
      x = acc
    out[idx] = x
  return out


def _composite(layers: Sequence, n: int, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
  """Back-to-front "over" compositing of constant-colour layers.

  Each layer is (alpha, colour [n, 3] or [3], idx, rows). idx None: all images, else the layer
  exists only on images `idx` (rare features are evaluated on just the images that have them);
  rows None: the full height, else the layer is confined to that row slice (facial features are
  evaluated on the band of rows they can reach). alpha is `[n or len(idx), H or band, W]`
  (broadcastable). A darkening is a black layer. Rather than blending three-channel images layer
  by layer, the visible weight of every layer is computed on one-channel fields (front-to-back
  transmittance) and the colours are mixed once at the end.

  Returns:
    weights `[K, n, H*W]` and colours `[n, 3, K]`.
  """
  k = len(layers)
  w = np.empty((k, n) + shape, _F32)  # layer-major: each layer's weights are contiguous
  t = np.ones((n,) + shape, _F32)
  full = slice(None)
  for i in range(k - 1, -1, -1):
    alpha, _, idx, rows = layers[i]
    if idx is None and rows is None:
      wi = np.multiply(alpha, t, out=w[i])
      t -= wi
      continue
    w[i] = 0.0
    rows = full if rows is None else rows
    if idx is None:
      wi = np.multiply(alpha, t[:, rows], out=w[i][:, rows])
      t[:, rows] -= wi
    else:
      wi = alpha * t[idx, rows]
      w[i][idx, rows] = wi
      t[idx, rows] -= wi
  cols = np.stack([np.broadcast_to(cl, (n, 3)) for _, cl, _, _ in layers], axis=2)
  return w.reshape(k, n, -1), cols


_BLACK = np.zeros(3, _F32)  # a darkening is a black layer


def _c(a, idx=None) -> np.ndarray:
  """A per-image scalar as float32 `[n, 1, 1]`, broadcast against `[n, H, W]` pixel fields
  (`[len(idx), 1, 1]`: only the images `idx`)."""
  a = np.asarray(a, _F32)
  return (a if idx is None else a[idx]).reshape(-1, 1, 1)


class _Canvas:
  """One chunk's pixel grid and the constant-colour layers painted on it, back to front (mixed
  by `_composite`)."""

  def __init__(self, n: int, size: int):
    self.n, self.size = n, size
    self.pw = 2.0 / size  # a pixel's width in image coordinates
    g = (np.arange(size, dtype=_F32) + 0.5) * _F32(self.pw) - 1.0
    self.u = g[None, None, :]
    self.v = g[None, :, None]
    self.layers = []

  def select(self, gate: np.ndarray) -> np.ndarray | None:
    """The images needing a rare feature: None = all of them."""
    idx = np.flatnonzero(gate)
    return None if idx.size == self.n else idx

  def pick(self, idx, *fields) -> list:
    """The rows `idx` of per-image fields; broadcast-only fields unchanged."""
    return [f if idx is None or f.shape[0] != self.n else f[idx] for f in fields]

  def crop(self, rows: slice, *fields) -> list:
    """A band of image rows of `[., H, W]` fields (views, no copies)."""
    return [f[:, rows] if f.shape[1] == self.size else f for f in fields]

  def add(self, alpha, color, idx=None, rows=None) -> None:
    """Paints a layer over the previous ones (`_composite`'s (alpha, colour, idx, rows))."""
    if idx is None or idx.size:
      self.layers.append((alpha, np.asarray(color, _F32).reshape(-1, 3), idx, rows))


@dataclasses.dataclass(frozen=True)
class _Look:
  """Per-image appearance at the image's age (`_look`): `[n]`, colours `[n, 3]`."""
  old: np.ndarray  # 0 up to 35 years, 1 at 70 (at most 1.3)
  hairline: np.ndarray  # receding with age
  hair_len: np.ndarray
  hair_vol: np.ndarray
  beard: np.ndarray
  head_w: np.ndarray  # drifting with weight
  jaw: np.ndarray
  sag: np.ndarray  # how far the eyes and mouth sink
  wrinkle: np.ndarray
  bald: np.ndarray
  crown: np.ndarray  # top of the side/back hair band: only bald heads have one
  skin_rgb: np.ndarray
  hair_rgb: np.ndarray
  brow_rgb: np.ndarray


def _look(ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray]) -> _Look:
  """Identity trajectories evaluated at the image's age (base age + per-image offset)."""
  age = np.clip(ip['base_age'] + nz['age'], 14.0, 90.0)
  old = np.clip((age - 35.0) / 35.0, 0.0, 1.3)
  young = np.clip((28.0 - age) / 14.0, 0.0, 1.0)
  grey = 1.0 / (1.0 + np.exp(-(age - ip['grey_onset']) / 4.0))
  hl_eff = (ip['hairline'] + nz['hairline_delta'] -
            0.4 * ip['recede'] * np.clip((age - 28.0) / 30.0, 0.0, 1.5))
  hair_base = np.clip(ip['hair_color'] * nz['hair_shade'][:, None], 0.0, 1.0)
  brow_base = ip['hair_color'] * ip['brow_dark'][:, None]
  bald = np.clip((-hl_eff - 0.85) / 0.1, 0.0, 1.0)
  return _Look(
      old=old, hairline=hl_eff,
      hair_len=np.maximum(ip['hair_length'] + nz['hair_length_delta'], -0.45),
      hair_vol=np.clip(ip['hair_volume'] + nz['hair_volume_delta'], 0.0, 0.3),
      beard=np.clip(ip['beard'] * nz['beard_growth'] + nz['stubble'], 0.0, 1.0),
      head_w=ip['head_w'] * (1.0 + 0.06 * ip['weight_drift'] * (age - ip['base_age']) / 30.0),
      jaw=np.clip(ip['jaw'] - 0.1 * old + 0.08 * young, 0.0, 0.7),
      sag=0.035 * old,
      wrinkle=np.clip((age - 40.0) / 30.0, 0.0, 1.0),
      bald=bald,
      crown=-3.0 + bald * 2.55,
      skin_rgb=ip['skin_color'] * (1.0 - 0.07 * old)[:, None] + (0.03 * young)[:, None],
      hair_rgb=hair_base + (_GREY_HAIR - hair_base) * grey[:, None],
      brow_rgb=brow_base + (_GREY_HAIR * 0.8 - brow_base) * (0.6 * grey)[:, None])


@dataclasses.dataclass(frozen=True)
class _Head:
  """The head's pose and surface in one chunk (`_head`): per-image scalars `[n, 1, 1]` (the
  `band` parameters `[n]`), pixel fields `[n, size, size]`."""
  a: np.ndarray  # half-width, b: half-height
  b: np.ndarray
  sin_t: np.ndarray  # of the yaw
  cos_t: np.ndarray
  x: np.ndarray  # head coordinates of every pixel (`face_frame`)
  y: np.ndarray
  xs: np.ndarray  # x with the skull's silhouette widened and slid back under yaw
  yn: np.ndarray  # y / b
  xa: np.ndarray  # xs over the half-width at that height (the jaw narrows it)
  r: np.ndarray  # the cylinder's cross-section radius
  xt: np.ndarray  # texture coordinates: xt = r sin(phi), yt moved by pitch
  yt: np.ndarray
  axt: np.ndarray  # |xt|, for the symmetric features
  head_m: np.ndarray  # the head's coverage
  back: np.ndarray  # 1 on the side/back of the skull
  face: np.ndarray  # where facial features may appear
  inv_pw: np.ndarray  # 1 / (pixel width in head units)
  inv_soft: np.ndarray  # softer edges for hair and shadows
  pitch_y: np.ndarray  # how far pitch moves texture y against head y
  scale: np.ndarray
  v_center: np.ndarray
  roll_cos: np.ndarray
  roll_sin: np.ndarray  # |sin roll|
  pw: float
  size: int

  def band(self, y_lo, y_hi, x_reach) -> slice:
    """Image rows that can see the head-coordinate box [-x_reach, x_reach] x [y_lo, y_hi]."""
    v_lo = self.v_center + self.scale * (self.roll_cos * y_lo - self.roll_sin * x_reach)
    v_hi = self.v_center + self.scale * (self.roll_cos * y_hi + self.roll_sin * x_reach)
    r0 = max(0, int(np.floor((v_lo.min() + 1.0) / self.pw - 0.5)) - 2)
    r1 = min(self.size, int(np.ceil((v_hi.max() + 1.0) / self.pw - 0.5)) + 3)
    return slice(r0, max(r1, r0 + 1))


def _head(ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray], look: _Look,
          canvas: _Canvas) -> _Head:
  """Every pixel's head and texture coordinates: the image-to-head transform, the skull under
  yaw, and a cylindrical surface the facial features are drawn on."""
  pw = canvas.pw
  a = _c(look.head_w)
  b = _c(ip['head_h'])
  sin_t, cos_t = _c(np.sin(nz['yaw'])), _c(np.cos(nz['yaw']))
  x, y = face_frame(nz, canvas.size)
  scale = _FACE_SCALE * nz['scale']
  inv_pw = _c(scale / pw)
  # Under yaw the skull's silhouette widens (a head is deeper than wide) and slides backwards.
  xs = (x + 0.12 * a * sin_t) * (1.0 / (1.0 + 0.18 * np.abs(sin_t)))
  yn = y * (1.0 / b)
  yn_pos = np.clip(yn, 0.0, 1.0)
  yn_neg = np.clip(yn, -1.0, 0.0)
  aw = a * (1.0 - _c(look.jaw) * yn_pos * yn_pos) * (1.0 - 0.08 * yn_neg * yn_neg)
  xa = xs / aw
  yn2 = yn * yn
  head_m = _soft(0.5 * a * (xa * xa + yn2 - 1.0), inv_pw)
  # Cylindrical surface with cross-section radius r(y); a surface point at image angle alpha
  # (sin alpha = xs / r) has texture angle phi = alpha - yaw, so xt = r sin(phi).
  r = aw * np.sqrt(np.clip(1.0 - yn2, 0.02, 1.0))
  sa = np.clip(xs / r, -1.0, 1.0)
  ca = np.sqrt(1.0 - sa * sa)
  xt = r * (sa * cos_t - ca * sin_t)
  cos_phi = ca * cos_t + sa * sin_t
  back = _soft((cos_phi - _COS_BACK) * r, inv_pw)
  return _Head(
      a=a, b=b, sin_t=sin_t, cos_t=cos_t, x=x, y=y, xs=xs, yn=yn, xa=xa, r=r, xt=xt,
      yt=y - _c(nz['pitch'] * 0.3) * ca, axt=np.abs(xt), head_m=head_m, back=back,
      face=head_m * (1.0 - back), inv_pw=inv_pw,
      inv_soft=np.minimum(inv_pw, _F32(1 / 0.035)), pitch_y=0.3 * np.abs(nz['pitch']),
      scale=scale, v_center=_FACE_CENTER_Y + nz['shift_y'], roll_cos=np.cos(nz['roll']),
      roll_sin=np.abs(np.sin(nz['roll'])), pw=pw, size=canvas.size)


def _hair_masks(ip: Mapping[str, np.ndarray], head: _Head, look: _Look):
  """(hairline `[n, H, W]`, hair on the head, the hair ring around it): the hair's masks, painted
  at two depths (the ring behind the head, the head's hair over skin and ears)."""
  hlen = _c(look.hair_len)
  hl = _c(look.hairline) + _c(ip['hairline_curve']) * head.xt * head.xt
  top_hair = _soft(head.yt - hl, head.inv_soft)
  hair_band = _soft(np.maximum(head.y - hlen, _c(look.crown) - head.y), head.inv_soft)
  hair_in = top_hair + (hair_band - top_hair) * head.back
  vol = _c(look.hair_vol)
  ax_o = head.a + vol
  yo = head.y + 0.3 * vol
  xo = head.xs / ax_o
  yoo = yo / (head.b + 1.2 * vol)
  outer_ell = 0.5 * ax_o * (xo * xo + yoo * yoo - 1.0)
  outer_side = np.maximum(np.abs(head.xs) - ax_o * (1.0 - 0.05 * head.y), -yo)  # hanging hair
  ring = _soft(np.minimum(outer_ell, outer_side), head.inv_pw) * hair_band
  return hl, hair_in, ring


def _paint_background(canvas: _Canvas, nz: Mapping[str, np.ndarray]) -> None:
  """The backdrop: a colour, a linear gradient to a second one and sometimes a blob."""
  u, v = canvas.u, canvas.v
  ang = nz['bg_angle']
  t_bg = np.clip(0.5 + 0.5 * (u * _c(np.cos(ang)) + v * _c(np.sin(ang))), 0.0, 1.0)
  canvas.add(np.ones((1, 1, 1), _F32), nz['bg_color'])
  canvas.add(t_bg, nz['bg_color2'])
  idx = canvas.select(nz['blob_r'] > 0)
  if idx is None or idx.size:
    bx, by_ = u - _c(nz['blob_x'], idx), v - _c(nz['blob_y'], idx)
    canvas.add(_soft(_round_dist(bx * bx + by_ * by_, _c(nz['blob_r'], idx)), 1.0 / 0.05),
               nz['blob_color'], idx)


def _paint_body(canvas: _Canvas, head: _Head, look: _Look, ring: np.ndarray,
                nz: Mapping[str, np.ndarray]) -> None:
  """The hair behind the head, the clothes, the neck and the head's skin."""
  canvas.add(ring, look.hair_rgb)
  xn = np.abs(head.x + 0.1 * head.a * head.sin_t)
  canvas.add(_soft(head.b + 0.12 + 0.25 * np.maximum(xn - 0.35, 0.0) - head.y, head.inv_pw),
             nz['clothes_color'])
  canvas.add(_soft(np.maximum(xn - 0.55 * head.a, 0.45 - head.yn), head.inv_pw),
             look.skin_rgb * 0.78)  # neck
  canvas.add(head.head_m, look.skin_rgb)


@dataclasses.dataclass(frozen=True)
class _Layout:
  """Where the facial features sit on each image, in texture coordinates (`_layout`): `[n]`
  for names ending in `_`, else `[n, 1, 1]`."""
  eye_y_: np.ndarray
  eh_: np.ndarray  # eye half-height
  mouth_y_: np.ndarray
  brow_y_: np.ndarray
  brow_ang: np.ndarray  # [n]
  tilt: np.ndarray  # [n], of the eyes
  reach: np.ndarray  # [n], the half-width the features' row bands cover
  eye_y: np.ndarray
  eh: np.ndarray
  eye_dx: np.ndarray
  eye_w: np.ndarray
  mouth_y: np.ndarray
  nose_y1: np.ndarray  # the nose's bottom
  nw: np.ndarray  # nose width
  mw: np.ndarray  # mouth half-width
  mo: np.ndarray  # mouth opening
  lip: np.ndarray


def _layout(ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray], look: _Look) -> _Layout:
  """The features' positions and sizes at this age and expression."""
  mouth_y_ = ip['mouth_y'] + look.sag
  eye_y_ = ip['eye_y'] + 0.3 * look.sag
  eh_ = ip['eye_h'] * (1.0 - 0.2 * look.old)
  eye_y = _c(eye_y_)
  tilt = ip['eye_tilt']
  return _Layout(
      eye_y_=eye_y_, eh_=eh_, mouth_y_=mouth_y_,
      brow_y_=eye_y_ - ip['brow_gap'] - 0.035 * nz['brow_raise'],
      brow_ang=ip['brow_angle'] - 0.08 * nz['brow_raise'] + tilt,
      tilt=tilt, reach=look.head_w + 0.3, eye_y=eye_y, eh=_c(eh_), eye_dx=_c(ip['eye_dx']),
      eye_w=_c(ip['eye_w']), mouth_y=_c(mouth_y_), nose_y1=eye_y + _c(ip['nose_len']),
      nw=_c(ip['nose_w']), mw=_c(ip['mouth_w'] * (1.0 + 0.08 * nz['smile'])),
      mo=_c(nz['mouth_open'] * 0.06), lip=_c(ip['lip_thick']))


@dataclasses.dataclass(frozen=True)
class _EyeBand:
  """The rows the eyes, brows and glasses can reach (`_eye_band`), with the head's fields there
  and coordinates about each eye, tilted with it."""
  rows: slice
  axt: np.ndarray
  yt: np.ndarray
  face: np.ndarray
  ex: np.ndarray
  ey: np.ndarray
  ex2: np.ndarray


def _eye_band(canvas: _Canvas, head: _Head, layout: _Layout,
              ip: Mapping[str, np.ndarray]) -> _EyeBand:
  """The eye band's rows (from the brows' top to below the eye bags) and eye coordinates."""
  eye_y_, eh_ = layout.eye_y_, layout.eh_
  brow_top = layout.brow_y_ - ip['brow_len'] * np.abs(np.sin(layout.brow_ang)) - ip['brow_thick']
  rows = head.band(np.minimum(brow_top, eye_y_ - 0.015 - 4.0 * eh_ - 0.2) - head.pitch_y - 0.06,
                   eye_y_ + np.maximum(4.0 * eh_, 0.16) + head.pitch_y + 0.06, layout.reach)
  axt_e, yt_e, face_e = canvas.crop(rows, head.axt, head.yt, head.face)
  ct, st = _c(np.cos(layout.tilt)), _c(np.sin(layout.tilt))
  dx = axt_e - layout.eye_dx
  dy = yt_e - layout.eye_y
  ex = ct * dx + st * dy
  ey = ct * dy - st * dx
  return _EyeBand(rows=rows, axt=axt_e, yt=yt_e, face=face_e, ex=ex, ey=ey, ex2=ex * ex)


def _paint_eye_sockets(canvas: _Canvas, head: _Head, eye: _EyeBand, layout: _Layout,
                       look: _Look) -> None:
  """Eye sockets and (with age) bags: soft shadows that keep the eye region visible at 32x32,
  where the eye itself is about one pixel tall."""
  eh, eye_w = layout.eh, layout.eye_w
  eys = (eye.ey + 0.015) * (1.0 / (2.8 * eh))
  sock = _soft(0.05 * (eye.ex2 * (1.0 / (1.7 * eye_w)**2) + eys * eys - 1.0),
               np.minimum(head.inv_pw, _F32(1 / 0.05)))
  shadow = 0.2 * sock
  idx = canvas.select(look.old > 0)
  if idx is None or idx.size:
    ex2_i, ey_i, ew_i, eh_i = canvas.pick(idx, eye.ex2, eye.ey, eye_w, eh)
    eyb = (ey_i - 2.2 * eh_i) * (1.0 / (0.9 * eh_i))
    bags = _soft(0.5 * (ex2_i * (1.0 / (1.2 * ew_i)**2) + eyb * eyb - 1.0), _F32(4.0))
    bags *= _c(0.12 * look.old, idx)
    if idx is None:
      shadow += bags
    else:
      shadow[idx] += bags
  canvas.add(shadow * eye.face, _BLACK, rows=eye.rows)


def _paint_eyes(canvas: _Canvas, head: _Head, eye: _EyeBand, layout: _Layout, look: _Look,
                ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray]) -> None:
  """The eyes: sclera ellipse, iris disc, dark upper lid line."""
  eh, eye_w, ex2, ey, inv_pw = layout.eh, layout.eye_w, eye.ex2, eye.ey, head.inv_pw
  eh_open = eh * _c(nz['eye_open'])
  exe2 = ex2 * (1.0 / (eye_w * eye_w))
  eyo = ey / np.maximum(eh_open, 1e-3)
  eye_m = _soft(0.5 * eh_open * (exe2 + eyo * eyo - 1.0), inv_pw) * eye.face
  canvas.add(eye_m, look.skin_rgb * 0.25 + 0.62, rows=eye.rows)
  canvas.add(_soft(_round_dist(ex2 + ey * ey, 0.8 * eh), inv_pw) * eye_m, ip['iris_color'],
             rows=eye.rows)
  lid_y = -eh_open * np.sqrt(np.clip(1.0 - exe2, 0.0, 1.0))
  lid_d = np.maximum(np.abs(ey - lid_y) - 0.008, (exe2 - 1.1) * (0.5 * eye_w))
  canvas.add(_soft(lid_d, inv_pw) * eye.face * 0.8, ip['iris_color'] * 0.4, rows=eye.rows)


def _paint_brows(canvas: _Canvas, head: _Head, eye: _EyeBand, layout: _Layout, look: _Look,
                 ip: Mapping[str, np.ndarray]) -> None:
  """Brows: tapered capsules above the eyes; expression raises and tilts them."""
  cb, sb = _c(np.cos(layout.brow_ang)), _c(np.sin(layout.brow_ang))
  dbx, dby = eye.axt - (layout.eye_dx + 0.01), eye.yt - _c(layout.brow_y_)
  along = cb * dbx - sb * dby
  across = sb * dbx + cb * dby
  blen = _c(ip['brow_len'])
  along_c = np.clip(along, -blen, blen)
  thick = _c(ip['brow_thick'] * 0.5) * (1.0 - 0.45 * np.clip(along_c / blen, 0.0, 1.0))
  da = along - along_c
  canvas.add(_soft(_round_dist(da * da + across * across, thick), head.inv_pw) * eye.face,
             look.brow_rgb, rows=eye.rows)


def _glasses_layers(canvas: _Canvas, head: _Head, eye: _EyeBand, layout: _Layout,
                    ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray]) -> list:
  """Glasses (identity trait, sometimes taken off) and sunglasses (an occluder): elliptical rims
  around the eyes plus a bridge; sunglasses also fill the lenses. Returned as layers, painted
  after the head hair, which they sit on."""
  layers = []
  sun = nz['occluder'] == nuisance_lib.OCC_SUNGLASSES
  wear = np.maximum(ip['glasses'] * nz['glasses_on'], sun)
  idx = canvas.select(wear > 0)
  if idx is None or idx.size:
    axt_i, yt_i, face_i, ipw, edx, ey_i, ew = canvas.pick(idx, eye.axt, eye.yt, eye.face,
                                                          head.inv_pw, layout.eye_dx,
                                                          layout.eye_y, layout.eye_w)
    gsz = _c(ip['glasses_size'], idx)
    lw, lh = 1.75 * ew * gsz, 0.13 * gsz
    lqx = (axt_i - edx) / lw
    lqy = (yt_i - ey_i + 0.01) / lh
    lens_d = 0.5 * lh * (lqx * lqx + lqy * lqy - 1.0)
    rim_t = np.maximum(_F32(0.009), 0.22 / ipw)
    bridge = np.maximum(np.abs(yt_i - ey_i + 0.03) - rim_t, axt_i - (edx - 0.9 * lw))
    frame = _soft(np.minimum(np.abs(lens_d) - rim_t, bridge), ipw) * face_i
    layers.append((frame, ip['glasses_color'], idx, eye.rows))
    layers.append((_soft(lens_d, ipw) * face_i * _c(0.93 * sun, idx), [0.05, 0.05, 0.07], idx,
                   eye.rows))
  return layers


def _paint_age_lines(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look,
                     hairline: np.ndarray) -> None:
  """Age lines (images older than ~40): nasolabial folds and forehead lines."""
  idx = canvas.select(look.wrinkle > 0)
  if idx is None or idx.size:
    axt_i, yt_i, hl_i, face_i, ipw = canvas.pick(idx, head.axt, head.yt, hairline, head.face,
                                                 head.inv_pw)
    nw_i, ny1_i, mw_i, my_i = canvas.pick(idx, layout.nw, layout.nose_y1, layout.mw,
                                          layout.mouth_y)
    line_w = np.maximum(_F32(0.012), 0.6 / ipw)
    fold = _segment_dist2(axt_i, yt_i, nw_i + 0.04, ny1_i - 0.02, mw_i + 0.04, my_i + 0.04)
    lines = 0.25 * _soft(_round_dist(fold, line_w), ipw)
    fore = np.abs(np.sin((yt_i - hl_i) * _F32(2 * np.pi / 0.09)))  # phase-locked to the hairline
    lines += 0.08 * fore * _soft(
        np.maximum(np.maximum(axt_i - 0.32, _c(layout.brow_y_, idx) - 0.05 - yt_i),
                   hl_i + 0.08 - yt_i), ipw)
    canvas.add(lines * _c(look.wrinkle, idx) * face_i, _BLACK, idx)


def _paint_beard(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look) -> None:
  """The beard, under the lips and over the skin."""
  idx = canvas.select(look.beard > 0)
  if idx is None or idx.size:
    axt_i, yt_i, face_i, isoft, a_i, my_i = canvas.pick(idx, head.axt, head.yt, head.face,
                                                        head.inv_soft, head.a, layout.mouth_y)
    beard_top = my_i - 0.1 - 0.3 * np.clip(axt_i / a_i - 0.25, 0.0, 1.0)
    canvas.add(_soft(beard_top - yt_i, isoft) * face_i * _c(look.beard, idx),
               look.hair_rgb * 0.85, idx)


def _paint_mouth(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look,
                 ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray]) -> None:
  """The mouth band: moustache, lips and the gap between them."""
  mouth_y, mw, mo, lip, inv_pw = layout.mouth_y, layout.mw, layout.mo, layout.lip, head.inv_pw
  reach_y = 0.1 + ip['lip_thick'] + 0.06 * nz['mouth_open'] + 0.05 * np.abs(nz['smile'])
  rows = head.band(layout.mouth_y_ - reach_y - head.pitch_y - 0.04,
                   layout.mouth_y_ + reach_y + head.pitch_y + 0.04, layout.reach)
  axt_m, yt_m, face_m = canvas.crop(rows, head.axt, head.yt, head.face)
  idx = canvas.select(ip['moustache'] > 0)
  if idx is None or idx.size:
    axt_i, yt_i, face_i, ipw, mw_i, my_i, lip_i, mo_i = canvas.pick(idx, axt_m, yt_m, face_m,
                                                                    inv_pw, mw, mouth_y, lip, mo)
    stache_y = my_i - 0.5 * (lip_i + mo_i) - 0.045
    stache = _soft(np.maximum(axt_i - mw_i * 1.1, np.abs(yt_i - stache_y) - 0.035), ipw)
    canvas.add(stache * face_i * _c(ip['moustache'], idx), look.hair_rgb * 0.85, idx, rows)
  # Lips: upper/lower bands around a smile curve; the gap is dark (teeth when wide open).
  ex_m = np.clip(axt_m / mw, 0.0, 1.0)
  ex_m2 = ex_m * ex_m
  env = np.sqrt(1.0 - ex_m2)
  dm = yt_m - mouth_y + _c(0.05 * nz['smile']) * ex_m2
  lip_env = lip * env
  mo_env = 0.5 * mo * env
  up = np.abs(dm + mo_env + 0.45 * lip_env) - 0.45 * lip_env
  lo = np.abs(dm - mo_env - 0.55 * lip_env) - 0.55 * lip_env
  side = axt_m - mw
  canvas.add(_soft(np.maximum(np.minimum(up, lo), side), inv_pw) * face_m, ip['lip_color'],
             rows=rows)
  gap_rgb = np.where((nz['mouth_open'] > 0.3)[:, None], [0.55, 0.45, 0.41], [0.22, 0.07, 0.07])
  canvas.add(_soft(np.maximum(np.abs(dm) - mo_env - 0.004, side), inv_pw) * face_m, gap_rgb,
             rows=rows)


def _paint_mole(canvas: _Canvas, head: _Head, ip: Mapping[str, np.ndarray]) -> None:
  """A mole (asymmetric on purpose: a left/right identity cue)."""
  idx = canvas.select(ip['mole'] > 0)
  if idx is None or idx.size:
    xt_i, yt_i, face_i, ipw = canvas.pick(idx, head.xt, head.yt, head.face, head.inv_pw)
    mx, my = xt_i - _c(ip['mole_x'], idx), yt_i - _c(ip['mole_y'], idx)
    canvas.add(_soft(_round_dist(mx * mx + my * my, 0.022), ipw) * face_i * 0.55, _BLACK, idx)


@dataclasses.dataclass(frozen=True)
class _Nose:
  """The nose as painted (`_paint_nose`), which shading gives its own ridge normal."""
  rows: slice  # the rows it can reach
  xs: np.ndarray  # the head's xs on those rows
  xm: np.ndarray  # its centre line there
  half: np.ndarray  # its half-width there
  mask: np.ndarray  # its coverage there
  depth: np.ndarray  # [n, 1, 1] how far it protrudes


def _paint_nose(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look,
                ip: Mapping[str, np.ndarray]) -> _Nose:
  """The nose, in head coordinates because it protrudes: the tip slides further than the surface
  under yaw and, in profile, sticks out past the cheek line. Then the nostrils."""
  sin_t, cos_t, nw, nose_y1 = head.sin_t, head.cos_t, layout.nw, layout.nose_y1
  nose_rows = head.band(layout.eye_y_ + 0.02,
                        layout.eye_y_ + ip['nose_len'] + 0.3 * ip['nose_w'] + 0.08, layout.reach)
  xs_n, y_n, r_n, head_n = canvas.crop(nose_rows, head.xs, head.y, head.r, head.head_m)
  nose_y0 = layout.eye_y + 0.06
  fr = np.clip((y_n - nose_y0) * (1.0 / (nose_y1 - nose_y0)), 0.0, 1.0)
  depth = _c(ip['nose_depth']) * fr
  xm = r_n * sin_t + (0.5 * sin_t) * depth
  half = (nw * (0.6 + 0.4 * np.abs(cos_t))) * (0.35 + 0.65 * fr * fr) + (
      0.5 * np.abs(sin_t)) * depth
  nose_d = np.maximum(np.maximum(np.abs(xs_n - xm) - half, nose_y0 - y_n),
                      y_n - nose_y1 - 0.3 * nw)
  nose_m = _soft(nose_d, head.inv_pw) * np.clip(cos_t * 3.0 + 1.0, 0.0, 1.0)  # gone at high yaw
  canvas.add(nose_m, look.skin_rgb * 1.03, rows=nose_rows)
  nose_depth = _c(ip['nose_depth'])
  nx_ = (np.abs(xs_n - (r_n + nose_depth) * sin_t) - 0.5 * nw * np.abs(cos_t)) * (1.0 / (0.35 * nw))
  ny_ = (y_n - nose_y1 - 0.015) * (1.0 / 0.018)
  nost = _soft(0.5 * (nx_ * nx_ + ny_ * ny_ - 1.0), np.minimum(head.inv_pw, _F32(1 / 0.02)))
  canvas.add(0.45 * nost * head_n, _BLACK, rows=nose_rows)
  return _Nose(rows=nose_rows, xs=xs_n, xm=xm, half=half, mask=nose_m, depth=nose_depth)


def _paint_ears(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look,
                ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray]) -> None:
  """Ears at texture angle +-90 degrees: seen edge-on (thin, sticking out) in frontal views, flat
  in profile; hidden behind the head, and covered by hair that reaches below them."""
  ear_y = ip['ear_y']
  ear_h = ip['ear_h']
  ear_hw = 0.5 * ear_h
  rows = head.band(ear_y - ear_h - 0.04, ear_y + ear_h + 0.04, layout.reach)
  xs_r, y_r, head_r = canvas.crop(rows, head.xs, head.y, head.head_m)
  r_ear = look.head_w * np.sqrt(np.clip(1.0 - (ear_y / ip['head_h'])**2, 0.1, 1.0))
  cover = 1.0 - 0.9 * np.clip((look.hair_len - ear_y + 0.05) * 10.0, 0.0, 1.0) * (1.0 - look.bald)
  ey_e = (y_r - _c(ear_y)) * _c(1.0 / ear_h)
  ey_e2 = ey_e * ey_e
  ear_m = 0.0
  inner = 0.0
  for s in (-1.0, 1.0):
    alpha_e = s * (np.pi / 2) + nz['yaw']
    sa_e, ca_e = np.sin(alpha_e), np.cos(alpha_e)
    xe = sa_e * (r_ear + (0.3 + 0.9 * ip['ear_out']) * ear_hw * (1.0 - np.abs(ca_e)))
    half_w = ear_hw * (0.35 + 0.65 * np.abs(ca_e))
    ex_e = (xs_r - _c(xe)) * _c(1.0 / half_w)
    ell2 = ex_e * ex_e + ey_e2
    behind = np.clip((0.45 - ca_e) / 0.3, 0.0, 1.0)
    vis = np.clip((ca_e + 0.15) * 8.0 + 0.5, 0.0, 1.0) * cover
    m = (_soft(_round_dist(ell2, 1.0) * _c(half_w), head.inv_pw) * (1.0 - head_r * _c(behind))
         * _c(vis))
    ear_m = ear_m + m
    inner = inner + _soft(_round_dist(ell2, 0.55) * _c(half_w), head.inv_pw) * m * _c(
        0.3 * np.clip(ca_e * 2.0, 0.0, 1.0))
  canvas.add(ear_m, look.skin_rgb * np.array([0.95, 0.85, 0.82], _F32), rows=rows)
  canvas.add(inner, _BLACK, rows=rows)


def _paint_occluders(canvas: _Canvas, head: _Head, layout: _Layout, look: _Look,
                     nz: Mapping[str, np.ndarray]) -> None:
  """The occluders other than sunglasses: a random rectangle, a hand over the lower face, a
  medical mask."""
  occ = nz['occluder']
  idx = canvas.select(occ == nuisance_lib.OCC_RECT)
  if idx is None or idx.size:
    rect = _soft(np.maximum(np.abs(canvas.u - _c(nz['occ_x'], idx)) - _c(nz['occ_w'], idx),
                            np.abs(canvas.v - _c(nz['occ_y'], idx)) - _c(nz['occ_h'], idx)),
                 _F32(1.0 / canvas.pw))
    canvas.add(rect, nz['occ_color'], idx)
  idx = canvas.select(occ == nuisance_lib.OCC_HAND)
  if idx is None or idx.size:
    x_i, y_i, ipw = canvas.pick(idx, head.x, head.y, head.inv_pw)
    hy = _c(0.35 + 0.35 * (nz['occ_y'] + 0.6), idx)
    hex_ = (x_i - _c(nz['occ_x'] * 0.5, idx)) * _c(1.0 / (0.22 + nz['occ_w']), idx)
    hey = (y_i - hy) * _c(1.0 / (0.18 + 0.6 * nz['occ_h']), idx)
    hand = _soft(0.125 * (hex_ * hex_ + hey * hey - 1.0), ipw)
    canvas.add(hand, look.skin_rgb * 0.97, idx)
    canvas.add(hand * (np.cos((y_i - hy) * _F32(2 * np.pi / 0.11)) > 0.6) * _F32(0.12), _BLACK,
               idx)
  idx = canvas.select(occ == nuisance_lib.OCC_MASK)
  if idx is None or idx.size:
    yt_i, face_i, ipw, ny1_i, b_i = canvas.pick(idx, head.yt, head.face, head.inv_pw,
                                                layout.nose_y1, head.b)
    canvas.add(_soft(np.maximum(ny1_i - 0.12 - yt_i, yt_i - b_i * 0.92), ipw) * face_i,
               0.6 + 0.4 * nz['occ_color'], idx)


def _shading(head: _Head, nose: _Nose, nz: Mapping[str, np.ndarray]) -> np.ndarray:
  """`[n, H, W]` light on the head: Lambertian on an ellipsoid normal field, the nose with its
  own ridge normal, and the cheek beyond the nose in its shadow."""
  nx = np.clip(head.xa, -1.0, 1.0)
  ny = np.clip(0.6 * head.yn, -1.0, 1.0)
  nx_n, ny_n = nx[:, nose.rows], ny[:, nose.rows]  # views: the nose's normals go into nx, ny
  nx_n += (np.clip((nose.xs - nose.xm) / (nose.half + 1e-3), -1.0, 1.0) - nx_n) * (0.8 * nose.mask)
  ny_n -= 0.3 * nose.mask
  nzz = np.sqrt(np.clip(1.0 - nx * nx - ny * ny, 0.0, 1.0))
  lx, ly = nz['light_x'], nz['light_y']
  ln = np.sqrt(lx * lx + ly * ly + 1.0)
  lam = np.maximum(nx * _c(lx / ln) + ny * _c(ly / ln) + nzz * _c(1.0 / ln), 0.0)
  ks = nz['light_strength']
  shade = _c(1.0 - ks) + _c(ks * ln) * lam  # normalised: a frontal light leaves the centre at 1
  # The cheek beyond the nose falls into the nose's shadow / away from the camera-side light.
  shade *= 1.0 - 0.25 * head.face * np.clip(
      (head.xs - (head.r + nose.depth) * head.sin_t) * (2.0 * head.sin_t / head.a), 0.0, 1.0)
  return shade


def _expose(canvas: _Canvas, nz: Mapping[str, np.ndarray], shade: np.ndarray,
            num_bg_layers: int) -> np.ndarray:
  """float `[n, 3, H, W]`: the layers composited, the foreground shaded, a light gradient and
  gain over everything, and the camera's colour."""
  n, size, u, v = canvas.n, canvas.size, canvas.u, canvas.v
  w, cols = _composite(canvas.layers, n, (size, size))
  fg = 1.0 - w[:num_bg_layers].sum(axis=0).reshape(n, size, size)  # the background is not shaded
  grad = 1.0 + (u * _c(nz['grad'] * np.cos(nz['grad_angle'])) +
                v * _c(nz['grad'] * np.sin(nz['grad_angle'])))
  light = (1.0 + (shade - 1.0) * fg) * grad * _c(nz['gain'])
  # Camera colour: tint, then (de)saturation, folded into one 3x3 matrix applied to the layer
  # colours rather than to every pixel.
  sat = nz['saturation'].astype(_F32)[:, None, None]
  cmat = sat * np.eye(3, dtype=_F32) + (1.0 - sat) * LUMA[None, None, :]
  cmat = cmat * nz['tint'].astype(_F32)[:, None, :]
  # einsum rather than matmul: no BLAS threads involved (see _blur).
  img = np.einsum('nck,knp->ncp', np.einsum('ncd,ndk->nck', cmat, cols), w)  # [n, 3, H*W]
  img *= light.reshape(n, 1, -1)
  return img.reshape(n, 3, size, size)


def _camera(img: np.ndarray, nz: Mapping[str, np.ndarray], size: int) -> np.ndarray:
  """uint8 `[n, 3, H, W]`: gaussian blur, then sensor noise, then quantisation."""
  sigma = nz['blur'] * (size / 32.0)
  idx = np.flatnonzero(sigma > 0.3)
  if idx.size:
    img[idx] = _blur(img[idx], sigma[idx])
  # Uniform sensor noise with std nuisance['noise'] (a uniform on [-a, a] has std a / sqrt(3)).
  noise = _noise_bank(size)[nz['noise_seed'] % _NOISE_BANK]
  img += noise * _c(nz['noise'] * (np.sqrt(3.0) / 127.0))[:, None]
  img = img * 255.0 + 0.5
  return np.clip(img, 0.0, 255.0, out=img).astype(np.uint8)


def _render_chunk(ip: Mapping[str, np.ndarray], nz: Mapping[str, np.ndarray],
                  size: int) -> np.ndarray:
  """Renders one chunk; see `render_faces`. Returns uint8 `[n, 3, size, size]` (channel first).

  Layers back to front: the backdrop, the body and head, the facial features (in texture
  coordinates, each on the band of rows it can reach), the head's hair, glasses and occluders;
  then shading, compositing, the camera's colour, blur and noise.
  """
  canvas = _Canvas(ip['head_w'].shape[0], size)
  look = _look(ip, nz)
  head = _head(ip, nz, look, canvas)
  hairline, hair_in, ring = _hair_masks(ip, head, look)
  _paint_background(canvas, nz)
  num_bg_layers = len(canvas.layers)
  _paint_body(canvas, head, look, ring, nz)
  layout = _layout(ip, nz, look)
  eye = _eye_band(canvas, head, layout, ip)
  _paint_eye_sockets(canvas, head, eye, layout, look)
  _paint_eyes(canvas, head, eye, layout, look, ip, nz)
  _paint_brows(canvas, head, eye, layout, look, ip)
  glasses = _glasses_layers(canvas, head, eye, layout, ip, nz)
  _paint_age_lines(canvas, head, layout, look, hairline)
  _paint_beard(canvas, head, layout, look)
  _paint_mouth(canvas, head, layout, look, ip, nz)
  _paint_mole(canvas, head, ip)
  nose = _paint_nose(canvas, head, layout, look, ip)
  _paint_ears(canvas, head, layout, look, ip, nz)
  canvas.add(hair_in * head.head_m, look.hair_rgb)  # over skin and ears
  for layer in glasses:  # on the hair
    canvas.add(*layer)
  _paint_occluders(canvas, head, layout, look, nz)
  shade = _shading(head, nose, nz)
  return _camera(_expose(canvas, nz, shade, num_bg_layers), nz, size)


def face_frame(nuisance: Mapping[str, np.ndarray], size: int) -> tuple[np.ndarray, np.ndarray]:
  """Head coordinates (x, y) `[n, size, size]` float32 of every pixel of a size x size image: the
  renderer's similarity transform (alignment jitter, scale and roll of `nuisance`) from image
  coordinates in [-1, 1]; the head is the ellipse of half-axes (head_w, head_h) around 0."""
  f32 = _F32
  c = lambda a: np.asarray(a, f32).reshape(-1, 1, 1)
  pw = 2.0 / size
  g = (np.arange(size, dtype=f32) + 0.5) * f32(pw) - 1.0
  u = g[None, None, :]
  v = g[None, :, None]
  scale = _FACE_SCALE * nuisance['scale']
  v_center = _FACE_CENTER_Y + nuisance['shift_y']
  cr, sr = c(np.cos(nuisance['roll']) / scale), c(np.sin(nuisance['roll']) / scale)
  px = u - c(nuisance['shift_x'])
  py = v - c(v_center)
  return cr * px + sr * py, cr * py - sr * px


def face_landmarks(identity_params: Mapping[str, np.ndarray], nuisance: Mapping[str, np.ndarray],
                   size: int) -> np.ndarray:
  """`[n, 5, 2]` float32 (x, y) pixel coordinates (cv2's: column and row of a pixel centre) of the
  five points face detectors give (left eye, right eye, nose tip, left and right mouth corner) in
  the rendered `size` x `size` images: the eye centres, the nose's bottom and the mouth's ends of
  the layout (`_layout`, at the image's age and expression), mapped by the inverse of
  `face_frame`'s similarity. Exact for frontal faces (yaw = pitch = 0), which is how IJB fixtures
  render them; under yaw the drawn features slide off these points."""
  ip = {k: np.asarray(v) for k, v in identity_params.items()}
  layout = _layout(ip, nuisance, _look(ip, nuisance))
  flat = lambda a: np.asarray(a, np.float64).reshape(-1)
  eye_dx, eye_y = flat(layout.eye_dx), flat(layout.eye_y)
  mouth_w, mouth_y = flat(layout.mw), flat(layout.mouth_y)
  head = np.stack([np.stack([-eye_dx, eye_y], -1), np.stack([eye_dx, eye_y], -1),
                   np.stack([np.zeros_like(eye_y), flat(layout.nose_y1)], -1),
                   np.stack([-mouth_w, mouth_y], -1), np.stack([mouth_w, mouth_y], -1)], 1)
  scale = (_FACE_SCALE * flat(nuisance['scale']))[:, None]
  cos, sin = np.cos(flat(nuisance['roll']))[:, None], np.sin(flat(nuisance['roll']))[:, None]
  x, y = head[..., 0], head[..., 1]
  u = flat(nuisance['shift_x'])[:, None] + scale * (cos * x - sin * y)
  v = _FACE_CENTER_Y + flat(nuisance['shift_y'])[:, None] + scale * (sin * x + cos * y)
  pixel = lambda t: (t + 1.0) * size / 2.0 - 0.5   # [-1, 1] image coordinates -> pixel centres
  return np.stack([pixel(u), pixel(v)], -1).astype(np.float32)


def face_depth(identity_params: Mapping[str, np.ndarray], nuisance: Mapping[str, np.ndarray],
               size: int) -> np.ndarray:
  """`[n, size, size]` float32 pseudo-depth of the rendered faces (PAD's live depth maps): the head
  as the ellipsoid of the renderer's silhouette (half-axes head_w, head_h, depth head_w; under yaw
  widened and slid back as rendered) with a nose bump where the texture's centre line faces,
  min-max normalised per image over the face (1 = nearest), 0 off the face."""
  x, y = face_frame(nuisance, size)
  a = np.asarray(identity_params['head_w'], _F32).reshape(-1, 1, 1)
  b = np.asarray(identity_params['head_h'], _F32).reshape(-1, 1, 1)
  sin_t = np.sin(np.asarray(nuisance['yaw'], _F32)).reshape(-1, 1, 1)
  xs = (x + 0.12 * a * sin_t) / (1.0 + 0.18 * np.abs(sin_t))
  inside = 1.0 - (xs / a) ** 2 - (y / b) ** 2
  z = a * np.sqrt(np.clip(inside, 0.0, 1.0))
  nose_y = 0.5 * (np.asarray(identity_params['eye_y'], _F32)
                  + np.asarray(identity_params['mouth_y'], _F32)).reshape(-1, 1, 1)
  nose_x = a * sin_t   # the surface point whose texture angle is 0
  z = z + 0.25 * a * np.exp(-((xs - nose_x) ** 2 + (y - nose_y) ** 2) / (2 * 0.07**2)) * (inside > 0)
  face = inside > 0
  lo = np.min(np.where(face, z, np.inf), axis=(1, 2), keepdims=True)
  hi = np.max(np.where(face, z, -np.inf), axis=(1, 2), keepdims=True)
  depth = np.where(face, (z - lo) / np.maximum(hi - lo, 1e-6), 0.0)
  return np.where(np.isfinite(depth), depth, 0.0).astype(_F32)


def render_faces(identity_params: dict[str, np.ndarray], nuisance: dict[str, np.ndarray],
                 image_size: int) -> np.ndarray:
  """Renders one image per row of `identity_params` / `nuisance`.

  Args:
    identity_params: as from `identities.sample_identities`, already gathered per image
      (leading dim n).
    nuisance: as from `nuisance.sample_nuisance`, leading dim n.
    image_size: output height and width in pixels (>= 16).

  Returns:
    uint8 `[n, image_size, image_size, 3]` RGB; a pure function of the inputs (also independent
    of how the work is chunked).
  """
  if image_size < 16:
    raise ValueError(f'image_size must be >= 16, got {image_size}')
  n = identity_params['head_w'].shape[0]
  for name, d in (('identity_params', identity_params), ('nuisance', nuisance)):
    for k, val in d.items():
      if val.shape[0] != n:
        raise ValueError(f'{name}[{k!r}] has {val.shape[0]} rows, expected {n}')
  out = np.empty((n, image_size, image_size, 3), np.uint8)
  if n == 0:
    return out
  chunk = max(1, _CHUNK_PIXELS // (image_size * image_size))
  starts = list(range(0, n, chunk))

  def work(s: int) -> None:
    e = min(n, s + chunk)
    rendered = _render_chunk({k: v[s:e] for k, v in identity_params.items()},
                             {k: v[s:e] for k, v in nuisance.items()}, image_size)
    out[s:e] = rendered.transpose(0, 2, 3, 1)

  # numpy releases the GIL inside its loops, so threads give a real speed-up on multi-core hosts.
  workers = min(len(starts), stores.usable_cpus(), 8)
  if workers <= 1:
    for s in starts:
      work(s)
  else:
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
      list(pool.map(work, starts))
  return out
