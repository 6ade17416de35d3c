"""Paper tables as sweeps of training runs: which runs, run them, read them, print the table.

A paper's tables (`fedjax_face/proj/<paper>/reproduce.py:TABLES`) are lists of rows; each row is a
`Run` of `python -m fedjax_face.main` (a config file, its variant argument and field overrides)
and the paper's numbers. `run_all` starts, one subprocess at a time, the runs whose workdir holds
no `results.json` yet (so a sweep can be stopped and resumed, and runs shared by several tables
are trained once); `markdown` prints ours beside the paper's, as mean ± std over seeds.
`python -m fedjax_face.reproduce` is the command (`main`).

Each table says which commits its runs came from (`commit_counts`, from each run's provenance),
and one made of runs from several commits is refused unless asked for (`commits_line`): seeds
trained by different code are no mean ± std of one method.
"""

import dataclasses
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Callable

from fedjax_face.io import checkpoint
from fedjax_face.io import files
from fedjax_face.io import provenance
from fedjax_face.run import results as results_lib
from fedjax_face.tools import claims

PERCENT_SECTIONS = ('verification', 'identification', 'personalized', 'pad')   # rates, shown in %
PAIR_TITLES = {'lfw': 'LFW', 'cfp_fp': 'CFP-FP', 'agedb_30': 'AgeDB-30', 'sllfw': 'SLLFW',
               'cplfw': 'CPLFW', 'calfw': 'CALFW'}
# 'diagnostics' columns: '<results.json diagnostics section>:<key>' -> title.
DIAGNOSTIC_TITLES = {
    'lookalikes:class_cos_lookalike': 'class cos, look-alikes',
    'lookalikes:class_cos_stranger': 'class cos, strangers',
    'lookalikes:feature_cos_lookalike': 'feature cos, look-alikes',
    'lookalikes:feature_cos_stranger': 'feature cos, strangers',
    'lookalikes:feature_cos_same_identity': 'feature cos, same identity',
    'class_embedding_similarity:within_mean': 'within-client class cos',
    'class_embedding_similarity:cross_mean': 'cross-client class cos',
    'class_embedding_norm:class_embeddings/norm_mean': 'class-embedding norm',
}


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run: a config file, its variant argument and field overrides."""
  config: str                      # configs/<config>.py, e.g. 'fedgc/fedpe'
  arg: str = ''                    # get_config argument, e.g. 'loss=cosface'
  overrides: tuple[tuple[str, str], ...] = ()
  init_from: 'Run | None' = None   # a run this one starts from (FedFR: its pre-training), run
                                   # first with the same seed; passed as --config.init_from

  def name(self, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The workdir's name: the config path, argument and overrides (unique per run)."""
    parts = [self.config.replace('/', '-')]
    parts += [self.arg.replace('=', '-').replace(',', '_')] if self.arg else []
    parts += [f'{k.split(".")[-1]}-{v}' for k, v in self.overrides + extra]
    return '_'.join(parts)

  def command(self, workdir: str, extra: tuple[tuple[str, str], ...] = ()) -> list[str]:
    config = f'configs/{self.config}.py' + (f':{self.arg}' if self.arg else '')
    return ([sys.executable, '-m', 'fedjax_face.main', f'--config={config}', f'--workdir={workdir}']
            + [f'--config.{k}={v}' for k, v in self.overrides + extra])


@dataclasses.dataclass(frozen=True)
class Combined:
  """A row computed from several finished runs rather than trained itself (the PAD paper's Fused:
  the Single runs' scores averaged): `combine(workdirs)` gives a results.json-like dict."""
  name: str
  runs: tuple[Run, ...]
  combine: Callable[[list[str]], dict]


@dataclasses.dataclass(frozen=True)
class Row:
  label: str
  run: 'Run | Combined | None'      # None: a paper's row this project does not build (shown so
                                    # that its numbers stay beside ours; the docs say why)
  paper: tuple[float | None, ...]   # the paper's numbers, one per column


@dataclasses.dataclass(frozen=True)
class Ordering:
  """One of the paper's orderings, checked on ours seed by seed: the rows `ahead` beat the rows
  `behind` on `column` (several rows are averaged first, as the PAD paper's average HTER over
  its protocols; lower beats higher when `lower_is_better`, as for an HTER)."""
  ahead: tuple[str, ...]            # row labels
  behind: tuple[str, ...]
  column: str
  claim: str                        # how the docs say it, e.g. 'FedFR above FedFace'
  lower_is_better: bool = False


