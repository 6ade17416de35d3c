"""What a table keeps of its runs, and reading it back: commits, archive, park, spot check."""

import json
import os
import sys

import pytest

from fedjax_face.tools.tables import archive
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Compacted, Row, Run, Table
from tests.tools.tables.fakes import fake_result


def write_run(root, run: Run, seed: int, result: dict, config: dict | None = None) -> str:
  """A finished run's workdir under `root`: results.json, and config.json when given."""
  run_dir = root / run.name(spec.seed_overrides((), seed))
  run_dir.mkdir(parents=True)
  (run_dir / 'results.json').write_text(json.dumps(result))
  if config is not None:
    (run_dir / 'config.json').write_text(json.dumps(config))
  return str(run_dir)


def at(commit: str, dirty: bool = False) -> dict:
  """A provenance record (`io/provenance.collect()`) at the commit `commit * 40`."""
  return {'git': {'commit': commit * 40, 'dirty': dirty, 'version': None}}


def two_row_table():
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  return Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (1.0,))), 'c'), a, b


def test_runs_made_before_provenance_are_unrecorded_and_accepted(tmp_path):
  table, a, b = two_row_table()
  write_run(tmp_path, a, 0, fake_result(lfw=0.5), config={'seed': 0})
  write_run(tmp_path, b, 0, fake_result(lfw=0.6))
  dirs = table_runs.finished_workdirs(table, str(tmp_path), (), (0, 1))
  assert dirs == [str(tmp_path / a.name()), str(tmp_path / b.name())]
  assert archive.commit_counts(dirs) == {'unrecorded': 2}
  line = archive.commits_line({'unrecorded': 2})
  assert line == 'commit: unrecorded (runs made before provenance was recorded)'
  results = table_runs.run_all(table, str(tmp_path), (), dry_run=True)
  assert line + '\n' in markdown.render(table, results, 'cmd', commits=line)
  assert archive.commits_line({}) == ''   # nothing finished yet: nothing to say


def test_runs_of_one_commit_name_it():
  assert archive.commits_line({'aaaaaaaaaaaa': 3}) == 'commit: aaaaaaaaaaaa (3 runs)'
  assert archive.commits_line({'aaaaaaaaaaaa+dirty': 1}) == 'commit: aaaaaaaaaaaa+dirty (1 run)'


def test_a_table_of_mixed_commits_is_refused_unless_allowed(tmp_path):
  table, a, b = two_row_table()
  write_run(tmp_path, a, 0, fake_result(lfw=0.5) | {'provenance': at('a')})
  write_run(tmp_path, a, 1, fake_result(lfw=0.5) | {'provenance': at('a')})
  write_run(tmp_path, b, 0, fake_result(lfw=0.6) | {'provenance': at('a', dirty=True)})
  write_run(tmp_path, b, 1, fake_result(lfw=0.6))   # archived before provenance
  counts = archive.commit_counts(table_runs.finished_workdirs(table, str(tmp_path), (), (0, 1)))
  assert counts == {'aaaaaaaaaaaa': 2, 'aaaaaaaaaaaa+dirty': 1, 'unrecorded': 1}
  with pytest.raises(archive.MixedCommitsError) as refused:
    archive.commits_line(counts)
  assert str(refused.value) == (
      'the runs come from 3 commits: aaaaaaaaaaaa (2 runs), aaaaaaaaaaaa+dirty (1 run), '
      'unrecorded (1 run); rerun them at one commit, or pass --allow_mixed_commits to make the '
      'table anyway.')
  line = archive.commits_line(counts, allow_mixed=True)
  assert line == ('commits (mixed, --allow_mixed_commits): aaaaaaaaaaaa (2 runs), '
                  'aaaaaaaaaaaa+dirty (1 run), unrecorded (1 run)')
  # Seed 0 alone is one commit per run but still two labels (a dirty tree is code of its own).
  with pytest.raises(archive.MixedCommitsError, match=r'2 commits: aaaaaaaaaaaa \(1 run\), '
                     r'aaaaaaaaaaaa\+dirty \(1 run\)'):
    archive.commits_line(archive.commit_counts(
        table_runs.finished_workdirs(table, str(tmp_path), (), (0,))))


