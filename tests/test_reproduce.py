"""`python -m fedjax_face.reproduce`: table names, the command end to end on finished runs (each
command in a child forked from a process that has imported its dependencies,
tests/forked_commands.py: its own process, flags, exit status, stdout and stderr)."""

import json
import os

import pytest
from absl import app

from fedjax_face import reproduce
from fedjax_face.proj.fedgc import reproduce as fedgc_tables
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from tests import config_files, forked_commands


def test_table_names_and_selection():
  names = reproduce.table_names()
  assert names == ([f'fedgc{i}' for i in range(1, 13)] + ['fedgc_scale', 'fedgc_scale_5seeds']
                   + ['fedfv1', 'fedfv2', 'fedfv3', 'fedfv4']
                   + ['fedfr1', 'fedfr2', 'fedfr_fig3', 'fedfr_fig4']
                   + ['pad1', 'pad3', 'pad5', 'pad6', 'pad7', 'pad8', 'pad9', 'pad10',
                      'pad_all_batch_norm', 'pad_fedma', 'pad_terms']
                   + ['privacy1', 'privacy2', 'privacy3', 'privacy4', 'privacy5', 'privacy6',
                      'privacy7'] + ['blocks1', 'blocks2']
                   + ['personalization1', 'personalization2', 'personalization3',
                      'personalization4'])
  # No sweep is unfinished: every table is in docs.
  assert reproduce.table_names(pending=True) == names
  assert reproduce.select('fedgc4') == [('fedgc', 4)]
  assert reproduce.select('fedfv') == [('fedfv', 1), ('fedfv', 2), ('fedfv', 3), ('fedfv', 4)]
  assert reproduce.select('fedfr_fig3') == [('fedfr', '_fig3')]
  assert reproduce.out_name('fedfr', '_fig3') == 'fedfr_fig3.md'
  assert reproduce.out_name('fedfr', 1) == 'fedfr_table1.md'
  assert len(reproduce.select('all')) == 46
  with pytest.raises(app.UsageError, match=r"--table=fedfv5; expected one of \['fedgc1'"):
    reproduce.select('fedfv5')


def reproduce_command(*args: str):
  """`python -m fedjax_face.reproduce *args` from the repository's root."""
  return forked_commands.run_module('fedjax_face.reproduce', *args)


def test_command_line_dry_run_with_seeds(tmp_path):
  """The program end to end (flags included) on finished runs: no training is started."""
  fedpe = fedgc_tables._fedpe()  # pylint: disable=protected-access
  for seed, acc in ((0, 0.8), (1, 0.9)):
    workdir = tmp_path / fedpe.name(spec.seed_overrides((), seed))
    workdir.mkdir()
    (workdir / 'results.json').write_text(json.dumps({'verification': {'lfw': {'accuracy': acc}}}))
  out_file = tmp_path / 'table4.md'
  args = ['--table=fedgc4', f'--root={tmp_path}', '--seeds=0,1', '--dry_run', f'--out={out_file}']
  proc = reproduce_command(*args)
  assert proc.returncode == 0, proc.stderr
  text = out_file.read_text()
  assert text in proc.stdout
  assert '| FedPE | 85.00 ± 7.07 | 94.77 |' in text and '| FedGC | — | 98.40 |' in text
  assert 'Made by `python -m fedjax_face.reproduce --table=fedgc4' in text
  assert '--dry_run' not in text   # the footnote names the command that makes the table
  # Runs archived before provenance was recorded are one label, and the table says so.
  assert '\ncommit: unrecorded (runs made before provenance was recorded)\n' in text
  for bad_args, message in ((['--table=fedgc13'], '--table=fedgc13; expected one of'),
                        (['--table=fedfv', f'--out={out_file}'], '--out names one file but '
                         '--table=fedfv is 4 tables'),
                        (['--table=fedgc1', '--seeds=0,0'], '--seeds=0,0; expected distinct')):
    bad = reproduce_command(*bad_args, f'--root={tmp_path}', '--dry_run')
    assert bad.returncode != 0 and message in bad.stderr + bad.stdout, bad_args
  # --park trains nothing and leaves each ended run its archived files (tables/archive.py:park).
  seed_0 = tmp_path / fedpe.name(spec.seed_overrides((), 0))
  (seed_0 / 'checkpoints').mkdir()
  parked = reproduce_command('--table=fedgc4', f'--root={tmp_path}', '--seeds=0', '--park')
  assert parked.returncode == 0, parked.stderr
  assert parked.stdout == f'fedgc4: pruned to its archived files: {seed_0}\n'
  assert [p.name for p in seed_0.iterdir()] == ['results.json']