@dataclasses.dataclass(frozen=True)
class Table:
  title: str
  metric: str                       # 'verification', 'identification', 'diagnostics' or
                                    # 'results'
  columns: tuple[str, ...]          # pair-set names, identification metric keys,
                                    # DIAGNOSTIC_TITLES keys, or ('results') '/' paths into
                                    # results.json ('personalized/tar/0.001')
  rows: tuple[Row, ...]
  claim: str                        # the ordering the paper reports
  setting: str = ''                 # ours against the paper's (data, backbone), for the footnote
  digits: int = 2                   # decimals of ours (3 for cosines)
  titles: tuple[str, ...] = ()      # column titles ('results' tables)
  column_digits: tuple[int, ...] = ()   # decimals per column where they differ (0 for bytes)
  orderings: tuple[Ordering, ...] = ()  # the paper's orderings, judged per seed (`judge`)
  archived_files: tuple[str, ...] = ()   # run files kept beyond `ARCHIVED`, that it reads
  own_orderings: bool = False       # the orderings are questions of ours, not a paper's claims:
                                    # they read 'ahead' / 'behind' (OWN_WORDS), not 'reproduced'
  paper_titles: tuple[str, ...] = ()  # the paper's columns where they measure something else
                                      # than ours (FedGC Table 6: MegaFace TPR@FPR=1e-6)

  def __post_init__(self):
    labels = [row.label for row in self.rows]
    for ordering in self.orderings:
      for label in ordering.ahead + ordering.behind:
        if label not in labels:
          raise ValueError(f'{self.title}: ordering {ordering.claim!r} names row {label!r}; '
                           f'expected one of {labels}.')
      if ordering.column not in self.columns:
        raise ValueError(f'{self.title}: ordering {ordering.claim!r} reads column '
                         f'{ordering.column!r}; expected one of {list(self.columns)}.')


def parse_overrides(items: list[str]) -> tuple[tuple[str, str], ...]:
  out = []
  for item in items:
    key, sep, value = item.partition('=')
    if not sep or not key:
      raise ValueError(f'--set={item!r}; expected field=value, e.g. --set=num_rounds=30.')
    out.append((key, value))
  return tuple(out)


def parse_seeds(items: list[str]) -> tuple[int, ...]:
  try:
    seeds = tuple(int(item) for item in items)
  except ValueError:
    raise ValueError(f'--seeds={",".join(items)}; expected integers, e.g. --seeds=0,1,2.') from None
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise ValueError(f'--seeds={",".join(items)}; expected distinct non-negative integers.')
  return seeds


def seed_overrides(extra: tuple[tuple[str, str], ...], seed: int) -> tuple[tuple[str, str], ...]:
  """Seed 0 is the default config (its runs are shared with single-seed tables); others add it."""
  return extra if seed == 0 else extra + (('seed', str(seed)),)


def workdir(root: str, run: Run, extra: tuple, seed: int) -> str:
  return files.join(root, run.name(seed_overrides(extra, seed)))


FAILED = 'failed.json'   # beside a run that ended in an error: its exit code and last error line


def last_error(stderr: str) -> str:
  """The exception line of a run's stderr (e.g. 'FloatingPointError: round 15: ...'), else its
  last line."""
  lines = [line for line in stderr.strip().splitlines() if line.strip()]
  errors = [line for line in lines if line.split(':', 1)[0].endswith(('Error', 'Exception'))]
  return (errors or lines or [''])[-1]


