"""What a table keeps of its runs under results/, and reading it back.

`archive_runs` copies each run's `archived_files` (its results, its config with the commits it ran
at, a failure's record, and what else its table reads, or only the summary of it the table reads)
into the archive (`results/<paper>_tables`), which `reproduce --check` rebuilds every table from;
`park` shrinks a sweep's root to the same, so that a commit carries it. Read back, a table says
which commits its runs came from (`commits_line`: seeds trained by different code are no mean ± std
of one method, so a mix is refused unless asked for), and `spot_check` reruns one run per method to
compare its printed cells with the archived run's.
"""

import filecmp
import glob
import os
import shutil

from fedjax_face.io import checkpoint
from fedjax_face.io import files
from fedjax_face.io import provenance
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Compacted, Run, Table

# What a table is rebuilt from (`reproduce --check`), kept per run by `archive_runs`: its results,
# its config (with the commits it ran at), a failure's record, and PAD's per-video scores (Fused
# and Fig. 5). A table that reads more names it (`Table.archived_files`): a file kept whole, or,
# where the table reads only a summary of it, a `Compacted` file whose summary is kept instead
# (FedFV Table 3's runs: the cosine histograms Fig. 5 draws, about 1 kB a run, where every pair's
# cosine took up to 2 MB).
# A run the divergence guard stopped keeps its record (`run.last_accepted`) and, when its last
# accepted checkpoint was evaluated, that evaluation's results and config (its commit).
ARCHIVED = ('results.json', 'config.json', table_runs.FAILED, 'pad_video_scores*.npz',
            table_runs.LAST_ACCEPTED,
            *(files.join(table_runs.evaluation_dir(''), name)
              for name in ('results.json', 'config.json')))


def archived_files(table: Table) -> tuple[str | Compacted, ...]:
  """What `archive_runs` and `park` keep of each of `table`'s runs: file patterns, and the
  files kept as their summaries."""
  return ARCHIVED + table.archived_files


def kept_pattern(item: str | Compacted) -> str:
  """The pattern of the files the archive holds for `item` (a `Compacted` file's summary)."""
  return item.name if isinstance(item, Compacted) else item


def keep(run_dir: str, items: tuple[str | Compacted, ...], target_dir: str) -> None:
  """Puts into `target_dir` (`run_dir` itself when parking) what the archive keeps of `run_dir`:
  the files each pattern matches, copied to the same path under it (a file already there with
  the same bytes is left as it is), and each `Compacted` file's summary, written from the file
  (or copied, where `run_dir` holds the summary alone: an archived or parked run)."""
  in_place = os.path.abspath(run_dir) == os.path.abspath(target_dir)
  for item in items:
    if isinstance(item, Compacted) and os.path.exists(os.path.join(run_dir, item.source)):
      item.write(os.path.join(run_dir, item.source), os.path.join(target_dir, item.name))
    elif not in_place:
      for path in sorted(glob.glob(os.path.join(run_dir, kept_pattern(item)))):
        target = os.path.join(target_dir, os.path.relpath(path, run_dir))
        if os.path.exists(target) and filecmp.cmp(path, target, shallow=False):
          continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(path, target)


def archive_runs(table: Table, root: str, extra: tuple, seeds: tuple[int, ...],
                 archive_root: str) -> list[str]:
  """Puts what the archive keeps (`keep`) of every run the table is made of (finished or failed)
  from `root` into `archive_root`/<run name>/; returns the archived workdirs. Local paths
  only."""
  out = []
  ended = ('results.json', table_runs.FAILED)
  for run_dir in table_runs.finished_workdirs(table, root, extra, seeds, ended=ended):
    target = os.path.join(archive_root, os.path.basename(run_dir))
    if os.path.abspath(target) == os.path.abspath(run_dir):
      out.append(target)
      continue
    os.makedirs(target, exist_ok=True)
    keep(run_dir, archived_files(table), target)
    out.append(target)
  return out


