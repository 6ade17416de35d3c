"""Running a table's runs: one subprocess at a time, each once, resumable, failures recorded.

`run_all` starts, one subprocess at a time, the runs whose workdir holds no `results.json` yet (so
a sweep can be stopped and resumed, and runs shared by several tables are trained once), and
reads every finished run's results back (`read_results`, which refuses a stale one). A run that
ends in an error leaves `FAILED` in its workdir and is shown, not retried.
"""

import json
import subprocess
import time

from fedjax_face.io import files
from fedjax_face.run import results as results_lib
from fedjax_face.tools.tables.spec import Combined, Run, Table, seed_overrides, workdir

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