def test_command_line_refuses_a_table_of_mixed_commits_unless_allowed(tmp_path):
  fedpe = fedgc_tables._fedpe()  # pylint: disable=protected-access
  for seed, commit in ((0, 'a'), (1, 'b'), (2, 'b')):
    workdir = tmp_path / fedpe.name(spec.seed_overrides((), seed))
    workdir.mkdir()
    result = {'verification': {'lfw': {'accuracy': 0.8}},
              'provenance': {'git': {'commit': commit * 40, 'dirty': False, 'version': None}}}
    (workdir / 'results.json').write_text(json.dumps(result))
  out_file = tmp_path / 'table4.md'
  args = ['--table=fedgc4', f'--root={tmp_path}', '--seeds=0,1,2', '--dry_run',
          f'--out={out_file}']
  refused = reproduce_command(*args)
  assert refused.returncode == 2 and not out_file.exists()
  (line,) = refused.stderr.splitlines()
  assert line.endswith(
      '--table=fedgc4: the runs come from 2 commits: bbbbbbbbbbbb (2 runs), aaaaaaaaaaaa (1 run); '
      'rerun them at one commit, or pass --allow_mixed_commits to make the table anyway.'), line
  # With a paper's tables at once, a refusal of its last table (the scale study's cell of 30
  # IDs per client, which no other table reads) comes before any page is written.
  scale_root = tmp_path / 'scale'
  scale_dirs = [d for d in table_runs.table_workdirs(
      reproduce.tables_of('fedgc')['_scale'], str(scale_root), (), (0, 1, 2))
                if 'fedpe' in d and 'num_identities-1080' in d]
  for workdir, commit in zip(scale_dirs, 'abb'):
    os.makedirs(workdir)
    result = {'verification': {'lfw': {'accuracy': 0.8}},
              'provenance': {'git': {'commit': commit * 40, 'dirty': False, 'version': None}}}
    with open(os.path.join(workdir, 'results.json'), 'w') as f:
      json.dump(result, f)
  out_dir = tmp_path / 'docs'
  out_dir.mkdir()
  refused = reproduce_command('--table=fedgc', f'--root={scale_root}', '--seeds=0,1,2',
                              '--dry_run', f'--out_dir={out_dir}')
  assert len(scale_dirs) == 3 and refused.returncode == 2, refused.stderr
  assert '--table=fedgc_scale: the runs come from 2 commits' in refused.stderr
  assert not list(out_dir.iterdir())
  allowed = reproduce_command(*args, '--allow_mixed_commits')
  assert allowed.returncode == 0, allowed.stderr
  text = out_file.read_text()
  assert text in allowed.stdout and '| FedPE | 80.00 ± 0.00 | 94.77 |' in text
  assert ('\ncommits (mixed, --allow_mixed_commits): bbbbbbbbbbbb (2 runs), aaaaaaaaaaaa (1 run)\n'
          in text)