def park(table: Table, root: str, extra: tuple, seeds: tuple[int, ...],
         also_kept: dict[str, tuple[str | Compacted, ...]] | None = None) -> list[str]:
  """Shrinks a sweep's `root` to what a commit carries, so that its queue goes on in another
  sitting from a fresh checkout (`launch/every_table.sh park`). Each finished or failed run of
  the table keeps only what the archive would (`keep`: its `archived_files`, a `Compacted` file
  as its summary), except a run that others start from (`init_from`), which is kept whole for
  them; a run that has not ended is removed, to start again. Returns a line per workdir changed
  or kept whole. Stop the sweep first: a running run is removed.
  `also_kept`: workdir -> what other tables keep of that run, where it is theirs too
  (`reproduce --park` passes them: FedFV Table 3's cosine histograms of the runs it shares with
  Tables 1 and 2, and of no other run). Local paths only.
  A table that shows a diverged run at its last accepted checkpoint (`Table.evaluate_diverged`)
  has that checkpoint evaluated first (`evaluate_stopped_runs`): pruned, the run could not be."""
  if table.evaluate_diverged:
    evaluate_stopped_runs(table, root, extra, seeds)
  lines = []
  for run_dir, started_from in table_runs.table_workdirs(table, root, extra, seeds).items():
    if not os.path.isdir(run_dir):
      continue
    if not any(os.path.exists(os.path.join(run_dir, name))
               for name in ('results.json', table_runs.FAILED)):
      shutil.rmtree(run_dir)
      lines.append(f'removed, not ended: {run_dir}')
      continue
    if started_from:
      lines.append(f'kept whole, other runs start from it: {run_dir}')
      continue
    items = archived_files(table) + tuple((also_kept or {}).get(run_dir, ()))
    keep(run_dir, items, run_dir)
    kept = {path for item in items
            for path in glob.glob(os.path.join(run_dir, kept_pattern(item)))}
    if prune(run_dir, kept):
      lines.append(f'pruned to its archived files: {run_dir}')
  return lines


def evaluate_stopped_runs(table: Table, root: str, extra: tuple, seeds: tuple[int, ...]) -> None:
  """Evaluates the last accepted checkpoint of each of `table`'s runs in `root` that ended in an
  error (`run.last_accepted`: once; a run the guard did not stop, or stopped before any
  checkpoint, gets no evaluation), as making the table would, so that its record and
  evaluation are kept when its checkpoints are not."""
  for row in table.rows:
    if not isinstance(row.run, Run):
      continue
    for seed in seeds:
      if table_runs.failure(row.run, root, extra, seed) is not None:
        table_runs.last_accepted(row.run, root, extra, seed, dry_run=False)


def prune(directory: str, kept: set[str]) -> list[str]:
  """Removes everything under `directory` but the paths in `kept` and the folders that hold
  them; returns what it removed."""
  dropped = []
  for path in sorted(os.path.join(directory, name) for name in os.listdir(directory)):
    if path in kept:
      continue
    if os.path.isdir(path) and not os.path.islink(path):
      if any(k.startswith(path + os.sep) for k in kept):
        dropped += prune(path, kept)
        continue
      shutil.rmtree(path)
    else:
      os.remove(path)
    dropped.append(path)
  return dropped


def spot_runs(table: Table) -> list[Run]:
  """One run per method (config file) of a table, its first row's: what `spot_check` reruns."""
  out = {}
  for row in table.rows:
    if isinstance(row.run, Run) and row.run.config not in out:
      out[row.run.config] = row.run
  return list(out.values())