def ensure_run(run: Run, root: str, extra: tuple, seed: int, dry_run: bool) -> str:
  """Runs `run` (after the run it starts from) unless its workdir holds results.json or
  failed.json; returns the workdir. A dry run prints the missing commands instead. A run that
  another process is training (a second sweep lane's table shares it) is waited for and read,
  not started twice or recorded as failed."""
  run_dir = workdir(root, run, extra, seed)
  path, failed = files.join(run_dir, 'results.json'), files.join(run_dir, FAILED)
  if files.exists(path):
    read_results(run_dir)   # refused when it is not the result of the run config.json describes
    return run_dir
  if files.exists(failed):
    return run_dir
  if not dry_run and files.wait_for_workdir(run_dir):   # another lane was training it
    print(f'  waited for another process to end its run in {run_dir}', flush=True)
    return ensure_run(run, root, extra, seed, dry_run)
  overrides = seed_overrides(extra, seed)
  if run.init_from is not None:
    start = ensure_run(run.init_from, root, extra, seed, dry_run)
    if files.exists(files.join(start, FAILED)):
      return run_dir   # nothing to start from: the table shows the start's failure
    overrides += (('init_from', start),)
  cmd = run.command(run_dir, overrides)
  if dry_run:
    print('missing: $ python ' + ' '.join(cmd[1:]), flush=True)
    return run_dir
  print('$ python ' + ' '.join(cmd[1:]), flush=True)
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  if proc.returncode:
    error = last_error(proc.stderr)
    if files.IN_USE in error:   # another process took the workdir first: read what it leaves
      return ensure_run(run, root, extra, seed, dry_run)
    files.makedirs(run_dir)
    files.write_text_atomic(failed, json.dumps({'returncode': proc.returncode, 'error': error}))
    print(f'  failed (exit {proc.returncode}): {error}', flush=True)
  else:
    print(f'  done in {time.perf_counter() - t0:.0f} s', flush=True)
  return run_dir


def read_results(run_dir: str) -> dict:
  """`run_dir`'s results.json, or ValueError naming it when it is not the result of the run its
  config.json describes (`results_lib.stale_results`: a run started or extended there since, and
  stopped before its end, or another run's files)."""
  results = files.read_json(files.join(run_dir, 'results.json'))
  stale = results_lib.stale_results(run_dir, results)
  if stale:
    raise ValueError(f'{files.join(run_dir, "results.json")} is stale: {stale}; expected the '
                     'results of the run config.json describes (rerun it, or delete both).')
  return results


def run_all(table: Table, root: str, extra: tuple, dry_run: bool = False,
            seeds: tuple[int, ...] = (0,)) -> dict[tuple[Run, int], dict]:
  """Runs what is missing; returns results.json of every (run, seed) that has one, and
  {'failed': error line} for a run that ended in an error (a diverged run is a result too).

  A failed run leaves `failed.json` in its workdir and is not retried (delete the file to retry).
  """
  results = {}
  for row in table.rows:
    for seed in seeds:
      if row.run is None:
        continue
      if isinstance(row.run, Combined):
        combined = combined_result(row.run, root, extra, seed, dry_run)
        if combined is not None:
          results[(row.run, seed)] = combined
        continue
      run_dir = ensure_run(row.run, root, extra, seed, dry_run)
      if files.exists(files.join(run_dir, 'results.json')):
        results[(row.run, seed)] = read_results(run_dir)
      elif (error := failure(row.run, root, extra, seed)) is not None:
        results[(row.run, seed)] = {'failed': error}
  return results


def combined_result(row: Combined, root: str, extra: tuple, seed: int,
                    dry_run: bool) -> dict | None:
  """A `Combined` row's result once each of its runs has finished ({'failed': ...} if one
  failed; None while one is missing)."""
  dirs = [ensure_run(run, root, extra, seed, dry_run) for run in row.runs]
  errors = [e for run in row.runs if (e := failure(run, root, extra, seed)) is not None]
  if errors:
    return {'failed': errors[0]}
  if not all(files.exists(files.join(d, 'results.json')) for d in dirs):
    return None
  return row.combine(dirs)


def failure(run: Run, root: str, extra: tuple, seed: int) -> str | None:
  """The error a run (or the run it starts from) ended with, or None."""
  failed = files.join(workdir(root, run, extra, seed), FAILED)
  if files.exists(failed):
    return files.read_json(failed)['error']
  return None if run.init_from is None else failure(run.init_from, root, extra, seed)


def table_workdirs(table: Table, root: str, extra: tuple,
                   seeds: tuple[int, ...]) -> dict[str, bool]:
  """Every workdir a table is made of, each once and in order: its rows' runs, the runs a
  `Combined` row combines, and the runs each of them started from (`init_from`: a fine-tuned
  model is the pre-training's code too). Each maps to whether another run starts from it."""
  out = {}

  def add(run: Run, seed: int, started_from: bool):
    run_dir = workdir(root, run, extra, seed)
    out[run_dir] = out.get(run_dir, False) or started_from
    if run.init_from is not None:
      add(run.init_from, seed, True)

  for row in table.rows:
    for seed in seeds:
      for run in (() if row.run is None else row.run.runs if isinstance(row.run, Combined)
                  else (row.run,)):
        add(run, seed, False)
  return out


