r"""The global widths FedMA's matching reached, read from finished runs.

    python -m fedjax_face.tools.fedma_widths --root=results/pad_tables

Prints a markdown table: each matched layer's width per run (every finished `pad-fedma*`
workdir under `--root`), beside a data center's width and the cap (`config.json`). A run records
its widths in results.json ('method_state', `Algorithm.summary`); runs made before it did are
read from their final checkpoint.
"""

import os

from absl import app
from absl import flags
import numpy as np

from fedjax_face.algorithms.fedma import layers
from fedjax_face.io import files
from fedjax_face.run import resume

_ROOT = flags.DEFINE_string('root', 'results/pad_tables', 'Directory of the runs\' workdirs.')


def run_widths(workdir: str) -> list[int]:
  """Each matched layer's global width at the end of the FedMA run in `workdir`."""
  recorded = files.read_json(os.path.join(workdir, 'results.json')).get('method_state', {})
  if 'widths' in recorded:
    return [int(w) for w in recorded['widths']]
  masks = resume.load_final_state(workdir)['server']['masks']
  masks = [masks[k] for k in sorted(masks, key=int)] if isinstance(masks, dict) else masks
  return [int(np.asarray(m).sum()) for m in masks]


def widths_table(root: str) -> str:
  runs = sorted(d for d in os.listdir(root) if d.startswith('pad-fedma')
                and os.path.isfile(os.path.join(root, d, 'results.json')))   # finished
  if not runs:
    raise FileNotFoundError(f'no finished pad-fedma* workdir under {root}')
  config = files.read_json(os.path.join(root, runs[0], 'config.json'))
  own = [layer.channels(config['fedma']['client_width']) for layer in layers.MATCHED]
  cap = [layer.channels(config['model']['width']) for layer in layers.MATCHED]
  lines = ['| run | ' + ' | '.join(str(i) for i in range(layers.NUM_MATCHED)) + ' | at the cap |',
           '| --- |' + ' ---: |' * (layers.NUM_MATCHED + 1),
           '| a data center | ' + ' | '.join(map(str, own)) + ' | |',
           '| the cap | ' + ' | '.join(map(str, cap)) + ' | |']
  for run in runs:
    widths = run_widths(os.path.join(root, run))
    at_cap = sum(w == c for w, c in zip(widths, cap))
    lines.append(f'| {run} | ' + ' | '.join(map(str, widths)) + f' | {at_cap} |')
  return '\n'.join(lines)


def main(argv):
  del argv
  print(widths_table(_ROOT.value))


if __name__ == '__main__':
  app.run(main)