def test_a_run_resumed_across_commits_counts_for_each_of_them(tmp_path):
  table, a, b = two_row_table()
  # config.json's record (start, then resumes) is read over results.json's (the last of them).
  resumed = {'seed': 0, 'provenance': {'start': at('a'), 'resumed': [
      at('b') | {'from_round': 2}, at('a') | {'from_round': 4}]}}
  write_run(tmp_path, a, 0, fake_result(lfw=0.5) | {'provenance': at('a')}, config=resumed)
  write_run(tmp_path, b, 0, fake_result(lfw=0.6) | {'provenance': at('a')},
            config={'seed': 0, 'provenance': {'start': at('a'), 'resumed': []}})
  assert archive.run_commits(str(tmp_path / a.name())) == ['aaaaaaaaaaaa', 'bbbbbbbbbbbb']
  counts = archive.commit_counts(table_runs.finished_workdirs(table, str(tmp_path), (), (0,)))
  assert counts == {'aaaaaaaaaaaa': 2, 'bbbbbbbbbbbb': 1}
  with pytest.raises(archive.MixedCommitsError):
    archive.commits_line(counts)


def test_the_commits_include_the_runs_a_table_combines_or_starts_from(tmp_path):
  start = Run('fedfr/pretrain')
  run = Run('fedfr/fedfr', 'row=hn', init_from=start)
  single = Run('pad/single', 'channel=rgb')
  fused = spec.Combined('fused', (single,), lambda dirs: {})
  table = Table('T', 'results', ('x',), (Row('A', run, (None,)), Row('F', fused, (None,)),
                                         Row('S', single, (None,))), 'c')
  for each, commit in ((start, 'a'), (run, 'b'), (single, 'c')):
    write_run(tmp_path, each, 0, {'provenance': at(commit)})
  dirs = table_runs.finished_workdirs(table, str(tmp_path), (), (0,))
  assert dirs == [str(tmp_path / name) for name in (run.name(), start.name(), single.name())]
  assert archive.commit_counts(dirs) == {'aaaaaaaaaaaa': 1, 'bbbbbbbbbbbb': 1, 'cccccccccccc': 1}


def test_archive_keeps_what_a_table_is_rebuilt_from_and_nothing_else(tmp_path):
  start, failing = Run('fedfr/pretrain'), Run('fedfr/fedface')
  run = Run('fedfr/fedfr', init_from=start)
  table = Table('T', 'verification', ('lfw',), (Row('A', run, (None,)),
                                                Row('B', failing, (None,))), 'c',
                archived_files=('class_embedding_similarity.npz',))   # as FedFV Table 3's
  root, archive_dir = tmp_path / 'sweep', tmp_path / 'results' / 'toy_tables'
  ended = {start: ('results.json', fake_result(lfw=0.7)),
           run: ('results.json', fake_result(lfw=0.8)),
           failing: (table_runs.FAILED, {'returncode': 1, 'error': 'boom'})}
  for r, (name, content) in ended.items():
    run_dir = root / r.name()
    (run_dir / 'checkpoints' / '4').mkdir(parents=True)
    (run_dir / name).write_text(json.dumps(content))
    for extra in ('config.json', 'pad_video_scores.npz', 'pad_video_scores_O.npz',
                  'class_embedding_similarity.npz', 'report.md', 'pad_roc.png', 'log.txt'):
      (run_dir / extra).write_text('x')
  kept = archive.archive_runs(table, str(root), (), (0,), str(archive_dir))
  assert sorted(kept) == sorted(str(archive_dir / r.name()) for r in ended)
  assert sorted(p.name for p in (archive_dir / run.name()).iterdir()) == [
      'class_embedding_similarity.npz', 'config.json', 'pad_video_scores.npz',
      'pad_video_scores_O.npz', 'results.json']
  assert sorted(p.name for p in (archive_dir / failing.name()).iterdir()) == [
      'class_embedding_similarity.npz', 'config.json', table_runs.FAILED, 'pad_video_scores.npz',
      'pad_video_scores_O.npz']
  # The archive is a root that `run_all` reads back as it read the sweep, nothing started.
  assert (table_runs.run_all(table, str(archive_dir), (), dry_run=True)
          == table_runs.run_all(table, str(root), (), dry_run=True)
          == {(run, 0): fake_result(lfw=0.8), (failing, 0): {'failed': 'boom'}})