def finished_workdirs(table: Table, root: str, extra: tuple, seeds: tuple[int, ...],
                      ended: tuple[str, ...] = ('results.json',)) -> list[str]:
  """The workdirs of `table_workdirs` whose run has finished: those holding one of `ended`."""
  return [run_dir for run_dir in table_workdirs(table, root, extra, seeds)
          if any(files.exists(files.join(run_dir, name)) for name in ended)]


# What a table is rebuilt from (`reproduce --check`), kept per run by `archive_runs`: its results,
# its config (with the commits it ran at), a failure's record, and PAD's per-video scores (Fused
# and Fig. 5). A table that reads more names it (`Table.archived_files`: FedFV Table 3's class-
# embedding cosines, for Fig. 5); every method writes those, at up to 2 MB a run.
ARCHIVED = ('results.json', 'config.json', FAILED, 'pad_video_scores*.npz')


def archived_files(table: Table) -> tuple[str, ...]:
  """The file patterns `archive_runs` and `park` keep of each of `table`'s runs."""
  return ARCHIVED + table.archived_files


def archive_runs(table: Table, root: str, extra: tuple, seeds: tuple[int, ...],
                 archive_root: str) -> list[str]:
  """Copies the `archived_files` of every run the table is made of (finished or failed) from
  `root` to `archive_root`/<run name>/; returns the archived workdirs. Local paths only."""
  out = []
  for run_dir in finished_workdirs(table, root, extra, seeds, ended=('results.json', FAILED)):
    target = os.path.join(archive_root, os.path.basename(run_dir))
    if os.path.abspath(target) == os.path.abspath(run_dir):
      out.append(target)
      continue
    os.makedirs(target, exist_ok=True)
    for pattern in archived_files(table):
      for path in sorted(glob.glob(os.path.join(run_dir, pattern))):
        shutil.copy2(path, os.path.join(target, os.path.basename(path)))
    out.append(target)
  return out


def park(table: Table, root: str, extra: tuple, seeds: tuple[int, ...],
         also_kept: dict[str, tuple[str, ...]] | None = None) -> list[str]:
  """Shrinks a sweep's `root` to what a commit carries, so that its queue goes on in another
  sitting from a fresh checkout (`launch/every_table.sh park`). Each finished or failed run of
  the table keeps only its `archived_files`, except a run that others start from (`init_from`),
  which is kept whole for them; a run that has not ended is removed, to start again. Returns a
  line per workdir changed or kept whole. Stop the sweep first: a running run is removed.
  `also_kept`: workdir -> the patterns other tables keep of that run, where it is theirs too
  (`reproduce --park` passes them: FedFV Table 3's cosines of the runs it shares with Tables
  1 and 2, and of no other run). Local paths only."""
  lines = []
  for run_dir, started_from in table_workdirs(table, root, extra, seeds).items():
    if not os.path.isdir(run_dir):
      continue
    if not any(os.path.exists(os.path.join(run_dir, name)) for name in ('results.json', FAILED)):
      shutil.rmtree(run_dir)
      lines.append(f'removed, not ended: {run_dir}')
      continue
    if started_from:
      lines.append(f'kept whole, other runs start from it: {run_dir}')
      continue
    patterns = archived_files(table) + tuple((also_kept or {}).get(run_dir, ()))
    kept = {path for pattern in patterns for path in glob.glob(os.path.join(run_dir, pattern))}
    dropped = sorted({os.path.join(run_dir, name) for name in os.listdir(run_dir)} - kept)
    for path in dropped:
      if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
    if dropped:
      lines.append(f'pruned to its archived files: {run_dir}')
  return lines


