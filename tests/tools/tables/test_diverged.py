"""A run the divergence guard stopped, in a table that evaluates it (`Table.evaluate_diverged`):
its last accepted checkpoint evaluated, the replayed rounds moved to what its checkpoints allow,
the record and evaluation archived, the row marked and noted; before any checkpoint, marked so.
Fake run folders only: no training, no evaluation (a fake `runner` writes its results)."""

import json
import os
import subprocess

import pytest

from fedjax_face.tools.tables import archive
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables.spec import Row, Run, Table

STOP_ERROR = 'FloatingPointError: round 50: training loss 2268 is more than ...'
EVALS = {'leakage': {'round': 60, 'rounds': 1, 'kinds': []},
         'inversion': {'round': 60, 'targets': 4}}


def at(commit: str) -> dict:
  """A provenance record (`io/provenance.collect()`) at the commit `commit * 40`."""
  return {'git': {'commit': commit * 40, 'dirty': False, 'version': None}}


OK_RUN = Run('fedgc/fedgc', 'loss=softmax')
STOPPED_RUN = Run('fedgc/fedgc', 'loss=softmax', (('dp.enabled', 'True'),
                                                  ('evals.leakage.round', '60')))


def make_table(evaluate_diverged: bool = True) -> Table:
  return Table('T', 'results', ('verification/lfw/accuracy', 'privacy/epsilon'),
               (Row('ok', OK_RUN, (None, None)), Row('noised', STOPPED_RUN, (None, None))),
               'none', titles=('LFW-like', 'epsilon'), column_digits=(2, 2),
               evaluate_diverged=evaluate_diverged)


def write_sweep(root, checkpoints=(20, 40), stopped=True) -> str:
  """A sweep root: OK_RUN finished at commit a; STOPPED_RUN failed, stopped by the divergence
  guard at round 50 (when `stopped`) holding `checkpoints`. Returns STOPPED_RUN's folder."""
  ok = root / OK_RUN.name()
  ok.mkdir(parents=True)
  (ok / 'results.json').write_text(json.dumps(
      {'verification': {'lfw': {'accuracy': 0.8372}}, 'privacy': {'epsilon': 16.0},
       'provenance': at('a')}))
  bad = root / STOPPED_RUN.name()
  (bad / 'checkpoints').mkdir(parents=True)
  for step in checkpoints:   # what orbax lists as a finished step
    (bad / 'checkpoints' / str(step)).mkdir()
    (bad / 'checkpoints' / str(step) / '_CHECKPOINT_METADATA').write_text('{}')
  (bad / 'config.json').write_text(json.dumps(
      {'checkpoint_every': 20, 'evals': EVALS,
       'provenance': {'start': at('a'), 'resumed': []}}))
  (bad / table_runs.FAILED).write_text(json.dumps({'returncode': 1, 'error': STOP_ERROR}))
  if stopped:
    (bad / 'stopped.json').write_text(json.dumps({'round': 50, 'reason': 'diverged'}))
  return str(bad)


class FakeEvaluate:
  """`subprocess.run` of the evaluation: records the command; writes the evaluation's files at
  commit b (lfw 0.6123 at the checkpoint, no epsilon), or fails."""

  def __init__(self, fail: bool = False):
    self.commands, self.fail = [], fail

  def __call__(self, cmd, **unused_kwargs):
    self.commands.append(cmd)
    if self.fail:
      return subprocess.CompletedProcess(cmd, 1, '', 'Traceback\nValueError: no memory left\n')
    run_dir = next(a.split('=', 1)[1] for a in cmd if a.startswith('--workdir='))
    out = table_runs.evaluation_dir(run_dir)
    os.makedirs(out)
    with open(os.path.join(out, 'results.json'), 'w') as f:
      json.dump({'verification': {'lfw': {'accuracy': 0.6123}}, 'evaluated_round': 40,
                 'diverged': True, 'provenance': at('b')}, f)
    with open(os.path.join(out, 'config.json'), 'w') as f:
      json.dump({'provenance': at('b')}, f)
    with open(os.path.join(out, 'report.md'), 'w') as f:
      f.write('not archived')
    return subprocess.CompletedProcess(cmd, 0, '', '')


@pytest.fixture
def evaluated_sweep(tmp_path, monkeypatch):
  """A sweep whose stopped run was evaluated (at commit b) by the table's run."""
  root = tmp_path / 'sweep'
  write_sweep(root)
  fake = FakeEvaluate()
  monkeypatch.setattr(table_runs.subprocess, 'run', fake)
  results = table_runs.run_all(make_table(), str(root), ())
  return root, results, fake