def test_park_leaves_what_a_commit_carries_and_the_queue_resumes_from_it(tmp_path):
  start, failing, unfinished = Run('fedfr/pretrain'), Run('fedfr/fedface'), Run('fedgc/fedpe')
  run = Run('fedfr/fedfr', init_from=start)
  outside = Run('fedgc/fedgc')   # in the root, but no run of this table
  table = Table('T', 'verification', ('lfw',), (Row('A', run, (None,)), Row('B', failing, (None,)),
                                                Row('C', unfinished, (None,))), 'c')
  root = tmp_path / 'sweep'
  everything = ('config.json', 'pad_video_scores.npz', 'report.md', '.hidden', 'log.txt',
                'class_embedding_similarity.npz')   # kept only where a table names it
  for r, ended in ((start, 'results.json'), (run, 'results.json'), (failing, table_runs.FAILED),
                   (unfinished, None), (outside, 'results.json')):
    run_dir = root / r.name()
    (run_dir / 'checkpoints' / '4').mkdir(parents=True)
    (run_dir / 'checkpoints' / '4' / 'state').write_text('x')
    for name in everything:
      (run_dir / name).write_text('x')
    if ended == table_runs.FAILED:
      (run_dir / ended).write_text(json.dumps({'returncode': 1, 'error': 'boom'}))
    elif ended:
      (run_dir / ended).write_text(json.dumps(fake_result(lfw=0.8)))
  before = table_runs.run_all(table, str(root), (), dry_run=True)

  lines = archive.park(table, str(root), (), (0, 1))
  assert lines == [f'pruned to its archived files: {root / run.name()}',
                   f'kept whole, other runs start from it: {root / start.name()}',
                   f'pruned to its archived files: {root / failing.name()}',
                   f'removed, not ended: {root / unfinished.name()}']
  listing = lambda r: sorted(p.name for p in (root / r.name()).iterdir())
  assert listing(run) == ['config.json', 'pad_video_scores.npz', 'results.json']
  assert listing(failing) == ['config.json', table_runs.FAILED, 'pad_video_scores.npz']
  assert listing(start) == sorted(everything + ('checkpoints', 'results.json'))
  assert (root / start.name() / 'checkpoints' / '4' / 'state').exists()
  assert listing(outside) == sorted(everything + ('checkpoints', 'results.json'))
  assert not (root / unfinished.name()).exists()
  # Read back, the parked root is the same table; only the unfinished run is missing again.
  assert table_runs.run_all(table, str(root), (), dry_run=True) == before
  assert archive.park(table, str(root), (), (0, 1)) == [
      f'kept whole, other runs start from it: {root / start.name()}']   # nothing more to do
  # A run shared with a table that keeps more of it (FedFV Table 3's cosines) keeps that too,
  # and only that run.
  shared = root / outside.name()
  (root / unfinished.name()).mkdir()
  for name in everything + ('results.json',):
    (root / unfinished.name() / name).write_text('x')
  wider = Table('U', 'verification', ('lfw',),
                (Row('D', outside, (None,)), Row('E', unfinished, (None,))), 'c')
  archive.park(wider, str(root), (), (0,),
              also_kept={str(shared): ('class_embedding_similarity.npz',)})
  assert listing(outside) == ['class_embedding_similarity.npz', 'config.json',
                              'pad_video_scores.npz', 'results.json'] and shared.exists()
  assert listing(unfinished) == ['config.json', 'pad_video_scores.npz', 'results.json']