def test_check_rebuilds_each_table_from_the_archive_alone(tmp_path, monkeypatch):
  """`--check`: a generated table equals what its footnote's command makes from the archived
  runs, or it is named with the first differing line, or the runs the archive lacks; so does its
  extra page, made with the seeds the table's footnote records."""
  import types  # pylint: disable=g-import-not-at-top
  a, b = spec.Run('fedgc/fedgc'), spec.Run('fedgc/fedpe')
  table = spec.Table('Toy', 'verification', ('lfw',),
                     (spec.Row('A', a, (None,)), spec.Row('B', b, (None,))), 'A > B')
  monkeypatch.setattr(reproduce, 'PAPERS', ('toy',))
  # An extra page, made with the seeds its table's footnote records, from the archive's root.
  extra_page = lambda root, extra, seeds, out_dir: f'{os.path.basename(root)}: seeds {seeds}'
  monkeypatch.setattr(reproduce, 'paper_module', lambda paper: types.SimpleNamespace(
      TABLES={1: table}, EXTRAS={1: ('toy_fig.md', extra_page)}))
  archive, docs = tmp_path / 'results', tmp_path / 'docs'
  docs.mkdir()
  for run, seeds in ((a, (0, 1)), (b, (0, 1))):
    for seed in seeds:
      run_dir = archive / 'toy_tables' / run.name(spec.seed_overrides((), seed))
      run_dir.mkdir(parents=True)
      (run_dir / 'results.json').write_text(json.dumps(
          {'verification': {'lfw': {'accuracy': 0.8 + 0.01 * seed}}}))
  command = 'python -m fedjax_face.reproduce --table=toy1 --seeds=0,1 --root=/elsewhere'
  results = table_runs.run_all(table, str(archive / 'toy_tables'), (), seeds=(0, 1))
  doc = markdown.render(table, results, command, (0, 1),
                        'commit: unrecorded (runs made before provenance was recorded)')
  (docs / 'toy_fig.md').write_text('toy_tables: seeds (0, 1)')
  assert reproduce.check(str(docs), str(archive)) == [
      ('toy1', 'no generated table in docs'),
      ('toy_fig.md', 'no "Made by" command in the footnote of toy_table1.md')]
  (docs / 'toy_table1.md').write_text(doc)
  assert reproduce.check(str(docs), str(archive)) == [('toy1', 'ok'), ('toy_fig.md', 'ok')]
  (docs / 'toy_table1.md').write_text(doc.replace('| A | 80.50 ± 0.71 |', '| A | 80.51 ± 0.71 |'))
  (docs / 'toy_fig.md').write_text('toy_tables: seeds (0,)')
  assert reproduce.check(str(docs), str(archive)) == [
      ('toy1', 'differs from the archive from line 7'),
      ('toy_fig.md', 'differs from the archive from line 1')]
  (docs / 'toy_table1.md').write_text(doc)
  (archive / 'toy_tables' / b.name(spec.seed_overrides((), 1)) / 'results.json').unlink()
  assert reproduce.check(str(docs), str(archive))[0] == (
      'toy1', f'1 run not in {archive / "toy_tables"}')


def test_every_table_in_docs_rebuilds_from_the_repository_s_archive():
  """`reproduce --check` on this repository: every generated table equals what its footnote's
  command makes from `results/`. Since PAD's landed (session 31) no table lacks its runs."""
  status = dict(reproduce.check(os.path.join(config_files.ROOT, 'docs'),
                                os.path.join(config_files.ROOT, 'results')))
  extras = {name for paper in reproduce.PAPERS
            for name, _ in getattr(reproduce.paper_module(paper), 'EXTRAS', {}).values()}
  assert set(status) == set(reproduce.table_names()) | extras
  assert 'fedfv_fig5.md' in extras   # drawn from the archive's cosine histograms
  assert {name: why for name, why in status.items() if why != 'ok'} == {}


def test_a_pending_table_runs_by_its_name_alone(monkeypatch):
  """A table whose sweep has not finished (a paper module's `PENDING`) is not in docs, so
  `--check` cannot judge it: `--table=<its name>` runs it, its paper's name and `all` do not.
  (No table of the repository is pending since session 45; a toy paper stands in.)"""
  import types  # pylint: disable=g-import-not-at-top
  done = spec.Table('Done', 'results', (), (), 'c')
  pending = spec.Table('Pending', 'results', (), (), 'c')
  monkeypatch.setattr(reproduce, 'PAPERS', ('toy',))
  monkeypatch.setattr(reproduce, 'paper_module', lambda paper: types.SimpleNamespace(
      TABLES={1: done}, PENDING={'_sweep': pending}))
  assert reproduce.table_names() == ['toy1']
  assert reproduce.table_names(pending=True) == ['toy1', 'toy_sweep']
  assert reproduce.select('toy_sweep') == [('toy', '_sweep')]
  assert reproduce.select('toy') == reproduce.select('all') == [('toy', 1)]
  assert reproduce.tables_of('toy')['_sweep'] is pending