def spot_check(table: Table, archive_root: str, root: str, dry_run: bool = False) -> list[str]:
  """Reruns `spot_runs` at seed 0 under `root` (at this checkout's code) and compares each
  column, as the table prints it, with the archived run's: one line per run saying 'same
  digits' or which cells differ, with the commits of both and how the machine differed, if it
  did. Lines start with 'differs' when a cell differs; a run the archive lacks is said so and
  rerun all the same."""
  lines = []
  for run in spot_runs(table):
    archived_dir = spec.workdir(archive_root, run, (), 0)
    archived_path = files.join(archived_dir, 'results.json')
    fresh_dir = table_runs.ensure_run(run, root, (), 0, dry_run)
    fresh_path = files.join(fresh_dir, 'results.json')
    name = run.name()
    if not files.exists(fresh_path):
      lines.append(f'{name}: not rerun ({table_runs.failure(run, root, (), 0) or "dry run"})')
      continue
    if not files.exists(archived_path):
      lines.append(f'{name}: not in the archive; rerun at '
                   f'{", ".join(run_commits(fresh_dir))}')
      continue
    old, new = files.read_json(archived_path), files.read_json(fresh_path)
    differ = []
    for column in table.columns:
      digits = spec.column_digits(table, column)
      values = (spec.column_value(old, table, column), spec.column_value(new, table, column))
      cells = [None if v is None else f'{v:.{digits}f}' for v in values]
      if cells[0] != cells[1]:
        differ.append(f'{spec.column_title(table, column)} {cells[0]} -> {cells[1]}')
    commits = (f'archive at {", ".join(run_commits(archived_dir))}, rerun at '
               f'{", ".join(run_commits(fresh_dir))}')
    # The same code can give other digits on another machine kind: say when it was one.
    moved = provenance.machine_difference(old.get('provenance'), new.get('provenance'))
    commits += f'; machine: {moved}' if moved else ''
    lines.append(f'differs: {name}: {"; ".join(differ)} ({commits})' if differ else
                 f'{name}: same digits ({commits})')
  return lines


def run_commits(run_dir: str) -> list[str]:
  """The commit labels (`provenance.commit_label`) a finished run was trained at: its
  config.json's record of its start and resumes when it has one (results.json's provenance is
  that of the last of them), else its results.json's ('unrecorded' for archived runs made before
  provenance was recorded)."""
  config_path = files.join(run_dir, 'config.json')
  config = files.read_json(config_path) if files.exists(config_path) else {}
  if checkpoint.PROVENANCE_KEY in config:
    return list(dict.fromkeys(checkpoint.config_commits(config)))
  result = files.read_json(files.join(run_dir, 'results.json'))
  return [provenance.commit_label(result.get(checkpoint.PROVENANCE_KEY))]


def commit_counts(run_dirs: list[str]) -> dict[str, int]:
  """How many runs each commit label made; a run resumed across commits counts for each."""
  counts = {}
  for run_dir in run_dirs:
    for label in run_commits(run_dir):
      counts[label] = counts.get(label, 0) + 1
  return counts


class MixedCommitsError(ValueError):
  """A table's runs came from more than one commit (and mixing was not allowed)."""


def commits_line(counts: dict[str, int], allow_mixed: bool = False) -> str:
  """The table's line saying which commits its runs came from ('' without finished runs).

  Raises MixedCommitsError, in one line naming each commit and its number of runs, when there
  are several (a dirty tree and 'unrecorded' are labels of their own) and `allow_mixed` is False.
  """
  if not counts:
    return ''
  how_many = lambda n: f'{n} run{"" if n == 1 else "s"}'
  if list(counts) == ['unrecorded']:
    return 'commit: unrecorded (runs made before provenance was recorded)'
  if len(counts) == 1:
    (label, n), = counts.items()
    return f'commit: {label} ({how_many(n)})'
  named = ', '.join(f'{label} ({how_many(n)})' for label, n in
                    sorted(counts.items(), key=lambda item: (-item[1], item[0])))
  if not allow_mixed:
    raise MixedCommitsError(f'the runs come from {len(counts)} commits: {named}; rerun them at '
                            'one commit, or pass --allow_mixed_commits to make the table anyway.')
  return f'commits (mixed, --allow_mixed_commits): {named}'
