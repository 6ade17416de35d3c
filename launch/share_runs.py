"""Shares the runs of a queue of tables among sweep lanes, run by run (`every_table.sh full`).

Tables share runs (most FedGC tables hold FedPE softmax, FedGC Tables 10 and 11 hold the same 29
runs), so lanes that split the queue table by table mostly wait for each other. Here every lane
walks every table's runs in queue order and trains each run that nobody has claimed, the run it
starts from (`init_from`) first; a run whose start another lane is still training is put off to a
later pass. Each lane then makes its own tables from what is there (`reproduce`), waiting for
whatever another lane is still training.

    python /work/main/launch/share_runs.py ROOT LANE "table seeds" ...
    python /work/main/launch/share_runs.py --hours ROOT ARCHIVE "table seeds" ...   # what is left

Run it from the worktree of the sweep's commit: the run definitions are that commit's
(`fedjax_face.tools.tables`, imported from the current directory), as the runs' code is.

A claim is a kernel lock (flock) on /tmp/every_table_claims/<run>, held by the lane for the
whole run: it goes with its process, so a killed lane's runs are simply claimed anew. The file
/tmp/every_table_claims/drain (`every_table.sh drain`) makes each lane end after its current run,
so that a sitting ends without losing a half-trained run.
"""
import fcntl
import os
import sys
import time

sys.path.insert(0, os.getcwd())   # the worktree's package, not the one pip installed

from fedjax_face import reproduce   # noqa: E402
from fedjax_face.io import files   # noqa: E402
from fedjax_face.tools.tables import run as table_runs   # noqa: E402
from fedjax_face.tools.tables import spec   # noqa: E402

RETRY_S = 60   # how long a lane with only put-off runs left sleeps before its next pass
CLAIMS = '/tmp/every_table_claims'
DRAIN = os.path.join(CLAIMS, 'drain')


def queue_runs(queue: list[str]) -> list[tuple[spec.Run, int]]:
  """(run, seed) of every table in `queue` ('fedgc10 0,1,2'), each once and in order, a run's
  start before it."""
  return [(run, seed) for _, run, seed in paper_runs(queue)]


def paper_runs(queue: list[str]) -> list[tuple[str, spec.Run, int]]:
  """`queue_runs` with the paper of the first table that holds each run."""
  out, seen = [], set()

  def add(paper, run, seed):
    if run.init_from is not None:
      add(paper, run.init_from, seed)
    if (run, seed) not in seen:
      seen.add((run, seed))
      out.append((paper, run, seed))

  for entry in queue:
    name, seeds = entry.split()
    for paper, tid in reproduce.select(name):
      for row in reproduce.tables_of(paper)[tid].rows:
        runs = row.run.runs if isinstance(row.run, spec.Combined) else (row.run,)
        for run in runs:
          if run is None:
            continue
          for seed in spec.parse_seeds(seeds.split(',')):
            add(paper, run, seed)
  return out


def hours_left(queue: list[str], root: str, archive: str) -> list[tuple[str, int, float]]:
  """Per paper, in queue order: (paper, runs not ended under `root`, lane-hours: one lane's
  time for them, with the other lane busy beside it as in the sweeps that timed the runs).

  A run's hours are its namesake's in `archive` (<archive>/<paper>_tables/<run>/results.json,
  `timing.total_s`), else the mean of the paper's runs that have ended under `root`, else the
  mean of its runs that have a namesake: a guide, not a promise (a resumed run's total_s is its
  last sitting's, and the archive's runs ran on other machines)."""
  def seconds(path):
    if not files.exists(path):
      return None
    return (files.read_json(path).get('timing') or {}).get('total_s')

  ended_s, archived_s, missing = {}, {}, {}
  for paper, run, seed in paper_runs(queue):
    run_dir = spec.workdir(root, run, (), seed)
    if ended(run_dir):
      if (here := seconds(files.join(run_dir, 'results.json'))) is not None:
        ended_s.setdefault(paper, []).append(here)
      continue
    known = seconds(files.join(archive, f'{paper}_tables', os.path.basename(run_dir),
                               'results.json'))
    if known is not None:
      archived_s.setdefault(paper, []).append(known)
    missing.setdefault(paper, []).append(known)
  out = []
  for paper, times in missing.items():
    stand_in = ended_s.get(paper) or archived_s.get(paper) or [0.0]
    mean = sum(stand_in) / len(stand_in)
    out.append((paper, len(times), sum(mean if t is None else t for t in times) / 3600))
  return out


def ended(run_dir: str) -> bool:
  return any(files.exists(files.join(run_dir, name))
             for name in ('results.json', table_runs.FAILED))


def one_pass(runs, root: str, claims: str = CLAIMS, drain: str = DRAIN) -> tuple[int, int]:
  """Trains every unclaimed run whose start has ended, until `drain` exists; returns (trained,
  put off)."""
  trained = put_off = 0
  for run, seed in runs:
    if os.path.exists(drain):
      return trained, 0
    run_dir = spec.workdir(root, run, (), seed)
    if ended(run_dir):
      continue
    if run.init_from is not None and not ended(spec.workdir(root, run.init_from, (), seed)):
      put_off += 1   # its start is another lane's claim, still training
      continue
    with open(os.path.join(claims, os.path.basename(run_dir)), 'a') as claim:
      try:
        fcntl.flock(claim, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        continue   # another lane's
      if not ended(run_dir):   # it may have ended since we looked
        table_runs.ensure_run(run, root, (), seed, dry_run=False)
        trained += 1
  return trained, put_off


def main(root: str, lane: str, queue: list[str]):
  runs = queue_runs(queue)
  os.makedirs(CLAIMS, exist_ok=True)
  print(f'lane {lane}: {len(runs)} runs in the queue, claims in {CLAIMS}', flush=True)
  while True:
    trained, put_off = one_pass(runs, root)
    if os.path.exists(DRAIN):
      print(f'lane {lane}: drained ({DRAIN})', flush=True)
      return
    if not put_off:
      return
    if not trained:
      time.sleep(RETRY_S)


if __name__ == '__main__':
  if len(sys.argv) < 4:
    sys.exit(__doc__)
  if sys.argv[1] == '--hours':
    for paper, n, hours in hours_left(sys.argv[4:], sys.argv[2], sys.argv[3]):
      print(f'{paper}: {n} runs left, about {hours:.1f} lane-hours')
  else:
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
