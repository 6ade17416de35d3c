"""The embedded face presentation-attack-detection (PAD) benchmark: five capture domains named
after the FedGPAD paper's data sets, live faces and print / display / replay attacks of the same
subjects.

The real sets (OULU-NPU, CASIA-MFSD, Idiap Replay-Attack, MSU-MFSD, SiW) cannot be had here, so
each is a capture setting with the traits the paper's Table I gives it (extra lighting, complex
backgrounds, its attack types and display devices) and a camera of its own. A frame is made in
three steps, all pure functions of the seed:

1. The scene: a subject of the domain rendered by `render.render_faces` (pose, expression and
   lighting of the domain's sessions; no camera effects yet), at twice the output size.
2. For an attack, the medium: the same subject's source photo (same pose, even light) reproduced
   by a print (reduced gamut, paper tone, halftone dots, paper grain, bending, visible edges and
   fingers when hand-held; `cut`: the eye regions cut out) or by a screen (its gamma and white
   point, the pixel grid that aliases into moire on re-capture, glare, the bezel; a `replay` adds
   the refresh banding of a video, moving from frame to frame), then placed in the scene's light.
3. The capture: the domain's camera (colour response, resolution, blur, sensor noise, JPEG),
   the same for live and attack frames, so that only the medium separates them.

Live frames carry a pseudo-depth map (`render.face_depth`, min-max normalised, as the
authors' PRNet maps are); attack frames an all-zero map. A video is `frames` frames of one
subject, one kind and one session (small pose and expression changes between frames); metrics
average frame scores per video. Each domain has its own subjects, split into train and test
subjects.
"""

import dataclasses
import io

import numpy as np
from PIL import Image

from fedjax_face.data.synthetic import identities, nuisance as nuisance_lib, render

ATTACKS = ('print', 'cut', 'display', 'replay')
LIVE = -1                      # `attack` value of a live frame
DEPTH_SIZE = 32                # the paper's depth maps


@dataclasses.dataclass(frozen=True)
class Camera:
  """A capture device: per-channel gains and gamma (its colour response), the share of the output
  resolution it resolves, blur (output pixels at 64x64), sensor noise std and JPEG quality."""
  gains: tuple[float, float, float]
  gamma: float
  resolution: float
  blur: float
  noise: float
  jpeg_quality: int


@dataclasses.dataclass(frozen=True)
class Screen:
  """A display device: pixel pitch (source pixels at twice the output size), gamma, white point,
  glare strength and bezel colour."""
  pitch: float
  gamma: float
  white: tuple[float, float, float]
  glare: float
  bezel: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Domain:
  """A data set as a capture setting (the paper's Table I)."""
  name: str
  title: str
  extra_light: bool              # strong, varied illumination between sessions
  complex_background: bool       # cluttered backgrounds (else plain walls)
  attacks: dict                  # attack kind -> share of the attack videos
  camera: Camera
  screens: tuple[Screen, ...]
  print_gamut: float             # share of the colour range a print keeps
  halftone: float                # halftone dot period (source pixels); 0 = continuous tone
  hand_held: float               # share of attacks held by hand (edges / bezel and fingers show)


_DELL = Screen(pitch=2.3, gamma=1.15, white=(0.96, 0.98, 1.04), glare=0.25, bezel=(0.1, 0.1, 0.11))
_RETINA = Screen(pitch=1.3, gamma=1.0, white=(1.0, 1.0, 1.02), glare=0.35, bezel=(0.6, 0.6, 0.62))
_IPAD = Screen(pitch=1.7, gamma=1.05, white=(0.98, 1.0, 1.05), glare=0.45, bezel=(0.05, 0.05, 0.05))
_IPHONE = Screen(pitch=2.0, gamma=1.1, white=(1.0, 0.99, 1.06), glare=0.4, bezel=(0.02, 0.02, 0.02))
_GALAXY = Screen(pitch=1.5, gamma=0.95, white=(1.02, 1.0, 0.98), glare=0.3, bezel=(0.15, 0.15, 0.2))

