"""The three anti-spoofing list layouts researchers hold (docs/references.md, pad-list-layouts):
readers, and the writers the tests and `tools/export_pad.py` use. No framework needed.

A data center is a root directory in one layout; each layout has a training split ('train') and
an evaluation split ('test'):

  'fedgpad'  the FedGPAD authors' lists (MADDoG, RFMetaFAS). A line is `<path relative to root>
             <label>`, whitespace-separated, 1 = live. 'train' = `image_list_real.txt` plus
             `image_list_fake.txt` (or `_print.txt` / `_video.txt`: `attack_list`); 'test' =
             `image_list_all.txt` (the target's, and a data center's frames scored for the
             'validation' threshold and the in-domain error). The video of a frame is its folder.
  'ssdg'     SSDG's JSON lists: 'train' = `train_label.json`, 'test' = `test_label.json`, each a
             JSON array of `{"photo_path", "photo_label"}` (1 = live; a relative path is taken
             from the root), and `"photo_belong_to_video_ID"` in SSDG's sampled `choose_*` lists.
             With that field every listed frame is kept, its video is that id; without it the
             video is the frame's folder and SSDG's sampling keeps k frames of a video of n
             (frames sorted by number): indices `6 + j*floor(n/k)`, j < k.
  'mcio'     MCIO text lists (FLIP, FedSIS): `<ds>_{real,fake}_{train,test}.txt`, one path a
             line; the label is the list's (real = live). A line naming `<video>_frame0.<ext>`
             is two frames of one video: `frame1` is the same path with `frame0` replaced. Any
             other line (WCS's and CelebA-Spoof's lists) is one frame, its own video, as FLIP's
             loader groups them. A root is either a folder holding the lists, paths relative
             to it, or the tree FLIP and FedSIS ship: `txt/` holding every data set's lists and
             `frame/` the frames, paths relative to `frame/` (`data/MCIO`, `data/WCS`, or its
             `txt/`). `<ds>` is named (`data.pad_lists.datasets`) or the one found. A data set
             in `TRAIN_ONLY` (CelebA-Spoof's `celeb`, an extra training client) has no test
             split: asking for it is refused.

Depth maps (any layout, training split only): with depth policy 'maps' a live frame's map is
`depth/<first k directories of its path>/<stem>_depth.jpg` under the root (the folder its
path is relative to: `frame/` in FLIP's tree), k per data set
(`DEPTH_DIRS`: OULU 1, MSU 2, CASIA 3, idiap 3, SiW 4; overridable), and every attack frame's is
`depth/fake_depth.jpg`. Policy 'ones': no files read; live maps all ones (as CDCN code does),
attack maps zeros. (A 'none' policy, no depth loss, is not offered: FedPAD's and FedGPAD's losses
need a target per frame.)

Attack species (`Frames.species`): the 'fedgpad' training split's `_print` list labels its
attack frames 'print' and its `_video` list 'replay' (`ATTACK_LIST_SPECIES`); no other list of
these layouts names a species (`_fake`, `image_list_all.txt`, SSDG's and MCIO's lists): None.
CelebA-Spoof's own labels (`celeba_spoof.py`) name one per image.

Order: a reader returns a split's frames sorted by (the video's base name, the video, the frame
path), whatever the order of its lines or lists; `tools/export_pad.py` names videos so that this
order is the embedded benchmark's own.

Bad input stops with a `PadListError` naming the file and line (a JSON list: the entry): a line
naming a missing file, a label other than 0 / 1, a live frame without its depth map (policy
'maps'), a malformed line, a data center with no live or no attack frames, an MCIO root of
several data sets with none named, a test split of a training-only data set. With
`skip_bad_records` the bad entries (never an empty data center) are dropped and counted in one
log line.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import glob
import json
import os

from absl import logging
import numpy as np
from PIL import Image

from fedjax_face.core import checks

LAYOUTS = ('fedgpad', 'ssdg', 'mcio')
SPLITS = ('train', 'test')
DEPTH_POLICIES = ('maps', 'ones')
ATTACK_LISTS = ('fake', 'print', 'video')     # image_list_<x>.txt of the 'fedgpad' layout
# The species an attack list labels its attack frames with (names of pad_benchmark.ATTACKS):
# FedGPAD's `_print` list holds printed photos, its `_video` list screen replays (tools/
# export_pad.py writes print + cut and display + replay into them); `_fake` says nothing.
ATTACK_LIST_SPECIES = {'fake': None, 'print': 'print', 'video': 'replay'}
# k of `depth/<first k dirs>/...` per data set, by its name or the embedded benchmark's letter.
DEPTH_DIRS = {'OULU': 1, 'MSU': 2, 'CASIA': 3, 'idiap': 3, 'SiW': 4,
              'O': 1, 'M': 2, 'C': 3, 'I': 3, 'S': 4}
FAKE_DEPTH = 'depth/fake_depth.jpg'
SSDG_LISTS = {'train': 'train_label.json', 'test': 'test_label.json'}
SSDG_FIRST = 6                               # SSDG's first sampled frame index
# FLIP's and FedSIS's shipped tree (`data/MCIO`, `data/WCS`): the lists, and what paths are
# relative to.
MCIO_LISTS, MCIO_FRAMES = 'txt', 'frame'
# The MCIO-layout data sets that ship training lists only: CelebA-Spoof (FLIP's
# `celeb_{real,fake}_train.txt`), which FLIP and FedSIS add as a training client, never a target.
TRAIN_ONLY = {'celeb': 'CelebA-Spoof'}


class PadListError(checks.UsageError):
  """Bad list input; the message names the file and line."""


@dataclasses.dataclass
class Frames:
  """One split of one data center. `paths` absolute; `depth` the depth map file of each frame
  (None: policy 'ones', or an evaluation split); `origins` '<file>:<line>' of each frame;
  `species` each attack frame's attack instrument species where its layout labels it (a name
  of `pad_benchmark.ATTACKS`, or one outside them such as CelebA-Spoof's '3d_mask'), None for a
  live frame or an unlabelled attack (`ATTACK_LIST_SPECIES`); `boxes` each frame's face box
  (x, y, w, h) in BOX_REFERENCE-scaled pixels, cropped when decoded (`scaled_box`), or None
  (the whole image: every layout but CelebA-Spoof's)."""
  paths: list[str]
  live: np.ndarray          # bool [N]
  video: np.ndarray         # int32 [N]: 0..V-1 in the sorted order of the videos
  videos: list[str]         # the video names, by id
  depth: list[str | None]
  origins: list[str]
  species: list[str | None]
  boxes: list[tuple[int, int, int, int] | None]


class Records:
  """Raises on a bad record, or (skip) counts it for one log line at the end."""

  def __init__(self, skip: bool):
    self.skip, self.bad = skip, []

  def bad_record(self, message: str) -> None:
    if not self.skip:
      raise PadListError(message)
    self.bad.append(message)

  def log(self, root: str) -> None:
    if self.bad:
      logging.warning('pad_lists: skipped %d bad record(s) under %s (first: %s)',
                      len(self.bad), root, self.bad[0])


def depth_path(rel: str, k: int) -> str | None:
  """`depth/<first k dirs of rel>/<stem>_depth.jpg`, or None when `rel` has fewer than k dirs."""
  parts = rel.replace('\\', '/').split('/')
  if len(parts) - 1 < k:
    return None
  stem = os.path.splitext(parts[-1])[0]
  return '/'.join(['depth'] + parts[:k] + [f'{stem}_depth.jpg'])


def frame1_path(frame0: str) -> str:
  """MCIO's second frame of a video: the `frame0` path with `frame0` replaced."""
  head, tail = os.path.split(frame0)
  return os.path.join(head, tail.replace('frame0', 'frame1'))


def sorted_frames(entries: list[tuple], root: str, split: str, depth_policy: str,
                  depth_dirs: int | None, records: Records, lists: list[str]) -> Frames:
  """entries (rel path, live, video name, origin[, attack species[, face box]]) -> Frames in the
  documented order, after the file and depth checks (a live frame's species is None whatever is
  given)."""
  kept = []
  for rel, live, video, origin, *extra in entries:
    species, box = (list(extra) + [None, None])[:2]
    species = None if live else species
    full = rel if os.path.isabs(rel) else os.path.join(root, rel)
    if not os.path.isfile(full):
      records.bad_record(f'{origin}: the frame {full} does not exist.')
      continue
    depth = None
    if split == 'train' and depth_policy == 'maps':
      if live:
        relative = os.path.relpath(full, root)
        d = depth_path(relative, depth_dirs)
        if d is None:
          records.bad_record(f'{origin}: the path {relative} has fewer than {depth_dirs} '
                             f'directories; its depth map is depth/<first {depth_dirs} '
                             'directories>/<stem>_depth.jpg.')
          continue
        depth = os.path.join(root, d)
        if not os.path.isfile(depth):
          records.bad_record(f"{origin}: the live frame {relative} has no depth map {depth}; "
                             "data.pad_lists.depth='ones' trains on all-ones live maps instead.")
          continue
      else:
        depth = os.path.join(root, FAKE_DEPTH)
        if not os.path.isfile(depth):
          records.bad_record(f"{origin}: the attack frames' depth map {depth} does not exist; "
                             "data.pad_lists.depth='ones' trains without depth files.")
          continue
    kept.append((os.path.basename(video), video, full, live, depth, origin, species, box))
  records.log(root)
  kept.sort(key=lambda e: e[:3])
  for kind, has in (('live', any(e[3] for e in kept)), ('attack', any(not e[3] for e in kept))):
    if not has:
      raise PadListError(f'{", ".join(lists)}: the data center at {root} has no {kind} frames '
                         f'in its {split} split.')
  names = list(dict.fromkeys(e[1] for e in kept))
  index = {name: i for i, name in enumerate(names)}
  return Frames(paths=[e[2] for e in kept], live=np.array([e[3] for e in kept], bool),
                video=np.array([index[e[1]] for e in kept], np.int32), videos=names,
                depth=[e[4] for e in kept], origins=[e[5] for e in kept],
                species=[e[6] for e in kept], boxes=[e[7] for e in kept])


def _label(token: str, origin: str, records: Records) -> bool | None:
  if token not in ('0', '1'):
    records.bad_record(f'{origin}: label {token!r}; expected 0 (attack) or 1 (live).')
    return None
  return token == '1'


def _text_lines(path: str):
  if not os.path.isfile(path):
    raise PadListError(f'{path}: no such list file.')
  with open(path) as f:
    for number, line in enumerate(f, 1):
      if line.strip():
        yield f'{path}:{number}', line.rstrip('\n')


def read_fedgpad(root: str, split: str, *, depth_dirs: int, depth_policy: str = 'maps',
                 attack_list: str = 'fake', skip_bad_records: bool = False) -> Frames:
  """The FedGPAD authors' lists of `split` under `root` (see the module docstring)."""
  names = (['image_list_real.txt', f'image_list_{attack_list}.txt'] if split == 'train'
           else ['image_list_all.txt'])
  records, entries = Records(skip_bad_records), []
  lists = [os.path.join(root, n) for n in names]
  species = [None, ATTACK_LIST_SPECIES[attack_list]] if split == 'train' else [None]
  for path, kind in zip(lists, species):
    for origin, line in _text_lines(path):
      words = line.split()
      if len(words) != 2:
        records.bad_record(f'{origin}: malformed line {line!r}; expected "<path> <label>".')
        continue
      live = _label(words[1], origin, records)
      if live is not None:
        entries.append((words[0], live, os.path.dirname(words[0]), origin, kind))
  return sorted_frames(entries, root, split, depth_policy, depth_dirs, records, lists)


def ssdg_picks(n: int, k: int) -> list[int]:
  """SSDG's sampling: of a video's n frames (sorted by number) the indices `6 + j*floor(n/k)`,
  j < k (the last may be >= n: the caller decides what a too-short video means)."""
  return [SSDG_FIRST + j * (n // k) for j in range(k)]


def _frame_number(path: str):
  stem = os.path.splitext(os.path.basename(path))[0]
  return (0, int(stem), stem) if stem.isdigit() else (1, 0, stem)


def read_ssdg(root: str, split: str, *, frames_per_video: int, depth_dirs: int | None = None,
              depth_policy: str = 'ones', skip_bad_records: bool = False) -> Frames:
  """SSDG's JSON list of `split` under `root` (see the module docstring)."""
  path = os.path.join(root, SSDG_LISTS[split])
  if not os.path.isfile(path):
    raise PadListError(f'{path}: no such list file.')
  try:
    with open(path) as f:
      items = json.load(f)
  except json.JSONDecodeError as e:
    raise PadListError(f'{path}:{e.lineno}: not JSON ({e.msg}).') from None
  if not isinstance(items, list):
    raise PadListError(f'{path}: expected a JSON array of {{"photo_path", "photo_label"}}.')
  records, entries = Records(skip_bad_records), []
  sampled = False
  for i, item in enumerate(items):
    origin = f'{path}: entry {i}'
    if (not isinstance(item, dict) or not isinstance(item.get('photo_path'), str)
        or 'photo_label' not in item):
      records.bad_record(f'{origin}: malformed entry {item!r}; expected "photo_path" and '
                         '"photo_label".')
      continue
    live = _label(str(item['photo_label']), origin, records)
    if live is None:
      continue
    given = 'photo_belong_to_video_ID' in item
    sampled |= not given
    video = (str(item['photo_belong_to_video_ID']) if given
             else os.path.dirname(item['photo_path']))
    entries.append((item['photo_path'], live, video, origin))
  if sampled:   # SSDG's per-video sampling of a list of every frame
    by_video: dict[str, list] = {}
    for e in entries:
      by_video.setdefault(e[2], []).append(e)
    entries = []
    for video, frames in by_video.items():
      frames.sort(key=lambda e: _frame_number(e[0]))
      n, k = len(frames), frames_per_video
      picks = ssdg_picks(n, k)
      if picks[-1] >= n:
        records.bad_record(f'{frames[0][3]}: video {video} has {n} frames; SSDG\'s sampling '
                           f'keeps frames {picks} (6 + j*floor(n/k), k={k}).')
        continue
      entries += [frames[p] for p in picks]
  return sorted_frames(entries, root, split, depth_policy, depth_dirs, records, [path])


def mcio_tree(root: str) -> tuple[str, str]:
  """(the folder holding an MCIO root's lists, the folder their paths are relative to): FLIP's
  and FedSIS's `<root>/txt` and `<root>/frame` when `<root>/txt` is a folder (or the root is
  that `txt/` itself, `frame/` beside it), else the root itself for both."""
  lists = os.path.join(root, MCIO_LISTS)
  if os.path.isdir(lists):
    return lists, os.path.join(root, MCIO_FRAMES)
  beside = os.path.join(os.path.dirname(os.path.normpath(root)), MCIO_FRAMES)
  if os.path.basename(os.path.normpath(root)) == MCIO_LISTS and os.path.isdir(beside):
    return root, beside
  return root, root


def mcio_name(root: str, split: str, name: str = '') -> str:
  """The `<ds>` of the `<ds>_real_<split>.txt` read from `root`: `name`, checked, or (no name)
  the one there."""
  lists, _ = mcio_tree(root)
  suffix = f'_real_{split}.txt'
  found = sorted(os.path.basename(p)[:-len(suffix)]
                 for p in glob.glob(os.path.join(lists, f'*{suffix}')))
  if name in TRAIN_ONLY and split != 'train':
    raise PadListError(f"{os.path.join(lists, name + suffix)}: {TRAIN_ONLY[name]} ('{name}') "
                       f'ships training lists only ({name}_{{real,fake}}_train.txt); expected '
                       'it as a data center, never a target.')
  if name:
    if name not in found:
      raise PadListError(f'{os.path.join(lists, name + suffix)}: no such list file (MCIO '
                         f'lists of data set {name!r}); the lists there: {found}.')
    return name
  if len(found) != 1:
    raise PadListError(f'{lists}: expected one <ds>{suffix} (MCIO lists), found {found}; name '
                       'the data set of each root (data.pad_lists.datasets, target_dataset).')
  return found[0]


def read_mcio(root: str, split: str, *, name: str = '', depth_dirs: int | None = None,
              depth_policy: str = 'ones', skip_bad_records: bool = False) -> Frames:
  """MCIO's text lists of data set `name` (default: the one in the root), split `split`, under
  `root` (see the module docstring)."""
  name = mcio_name(root, split, name)
  lists_dir, frames_dir = mcio_tree(root)
  records, entries = Records(skip_bad_records), []
  lists = [os.path.join(lists_dir, f'{name}_{kind}_{split}.txt') for kind in ('real', 'fake')]
  for path, live in zip(lists, (True, False)):
    for origin, line in _text_lines(path):
      words = line.split()
      if len(words) != 1:
        records.bad_record(f'{origin}: malformed line {line!r}; expected one frame path.')
        continue
      frame0 = words[0]
      base = os.path.basename(frame0)
      if 'frame0' not in base:       # one frame, its own video
        entries.append((frame0, live, os.path.splitext(frame0)[0], origin))
        continue
      frame1 = frame1_path(frame0)
      missing = [p for p in (frame0, frame1)
                 if not os.path.isfile(p if os.path.isabs(p) else os.path.join(frames_dir, p))]
      if missing:
        records.bad_record(f'{origin}: the frame {os.path.join(frames_dir, missing[0])} does '
                           'not exist.')
        continue
      video = os.path.join(os.path.dirname(frame0), base[:base.index('frame0')].rstrip('_'))
      entries += [(frame0, live, video, origin), (frame1, live, video, origin)]
  return sorted_frames(entries, frames_dir, split, depth_policy, depth_dirs, records, lists)


def read(layout: str, root: str, split: str, *, depth_dirs: int | None, depth_policy: str,
         frames_per_video: int = 1, attack_list: str = 'fake', name: str = '',
         skip_bad_records: bool = False) -> Frames:
  """The reader of `layout` (`name`: an 'mcio' root's data set, '' for the one there)."""
  if layout == 'fedgpad':
    return read_fedgpad(root, split, depth_dirs=depth_dirs, depth_policy=depth_policy,
                        attack_list=attack_list, skip_bad_records=skip_bad_records)
  if layout == 'ssdg':
    return read_ssdg(root, split, frames_per_video=frames_per_video, depth_dirs=depth_dirs,
                     depth_policy=depth_policy, skip_bad_records=skip_bad_records)
  if layout == 'mcio':
    return read_mcio(root, split, name=name, depth_dirs=depth_dirs, depth_policy=depth_policy,
                     skip_bad_records=skip_bad_records)
  raise ValueError(f'layout {layout!r}; expected one of {LAYOUTS}.')


# -- images -----------------------------------------------------------------------------------

# CelebA-Spoof's face boxes (`<image>_BB.txt`) are in the pixels of a 224x224 image
# (ZhangYuanhan-AI/CelebA-Spoof, intra_dataset_code/client.py, `read_image`).
BOX_REFERENCE = 224


def scaled_box(box: tuple[int, int, int, int], width: int,
               height: int) -> tuple[int, int, int, int]:
  """(left, top, right, bottom) of `box` (x, y, w, h at BOX_REFERENCE) in a width x height
  image, as CelebA-Spoof's client.py `read_image` crops: each value scaled by the image's size
  over 224 and truncated; the top-left clipped at 0; the bottom-right the image's edge where
  the clipped corner plus the size passes it, else the unclipped corner plus the size (the
  code's own arithmetic, kept for equal crops)."""
  x, y, w, h = box
  w, h = int(w * (width / BOX_REFERENCE)), int(h * (height / BOX_REFERENCE))
  x, y = int(x * (width / BOX_REFERENCE)), int(y * (height / BOX_REFERENCE))
  left, top = max(x, 0), max(y, 0)
  right = width if left + w > width else x + w
  bottom = height if top + h > height else y + h
  return left, top, right, bottom


def load_image(path: str, origin: str, size: int,
               box: tuple[int, int, int, int] | None = None) -> np.ndarray:
  """uint8 [size, size, 3] RGB (cropped to `box` when given, `scaled_box`; resized bilinearly
  when the file or crop differs), or a PadListError naming the list line of an unreadable file
  or a box that leaves no pixels."""
  try:
    with Image.open(path) as img:
      if box is not None:
        crop = scaled_box(box, *img.size)
        if crop[2] <= crop[0] or crop[3] <= crop[1]:
          raise PadListError(f'{origin}: the face box {box} leaves no pixels of the '
                             f'{img.size[0]}x{img.size[1]} image {path} (crop {crop}).')
        img = img.crop(crop)
      img = img.convert('RGB')
      if img.size != (size, size):
        img = img.resize((size, size), Image.BILINEAR)
      return np.asarray(img, np.uint8)
  except PadListError:
    raise
  except (OSError, ValueError) as e:
    raise PadListError(f'{origin}: cannot read the image {path} ({e}).') from None


# Decoding on several threads pays off when the decoders' work dominates, which releases the
# GIL: at 256x256 two threads read 1.1-1.2x the frames of one, at 32x32 about 0.6x (Python's
# per-frame work holds the GIL; BUILD_NOTES.md, "Data pipeline"). No size between was measured:
# the threshold is the geometric middle of the two.
THREADED_MIN_PIXELS = 90 * 90


def decode_threads(paths: list[str], cpus: int) -> int:
  """How many threads `load_frames` decodes `paths` on: `cpus` when the first file holds at
  least THREADED_MIN_PIXELS (its header alone is read), else 1. An unreadable first file gives
  1: `load_frames` names it."""
  if not paths:
    return 1
  try:
    with Image.open(paths[0]) as img:
      width, height = img.size
  except (OSError, ValueError):
    return 1
  return cpus if width * height >= THREADED_MIN_PIXELS else 1


def load_frames(frames: Frames, size: int, depth_size: int, *, train: bool,
                skip_bad_records: bool = False,
                threads: int = 1) -> tuple[Frames, np.ndarray, np.ndarray]:
  """Decodes a split: (the frames kept, uint8 images [N, size, size, 3], float32 depth maps
  [N, depth_size, depth_size]: the files', or with no file (policy 'ones', or `train` False)
  ones for live frames of a training split and zeros otherwise). An unreadable image or depth
  map stops with a PadListError naming its list line, or (skip) is dropped, counted in one log
  line; a data center left without live or attack frames stops either way. `threads` decode at
  once (PIL's decoders release the GIL); the result is the same for any number."""
  cache: dict[str, np.ndarray] = {}   # the one attack map, read once (a race reads it twice)

  def one(item):
    path, origin, live, depth, box = item
    try:
      image = load_image(path, origin, size, box)
      if depth is None:
        return image, np.full((depth_size,) * 2, 1.0 if (train and live) else 0.0, np.float32)
      if depth not in cache:
        try:
          cache[depth] = load_depth(depth, depth_size)
        except (OSError, ValueError) as e:
          raise PadListError(f'{origin}: cannot read the depth map {depth} ({e}).') from None
      return image, cache[depth]
    except PadListError as e:
      return e

  items = zip(frames.paths, frames.origins, frames.live, frames.depth, frames.boxes)
  with concurrent.futures.ThreadPoolExecutor(max(threads, 1)) as pool:
    loaded = list(pool.map(one, items))
  records, images, depths, keep = Records(skip_bad_records), [], [], []
  for i, result in enumerate(loaded):   # in list order: the first bad line is the one named
    if isinstance(result, PadListError):
      records.bad_record(str(result))
      continue
    images.append(result[0])
    depths.append(result[1])
    keep.append(i)
  where = frames.origins[0].rsplit(':', 1)[0] if frames.origins else ''
  records.log(where)
  live = frames.live[keep]
  for kind, has in (('live', live.any()), ('attack', (~live).any())):
    if not has:
      raise PadListError(f'{where}: no {kind} frame left after dropping the unreadable ones.')
  kept = Frames(paths=[frames.paths[i] for i in keep], live=live, video=frames.video[keep],
                videos=frames.videos, depth=[frames.depth[i] for i in keep],
                origins=[frames.origins[i] for i in keep],
                species=[frames.species[i] for i in keep],
                boxes=[frames.boxes[i] for i in keep])
  return kept, np.stack(images), np.stack(depths)


def load_depth(path: str, size: int) -> np.ndarray:
  """float32 [size, size] in [0, 1]: a float ('F' mode) map as stored, an 8-bit one / 255 (the
  authors' ToTensor); resized bicubically to `size` when it differs (the authors' 32x32)."""
  with Image.open(path) as img:
    if img.mode != 'F':
      img = img.convert('L')
    if img.size != (size, size):
      img = img.resize((size, size), Image.BICUBIC)
    out = np.asarray(img, np.float32)
  return out if img.mode == 'F' else out / np.float32(255.0)


# -- writers (the tests' fixtures, tools/export_pad.py) ----------------------------------------

def save_image(path: str, image: np.ndarray) -> None:
  """uint8 RGB as PNG content (lossless), whatever the extension: PIL decodes by content."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(np.asarray(image, np.uint8)).save(path, format='PNG')


def save_depth(path: str, depth: np.ndarray) -> None:
  """A float32 depth map as a 32-bit float TIFF (lossless; PNG holds no floats), under its
  `.jpg` name: PIL decodes by content. The authors' code reads 8-bit maps; `save_depth8` writes
  one."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray(np.asarray(depth, np.float32), mode='F').save(path, format='TIFF')


def save_depth8(path: str, depth: np.ndarray) -> None:
  """A depth map in [0, 1] as 8-bit grey PNG content (rounded: not lossless)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  Image.fromarray((np.clip(depth, 0, 1) * 255 + 0.5).astype(np.uint8)).save(path, format='PNG')


def write_fedgpad_list(path: str, entries) -> None:
  """`<path> <label>` lines, entries (relative path, label: 1 / True = live; written as given)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.writelines(f'{rel} {int(label)}\n' for rel, label in entries)


def write_ssdg_list(path: str, entries) -> None:
  """SSDG's JSON array, entries (photo path, label[, video id]); one object a line."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  items = []
  for entry in entries:
    item = {'photo_path': entry[0], 'photo_label': int(entry[1])}
    if len(entry) > 2:
      item['photo_belong_to_video_ID'] = entry[2]
    items.append(json.dumps(item))
  with open(path, 'w') as f:
    f.write('[\n' + ',\n'.join(items) + '\n]\n')


def write_mcio_list(path: str, frame0_paths) -> None:
  """One frame0 path a line."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    f.writelines(f'{p}\n' for p in frame0_paths)
