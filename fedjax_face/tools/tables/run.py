"""Running a table's runs: one subprocess at a time, each once, resumable, failures recorded.

`run_all` starts, one subprocess at a time, the runs whose workdir holds no `results.json` yet (so
a sweep can be stopped and resumed, and runs shared by several tables are trained once), and
reads every finished run's results back (`read_results`, which refuses a stale one). A run that
ends in an error leaves `FAILED` in its workdir and is shown, not retried.

A table that asks it (`Table.evaluate_diverged`) shows a run the divergence guard stopped at its
last accepted checkpoint (`last_accepted`): `python -m fedjax_face.evaluate` scores that state
into `<run>/evaluations/last_accepted/` (an attack that replays rounds replays the latest its
checkpoints allow, `replayed_within`), and `LAST_ACCEPTED` beside the run records where the guard
stopped it, the checkpoints it held and what the evaluation replayed, or that it stopped before
its first checkpoint. Both are archived, so the table rebuilds from the archive alone.
"""

import json
import subprocess
import time

import ml_collections

from fedjax_face import experiment
from fedjax_face.io import checkpoint, files
from fedjax_face.run import replay, schedule
from fedjax_face.run import results as results_lib
from fedjax_face.tools.tables.spec import Combined, Run, Table, seed_overrides, workdir

FAILED = 'failed.json'   # beside a run that ended in an error: its exit code and last error line
LAST_ACCEPTED = 'last_accepted.json'   # beside a run the divergence guard stopped (`last_accepted`)
DIVERGED_EVALUATION = 'last_accepted'  # its evaluation: <run>/evaluations/<this>/
ROUND_FIELD = 'round'   # the last round each replaying attack's section replays (schedule.REPLAYED)


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
        if table.evaluate_diverged:
          results[(row.run, seed)].update(last_accepted(row.run, root, extra, seed, dry_run))
  return results


def evaluation_dir(run_dir: str) -> str:
  """Where `last_accepted` evaluates a diverged run's last accepted checkpoint."""
  return files.join(run_dir, experiment.EVALUATIONS, DIVERGED_EVALUATION)


def replayed_within(run_config: dict, held: list[int],
                    attacked: int) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
  """Per attack of `run_config` (a config.json) that replays rounds: (the rounds it asks, the
  rounds an evaluation of round `attacked` with the checkpoints `held` replays). The same where
  they can be replayed (round 1, or a round whose predecessor is held: `replay.replayable`), else
  the latest window of as many consecutive rounds, ending at or before `attacked`, that can be;
  () when none can."""
  evals = ml_collections.ConfigDict({'evals': run_config.get('evals', {})})
  allowed = set(replay.replayable(held, attacked))
  out = {}
  for kind, (_, asked) in schedule.replayed_rounds(evals).items():
    if set(asked) <= allowed:
      out[kind] = (asked, asked)
      continue
    width = len(asked)
    ends = [end for end in range(attacked, width - 1, -1)
            if all(r in allowed for r in range(end - width + 1, end + 1))]
    out[kind] = (asked, tuple(range(ends[0] - width + 1, ends[0] + 1)) if ends else ())
  return out


def replay_changes(replayed: dict) -> tuple[tuple[str, str], ...]:
  """The `--config.` fields that make an evaluation replay `replayed_within`'s rounds: each
  moved attack's last round, or its switch at its off value when no round can be replayed."""
  changes = []
  for kind, (asked, used) in replayed.items():
    if used != asked:
      field, off, _ = schedule.REPLAYED[kind]
      changes.append((f'evals.{kind}.{ROUND_FIELD}', str(used[-1])) if used else
                     (f'evals.{kind}.{field}', str(off)))
  return tuple(changes)


def last_accepted(run: Run, root: str, extra: tuple, seed: int, dry_run: bool,
                  runner=None) -> dict:
  """For a run the divergence guard stopped: {'last_accepted': its `LAST_ACCEPTED` record, and
  when its last accepted checkpoint was evaluated 'checkpoint': that evaluation's results.json
  and 'trained_at': the run's commit labels}; {} for a run that failed otherwise, or whose
  evaluation a dry run has not made.

  The record is made once (delete it to make it again): where the guard stopped the run
  ('stopped_at_round'), the checkpoints it held and its 'checkpoint_every', and when it held
  one, the evaluation of the newest (`Run.evaluate_command` into `evaluation_dir`, run by
  `runner`, `subprocess.run` by default, each replaying attack moved to `replayed_within`'s
  rounds): 'replayed' (attack -> the rounds asked and replayed), then 'evaluation' (its
  folder's name) or 'error' (its last error line). A dry run prints the evaluation's command as
  missing and writes nothing."""
  run_dir = workdir(root, run, extra, seed)
  if files.exists(files.join(run_dir, LAST_ACCEPTED)):
    return read_last_accepted(run_dir)
  stopped, held = replay.last_accepted(run_dir)
  if stopped is None:
    return {}
  run_config = files.read_json(files.join(run_dir, 'config.json'))
  record = {'stopped_at_round': stopped['round'], 'checkpoints': held,
            'checkpoint_every': run_config.get('checkpoint_every')}
  if held:
    replayed = replayed_within(run_config, held, held[-1])
    cmd = run.evaluate_command(run_dir, DIVERGED_EVALUATION, seed_overrides(extra, seed),
                               replay_changes(replayed))
    if dry_run:
      print('missing: $ python ' + ' '.join(cmd[1:]), flush=True)
      return {}
    print('$ python ' + ' '.join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    proc = (runner or subprocess.run)(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True)
    record['replayed'] = {kind: {'asked': list(asked), 'replayed': list(used)}
                          for kind, (asked, used) in replayed.items()}
    if proc.returncode:
      record['error'] = last_error(proc.stderr)
      print(f'  evaluation failed (exit {proc.returncode}): {record["error"]}', flush=True)
    else:
      record['evaluation'] = DIVERGED_EVALUATION
      print(f'  evaluated in {time.perf_counter() - t0:.0f} s', flush=True)
  elif dry_run:
    return {'last_accepted': record}
  files.write_text_atomic(files.join(run_dir, LAST_ACCEPTED), json.dumps(record, indent=2))
  return read_last_accepted(run_dir)


def read_last_accepted(run_dir: str) -> dict:
  """`last_accepted`'s answer from the files it left in `run_dir` (a sweep's or the archive's):
  the record, and the evaluation it names with the run's commit labels. ValueError naming the
  evaluation when the record names one that is missing."""
  record = files.read_json(files.join(run_dir, LAST_ACCEPTED))
  out = {'last_accepted': record}
  if record.get('evaluation'):
    evaluated = files.join(evaluation_dir(run_dir), 'results.json')
    if not files.exists(evaluated):
      raise ValueError(f'{files.join(run_dir, LAST_ACCEPTED)} names the evaluation {evaluated}, '
                       'which is missing; expected it beside the record (archive both, or delete '
                       'the record to evaluate again).')
    out['checkpoint'] = files.read_json(evaluated)
    out['trained_at'] = checkpoint.config_commits(
        files.read_json(files.join(run_dir, 'config.json')))
  return out


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