def test_verdict_counts_say_what_the_correction_decides(tmp_path, monkeypatch):
  """`--check`'s line per page: its tests, how many the test alone decides and how many survive
  Benjamini-Hochberg. Margins over 3 seeds (points of LFW accuracy), B the reference: A above B
  +1.0, +1.1, +0.9 (t = 17.3, p = 0.0017); B above A is the same test (its opposite), counted
  once, as A above B (its first line); B above E (E a twin of A, other runs) the same margins
  reversed; C above B +0.2, +0.6, +0.3 (t = 3.05 > 2.92, p = 0.046); D above B -0.5, +0.5, +0.1
  (p = 0.38). BH over the four tests, by hand: 0.38; min(0.38, 4 x 0.046 / 3 = 0.061) > 0.05, so
  C falls; min(0.061, 4 x 0.0017 / 2 = 0.0034) and 0.0034 pass: A above B reproduced, B above E
  reversed. A fifth table's ordering at one seed is not tested."""
  import types  # pylint: disable=g-import-not-at-top
  runs = {label: spec.Run(f'fedgc/{name}') for label, name in
          (('A', 'fedgc'), ('B', 'fedpe'), ('C', 'centralized'), ('D', 'fedcos'),
           ('E', 'fedpe_fixed'))}
  rows = tuple(spec.Row(label, run, (None,)) for label, run in runs.items())
  above = lambda a, b: spec.Ordering((a,), (b,), 'lfw', f'{a} above {b}')
  table = spec.Table('Toy', 'verification', ('lfw',), rows, 'c', orderings=(
      above('A', 'B'), above('B', 'A'), above('B', 'E'), above('C', 'B'), above('D', 'B')))
  one_seed = spec.Table('Toy one seed', 'verification', ('lfw',), rows, 'c',
                        orderings=(above('A', 'B'),))
  monkeypatch.setattr(reproduce, 'PAPERS', ('toy',))
  monkeypatch.setattr(reproduce, 'paper_module',
                      lambda paper: types.SimpleNamespace(TABLES={1: table, 2: one_seed}))
  accuracy = {'A': (81.0, 81.1, 80.9), 'B': (80.0, 80.0, 80.0), 'C': (80.2, 80.6, 80.3),
              'D': (79.5, 80.5, 80.1), 'E': (81.0, 81.1, 80.9)}
  archive, docs = tmp_path / 'results', tmp_path / 'docs'
  docs.mkdir()
  for label, run in runs.items():
    for seed, value in enumerate(accuracy[label]):
      run_dir = archive / 'toy_tables' / run.name(spec.seed_overrides((), seed))
      run_dir.mkdir(parents=True)
      (run_dir / 'results.json').write_text(json.dumps(
          {'verification': {'lfw': {'accuracy': value / 100}}}))
  for tid, seeds in ((1, '0,1,2'), (2, '0')):
    (docs / f'toy_table{tid}.md').write_text(
        f'Made by `python -m fedjax_face.reproduce --table=toy{tid} --seeds={seeds}`\n')
  assert reproduce.verdict_counts('toy', str(docs), str(archive)) == (
      'docs/toy.md: 4 tests; decided by the test alone 3 (2 reproduced, 1 reversed), after the '
      'correction 2 (1 reproduced, 1 reversed); 1 not tested (one seed)')


@pytest.mark.parametrize('args, line', [
    (('--table=nope',), "--table=nope; expected one of ['fedgc1',"),
    (('--plan_seeds', '--plan_machine=bogus'),
     'flag --plan_machine=bogus: value should be one of <here|same|other>'),
    (('--tabel=fedgc4',), "Unknown command line flag 'tabel'"),
    (('--table=fedgc4', '--set=seed=1'), '--set=seed=... is not allowed; use --seeds.'),
])
def test_a_usage_error_is_one_line_and_exit_status_2(args, line):
  refused = reproduce_command(*args)
  assert refused.returncode == 2 and refused.stdout == ''
  assert len(refused.stderr.splitlines()) == 1 and line in refused.stderr, refused.stderr
