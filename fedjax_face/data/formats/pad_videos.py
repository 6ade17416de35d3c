"""Frames from the videos anti-spoofing data sets ship (.avi, .mov, .mp4): the video list, the
frame sampling rules, face boxes and crops; decoding with PyAV (`pip install -e '.[video]'`).

A video list is a text file, one video a line: `<path> <label>`, whitespace-separated, the path
relative to the list's video root, 1 = live (the FedGPAD lists' line; docs/references.md,
pad-list-layouts). Each data set names live and attack videos its own way, so the list is the
user's one statement of which is which (docs/pad.md gives the one-line command per data set).

Sampling (frames numbered from 0 in decoding order, n per video):
  'ssdg'   SSDG's rule, k frames `6 + j*floor(n/k)`, j < k (k = 1 for training videos, 2 for the
           target, in SSDG; MCIO's two frames are this rule at k = 2);
  'every'  every k-th frame from frame 0;
  'all'    every frame.

Face boxes (no detector is bundled: weights cannot be fetched here, and the papers each used their
own):
  'center' the central square of the frame;
  'dat'    a `<video stem>.dat` beside each video, line i = frame i's box `y1 x1 w h` (commas or
           spaces), CASIA-style;
  'csv'    one CSV from any detector, header `video,frame,x,y,w,h` (the video as its list path, the
           frame number, the box's top-left corner and size in pixels).
The crop is the box scaled about its centre by `box_scale`, clipped to the frame, then resized
bilinearly to a square of `size` pixels (the face is stretched when the box is not square, as the
authors' crops are).

Every bad input raises a `PadVideoError` naming the file and line (the list's, or the box file's)
and what was expected: a malformed line, a label other than 0 / 1, a missing video or box file, a
video that does not decode, a sampled frame the video does not have or without a box.
"""

from __future__ import annotations

import csv
import dataclasses
import os

import numpy as np
from PIL import Image

from fedjax_face.core import checks
from fedjax_face.data.formats import pad_lists

VIDEO_EXTENSIONS = ('.avi', '.mov', '.mp4')
SAMPLINGS = ('ssdg', 'every', 'all')
BOXES = ('center', 'dat', 'csv')
CSV_HEADER = ('video', 'frame', 'x', 'y', 'w', 'h')


class PadVideoError(checks.UsageError):
  """A video list, video or box file that cannot be used; the message names it."""


@dataclasses.dataclass(frozen=True)
class Video:
  path: str        # as the list gives it (relative to the video root)
  live: bool
  origin: str      # '<list file>:<line>'


def read_video_list(path: str, video_root: str) -> list[Video]:
  """The videos of a video list, each checked to exist under `video_root`."""
  if not os.path.isfile(path):
    raise PadVideoError(f'{path}: no such video list.')
  videos = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if not line.strip():
        continue
      origin = f'{path}:{number}'
      words = line.split()
      if len(words) != 2:
        raise PadVideoError(f'{origin}: malformed line {line.strip()!r}; expected '
                            '`<video path> <label>`.')
      rel, label = words
      if label not in ('0', '1'):
        raise PadVideoError(f'{origin}: label {label!r}; expected 1 (live) or 0 (attack).')
      if os.path.splitext(rel)[1].lower() not in VIDEO_EXTENSIONS:
        raise PadVideoError(f'{origin}: {rel!r} is not a video; expected one of '
                            f'{VIDEO_EXTENSIONS}.')
      if not os.path.isfile(os.path.join(video_root, rel)):
        raise PadVideoError(f'{origin}: the video {os.path.join(video_root, rel)} does not '
                            'exist.')
      videos.append(Video(rel, label == '1', origin))
  if not videos:
    raise PadVideoError(f'{path}: no videos listed.')
  return videos


def sampled(n: int, sampling: str, k: int) -> list[int]:
  """The frame numbers kept of a video of `n` frames (module docstring)."""
  if sampling == 'ssdg':
    return pad_lists.ssdg_picks(n, k)
  if sampling == 'every':
    return list(range(0, n, k))
  if sampling == 'all':
    return list(range(n))
  raise ValueError(f'sampling {sampling!r}; expected one of {SAMPLINGS}.')


def _av():
  try:
    import av  # pylint: disable=g-import-not-at-top  (optional: only videos need it)
  except ImportError:
    raise PadVideoError("Decoding videos needs PyAV: pip install -e '.[video]' "
                        '(or pip install av).') from None
  return av


