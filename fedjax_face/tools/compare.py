r"""Side-by-side table of finished runs: `python -m fedjax_face.tools.compare DIR [DIR ...]`.

Reads each workdir's results.json and prints (and optionally writes, --out) one markdown table of
verification accuracy per pair set, one row per run, plus the class-embedding diagnostic.
"""

import os

from absl import app, flags

from fedjax_face.eval.recognition import report
from fedjax_face.io import files


def load(workdir: str) -> dict:
  path = files.join(workdir, 'results.json')
  if not files.exists(path):
    raise FileNotFoundError(f'{path} does not exist: is {workdir} a finished run?')
  return files.read_json(path)


def table(workdirs: list[str]) -> str:
  runs = {}
  for w in workdirs:
    res = load(w)
    runs[f"{res['config_name']} ({os.path.basename(os.path.normpath(w))})"] = res
  lines = [report.verification_table(runs), '',
           '| run | within-client cos (mean) | cross-client cos (mean / p99) |',
           '| --- | --- | --- |']
  for name, res in runs.items():
    sim = res.get('diagnostics', {}).get('class_embedding_similarity', {})
    if sim.get('within_mean') is not None:
      lines.append(f"| {name} | {sim['within_mean']:.3f} | {sim['cross_mean']:.3f} / "
                   f"{sim['cross_p99']:.3f} |")
  return '\n'.join(lines)


def main(argv):
  if len(argv) < 2:
    raise app.UsageError('give one or more workdirs of finished runs')
  text = table(argv[1:])
  print(text)
  if flags.FLAGS.out:
    files.write_text_atomic(flags.FLAGS.out, text + '\n')


def define_flags():
  """--out, defined only when run as a program (other tools define an `out` flag too)."""
  flags.DEFINE_string('out', None, 'Also write the table to this markdown file.')


if __name__ == '__main__':
  define_flags()
  app.run(main)
