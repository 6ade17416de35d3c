r"""The papers' tables: `python -m fedjax_face.reproduce --table=<paper><N>|<paper>|all`.

    python -m fedjax_face.reproduce --table=fedgc4 --seeds=0,1,2 --out=docs/fedgc_table4.md
    python -m fedjax_face.reproduce --table=fedfv --seeds=0,1,2 --out_dir=docs
    python -m fedjax_face.reproduce --table=all --dry_run      # the commands, and what exists

Tables are named after the paper and their number there (fedgc1-7: `proj/fedgc/reproduce.py`,
fedfv1-3: `proj/fedfv/reproduce.py`); a paper's name alone runs all of its tables. Runs whose
workdir under `--root` already holds results.json are read, not run again (`tools/tables.py`).
`--out_dir` writes `<paper>_table<N>.md` per table, and a paper's extras (FedFV's Fig. 5) beside.
Each table names the commits its runs came from; a table whose runs came from several commits is
refused (one line naming them) unless `--allow_mixed_commits`.
"""

import importlib
import os
import sys

from absl import app, flags

from fedjax_face.io import files
from fedjax_face.tools import tables

PAPERS = ('fedgc', 'fedfv', 'fedfr', 'pad', 'privacy', 'blocks')   # fedjax_face/proj/<paper>/reproduce.py


def paper_module(paper: str):
  return importlib.import_module(f'fedjax_face.proj.{paper}.reproduce')


def table_names() -> list[str]:
  return [f'{paper}{tid}' for paper in PAPERS for tid in table_ids(paper)]


def table_ids(paper: str) -> list:
  """A paper's table numbers, then its named tables ('_fig3': `--table=fedfr_fig3`)."""
  return sorted(paper_module(paper).TABLES,
                key=lambda tid: (isinstance(tid, str), 0 if isinstance(tid, str) else tid, str(tid)))


def out_name(paper: str, tid) -> str:
  """docs file of a table: fedgc_table4.md, fedfr_fig3.md."""
  return f'{paper}{tid}.md' if isinstance(tid, str) else f'{paper}_table{tid}.md'


def select(name: str) -> list[tuple[str, int]]:
  """(paper, table number) for `--table`: 'fedgc4', a paper ('fedfv'), or 'all'."""
  known = table_names()
  if name == 'all' or name in PAPERS:
    return [(paper, tid) for paper in PAPERS if name in ('all', paper)
            for tid in table_ids(paper)]
  if name not in known:
    raise app.UsageError(f'--table={name}; expected one of {known}, a paper {list(PAPERS)} or '
                         'all.')
  paper = next(p for p in PAPERS if name.startswith(p))
  tid = name[len(paper):]
  return [(paper, int(tid) if tid.isdigit() else tid)]


def define_flags():
  """The flags, defined only when run as a program: other tools define an `out` flag too, and absl
  refuses a flag defined twice in one process (e.g. a test session importing both)."""
  flags.DEFINE_string('table', None, "'fedgc4', a paper ('fedfv': all of its tables), or 'all'.")
  flags.DEFINE_string('root', '/tmp/fedjax_face_tables', "Directory of the runs' workdirs.")
  flags.DEFINE_string('out', None, 'Markdown file for one table (default: print only).')
  flags.DEFINE_string('out_dir', None, 'Write <paper>_table<N>.md (and extras) here.')
  flags.DEFINE_multi_string('set', [], 'field=value override applied to every run.')
  flags.DEFINE_bool('dry_run', False, 'Print the commands and the table of what exists.')
  flags.DEFINE_list('seeds', ['0'], 'config.seed values; several: mean ± std over them.')
  flags.DEFINE_bool('allow_mixed_commits', False, 'Make a table whose runs came from several '
                    'commits (the table names them) instead of refusing it.')


def main(argv):
  del argv
  f = flags.FLAGS
  if f.table is None:
    raise app.UsageError(f'--table is required: one of {table_names()}, a paper or all.')
  try:
    extra = tables.parse_overrides(f.set)
    seeds = tables.parse_seeds(f.seeds)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if any(key == 'seed' for key, _ in extra):
    raise app.UsageError('--set=seed=... is not allowed; use --seeds.')
  chosen = select(f.table)
  if f.out and len(chosen) > 1:
    raise app.UsageError(f'--out names one file but --table={f.table} is {len(chosen)} tables; '
                         'use --out_dir.')
  # The footnote names the command that makes the table; --dry_run only reads finished runs.
  command = 'python -m fedjax_face.reproduce ' + ' '.join(
      a for a in sys.argv[1:] if a not in ('--dry_run', '--dry_run=true', '--dry_run=True'))
  for paper, tid in chosen:
    module = paper_module(paper)
    table = module.TABLES[tid]
    results = tables.run_all(table, f.root, extra, f.dry_run, seeds)
    counts = tables.commit_counts(tables.finished_workdirs(table, f.root, extra, seeds))
    try:
      commits = tables.commits_line(counts, f.allow_mixed_commits)
    except tables.MixedCommitsError as e:
      sys.exit(f'--table={paper}{tid}: {e}')   # one line on stderr, exit status 1
    text = tables.markdown(table, results, command, seeds, commits)
    print(text, flush=True)
    out = f.out or (os.path.join(f.out_dir, out_name(paper, tid)) if f.out_dir else None)
    if out:
      files.write_text_atomic(out, text)
    extras = getattr(module, 'EXTRAS', {})
    if tid in extras:
      file_name, make = extras[tid]
      text = make(f.root, extra, seeds, f.out_dir)
      print(text, flush=True)
      if f.out_dir:
        files.write_text_atomic(os.path.join(f.out_dir, file_name), text)


if __name__ == '__main__':
  define_flags()
  app.run(main)