DOMAINS = {d.name: d for d in (
    Domain('O', 'OULU-NPU-like', extra_light=True, complex_background=False,
           attacks={'print': 0.5, 'display': 0.25, 'replay': 0.25},
           camera=Camera(gains=(1.0, 0.97, 0.93), gamma=1.0, resolution=1.0, blur=0.4,
                         noise=0.015, jpeg_quality=90),
           screens=(_DELL, _RETINA), print_gamut=0.8, halftone=0.0, hand_held=0.3),
    Domain('C', 'CASIA-MFSD-like', extra_light=False, complex_background=True,
           attacks={'print': 0.35, 'cut': 0.3, 'replay': 0.35},
           camera=Camera(gains=(1.05, 1.0, 0.9), gamma=1.1, resolution=0.5, blur=0.9,
                         noise=0.03, jpeg_quality=60),
           screens=(_IPAD,), print_gamut=0.7, halftone=3.0, hand_held=0.9),
    Domain('I', 'Replay-Attack-like', extra_light=True, complex_background=True,
           attacks={'print': 0.3, 'display': 0.3, 'replay': 0.4},
           camera=Camera(gains=(0.95, 1.0, 1.08), gamma=0.9, resolution=0.6, blur=0.7,
                         noise=0.035, jpeg_quality=70),
           screens=(_IPHONE, _IPAD), print_gamut=0.65, halftone=2.5, hand_held=0.5),
    Domain('M', 'MSU-MFSD-like', extra_light=False, complex_background=True,
           attacks={'print': 0.5, 'replay': 0.5},
           camera=Camera(gains=(1.0, 1.02, 1.0), gamma=1.05, resolution=0.75, blur=0.5,
                         noise=0.02, jpeg_quality=80),
           screens=(_IPAD, _IPHONE), print_gamut=0.75, halftone=2.0, hand_held=0.2),
    Domain('S', 'SiW-like', extra_light=True, complex_background=True,
           attacks={'print': 0.3, 'display': 0.3, 'replay': 0.4},
           camera=Camera(gains=(1.02, 1.0, 0.98), gamma=1.0, resolution=0.9, blur=0.3,
                         noise=0.012, jpeg_quality=95),
           screens=(_DELL, _IPAD, _IPHONE, _GALAXY), print_gamut=0.85, halftone=1.5,
           hand_held=0.4),
)}
DOMAIN_NAMES = tuple(DOMAINS)

# Leave-one-domain-out (the paper's Tables III-V): three source data centers, one unseen target.
PROTOCOLS = {'OCI_M': (('O', 'C', 'I'), 'M'), 'OMI_C': (('O', 'M', 'I'), 'C'),
             'OCM_I': (('O', 'C', 'M'), 'I'), 'ICM_O': (('I', 'C', 'M'), 'O')}

_STREAM_OF = {name: 100 + i for i, name in enumerate(DOMAIN_NAMES)}   # synthetic's streams are < 100


@dataclasses.dataclass(frozen=True)
class PadSet:
  """The frames of one domain. `split` 0 = train subjects, 1 = test subjects."""
  domain: str
  images: np.ndarray   # uint8 [N, S, S, 3]
  depth: np.ndarray    # float32 [N, 32, 32], 0 for attacks
  live: np.ndarray     # bool [N]
  attack: np.ndarray   # int8 [N]: LIVE or an index into ATTACKS
  video: np.ndarray    # int32 [N], unique within the domain
  subject: np.ndarray  # int32 [N]
  split: np.ndarray    # int8 [N]

  def take(self, keep: np.ndarray) -> 'PadSet':
    """The frames where `keep` (a bool mask or indices)."""
    return dataclasses.replace(self, **{f.name: getattr(self, f.name)[keep]
                                        for f in dataclasses.fields(self) if f.name != 'domain'})


# -- the capture pipeline, as pure functions of arrays in [0, 1] -------------------------------

def _resize(images: np.ndarray, size: int) -> np.ndarray:
  """float [N, H, W, 3] -> [N, size, size, 3], area-averaged down or bilinear up (PIL)."""
  method = Image.BOX if size < images.shape[1] else Image.BILINEAR
  out = np.empty((len(images), size, size, 3), np.float32)
  for i, img in enumerate(images):
    channels = [Image.fromarray(img[..., ch].astype(np.float32), mode='F') for ch in range(3)]
    out[i] = np.stack([np.asarray(c.resize((size, size), method)) for c in channels], -1)
  return out