def test_spot_check_reruns_one_run_per_method_and_compares_the_printed_cells(tmp_path,
                                                                           monkeypatch):
  a1, a2 = Run('fedgc/fedgc', 'loss=softmax'), Run('fedgc/fedgc', 'loss=cosface')
  b = Run('fedgc/fedpe')
  table = Table('T', 'verification', ('lfw',), (Row('A1', a1, (None,)), Row('A2', a2, (None,)),
                                                Row('B', b, (None,))), 'c')
  assert archive.spot_runs(table) == [a1, b]   # one per config file: the first row's
  archive_dir = tmp_path / 'archive'
  write_run(archive_dir, a1, 0, fake_result(lfw=0.812341))
  def on(os_build, extensions):   # provenance of a machine (io/provenance.py:machine)
    return {'provenance': {'platform': {'os': os_build, 'cpu': {
        'model': 'AMD EPYC', 'vector_extensions': extensions, 'usable': 2}}}}
  write_run(archive_dir, b, 0, fake_result(lfw=0.75) | on('v769', ['avx2']))
  # The same at 2 decimals (81.23), and not (75.00 -> 75.12, on another machine kind).
  rerun = {a1: fake_result(lfw=0.812344), b: fake_result(lfw=0.7512) | on('v669', ['avx2', 'f16c'])}
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    result = rerun[self]
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              f'json.dump({result!r}, open(os.path.join(sys.argv[1], "results.json"), "w"))')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  lines = archive.spot_check(table, str(archive_dir), str(tmp_path / 'fresh'))
  assert started == [a1, b]
  assert lines == [
      f'{a1.name()}: same digits (archive at unrecorded, rerun at unrecorded)',
      f'differs: {b.name()}: LFW 75.00 -> 75.12 (archive at unrecorded, rerun at unrecorded; '
      'machine: os v769 -> v669; CPU gained f16c)']


def test_a_file_a_table_reads_a_summary_of_is_archived_and_parked_as_the_summary(tmp_path):
  def write_length(source, target):   # a summary: the file's size
    with open(target, 'w') as f:
      f.write(str(os.path.getsize(source)))
  cosines = Compacted('cosines.npz', 'cosines.json', write_length)
  run = Run('fedfv/fedfv')
  table = Table('T', 'verification', ('lfw',), (Row('A', run, (None,)),), 'c',
                archived_files=(cosines,))
  root = tmp_path / 'sweep'
  (root / run.name()).mkdir(parents=True)
  (root / run.name() / 'results.json').write_text(json.dumps(fake_result(lfw=0.8)))
  (root / run.name() / 'cosines.npz').write_text('x' * 2000)
  listing = lambda d: sorted(p.name for p in (d / run.name()).iterdir())
  archive.archive_runs(table, str(root), (), (0,), str(tmp_path / 'archive'))
  assert listing(tmp_path / 'archive') == ['cosines.json', 'results.json']
  assert (tmp_path / 'archive' / run.name() / 'cosines.json').read_text() == '2000'
  # An archived run holds the summary alone: archived again, the summary is copied.
  archive.archive_runs(table, str(tmp_path / 'archive'), (), (0,), str(tmp_path / 'again'))
  assert (tmp_path / 'again' / run.name() / 'cosines.json').read_text() == '2000'
  # Parked, the sweep's run keeps the summary in the file's place, and parks again unchanged.
  assert archive.park(table, str(root), (), (0,)) == [
      f'pruned to its archived files: {root / run.name()}']
  assert listing(root) == ['cosines.json', 'results.json']
  assert archive.park(table, str(root), (), (0,)) == []
  assert (root / run.name() / 'cosines.json').read_text() == '2000'