def column_digits(table: Table, column: str) -> int:
  """The decimals a table prints `column` with."""
  return (table.column_digits[table.columns.index(column)] if table.column_digits
          else table.digits)


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
    archived_dir = workdir(archive_root, run, (), 0)
    archived_path = files.join(archived_dir, 'results.json')
    fresh_dir = ensure_run(run, root, (), 0, dry_run)
    fresh_path = files.join(fresh_dir, 'results.json')
    name = run.name()
    if not files.exists(fresh_path):
      lines.append(f'{name}: not rerun ({failure(run, root, (), 0) or "dry run"})')
      continue
    if not files.exists(archived_path):
      lines.append(f'{name}: not in the archive; rerun at '
                   f'{", ".join(run_commits(fresh_dir))}')
      continue
    old, new = files.read_json(archived_path), files.read_json(fresh_path)
    differ = []
    for column in table.columns:
      digits = column_digits(table, column)
      cells = [None if v is None else f'{v:.{digits}f}'
               for v in (_ours(old, table, column), _ours(new, table, column))]
      if cells[0] != cells[1]:
        differ.append(f'{_column_title(table, column)} {cells[0]} -> {cells[1]}')
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
  runs = lambda n: f'{n} run{"" if n == 1 else "s"}'
  if list(counts) == ['unrecorded']:
    return 'commit: unrecorded (runs made before provenance was recorded)'
  if len(counts) == 1:
    (label, n), = counts.items()
    return f'commit: {label} ({runs(n)})'
  named = ', '.join(f'{label} ({runs(n)})' for label, n in
                    sorted(counts.items(), key=lambda item: (-item[1], item[0])))
  if not allow_mixed:
    raise MixedCommitsError(f'the runs come from {len(counts)} commits: {named}; rerun them at '
                            'one commit, or pass --allow_mixed_commits to make the table anyway.')
  return f'commits (mixed, --allow_mixed_commits): {named}'


def _ours(result: dict | None, table: Table, column: str) -> float | None:
  """The run's value for one column (None when the run has no such value, e.g. a pair set it
  did not evaluate)."""
  if result is None or 'failed' in result:
    return None
  if table.metric == 'verification':
    pair_set = result['verification'].get(column)
    return None if pair_set is None else pair_set['accuracy'] * 100
  if table.metric == 'diagnostics':
    section, _, key = column.partition(':')
    return result.get('diagnostics', {}).get(section, {}).get(key)
  if table.metric == 'results':
    value = result
    for key in column.split('/'):
      value = value.get(key) if isinstance(value, dict) else None
    if value is None:
      return None
    return value * 100 if column.split('/')[0] in PERCENT_SECTIONS else value
  ident = result.get('identification')
  if not ident:
    return None
  key, _, fpir = column.partition(':')
  value = ident[key].get(fpir) if fpir else ident[key]
  return None if value is None else value * 100


def _column_title(table: Table, column: str) -> str:
  if table.titles:
    return table.titles[table.columns.index(column)]
  if table.metric == 'verification':
    return PAIR_TITLES.get(column, column)
  if table.metric == 'diagnostics':
    return DIAGNOSTIC_TITLES.get(column, column)
  key, _, fpir = column.partition(':')
  return {'rank_1': 'rank-1'}.get(key, f'TPIR@FPIR={fpir}')


def summarize(values: list[float], num_seeds: int = 1, digits: int = 2) -> str:
  """One cell: '—' without runs, the value of one run, mean ± sample std over several; a cell
  missing some of the `num_seeds` runs says how many it has."""
  if not values:
    return '—'
  cell = (f'{values[0]:.{digits}f}' if len(values) == 1 else
          f'{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}')
  return cell if len(values) == num_seeds else f'{cell} ({len(values)} of {num_seeds} seeds)'


def row_values(table: Table, row: Row, column: str, results: dict,
               seeds: tuple[int, ...]) -> list[float]:
  """Ours for one cell: one value per seed that has a finished run."""
  values = [_ours(results.get((row.run, seed)), table, column) for seed in seeds]
  return [v for v in values if v is not None]


def ordering_margins(table: Table, ordering: Ordering, results: dict,
                     seeds: tuple[int, ...]) -> dict[int, float]:
  """Per seed whose runs all have a value: how far `ahead` leads `behind` (positive: the
  ordering holds; in the column's unit, HTER points for the PAD tables)."""
  rows = {row.label: row for row in table.rows}

  def mean(labels, seed):
    values = [_ours(results.get((rows[label].run, seed)), table, ordering.column)
              for label in labels]
    return None if None in values else statistics.mean(values)

  margins = {}
  for seed in seeds:
    ahead, behind = mean(ordering.ahead, seed), mean(ordering.behind, seed)
    if ahead is not None and behind is not None:
      # Rounded so that equal measurements (HTERs count whole videos) tie instead of leaving a
      # last-bit difference of the percent scaling; + 0.0 turns a rounded -0.0 into 0.0.
      margin = behind - ahead if ordering.lower_is_better else ahead - behind
      margins[seed] = round(margin, 9) + 0.0
  return margins