def _gaussian_blur(images: np.ndarray, sigma: float) -> np.ndarray:
  """Separable gaussian blur of [N, H, W, 3] by `sigma` pixels (edges reflected)."""
  if sigma <= 0:
    return images
  radius = max(1, int(np.ceil(3 * sigma)))
  taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
  taps /= taps.sum()
  out = images
  for axis in (1, 2):
    pad = [(0, 0)] * 4
    pad[axis] = (radius, radius)
    padded = np.pad(out, pad, mode='reflect')
    length = out.shape[axis]
    out = sum(w * np.take(padded, np.arange(k, k + length), axis=axis)
              for k, w in enumerate(taps))
  return out.astype(np.float32)


def _jpeg(images: np.ndarray, quality: int) -> np.ndarray:
  """uint8 [N, H, W, 3] through JPEG at `quality` (PIL), as a camera's compression."""
  out = np.empty_like(images)
  for i, img in enumerate(images):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format='JPEG', quality=int(quality))
    out[i] = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert('RGB'))
  return out


def capture(scene: np.ndarray, camera: Camera, size: int, rng: np.random.Generator) -> np.ndarray:
  """The domain's camera on a float scene [N, H, W, 3] in [0, 1]: colour response, the resolution
  it resolves, blur, sensor noise, then uint8 [N, size, size, 3] through JPEG."""
  x = np.clip(scene * np.asarray(camera.gains, np.float32), 0.0, 1.0) ** camera.gamma
  sensed = max(8, int(round(size * camera.resolution)))
  x = _resize(_resize(x, sensed), size)
  x = _gaussian_blur(x, camera.blur * size / 64.0)
  x = x + rng.normal(0.0, camera.noise, x.shape).astype(np.float32)
  x = (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
  return _jpeg(x, camera.jpeg_quality) if camera.jpeg_quality < 100 else x


def _grid(size: int) -> tuple[np.ndarray, np.ndarray]:
  """Pixel-centre coordinates in [-1, 1] of a size x size image: (u [1, S], v [S, 1])."""
  g = (np.arange(size, dtype=np.float32) + 0.5) * (2.0 / size) - 1.0
  return g[None, :], g[:, None]


def print_medium(source: np.ndarray, domain: Domain, rng: np.random.Generator,
                 cut_eyes: np.ndarray | None = None) -> np.ndarray:
  """A printed photo of `source` [N, H, W, 3] in [0, 1]: the printer's reduced gamut on a paper
  tone, halftone dots, paper grain and a bend (a horizontal warp with the shading it casts);
  `cut_eyes` [N, H, W] in [0, 1] marks holes cut in the paper (dark: the attacker behind)."""
  n, size = source.shape[0], source.shape[1]
  paper = np.array([0.97, 0.95, 0.9], np.float32)
  gamut = domain.print_gamut
  x = (1.0 - gamut) * 0.5 * paper + gamut * source
  u, v = _grid(size)
  if domain.halftone:
    angle = rng.uniform(0.0, np.pi / 2, (n, 1, 1))
    period = domain.halftone * 2.0 / size
    a = (u * np.cos(angle) + v * np.sin(angle)) / period
    b = (v * np.cos(angle) - u * np.sin(angle)) / period
    dots = 0.5 + 0.25 * (np.cos(2 * np.pi * a) + np.cos(2 * np.pi * b))   # in [0, 1]
    # A dot is inked where the screen value is below the ink coverage 1 - x (soft edges); 30 % of
    # the tone comes from the dots, the rest from the ink's spread.
    ink = np.clip((1.0 - x - dots[..., None]) * 4.0 + 0.5, 0.0, 1.0)
    x = 0.7 * x + 0.3 * (1.0 - ink)
  grain = rng.normal(0.0, 0.025, (n, size, size, 1)).astype(np.float32)
  x = x * (1.0 + grain)
  # Bending: the sheet curves about a vertical axis; its sides turn away and darken.
  bend = rng.uniform(0.0, 0.35, (n, 1, 1))
  warped_u = u * (1.0 + bend * (u ** 2 - 0.33))
  cols = np.clip(((warped_u + 1.0) * 0.5 * size - 0.5).round().astype(np.int64), 0, size - 1)
  x = np.take_along_axis(x, np.broadcast_to(cols[..., None], x.shape), axis=2)
  x = x * (1.0 - 0.5 * bend * u ** 2)[..., None]
  if cut_eyes is not None:
    x = x * (1.0 - cut_eyes[..., None]) + 0.08 * cut_eyes[..., None]
  return np.clip(x, 0.0, 1.0).astype(np.float32)


def screen_medium(source: np.ndarray, screens: list[Screen], rng: np.random.Generator,
                  banding_phase: np.ndarray | None = None) -> np.ndarray:
  """`source` [N, H, W, 3] in [0, 1] shown on `screens` (one per image): the screen's gamma and
  white point, its pixel grid (which the camera's resampling aliases into moire), a glare spot;
  `banding_phase` [N] adds a video's refresh banding (horizontal bands that move over frames)
  where it is not NaN (a still photo on the screen has none)."""
  n, size = source.shape[0], source.shape[1]
  u, v = _grid(size)
  gamma = np.array([s.gamma for s in screens], np.float32)[:, None, None, None]
  white = np.array([s.white for s in screens], np.float32)[:, None, None, :]
  x = source ** gamma * white
  pitch = np.array([s.pitch for s in screens], np.float32)[:, None, None] * 2.0 / size
  angle = rng.uniform(-0.08, 0.08, (n, 1, 1))
  cu = (u * np.cos(angle) + v * np.sin(angle)) / pitch
  cv = (v * np.cos(angle) - u * np.sin(angle)) / pitch
  cells = (0.88 + 0.12 * np.cos(2 * np.pi * cu)) * (0.92 + 0.08 * np.cos(2 * np.pi * cv))
  x = x * cells[..., None]
  glare = np.array([s.glare for s in screens], np.float32)[:, None, None]
  gx, gy = rng.uniform(-0.7, 0.7, (2, n, 1, 1))
  spot = glare * rng.uniform(0.3, 1.0, (n, 1, 1)) * np.exp(-((u - gx) ** 2 + (v - gy) ** 2) / 0.08)
  x = x + spot[..., None]
  if banding_phase is not None:
    phase = banding_phase[:, None, None]
    bands = 1.0 - 0.12 * (0.5 + 0.5 * np.sin(2 * np.pi * (v * 3.0 + np.nan_to_num(phase))))
    x = x * np.where(np.isnan(phase), 1.0, bands)[..., None]
  return np.clip(x, 0.0, 1.0).astype(np.float32)


def hold(medium: np.ndarray, scene: np.ndarray, frame_color: np.ndarray, held: np.ndarray,
         rng: np.random.Generator) -> np.ndarray:
  """The medium in front of the camera: filling the frame, or (`held`) smaller, its edge (paper
  white or a screen's bezel, `frame_color` [N, 3]) and the scene's background around it, with
  fingers on its lower edge."""
  n, size = medium.shape[0], medium.shape[1]
  u, v = _grid(size)
  scale = np.where(held, rng.uniform(0.72, 0.85, n), 1.0)[:, None, None]
  du, dv = rng.uniform(-0.06, 0.06, (2, n, 1, 1)) * held[None, :, None, None]
  su, sv = (u - du) / scale, (v - dv) / scale
  cols = np.clip(((su + 1.0) * 0.5 * size - 0.5).round().astype(np.int64), 0, size - 1)
  rows = np.clip(((sv + 1.0) * 0.5 * size - 0.5).round().astype(np.int64), 0, size - 1)
  picked = medium[np.arange(n)[:, None, None], rows, cols]
  inside = ((np.abs(su) < 1.0) & (np.abs(sv) < 1.0))[..., None]
  border = ((np.abs(su) < 1.08) & (np.abs(sv) < 1.08))[..., None]
  out = np.where(inside, picked, np.where(border, frame_color[:, None, None, :], scene))
  fx = rng.uniform(-0.5, 0.5, (n, 1, 1))
  finger = (((u - fx) / 0.09) ** 2 + ((v - scale - dv) / 0.16) ** 2 < 1.0) & held[:, None, None]
  skin = np.array([0.85, 0.65, 0.55], np.float32)
  return np.where(finger[..., None], skin, out).astype(np.float32)


# -- one domain --------------------------------------------------------------------------------

def _session_nuisance(rng: np.random.Generator, n: int, domain: Domain) -> dict:
  """Per-video scene draws: pose and expression of the benchmark's 'lfw' profile, the domain's
  lighting and backgrounds, no camera effects (the domain's camera adds its own)."""
  nz = nuisance_lib.sample_nuisance(rng, n, 'lfw', 1.0)
  light = 1.3 if domain.extra_light else 0.45
  nz['light_strength'] = np.clip(nz['light_strength'] * light, 0.0, 0.9).astype(np.float32)
  nz['gain'] = np.exp(np.log(nz['gain']) * light).astype(np.float32)
  nz['grad'] = (nz['grad'] * light).astype(np.float32)
  if not domain.complex_background:
    grey = rng.uniform(0.55, 0.85, (n, 1)).astype(np.float32)
    nz['bg_color'] = np.repeat(grey, 3, axis=1)
    nz['bg_color2'] = nz['bg_color'] * 0.95
    nz['blob_r'] = np.zeros(n, np.float32)
  nz['blur'] = np.zeros(n, np.float32)
  nz['noise'] = np.zeros(n, np.float32)
  nz['occluder'] = np.full(n, nuisance_lib.OCC_NONE, np.int32)
  nz['saturation'] = np.maximum(nz['saturation'], 0.7).astype(np.float32)
  return nz


PHOTO_LIGHT = ('light_strength', 'gain', 'grad')   # what a source photo's nuisance changes


def photo_nuisance(nuisance: dict) -> dict:
  """An attack's source photo of a frame: the same subject, pose, expression and scene, evenly
  lit (`PHOTO_LIGHT` alone differs), so that live and attack frames differ in the capture cues,
  not in who or how the face is."""
  n = len(nuisance['yaw'])
  return {**nuisance, 'light_strength': np.full(n, 0.3, np.float32),
          'gain': np.ones(n, np.float32), 'grad': np.zeros(n, np.float32)}


def _frames_of(nz: dict, frames: int, rng: np.random.Generator) -> dict:
  """Each video's nuisance repeated per frame, with the small pose and expression changes of a
  few frames of one video."""
  out = {k: np.repeat(v, frames, axis=0) for k, v in nz.items()}
  m = len(out['yaw'])
  for key, sd in (('yaw', 0.04), ('pitch', 0.03), ('roll', 0.02), ('smile', 0.1),
                  ('shift_x', 0.01), ('shift_y', 0.01)):
    out[key] = (out[key] + rng.normal(0.0, sd, m)).astype(np.float32)
  out['noise_seed'] = rng.integers(0, 2**32, m, dtype=np.uint64).astype(np.uint32)
  return out


def _eye_holes(ip: dict, nz: dict, size: int) -> np.ndarray:
  """[N, S, S] masks of the two eye regions (the cut-photo attack's holes), placed with the
  renderer's face transform (`render.face_frame`)."""
  x, y = render.face_frame(nz, size)
  yaw_shift = np.sin(nz['yaw'])[:, None, None] * ip['head_w'][:, None, None] * 0.8
  holes = np.zeros_like(x)
  for side in (-1.0, 1.0):
    ex = side * ip['eye_dx'][:, None, None] + yaw_shift
    dx = (x - ex) / (ip['eye_w'][:, None, None] * 1.6)
    dy = (y - ip['eye_y'][:, None, None]) / 0.09
    holes = np.maximum(holes, (dx * dx + dy * dy < 1.0).astype(np.float32))
  return holes


def make_domain(name: str, *, seed: int, image_size: int = 64, subjects: int = 20,
                test_subjects: int = 8, live_videos: int = 2, attack_videos: int = 4,
                frames: int = 4) -> PadSet:
  """Every frame of domain `name` (a pure function of the arguments)."""
  if name not in DOMAINS:
    raise ValueError(f'PAD domain {name!r}; expected one of {DOMAIN_NAMES}.')
  for field, value, low in (('image_size', image_size, 16), ('subjects', subjects, 2),
                            ('live_videos', live_videos, 1), ('attack_videos', attack_videos, 1),
                            ('frames', frames, 1), ('test_subjects', test_subjects, 1)):
    if not isinstance(value, int) or value < low:
      raise ValueError(f'{field}={value!r}; expected an integer >= {low}.')
  if test_subjects >= subjects:
    raise ValueError(f'test_subjects={test_subjects} of subjects={subjects}; expected fewer, so '
                     'that the domain keeps training subjects.')
  domain = DOMAINS[name]
  rng = np.random.default_rng(np.random.SeedSequence([seed, _STREAM_OF[name]]))
  people = identities.sample_identities(rng, subjects)
  kinds = list(domain.attacks)
  shares = np.array([domain.attacks[k] for k in kinds])
  # Videos: every subject's live videos, then its attack videos (kinds by the domain's mix).
  per_subject = live_videos + attack_videos
  subject = np.repeat(np.arange(subjects), per_subject)
  attack = np.tile(np.r_[np.full(live_videos, LIVE),
                         np.zeros(attack_videos, np.int64)], subjects)
  is_attack = attack != LIVE
  drawn = rng.choice(len(kinds), size=int(is_attack.sum()), p=shares / shares.sum())
  attack[is_attack] = [ATTACKS.index(kinds[i]) for i in drawn]
  num_videos = len(subject)
  video_nz = _session_nuisance(rng, num_videos, domain)
  screen_of = rng.integers(0, len(domain.screens), num_videos)
  held = rng.random(num_videos) < domain.hand_held
  # Frames.
  nz = _frames_of(video_nz, frames, rng)
  f_subject, f_attack = np.repeat(subject, frames), np.repeat(attack, frames)
  f_video = np.repeat(np.arange(num_videos), frames)
  ip = {k: v[f_subject] for k, v in people.items()}
  src = 2 * image_size
  scene = render.render_faces(ip, nz, src).astype(np.float32) / 255.0
  images = scene.copy()
  spoof = f_attack != LIVE
  if spoof.any():
    idx = np.flatnonzero(spoof)
    photo_nz = photo_nuisance({k: v[idx] for k, v in nz.items()})
    photo_ip = {k: v[idx] for k, v in ip.items()}
    photo = render.render_faces(photo_ip, photo_nz, src).astype(np.float32) / 255.0
    kind = f_attack[idx]
    medium = np.empty_like(photo)
    frame_color = np.empty((len(idx), 3), np.float32)
    on_paper = (kind == ATTACKS.index('print')) | (kind == ATTACKS.index('cut'))
    if on_paper.any():
      p = np.flatnonzero(on_paper)
      cut = kind[p] == ATTACKS.index('cut')
      holes = _eye_holes({k: v[p] for k, v in photo_ip.items()},
                         {k: v[p] for k, v in photo_nz.items()}, src) * cut[:, None, None]
      medium[p] = print_medium(photo[p], domain, rng, cut_eyes=holes)
      frame_color[p] = (0.97, 0.95, 0.9)
    if (~on_paper).any():
      s = np.flatnonzero(~on_paper)
      screens = [domain.screens[i] for i in screen_of[f_video[idx[s]]]]
      replay = kind[s] == ATTACKS.index('replay')
      phase = np.where(replay, rng.uniform(0.0, 1.0, len(s)), np.nan)
      medium[s] = screen_medium(photo[s], screens, rng, banding_phase=phase)
      frame_color[s] = [sc.bezel for sc in screens]
    # The scene's light falls on the medium too (its gain and tint), then it is held up.
    light = (nz['gain'][idx, None] * nz['tint'][idx]).astype(np.float32)
    medium = np.clip(medium * light[:, None, None, :] ** 0.5, 0.0, 1.0)
    images[idx] = hold(medium, scene[idx], frame_color, held[f_video[idx]], rng)
  out = capture(images, domain.camera, image_size, rng)
  depth = render.face_depth(ip, nz, DEPTH_SIZE) * (~spoof)[:, None, None]
  split = (f_subject >= subjects - test_subjects).astype(np.int8)
  return PadSet(domain=name, images=out, depth=depth.astype(np.float32), live=~spoof,
                attack=f_attack.astype(np.int8), video=f_video.astype(np.int32),
                subject=f_subject.astype(np.int32), split=split)


def make_benchmark(*, seed: int, domains=DOMAIN_NAMES, **kwargs) -> dict[str, PadSet]:
  """`make_domain` for each of `domains` (the same sizes for all)."""
  return {name: make_domain(name, seed=seed, **kwargs) for name in domains}
