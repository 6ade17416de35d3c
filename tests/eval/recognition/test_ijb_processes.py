"""IJB-B/C in a real process (issue 56, items 9 and 10): a bad meta file stops `fedjax_face.main`
with one line and exit status 2 before the workdir is made, and the evaluation's image workers
die with the process that made them, however it dies (kill -9 included). That process is a
`python -c` script run in a child forked from one that has imported its dependencies
(tests/forked_commands.py): its own pid, stdout and exit status, its workers its own children
(spawned: new interpreters)."""

import os
import signal
import sys
import time

import pytest

from tests import forked_commands, ijb_files, main_in_process

CONFIG = 'configs/fedgc/fedgc.py:runlocal'
GONE_WITHIN_S = 5.0   # the prctl signal is at once; the fallback polls every PARENT_POLL_S (0.5 s)


def test_a_malformed_landmark_line_stops_main_in_one_line_before_the_workdir(
    tmp_path, monkeypatch, capsys):
  root = tmp_path / 'ijbc'
  ijb_files.write_ijb(root)
  lines = ijb_files.meta_lines(root, 'name_5pts_score.txt')
  lines[6] = ' '.join(lines[6].split()[:10])   # 9 numbers after the name, not 11
  landmarks = ijb_files.rewrite_meta(root, 'name_5pts_score.txt', lines)
  workdir = tmp_path / 'run'
  code, err = main_in_process.run(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                                  f'--config.evals.ijb.root={root}',
                                  '--config.evals.ijb.check_pair_count=False')
  assert code == 2
  assert err == [f'{main_in_process.PROG}: {landmarks}:7: 10 fields; expected "image_name x1 y1 '
                 '... x5 y5 faceness" (12)'], err
  # Found while the evaluators are made, which the driver does before it makes the workdir.
  assert not workdir.exists()


# -- workers die with their parent ------------------------------------------------------------

def _state(pid: int) -> str:
  """The process's state letter, or 'gone'. A zombie ('Z') holds no memory: as good as gone
  here, where nothing may reap the orphans (a container's PID 1)."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      return f.read().rsplit(')', 1)[1].split()[0]
  except (FileNotFoundError, ProcessLookupError):
    return 'gone'


def _kill_and_wait_for(script: str, *args: str) -> dict:
  """Runs `script` (python -c) until it prints its workers' pids, kill -9s it, and returns each
  worker's state GONE_WITHIN_S seconds later, or as soon as all are gone. A survivor is killed
  before the test fails."""
  proc = forked_commands.start_code(script, *args, timeout=300)
  try:
    line = proc.stdout.readline()
    pids = [int(p) for p in line.split()]
    assert pids, f'no worker pids from the script (exit {proc.poll()})'
    assert all(_state(p) not in ('gone', 'Z') for p in pids)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
  finally:
    proc.kill()
    proc.wait(timeout=30)
  deadline = time.monotonic() + GONE_WITHIN_S
  while time.monotonic() < deadline and any(_state(p) not in ('gone', 'Z') for p in pids):
    time.sleep(0.1)
  states = {p: _state(p) for p in pids}
  for pid, state in states.items():
    if state not in ('gone', 'Z'):
      os.kill(pid, signal.SIGKILL)
  return states


# The IJB image reading with two workers, stopped after its first chunk with the next one's
# tasks pending: the point of an evaluation where a kill -9 left the workers blocked on the
# pool's queue for good.
_READING = '''
import multiprocessing, sys, time
from fedjax_face.data.formats import ijb as ijb_format
from fedjax_face.eval.recognition import ijb
ijb.TASK_IMAGES = 2
chunks = ijb.aligned_chunks(ijb_format.read_protocol(sys.argv[1]), 16, chunk=4, workers=2)
next(chunks)
print(' '.join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(120)
'''


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_kill_9_during_the_image_reading_takes_its_workers_with_it(tmp_path):
  ijb_files.write_ijb(tmp_path, num_subjects=2)
  states = _kill_and_wait_for(_READING, str(tmp_path))
  assert len(states) == 2
  assert set(states.values()) <= {'gone', 'Z'}, states


# Workers whose initializer is the fallback alone (no prctl): the thread that polls getppid.
_FALLBACK = '''
import concurrent.futures, multiprocessing, os, time
from fedjax_face.eval.recognition import ijb
pool = concurrent.futures.ProcessPoolExecutor(
    2, mp_context=multiprocessing.get_context('spawn'), initializer=ijb.die_with_parent,
    initargs=(os.getpid(), False))
started = [pool.submit(time.sleep, 0.5) for _ in range(2)]
concurrent.futures.wait(started)
sleeping = [pool.submit(time.sleep, 120) for _ in range(2)]
print(' '.join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
time.sleep(120)
'''


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
def test_without_prctl_the_workers_see_their_parent_go_and_end(tmp_path):
  states = _kill_and_wait_for(_FALLBACK)
  assert len(states) == 2
  assert set(states.values()) <= {'gone', 'Z'}, states


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='prctl is Linux only')
def test_a_worker_whose_parent_is_already_gone_ends_at_once():
  # The parent died between the worker's start and its prctl: no signal will come, so the
  # initializer ends the worker itself. Here the "parent" is a pid that is not this one's.
  script = ('import os\nfrom fedjax_face.eval.recognition import ijb\n'
            'ijb.die_with_parent(os.getppid() + 1)\nprint("still here")\n')
  out = forked_commands.run_code(script)
  assert out.returncode == 1 and 'still here' not in out.stdout, out