SIGNIFICANCE = 0.05   # one-sided, over the seeds' paired margins
OWN_WORDS = {'reproduced': 'ahead', 'reversed': 'behind'}   # the verdicts of our own orderings
VERDICT_RULE = ('Reproduced: the ordering holds in every seed asked for, and the mean of the '
                "seeds' margins passes a one-sided paired t-test at 5 % (t = mean / (sd / "
                "sqrt(n)) above Student's t quantile with n - 1 degrees of freedom: 2.92 for 3 "
                'seeds, 2.13 for 5). Reversed: the same for the opposite ordering. Otherwise '
                'within noise. A seed without a value (not run, failed or diverged) counts against '
                'the ordering, and one seed alone gives no noise estimate, so it never decides.')


@dataclasses.dataclass(frozen=True)
class Verdict:
  """An ordering's verdict on one column over the seeds asked for (`VERDICT_RULE`)."""
  verdict: str                    # 'reproduced', 'reversed', 'within noise' or 'not measured'
  margins: dict[int, float]       # per seed with a value
  missing: tuple[int, ...]        # seeds asked for without a value
  t: float | None = None          # the paired t statistic (None under two margins)
  critical: float | None = None   # its one-sided 5 % quantile

  @property
  def held(self) -> int:
    return sum(margin > 0 for margin in self.margins.values())


def t_critical(n: int) -> float:
  """Student's t quantile 1 - SIGNIFICANCE with n - 1 degrees of freedom."""
  from scipy import stats  # pylint: disable=g-import-not-at-top  (only tables with orderings)
  return float(stats.t.ppf(1.0 - SIGNIFICANCE, n - 1))


def judge(margins: dict[int, float], seeds: tuple[int, ...]) -> Verdict:
  """`VERDICT_RULE` on the per-seed margins of one ordering and column."""
  missing = tuple(seed for seed in seeds if seed not in margins)
  values = list(margins.values())
  if not values:
    return Verdict('not measured', margins, missing)
  if len(values) < 2:
    return Verdict('within noise', margins, missing)
  mean, sd = statistics.mean(values), statistics.stdev(values)
  if sd > 0:
    t = mean / (sd / len(values) ** 0.5)
  else:   # every seed the same margin: no spread to weigh it against
    t = 0.0 if mean == 0 else float('inf') if mean > 0 else float('-inf')
  critical = t_critical(len(values))
  if not missing and all(v > 0 for v in values) and t > critical:
    verdict = 'reproduced'
  elif all(v < 0 for v in values) and t < -critical:
    verdict = 'reversed'
  else:
    verdict = 'within noise'
  return Verdict(verdict, margins, missing, t, critical)


def _verdict_detail(verdict: Verdict, seeds: tuple[int, ...], own: bool = False) -> str:
  """'**reproduced**: holds in 3 of 3 seeds (by +0.35 to +1.35; t = 4.10 > 2.92)'; an ordering
  of our own (`own`) reads '**ahead**: ahead in 3 of 3 seeds ...'."""
  if not verdict.margins:
    return 'not measured: no seed has a value on both sides (not run, or failed)'
  low, high = min(verdict.margins.values()), max(verdict.margins.values())
  spread = f'by {low:+.2f}' if len(verdict.margins) == 1 else f'by {low:+.2f} to {high:+.2f}'
  if verdict.t is None:
    test = 'one seed gives no noise estimate'
  else:
    t, critical = verdict.t, verdict.critical
    # Two decimals, or as many as it takes (up to 6) for t not to print as the quantile it passed.
    d = next((digits for digits in range(2, 7)
              if f'{abs(t):.{digits}f}' != f'{critical:.{digits}f}'), 6)
    test = (f't = {t:.{d}f} > {critical:.{d}f}' if t > critical else
            f't = {t:.{d}f} < -{critical:.{d}f}' if t < -critical else
            f'|t| = {abs(t):.{d}f} ≤ {critical:.{d}f}')
  missing = ''
  if verdict.missing:
    names = ', '.join(map(str, verdict.missing))
    missing = (f'; seed{"" if len(verdict.missing) == 1 else "s"} {names}: no value (not run or '
               'failed), counted against')
  word = OWN_WORDS.get(verdict.verdict, verdict.verdict) if own else verdict.verdict
  return (f'**{word}**: {"ahead" if own else "holds"} in {verdict.held} of {len(seeds)} seed'
          f'{"" if len(seeds) == 1 else "s"} ({spread}; {test}{missing})')


