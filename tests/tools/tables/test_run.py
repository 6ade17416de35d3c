"""Running a table's runs: finished runs read, missing ones started once, failures recorded."""

import json
import subprocess
import sys
import time

from fedjax_face.io import files
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Row, Run, Table
from tests.tools.tables.fakes import fake_result


def test_run_all_reads_finished_runs_and_dry_run_starts_nothing(tmp_path, capsys):
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (1.0,))), 'c')
  for run, seed, acc in ((a, 0, 0.5), (a, 1, 0.6)):
    workdir = tmp_path / run.name(spec.seed_overrides((), seed))
    workdir.mkdir()
    (workdir / 'results.json').write_text(json.dumps(fake_result(lfw=acc)))
  got = table_runs.run_all(table, str(tmp_path), (), dry_run=True, seeds=(0, 1))
  assert got == {(a, 0): fake_result(lfw=0.5), (a, 1): fake_result(lfw=0.6)}
  # Nothing was started; the missing runs are listed with the commands that would make them.
  missing = capsys.readouterr().out.splitlines()
  assert [line.split(' --workdir=')[1].split()[0] for line in missing] == [
      str(tmp_path / b.name(spec.seed_overrides((), 0))),
      str(tmp_path / b.name(spec.seed_overrides((), 1)))]
  assert all(line.startswith('missing: $ python -m fedjax_face.main --config=') for line in missing)
  assert not (tmp_path / b.name()).exists()


def test_a_failed_run_is_recorded_not_retried_and_shown(tmp_path, monkeypatch, capsys):
  # A run that diverges ends in an error: the sweep goes on, writes failed.json with the error
  # line, does not start it again, and the table says 'failed' with the error in a footnote.
  a, b = Run('fedgc/fedgc', 'loss=softmax'), Run('fedgc/fedpe', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (2.0,))), 'c')
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    if self == a:
      return [sys.executable, '-c', 'raise FloatingPointError("round 15: non-finite")']
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              'open(os.path.join(sys.argv[1], "results.json"), "w").write(sys.argv[2])')
    return [sys.executable, '-c', script, workdir, json.dumps(fake_result(lfw=0.7))]

  monkeypatch.setattr(Run, 'command', command)
  got = table_runs.run_all(table, str(tmp_path), ())
  assert got == {(a, 0): {'failed': 'FloatingPointError: round 15: non-finite'},
                 (b, 0): fake_result(lfw=0.7)}
  assert 'failed (exit 1): FloatingPointError: round 15: non-finite' in capsys.readouterr().out
  assert json.loads((tmp_path / a.name() / 'failed.json').read_text())['returncode'] == 1
  assert table_runs.run_all(table, str(tmp_path), ()) == got and started == [a, b]   # not retried
  text = markdown.render(table, got, 'cmd')
  assert '| A | failed | 1.00 |' in text and '| B | 70.00 | 2.00 |' in text
  assert 'Failed runs ended with: `FloatingPointError: round 15: non-finite`' in text


def test_last_error_picks_the_exception_line():
  stderr = 'W1124 font\nTraceback (most recent call last):\n  File "x"\nValueError: bad\n\n'
  assert table_runs.last_error(stderr) == 'ValueError: bad'
  assert table_runs.last_error('killed\n') == 'killed'


def test_a_run_that_starts_from_another_runs_it_first_with_the_same_seed(tmp_path, monkeypatch,
                                                                        capsys):
  start = Run('fedfr/pretrain')
  run = Run('fedfr/fedfr', 'row=hn', init_from=start)
  table = Table('T', 'results', ('personalized/tar/0.001', 'last_logged_round/steps_run'),
                (Row('A', run, (None, None)),), 'c')
  commands = []

  def command(self, workdir, extra=()):
    commands.append((self, dict(extra)))
    value = 0.5 if self == run else 0.25
    result = {'personalized': {'tar': {'0.001': value}}, 'last_logged_round': {'steps_run': 7.0}}
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              f'json.dump({result!r}, open(os.path.join(sys.argv[1], "results.json"), "w"))')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  got = table_runs.run_all(table, str(tmp_path), (), seeds=(1,))
  start_dir = str(tmp_path / start.name(spec.seed_overrides((), 1)))
  assert commands == [(start, {'seed': '1'}), (run, {'seed': '1', 'init_from': start_dir})]
  text = markdown.render(table, got, 'cmd', seeds=(1,))
  assert '| A | 50.00 | 7.00 |' in text   # rates in %, counts as they are; no paper column
  # A start that failed is the dependent row's failure, and nothing is started after it.
  (tmp_path / 'failed_root').mkdir()
  failed_dir = tmp_path / 'failed_root' / start.name()
  failed_dir.mkdir()
  (failed_dir / table_runs.FAILED).write_text(json.dumps({'returncode': 1, 'error': 'boom'}))
  commands.clear()
  got = table_runs.run_all(table, str(tmp_path / 'failed_root'), (), seeds=(0,))
  assert commands == [] and got == {(run, 0): {'failed': 'boom'}}


def test_a_run_another_lane_is_training_is_waited_for_and_read_not_started_again(tmp_path,
                                                                                monkeypatch):
  run = Run('fedgc/fedpe')
  run_dir = tmp_path / run.name()
  run_dir.mkdir()
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    # Refused as files.workdir_lock refuses, by a lane that finished just before the refusal.
    script = ('import json, os, sys; d = sys.argv[1]; '
              f'json.dump({fake_result(lfw=0.7)!r}, open(os.path.join(d, "results.json"), "w")); '
              f'sys.exit("RuntimeError: --workdir={{d}} {files.IN_USE} pid 1 on host h")')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  # Another process holds the workdir's lock and writes results.json before it lets go.
  holder = subprocess.Popen([sys.executable, '-c', (
      'import fcntl, json, os, sys, time; d = sys.argv[1]; '
      'h = open(os.path.join(d, ".lock"), "a+"); fcntl.flock(h, fcntl.LOCK_EX); '
      'open(os.path.join(d, "locked"), "w").close(); time.sleep(1); '
      f'json.dump({fake_result(lfw=0.8)!r}, open(os.path.join(d, "results.json"), "w"))'),
      str(run_dir)])
  while not (run_dir / 'locked').exists():
    time.sleep(0.01)
  assert table_runs.ensure_run(run, str(tmp_path), (), 0, dry_run=False) == str(run_dir)
  holder.wait()
  assert started == [] and json.loads((run_dir / 'results.json').read_text()) == fake_result(
      lfw=0.8)
  # Refused by a lock taken between the check and the start: read, no failed.json written.
  (run_dir / 'results.json').unlink()
  assert table_runs.ensure_run(run, str(tmp_path), (), 0, dry_run=False) == str(run_dir)
  assert started == [run] and not (run_dir / table_runs.FAILED).exists()
  assert table_runs.run_all(Table('T', 'verification', ('lfw',), (Row('A', run, (None,)),), 'c'),
                        str(tmp_path), ()) == {(run, 0): fake_result(lfw=0.7)}
