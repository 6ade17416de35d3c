r"""Real anti-spoofing frames from disk against the PAD round: does the input keep up?

    python -m fedjax_face.tools.bench.pad_pipeline --config=configs/pad/fedpad.py --out=/tmp/padb

Exports the config's data centers and target as lists (`tools/export_pad.py`, the 'fedgpad'
layout: PNG frames at `data.image_size`, 8-bit depth maps as the authors' code reads), then:

* `frames`: every data center's training frames read from disk as a run reads them
  (`formats.load_frames`: PIL decode, resize to `data.image_size`, the depth maps), frames/s with
  1 thread and with the usable CPUs (what `data.source='pad_lists'` uses). RGB + HSV is made on
  the device, by the model, so it is part of the round;
* `round`: `--rounds` rounds of the config trained on the exported lists (`train_and_evaluate`),
  the training frames a second after the first (compiling) round;
* `data_s`: the run's whole data loading (lists, frames, depth maps) in seconds.

Writes `pad_pipeline.json` and prints one markdown table. The frames are read once, before
training (`sources/pad_lists.py` holds them in memory), so what must keep up is the start: the
loading's frames/s against the round's.
"""

import json
import os
import time

from absl import app
from absl import flags
from ml_collections import config_flags

from fedjax_face import experiment
from fedjax_face.core import policy
from fedjax_face.core import xla_flags
from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.data.synthetic.pad_benchmark import DEPTH_SIZE
from fedjax_face.tools import export_pad


def define_flags():
  config_flags.DEFINE_config_file('config', None, 'A PAD config (configs/pad/*.py).')
  flags.DEFINE_string('out', None, 'Where the export, the run and pad_pipeline.json go.')
  flags.DEFINE_integer('rounds', 20, 'Rounds trained on the export (the first compiles).')


def loading_rate(fields: dict, size: int, threads: int) -> dict:
  """Frames/s of `formats.load_frames` over every data center's training split."""
  splits = [formats.read('fedgpad', root, 'train', depth_dirs=k, depth_policy='maps')
            for root, k in zip(fields['roots'], fields['depth_dirs'])]
  t0 = time.perf_counter()
  n = sum(len(formats.load_frames(s, size, DEPTH_SIZE, train=True, threads=threads)[0].paths)
          for s in splits)
  seconds = time.perf_counter() - t0
  return {'threads': threads, 'frames': n, 'seconds': seconds, 'frames_per_s': n / seconds}


def round_rate(config, fields: dict, workdir: str, rounds: int) -> dict:
  """Training frames/s after the first round, on the exported lists."""
  config.data.source = 'pad_lists'
  for key, value in fields.items():
    config.data.pad_lists[key] = value
  config.num_rounds, config.log_every, config.checkpoint_every = rounds, rounds, 0
  results = experiment.train_and_evaluate(config, workdir)
  t = results['timing']
  per_round = results['images_seen'] / rounds
  steady = t['in_rounds_s'] - t['first_round_s']
  return {'rounds': rounds, 'frames_per_round': per_round,
          'frames_per_s': per_round * (rounds - 1) / steady, 'data_s': t['data_s'],
          'first_round_s': t['first_round_s']}


def main(argv):
  del argv
  f = flags.FLAGS
  config, out = f.config, f.out
  fields = export_pad.export(config, 'fedgpad', os.path.join(out, 'lists'), depth_bits=8)
  size = config.data.image_size
  rows = [loading_rate(fields, size, t) for t in sorted({1, policy.usable_cpus()})]
  trained = round_rate(config, fields, os.path.join(out, 'run'), f.rounds)
  saved = {'image_size': size, 'loading': rows, 'round': trained,
           'load_average': os.getloadavg()[0]}
  with open(os.path.join(out, 'pad_pipeline.json'), 'w') as fp:
    json.dump(saved, fp, indent=2)
  print(f'| {size}x{size} PNG | frames | s | frames/s |\n| --- | --- | --- | --- |')
  for r in rows:
    print(f"| read, decode, resize ({r['threads']} thread{'s' * (r['threads'] > 1)}) | "
          f"{r['frames']} | {r['seconds']:.2f} | {r['frames_per_s']:,.0f} |")
  print(f"| FedPAD-style round ({config.algorithm}, {trained['frames_per_round']:.0f} frames) | "
        f"{trained['frames_per_round'] * (f.rounds - 1):.0f} | "
        f"{trained['frames_per_round'] * (f.rounds - 1) / trained['frames_per_s']:.2f} | "
        f"{trained['frames_per_s']:,.0f} |")
  print(f"the run's data loading: {trained['data_s']:.2f} s; load average "
        f"{saved['load_average']:.1f}")


if __name__ == '__main__':
  xla_flags.apply_cpu_defaults()
  define_flags()
  flags.mark_flags_as_required(['config', 'out'])
  app.run(main)