def decoded_frames(path: str, origin: str, rgb: bool = True):
  """The video's frames as uint8 RGB arrays (`rgb`; else PyAV's frames, unconverted, for
  counting), in decoding order (a generator)."""
  av = _av()
  try:
    with av.open(path) as container:
      if not container.streams.video:
        raise PadVideoError(f'{origin}: {path} has no video stream.')
      for frame in container.decode(video=0):
        yield frame.to_ndarray(format='rgb24') if rgb else frame
  except PadVideoError:
    raise
  except Exception as e:  # pylint: disable=broad-except  (FFmpeg's errors, and PyAV's own)
    raise PadVideoError(f'{origin}: {path} does not decode as a video '
                        f'({type(e).__name__}: {e}).') from None


def kept_frames(path: str, origin: str, sampling: str, k: int):
  """(frame number, uint8 RGB frame) of each frame `sampling` keeps, in order, one frame in
  memory at a time ('ssdg' decodes the video twice: its rule needs the frame count first, which
  containers often do not record)."""
  if sampling == 'ssdg':
    n = sum(1 for _ in decoded_frames(path, origin, rgb=False))
    want = sampled(n, sampling, k)
    if not n or want[-1] >= n:
      raise PadVideoError(f'{origin}: {path} decodes to {n} frames; SSDG\'s sampling keeps '
                          f'frames {want} (6 + j*floor(n/k), k={k}).')
  for number, frame in enumerate(decoded_frames(path, origin)):
    if sampling == 'ssdg' and number > want[-1]:
      return
    if (sampling == 'all' or (sampling == 'every' and number % k == 0)
        or (sampling == 'ssdg' and number in want)):
      yield number, frame


def _box_numbers(words: list[str], origin: str, n: int) -> tuple[int, ...]:
  try:
    values = tuple(int(round(float(w))) for w in words)
  except ValueError:
    values = ()
  if len(values) != n:
    raise PadVideoError(f'{origin}: malformed box {" ".join(words)!r}; expected {n} numbers.')
  return values


def read_dat_boxes(path: str) -> list[tuple[int, int, int, int] | None]:
  """A CASIA-style `.dat`: line i = frame i's `y1 x1 w h`, as (x, y, w, h); a blank or all-zero
  line = no face found in that frame (None)."""
  if not os.path.isfile(path):
    raise PadVideoError(f'{path}: no such box file (boxes=dat expects one beside each video).')
  boxes = []
  with open(path) as f:
    for number, line in enumerate(f, 1):
      words = line.replace(',', ' ').split()
      if not words:
        boxes.append(None)
        continue
      y1, x1, w, h = _box_numbers(words, f'{path}:{number}', 4)
      boxes.append((x1, y1, w, h) if w > 0 and h > 0 else None)
  return boxes


def read_csv_boxes(path: str) -> dict[tuple[str, int], tuple[int, int, int, int]]:
  """{(video, frame): (x, y, w, h)} of a detector's CSV (module docstring)."""
  if not os.path.isfile(path):
    raise PadVideoError(f'{path}: no such box file.')
  boxes = {}
  with open(path, newline='') as f:
    rows = csv.reader(f)
    header = tuple(w.strip() for w in next(rows, ()))
    if header != CSV_HEADER:
      raise PadVideoError(f'{path}:1: header {",".join(header)!r}; expected '
                          f'{",".join(CSV_HEADER)!r}.')
    for number, row in enumerate(rows, 2):
      if not row:
        continue
      origin = f'{path}:{number}'
      if len(row) != len(CSV_HEADER):
        raise PadVideoError(f'{origin}: malformed row {",".join(row)!r}; expected '
                            f'{",".join(CSV_HEADER)}.')
      frame, x, y, w, h = _box_numbers(row[1:], origin, 5)
      if w <= 0 or h <= 0:
        raise PadVideoError(f'{origin}: box of size {w}x{h}; expected a positive width and '
                            'height.')
      boxes[(row[0].strip(), frame)] = (x, y, w, h)
  return boxes


def center_box(height: int, width: int) -> tuple[int, int, int, int]:
  """(x, y, w, h) of the frame's central square."""
  side = min(height, width)
  return (width - side) // 2, (height - side) // 2, side, side


def crop(frame: np.ndarray, box: tuple[int, int, int, int], size: int,
         box_scale: float = 1.0) -> np.ndarray:
  """uint8 [size, size, 3]: the box (x, y, w, h) scaled about its centre, clipped to the frame,
  resized bilinearly."""
  x, y, w, h = box
  cx, cy = x + w / 2, y + h / 2
  w, h = w * box_scale, h * box_scale
  height, width = frame.shape[:2]
  left, top = max(int(round(cx - w / 2)), 0), max(int(round(cy - h / 2)), 0)
  right, bottom = min(int(round(cx + w / 2)), width), min(int(round(cy + h / 2)), height)
  if right <= left or bottom <= top:
    raise ValueError(f'box {box} lies outside the {width}x{height} frame.')
  face = Image.fromarray(frame[top:bottom, left:right])
  return np.asarray(face.resize((size, size), Image.BILINEAR), np.uint8)