def ordering_line(table: Table, ordering: Ordering, results: dict,
                  seeds: tuple[int, ...]) -> str:
  """'- FedFR above FedFace (generic LFW acc.): **reproduced**: holds in 3 of 3 seeds (by +0.35
  to +1.35; t = 4.10 > 2.92).' (`judge`: a tie does not hold the ordering, and a seed without a
  value counts against it.)"""
  verdict = judge(ordering_margins(table, ordering, results, seeds), seeds)
  detail = _verdict_detail(verdict, seeds, table.own_orderings)
  return f'- {ordering.claim} ({_column_title(table, ordering.column)}): {detail}.'


def ordering_lines(table: Table, results: dict, seeds: tuple[int, ...]) -> list[str]:
  """Every ordering's line; a claim checked on several columns gets a line saying on how many it
  is reproduced, then one indented line per column."""
  claims = {}
  for ordering in table.orderings:
    claims.setdefault(ordering.claim, []).append(ordering)
  lines = []
  for claim, orderings in claims.items():
    if len(orderings) == 1:
      lines.append(ordering_line(table, orderings[0], results, seeds))
      continue
    verdicts = [judge(ordering_margins(table, o, results, seeds), seeds) for o in orderings]
    counts = {word: sum(v.verdict == word for v in verdicts)
              for word in ('reproduced', 'reversed')}
    said = OWN_WORDS if table.own_orderings else {word: word for word in counts}
    lines.append(f'- {claim}: {said["reproduced"]} on {counts["reproduced"]} of {len(orderings)} '
                 'columns' + (f', {said["reversed"]} on {counts["reversed"]}'
                              if counts['reversed'] else '') + ':')
    lines += [f'  - {_column_title(table, o.column)}: '
              f'{_verdict_detail(v, seeds, table.own_orderings)}.'
              for o, v in zip(orderings, verdicts)]
  return lines


def markdown(table: Table, results: dict[tuple[Run, int], dict], command: str,
             seeds: tuple[int, ...] = (0,), commits: str = '') -> str:
  """The table with ours and the paper's value side by side per column (ours alone when the
  paper has no number anywhere in it); `commits` (`commits_line`) goes under the footnote."""
  has_paper = any(v is not None for row in table.rows for v in row.paper)
  header = ['method']
  for i, column in enumerate(table.columns):
    title = _column_title(table, column)
    paper_title = table.paper_titles[i] if table.paper_titles else title
    header += [f'{title} (ours)', f'{paper_title} (paper)'] if has_paper else [title]
  lines = [f'## {table.title}', '', f'Paper: {table.claim}.', '',
           '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for row in table.rows:
    cells = [row.label]
    failed = sum('failed' in results.get((row.run, seed), {}) for seed in seeds)
    for column, paper in zip(table.columns, row.paper):
      values = [] if row.run is None else row_values(table, row, column, results, seeds)
      digits = column_digits(table, column)
      cell = summarize(values, len(seeds) - failed, digits) if values else 'failed'
      if failed and values:
        cell += f' ({failed} failed)'
      cells.append('not built' if row.run is None else cell if values or failed else '—')
      if has_paper:
        cells.append('—' if paper is None else f'{paper:.2f}')
    lines.append('| ' + ' | '.join(cells) + ' |')
  spread = ('' if len(seeds) == 1 else
            f' Ours: mean ± standard deviation over config.seed = {", ".join(map(str, seeds))}.')
  errors = sorted({result['failed'] for result in results.values() if 'failed' in result})
  if table.orderings:
    heads = claims.ORDERINGS_HEADS
    head = (f"{heads[1]} (no paper states them), on ours seed by seed (by: how far the first "
            "leads, per seed, in the column's unit). " + VERDICT_RULE
            + " Here 'ahead' stands for reproduced and 'behind' for reversed."
            if table.own_orderings else
            f"{heads[0]}, seed by seed (by: how far the first leads, per seed, in the column's "
            'unit). ' + VERDICT_RULE)
    lines += ['', head, '']
    lines += ordering_lines(table, results, seeds)
  lines += ['', f'Made by `{command}`; {table.setting}' + spread, '']
  if commits:
    lines += [commits, '']
  if errors:
    lines += ['Failed runs ended with: ' + '; '.join(f'`{e}`' for e in errors), '']
  return '\n'.join(lines)