def test_replayed_rounds_move_to_the_latest_the_checkpoints_allow():
  # Round r replays from round r-1's checkpoint: with 20 and 40 held, the state at 40 allows
  # rounds 1 and 21, so round 60 moves to 21.
  assert table_runs.replayed_within({'evals': EVALS}, [20, 40], 40) == {
      'leakage': ((60,), (21,)), 'inversion': ((60,), (21,))}
  window = {'evals': {'leakage': {'round': 60, 'rounds': 3, 'kinds': []}}}
  assert table_runs.replayed_within(window, [20, 21, 22, 40], 40) == {
      'leakage': ((58, 59, 60), (21, 22, 23))}
  assert table_runs.replayed_within(window, [40], 40) == {'leakage': ((58, 59, 60), ())}
  assert table_runs.replayed_within({'evals': EVALS}, [59, 60], 60) == {
      'leakage': ((60,), (60,)), 'inversion': ((60,), (60,))}
  assert table_runs.replay_changes({'leakage': ((58, 59, 60), ()), 'inversion': ((60,), (21,)),
                                    'other': ((5,), (5,))}) == (
      ('evals.leakage.round', '0'), ('evals.inversion.round', '21'))


def test_the_evaluate_command_is_the_runs_own_config_aimed_at_its_folder():
  cmd = STOPPED_RUN.evaluate_command('/r/x', 'last_accepted', (('seed', '1'),),
                                     (('evals.leakage.round', '21'),
                                      ('evals.inversion.round', '21')))
  assert cmd[1:] == ['-m', 'fedjax_face.evaluate', '--config=configs/fedgc/fedgc.py:loss=softmax',
                     '--workdir=/r/x', '--name=last_accepted', '--config.dp.enabled=True',
                     '--config.evals.leakage.round=21', '--config.seed=1',
                     '--config.evals.inversion.round=21', '--config.init_from=/r/x']


def test_a_diverged_run_shows_its_evaluated_checkpoint_marked(evaluated_sweep):
  root, results, fake = evaluated_sweep
  run_dir = str(root / STOPPED_RUN.name())
  assert len(fake.commands) == 1
  assert fake.commands[0][1:6] == ['-m', 'fedjax_face.evaluate',
                                   '--config=configs/fedgc/fedgc.py:loss=softmax',
                                   f'--workdir={run_dir}', '--name=last_accepted']
  assert '--config.evals.leakage.round=21' in fake.commands[0]
  assert '--config.evals.inversion.round=21' in fake.commands[0]
  record = json.loads((root / STOPPED_RUN.name() / table_runs.LAST_ACCEPTED).read_text())
  assert record == {'stopped_at_round': 50, 'checkpoints': [20, 40], 'checkpoint_every': 20,
                    'replayed': {'leakage': {'asked': [60], 'replayed': [21]},
                                 'inversion': {'asked': [60], 'replayed': [21]}},
                    'evaluation': 'last_accepted'}
  result = results[(STOPPED_RUN, 0)]
  assert result['failed'] == STOP_ERROR   # a failure to the verdicts, which read it as none
  text = markdown.render(make_table(), results, 'cmd')
  assert ('| noised (diverged at round 50: its round-40 checkpoint [1]) | 61.23 | — |'
          in text.splitlines())
  assert '| ok | 83.72 | 16.00 |' in text.splitlines()
  assert ("- [1] noised: the divergence guard stopped it at round 50; its cells are its last "
          "accepted checkpoint's, round 40 (checkpoints held: 20, 40), evaluated afterwards by "
          "`python -m fedjax_face.evaluate` (evaluations/last_accepted/) at commit bbbbbbbbbbbb, "
          "the run trained at aaaaaaaaaaaa; another commit than its training and than the "
          "finished rows' attacks, so its numbers may differ by code as well as by state: a "
          "state 10 rounds before the stop, not a finished run's. Leakage replays round 21 "
          "(round 60 asked); inversion replays round 21 (round 60 asked): a replay of round r "
          "starts from the checkpoint of round r-1. Its evaluation has no epsilon (—)."
          in text.splitlines())
  # Made once: a second table run reads the record and runs nothing.
  again = table_runs.run_all(make_table(), str(root), ())
  assert len(fake.commands) == 1 and markdown.render(make_table(), again, 'cmd') == text


def test_the_archive_keeps_the_record_and_evaluation_and_rebuilds_the_table(evaluated_sweep,
                                                                             tmp_path):
  root, results, _ = evaluated_sweep
  target = tmp_path / 'archive'
  table = make_table()
  archive.archive_runs(table, str(root), (), (0,), str(target))
  kept = target / STOPPED_RUN.name()
  assert sorted(str(p.relative_to(kept)) for p in kept.rglob('*') if p.is_file()) == [
      'config.json', 'evaluations/last_accepted/config.json',
      'evaluations/last_accepted/results.json', 'failed.json', 'last_accepted.json']
  # `reproduce --check`: the archive alone (a dry run, no checkpoints) gives the same page.
  rebuilt = table_runs.run_all(table, str(target), (), dry_run=True)
  assert markdown.render(table, rebuilt, 'cmd') == markdown.render(table, results, 'cmd')
  # Archiving again leaves files whose bytes are the same as they were (their times too).
  evaluation = kept / 'evaluations' / 'last_accepted' / 'results.json'
  os.utime(evaluation, (1, 1))
  os.utime(target / OK_RUN.name() / 'results.json', (1, 1))
  archive.archive_runs(table, str(root), (), (0,), str(target))
  assert os.stat(evaluation).st_mtime == 1
  assert os.stat(target / OK_RUN.name() / 'results.json').st_mtime == 1


