r"""Writes the embedded PAD benchmark in one of the three list layouts: `formats/pad_lists.py`.

    python -m fedjax_face.tools.export_pad --layout=fedgpad|ssdg|mcio \
        --config=configs/pad/fedpad.py:runlocal --out=/tmp/pad_fedgpad

One root per data center and one for the target, `<out>/<name>/`, holding the config's
`data.pad` frames: a data center's training frames (its train subjects' live frames and the
attacks it trains on) as its 'train' split, its held-out subjects as its 'test' split (the
'validation' set), the target's held-out subjects as the target's 'test' split. It prints the
`--config.data.source=pad_lists ...` flags that read it back; a run with them equals the
in-memory run bit for bit (tests/data/test_pad_lists.py):

* lossless files: frames are PNG content; depth maps are 32-bit float TIFF content under the
  layout's `<stem>_depth.jpg` names (PNG holds no floats; PIL decodes by content, so the names
  do not matter). `--depth_bits=8` writes 8-bit PNG maps instead, as the authors' code reads
  them (rounded: then the run is close to, not equal to, the in-memory one);
* the same frames in the same order: the readers sort a split by (the video's base name, the
  video, the frame path), and the export names videos `v<video id, 5 digits>` and frames by
  their number, so that this order is the benchmark's own (video by video, frames in order).

Paths: 'fedgpad' `<split>/<live|attack>/s<subject>/v<video>/v<video>_<frame>.png` (depth maps at
the data set's k, `formats.DEPTH_DIRS`), 'ssdg' `<split>/<live|attack>/s<subject>/v<video>/
<frame>.png` with `photo_belong_to_video_ID` (SSDG's sampled `choose_*` lists: every listed
frame kept; depth maps at k = 4), 'mcio' `<split>/<real|fake>/v<video>_frame{0,1}.png` (needs
two frames a video; depth maps at k = 2). `data.pad.extra_targets` are not exported.
"""

import os

from absl import app, flags
from ml_collections import config_flags
import numpy as np

from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic.pad_benchmark import ATTACKS, DEPTH_SIZE, PadSet

DEPTH_DIRS = {'ssdg': 4, 'mcio': 2}      # the k the export's paths are made for
PRINT_KINDS, VIDEO_KINDS = ('print', 'cut'), ('display', 'replay')   # image_list_print / _video


def _frame_paths(layout: str, frames: PadSet, split: str) -> list[str]:
  """Each frame's path relative to its root (module docstring)."""
  paths, seen = [], {}
  for video, live, subject in zip(frames.video, frames.live, frames.subject):
    f = seen[int(video)] = seen.get(int(video), -1) + 1
    v = f'v{int(video):05d}'
    if layout == 'mcio':
      paths.append(f'{split}/{"real" if live else "fake"}/{v}_frame{f}.png')
    else:
      head = f'{split}/{"live" if live else "attack"}/s{int(subject):03d}/{v}'
      paths.append(f'{head}/{v}_{f:03d}.png' if layout == 'fedgpad' else f'{head}/{f:03d}.png')
  return paths


def _write_split(layout: str, root: str, name: str, frames: PadSet, split: str, k: int,
                 save_depth) -> None:
  paths = _frame_paths(layout, frames, split)
  for rel, image in zip(paths, frames.images):
    formats.save_image(os.path.join(root, rel), image)
  if split == 'train':
    for rel, live, depth in zip(paths, frames.live, frames.depth):
      if live:
        save_depth(os.path.join(root, formats.depth_path(rel, k)), depth)
    save_depth(os.path.join(root, formats.FAKE_DEPTH), np.zeros((DEPTH_SIZE,) * 2, np.float32))
  live = [bool(x) for x in frames.live]
  if layout == 'fedgpad':
    entries = list(zip(paths, live))
    if split == 'train':
      kinds = [ATTACKS[a] if a >= 0 else None for a in frames.attack]
      lists = {'real': [e for e in entries if e[1]], 'fake': [e for e in entries if not e[1]],
               'print': [e for e, kd in zip(entries, kinds) if kd in PRINT_KINDS],
               'video': [e for e, kd in zip(entries, kinds) if kd in VIDEO_KINDS]}
    else:
      lists = {'all': entries}
    for suffix, rows in lists.items():
      formats.write_fedgpad_list(os.path.join(root, f'image_list_{suffix}.txt'), rows)
  elif layout == 'ssdg':
    videos = [os.path.basename(os.path.dirname(p)) for p in paths]
    formats.write_ssdg_list(os.path.join(root, formats.SSDG_LISTS[split]),
                            list(zip(paths, live, videos)))
  else:
    for kind, want in (('real', True), ('fake', False)):
      formats.write_mcio_list(os.path.join(root, f'{name}_{kind}_{split}.txt'),
                              [p for p, l in zip(paths, live) if l == want and 'frame0' in p])


def export(config, layout: str, out: str, depth_bits: int = 32) -> dict:
  """Writes `config.data.pad`'s data centers and target under `out` in `layout`; returns the
  `config.data.pad_lists` fields that read them back."""
  p = config.data.pad
  if layout not in formats.LAYOUTS:
    raise ValueError(f'layout {layout!r}; expected one of {formats.LAYOUTS}.')
  if layout == 'mcio' and p.frames != 2:
    raise ValueError(f'config.data.pad.frames={p.frames}; the mcio layout holds two frames a '
                     'video (frame0, frame1): expected 2.')
  save_depth = formats.save_depth if depth_bits == 32 else formats.save_depth8
  ks = [DEPTH_DIRS.get(layout) or formats.DEPTH_DIRS[name] for name in p.sources]
  roots = [os.path.join(out, name) for name in p.sources]
  for name, root, k, kinds in zip(p.sources, roots, ks, pad_source.train_attacks(p)):
    frames = pad_source.domain_frames(name, config)
    _write_split(layout, root, name, pad_source.training_frames(frames, kinds), 'train', k,
                 save_depth)
    _write_split(layout, root, name, pad_source.held_out(frames), 'test', k, save_depth)
  target_root = os.path.join(out, p.target)
  _write_split(layout, target_root, p.target,
               pad_source.held_out(pad_source.domain_frames(p.target, config)), 'test', 0,
               save_depth)
  return {'centers': tuple(p.sources), 'roots': tuple(roots),
          'layouts': (layout,) * len(roots), 'target': p.target, 'target_root': target_root,
          'target_layout': layout, 'depth_dirs': tuple(ks), 'depth': 'maps',
          'pooled': bool(p.pooled)}


def define_flags():
  """The command's flags, defined only when run as a program: other tools define a `config` flag
  too, and absl refuses a flag defined twice in one process (a test session importing both)."""
  config_flags.DEFINE_config_file('config', None, 'A PAD config (configs/pad/*.py).')
  flags.DEFINE_enum('layout', None, list(formats.LAYOUTS), 'The list layout.')
  flags.DEFINE_string('out', None, 'The directory to write (one root per domain).')
  flags.DEFINE_enum('depth_bits', '32', ['32', '8'],
                    'Depth maps as float TIFF (lossless) or 8-bit PNG.')


def main(argv):
  del argv
  f = flags.FLAGS
  fields = export(f.config, f.layout, f.out, int(f.depth_bits))
  flags_out = ['--config.data.source=pad_lists'] + [
      f'--config.data.pad_lists.{k}="{v}"' if isinstance(v, tuple) else
      f'--config.data.pad_lists.{k}={v}' for k, v in fields.items()]
  print(' \\\n  '.join(flags_out))


if __name__ == '__main__':
  define_flags()
  flags.mark_flags_as_required(['config', 'layout', 'out'])
  app.run(main)
