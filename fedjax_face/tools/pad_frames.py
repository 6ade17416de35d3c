r"""Frames from anti-spoofing videos, written as a data-center root in one of the three list
layouts (`data/formats/pad_lists.py`) that `data.source='pad_lists'` reads.

    python -m fedjax_face.tools.pad_frames --videos=casia_train.txt --video_root=/data/CASIA \
        --out=/data/frames/CASIA --layout=fedgpad --split=train --sampling=ssdg --frames=1 \
        --boxes=dat --size=256

`--videos` lists the videos and their labels (`data/formats/pad_videos.py`: `<path> <label>` a
line, 1 = live). Run it once per split into the same `--out` (the training videos with
`--split=train`, the evaluation videos with `--split=test`). What is written, under `--out`:

  fedgpad  `<video path without extension>/<frame number>.png`; train: `image_list_real.txt` and
           `image_list_fake.txt`, test: `image_list_all.txt`.
  ssdg     the same frames; `train_label.json` / `test_label.json`. With `--sampling=all` the
           list holds every frame and the reader samples (`data.pad_lists.frames_per_video`);
           otherwise each entry names its video (`photo_belong_to_video_ID`) and the reader
           keeps every listed frame.
  mcio     `<split>/<real|fake>/<video path, '/' as '_'>_frame<0|1>.png`, the two frames of
           SSDG's rule at k = 2 (`--sampling=ssdg --frames=2`, the only sampling it takes);
           `<name>_{real,fake}_<split>.txt`.

No depth maps are made: live pseudo-depth comes from the user's own files (PRNet in the papers,
docs/pad.md), at `depth/<first k directories of the frame path>/<frame stem>_depth.jpg`, or
`--config.data.pad_lists.depth=ones` trains without them. A bad input stops the tool before
anything is left behind (`pad_videos.PadVideoError`, naming the file and line); the frames it
wrote are removed, and the progress line is ended first, so that the error is a line of its own.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags

from fedjax_face.data.formats import pad_lists
from fedjax_face.data.formats import pad_videos
from fedjax_face.data.formats.pad_videos import PadVideoError


def frame_path(layout: str, split: str, video: pad_videos.Video, number: int,
               position: int) -> str:
  """The frame's path relative to the root (module docstring): frame `number` of the video,
  the `position`-th one kept."""
  stem = os.path.splitext(video.path)[0]
  if layout == 'mcio':
    return (f'{split}/{"real" if video.live else "fake"}/{stem.replace(os.sep, "_")}'
            f'_frame{position}.png')
  return f'{stem}/{number:05d}.png'


def list_files(layout: str, split: str, name: str) -> list[str]:
  """The list files a split of `layout` is read from."""
  if layout == 'fedgpad':
    return (['image_list_real.txt', 'image_list_fake.txt'] if split == 'train'
            else ['image_list_all.txt'])
  if layout == 'ssdg':
    return [pad_lists.SSDG_LISTS[split]]
  return [f'{name}_{kind}_{split}.txt' for kind in ('real', 'fake')]


def _boxes_of(boxes: str, video: pad_videos.Video, video_root: str, csv_boxes):
  """frame number -> (x, y, w, h) or None, and the file it comes from."""
  if boxes == 'dat':
    path = os.path.join(video_root, os.path.splitext(video.path)[0] + '.dat')
    dat = pad_videos.read_dat_boxes(path)
    return (lambda i: dat[i] if i < len(dat) else None), path
  if boxes == 'csv':
    return (lambda i: csv_boxes[0].get((video.path, i))), csv_boxes[1]
  return None, None


def _progress(done: int, total: int, frames: int) -> None:
  filled = done * 30 // total
  sys.stderr.write(f'\r[{"#" * filled}{"." * (30 - filled)}] {done}/{total} videos, '
                   f'{frames} frames')
  if done == total:
    sys.stderr.write('\n')
  sys.stderr.flush()


def _remove_empty_dirs(dirs, out: str) -> None:
  """Removes the now empty folders the frames were written in, up to and with `out`."""
  stop = os.path.dirname(os.path.abspath(out))
  for d in sorted(dirs, key=len, reverse=True):
    d = os.path.abspath(d)
    while d != stop and os.path.isdir(d) and not os.listdir(d):
      os.rmdir(d)
      d = os.path.dirname(d)


def write_lists(layout: str, split: str, out: str, name: str, entries) -> list[str]:
  """The split's list files from (frame path, live, video id, every frame listed) entries;
  each written to a temporary name first, then moved into place."""
  written = []

  def place(file_name, writer, rows):
    path = os.path.join(out, file_name)
    writer(path + '.partial', rows)
    os.replace(path + '.partial', path)
    written.append(path)

  if layout == 'fedgpad':
    rows = [(p, live) for p, live, _, _ in entries]
    if split == 'train':
      place('image_list_real.txt', pad_lists.write_fedgpad_list, [r for r in rows if r[1]])
      place('image_list_fake.txt', pad_lists.write_fedgpad_list, [r for r in rows if not r[1]])
    else:
      place('image_list_all.txt', pad_lists.write_fedgpad_list, rows)
  elif layout == 'ssdg':
    place(pad_lists.SSDG_LISTS[split], pad_lists.write_ssdg_list,
          [(p, live) if every else (p, live, video) for p, live, video, every in entries])
  else:
    for kind, want in (('real', True), ('fake', False)):
      place(f'{name}_{kind}_{split}.txt', pad_lists.write_mcio_list,
            [p for p, live, _, _ in entries if live == want and '_frame0.' in p])
  return written


def extract(videos_list: str, out: str, *, layout: str, split: str, video_root: str | None = None,
            sampling: str = 'ssdg', frames: int = 1, boxes: str = 'center',
            boxes_csv: str | None = None, box_scale: float = 1.0, size: int = 256,
            name: str | None = None, progress: bool = True) -> dict:
  """Decodes, samples, crops and writes every listed video (module docstring); returns
  {'videos', 'frames', 'lists'}. Raises PadVideoError on bad input, leaving nothing written."""
  if layout not in pad_lists.LAYOUTS or split not in pad_lists.SPLITS:
    raise ValueError(f'layout={layout!r}, split={split!r}; expected one of {pad_lists.LAYOUTS} '
                     f'and one of {pad_lists.SPLITS}.')
  if sampling not in pad_videos.SAMPLINGS or boxes not in pad_videos.BOXES:
    raise ValueError(f'sampling={sampling!r}, boxes={boxes!r}; expected one of '
                     f'{pad_videos.SAMPLINGS} and one of {pad_videos.BOXES}.')
  if frames < 1 or size < 1 or box_scale <= 0:
    raise ValueError(f'frames={frames}, size={size}, box_scale={box_scale}; expected positive '
                     'values.')
  if layout == 'mcio' and (sampling, frames) != ('ssdg', 2):
    raise ValueError(f'layout=mcio keeps frame0 and frame1 of SSDG\'s rule at k = 2; got '
                     f'sampling={sampling!r}, frames={frames} (expected --sampling=ssdg '
                     '--frames=2).')
  if (boxes == 'csv') != bool(boxes_csv):
    raise ValueError('boxes=csv needs --boxes_csv=<file>, and --boxes_csv needs boxes=csv.')
  video_root = video_root or os.path.dirname(os.path.abspath(videos_list))
  name = name or os.path.basename(os.path.normpath(out))
  videos = pad_videos.read_video_list(videos_list, video_root)
  csv_boxes = (pad_videos.read_csv_boxes(boxes_csv), boxes_csv) if boxes == 'csv' else None
  existing = [f for f in list_files(layout, split, name) if os.path.exists(os.path.join(out, f))]
  if existing:
    raise PadVideoError(f'{out} already holds {existing[0]}; remove the split\'s lists and '
                        'frames first, or write to another --out.')
  written, entries = [], []
  open_line = False   # a progress line without its newline yet: an error must not follow on it
  try:
    for done, video in enumerate(videos, 1):
      path = os.path.join(video_root, video.path)
      box_of, box_file = _boxes_of(boxes, video, video_root, csv_boxes)
      kept = 0
      for position, (number, frame) in enumerate(
          pad_videos.kept_frames(path, video.origin, sampling, frames)):
        kept += 1
        box = pad_videos.center_box(*frame.shape[:2]) if box_of is None else box_of(number)
        if box is None:
          raise PadVideoError(f'{box_file}: no face box for frame {number} of {video.path} '
                              f'({video.origin}).')
        try:
          face = pad_videos.crop(frame, box, size, box_scale)
        except ValueError as e:
          raise PadVideoError(f'{box_file}: frame {number} of {video.path}: {e}') from None
        rel = frame_path(layout, split, video, number, position)
        if os.path.exists(os.path.join(out, rel)):   # another split's, or a video listed twice
          raise PadVideoError(f'{video.origin}: {os.path.join(out, rel)} already exists; a '
                              'video belongs to one split, listed once.')
        pad_lists.save_image(os.path.join(out, rel), face)
        written.append(os.path.join(out, rel))
        entries.append((rel, video.live, os.path.splitext(video.path)[0], sampling == 'all'))
      if not kept:
        raise PadVideoError(f'{video.origin}: {path} decodes to no frames.')
      if progress:
        _progress(done, len(videos), len(entries))
        open_line = done < len(videos)
    lists = write_lists(layout, split, out, name, entries)
  except BaseException:
    if open_line:
      sys.stderr.write('\n')
      sys.stderr.flush()
    for path in written:
      os.remove(path)
    _remove_empty_dirs({os.path.dirname(p) for p in written}, out)
    raise
  return {'videos': len(videos), 'frames': len(entries), 'lists': lists}


def define_flags():
  flags.DEFINE_string('videos', None, 'The video list: `<path> <label>` a line, 1 = live.')
  flags.DEFINE_string('video_root', None, 'The directory list paths are relative to '
                      '(default: the list\'s).')
  flags.DEFINE_string('out', None, 'The data-center root to write.')
  flags.DEFINE_enum('layout', None, list(pad_lists.LAYOUTS), 'The list layout.')
  flags.DEFINE_enum('split', None, list(pad_lists.SPLITS), 'train or test.')
  flags.DEFINE_enum('sampling', 'ssdg', list(pad_videos.SAMPLINGS), 'Which frames to keep.')
  flags.DEFINE_integer('frames', 1, "k: SSDG's frames per video, or every k-th frame.")
  flags.DEFINE_enum('boxes', 'center', list(pad_videos.BOXES), 'Where the face is.')
  flags.DEFINE_string('boxes_csv', None, 'boxes=csv: the detector\'s CSV.')
  flags.DEFINE_float('box_scale', 1.0, 'The box scaled about its centre before the crop.')
  flags.DEFINE_integer('size', 256, 'Side of the square frames written.')
  flags.DEFINE_string('name', None, "mcio: the lists' <ds> (default: --out's base name).")


def main(argv):
  del argv
  f = flags.FLAGS
  try:
    done = extract(f.videos, f.out, layout=f.layout, split=f.split, video_root=f.video_root,
                   sampling=f.sampling, frames=f.frames, boxes=f.boxes, boxes_csv=f.boxes_csv,
                   box_scale=f.box_scale, size=f.size, name=f.name)
  except ValueError as e:   # PadVideoError included: one line, no traceback
    sys.exit(f'pad_frames: {e}')
  print(f"{done['videos']} videos -> {done['frames']} frames; lists: "
        + ', '.join(done['lists']))


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['videos', 'out', 'layout', 'split'])
  app.run(main)