def test_park_keeps_the_evaluation_inside_its_folder(evaluated_sweep):
  root, _, _ = evaluated_sweep
  archive.park(make_table(), str(root), (), (0,))
  run_dir = root / STOPPED_RUN.name()
  assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob('*')) == [
      'config.json', 'evaluations', 'evaluations/last_accepted',
      'evaluations/last_accepted/config.json', 'evaluations/last_accepted/results.json',
      'failed.json', 'last_accepted.json']


def test_park_evaluates_a_stopped_run_before_its_checkpoints_go(tmp_path, monkeypatch):
  # A sweep parked before its table was made: the evaluation the table needs is made first, and
  # the parked root makes the same table as the evaluated sweep did, without checkpoints.
  write_sweep(tmp_path)
  fake = FakeEvaluate()
  monkeypatch.setattr(table_runs.subprocess, 'run', fake)
  archive.park(make_table(), str(tmp_path), (), (0,))
  run_dir = tmp_path / STOPPED_RUN.name()
  assert len(fake.commands) == 1 and not (run_dir / 'checkpoints').exists()
  assert (run_dir / table_runs.LAST_ACCEPTED).exists()
  parked = table_runs.run_all(make_table(), str(tmp_path), (), dry_run=True)
  assert ('| noised (diverged at round 50: its round-40 checkpoint [1]) | 61.23 | — |'
          in markdown.render(make_table(), parked, 'cmd').splitlines())
  # A table that does not evaluate diverged runs parks without evaluating.
  write_sweep(tmp_path / 'other')
  archive.park(make_table(evaluate_diverged=False), str(tmp_path / 'other'), (), (0,))
  assert len(fake.commands) == 1


def test_a_run_stopped_before_its_first_checkpoint_is_marked_so(tmp_path, monkeypatch):
  write_sweep(tmp_path, checkpoints=())
  fake = FakeEvaluate()
  monkeypatch.setattr(table_runs.subprocess, 'run', fake)
  dry = table_runs.run_all(make_table(), str(tmp_path), (), dry_run=True)
  assert not (tmp_path / STOPPED_RUN.name() / table_runs.LAST_ACCEPTED).exists()
  results = table_runs.run_all(make_table(), str(tmp_path), ())
  assert fake.commands == []
  text = markdown.render(make_table(), results, 'cmd')
  assert text == markdown.render(make_table(), dry, 'cmd')
  assert ('| noised (diverged at round 50, before any checkpoint [1]) | failed | failed |'
          in text.splitlines())
  assert ('- [1] noised: the divergence guard stopped it at round 50, before its first '
          'checkpoint (checkpoint_every = 20): no state to evaluate, so its cells stay "failed".'
          in text.splitlines())


def test_a_failed_evaluation_is_recorded_and_shown(tmp_path, monkeypatch):
  write_sweep(tmp_path)
  monkeypatch.setattr(table_runs.subprocess, 'run', FakeEvaluate(fail=True))
  results = table_runs.run_all(make_table(), str(tmp_path), ())
  record = json.loads((tmp_path / STOPPED_RUN.name() / table_runs.LAST_ACCEPTED).read_text())
  assert record['error'] == 'ValueError: no memory left' and 'evaluation' not in record
  lines = markdown.render(make_table(), results, 'cmd').splitlines()
  assert ('| noised (diverged at round 50; the evaluation of its round-40 checkpoint failed [1]) '
          '| failed | failed |' in lines)
  assert ('- [1] noised: the divergence guard stopped it at round 50; the evaluation of its last '
          'accepted checkpoint (round 40) ended with `ValueError: no memory left`.' in lines)


@pytest.mark.parametrize('stopped, evaluate_diverged', [(False, True), (True, False)])
def test_other_failures_and_other_tables_stay_failed(tmp_path, monkeypatch, stopped,
                                                     evaluate_diverged):
  """A run that failed without the guard, or a table that does not evaluate diverged runs:
  'failed', no note, nothing run or written."""
  run_dir = write_sweep(tmp_path, stopped=stopped)
  fake = FakeEvaluate()
  monkeypatch.setattr(table_runs.subprocess, 'run', fake)
  table = make_table(evaluate_diverged)
  text = markdown.render(table, table_runs.run_all(table, str(tmp_path), ()), 'cmd')
  assert '| noised | failed | failed |' in text.splitlines()
  assert 'Diverged runs:' not in text and fake.commands == []
  assert not os.path.exists(os.path.join(run_dir, table_runs.LAST_ACCEPTED))
