"""A page's verdicts decided over all of its tables (`reproduce.page_family`), and the runs that
ended on a dirty tree named in a table's footnote."""

import json
import types

from fedjax_face import reproduce
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict


def toy_paper(tmp_path, monkeypatch):
  """A paper 'toy' of two tables, each with one ordering of its own pair of runs, three seeds
  archived under tmp_path/results; the second table's A ended on a dirty tree in seed 1."""
  runs = [spec.Run('fedgc/fedgc'), spec.Run('fedgc/fedpe'), spec.Run('fedfr/fedfr'),
          spec.Run('fedfr/fedface')]
  tables = {}
  for tid, (a, b) in ((1, runs[:2]), (2, runs[2:])):
    tables[tid] = spec.Table(f'Toy {tid}', 'verification', ('lfw',),
                             (spec.Row('A', a, (None,)), spec.Row('B', b, (None,))), 'A > B',
                             orderings=(spec.Ordering(('A',), ('B',), 'lfw', 'A above B'),))
  monkeypatch.setattr(reproduce, 'PAPERS', ('toy',))
  monkeypatch.setattr(reproduce, 'paper_module',
                      lambda paper: types.SimpleNamespace(TABLES=tables, EXTRAS={}))
  # Margins in points: table 1 (1.5, 2.0, 2.5), p = 0.010; table 2 (1.0, 2.0, 3.5), p = 0.048.
  margins = {1: (1.5, 2.0, 2.5), 2: (1.0, 2.0, 3.5)}
  archive = tmp_path / 'results'
  for tid, table in tables.items():
    for seed, margin in enumerate(margins[tid]):
      for row, accuracy in zip(table.rows, (0.5 + margin / 100, 0.5)):
        run_dir = archive / 'toy_tables' / row.run.name(spec.seed_overrides((), seed))
        run_dir.mkdir(parents=True)
        # Clean at its start (config.json, what the commit line counts); dirty at its end
        # (results.json) for one run.
        git = {'commit': 'c' * 40, 'dirty': False, 'version': None}
        (run_dir / 'config.json').write_text(json.dumps(
            {'provenance': {'start': {'git': git}, 'resumed': []}}))
        end = git | {'dirty': tid == 2 and row.label == 'A' and seed == 1}
        (run_dir / 'results.json').write_text(json.dumps(
            {'verification': {'lfw': {'accuracy': accuracy}}, 'provenance': {'git': end}}))
  return tables, str(archive)


def write_pages(tables, docs, archive, family_of):
  for tid, table in tables.items():
    command = f'python -m fedjax_face.reproduce --table=toy{tid} --seeds=0,1,2'
    text = reproduce.table_text(table, f'{archive}/toy_tables', (), (0, 1, 2), command, False,
                                True, family_of(tid))
    (docs / f'toy_table{tid}.md').write_text(text)


def test_a_page_s_tables_form_one_family_and_a_dirty_run_is_named(tmp_path, monkeypatch,
                                                                   capsys):
  tables, archive = toy_paper(tmp_path, monkeypatch)
  docs = tmp_path / 'docs'
  docs.mkdir()
  # Each table on its own: both p-values pass alone (m = 1).
  write_pages(tables, docs, archive, lambda tid: None)
  alone = [(docs / f'toy_table{tid}.md').read_text() for tid in tables]
  assert all('**reproduced**: holds in 3 of 3 seeds' in text for text in alone)
  # The page's family holds both tables (read from their pages' footnotes and the archive):
  # p = 0.010, 0.048 against 0.025, 0.05 -> both survive (p_(2) ≤ 2 q / 2): BH keeps a pair
  # that Bonferroni (0.025 each) would split.
  family = reproduce.page_family('toy', str(docs), archive)
  assert (family.page, family.tables, family.tests, family.discoveries) == (
      'docs/toy.md', 2, 2, 2)
  adjusted = family.adjusted[('Toy 2', 0)]
  assert adjusted == verdict.judge_table(tables[2], reproduce.recorded_results(
      'toy', 2, str(docs), archive)[0], (0, 1, 2))[0].p
  write_pages(tables, docs, archive, lambda tid: family)
  capsys.readouterr()
  assert reproduce.check(str(docs), archive) == [('toy1', 'ok'), ('toy2', 'ok')]
  page = (docs / 'toy_table2.md').read_text()
  assert ('The family of docs/toy.md: 2 tests (ordering and column, two seeds or more; a '
          'comparison several tables print is one test) on its 2 '
          'tables with orderings; 2 of them pass the correction. A verdict here can move when '
          'another table of the page gains seeds or runs: the correction ranks the page\'s tests '
          'together.') in page
  # The run that ended dirty is named under the commit line; the other table has none.
  assert ('\ncommit: cccccccccccc (6 runs)\n\nEnded on a dirty tree (tracked files modified; '
          'results.json provenance git.dirty at the end, while the commit line counts each '
          "run's start and resumes): fedfr-fedfr_seed-1.\n") in page
  assert 'dirty' not in (docs / 'toy_table1.md').read_text()
  # A table made anew is judged on its fresh results, the page's others on their records.
  rebuilt = reproduce.page_family('toy', str(docs), archive,
                                  {1: (reproduce.recorded_results('toy', 1, str(docs), archive))})
  assert rebuilt == family
  # Table 1's seed 2 measured anew, 3 points behind: its p grows (margins 1.5, 2.0, -3.0), and
  # table 2's (0.048 > 1 q / 2 now) no longer survives, so the page of table 2, unchanged itself,
  # no longer rebuilds until it is made again.
  seed_2 = tmp_path / 'results' / 'toy_tables' / tables[1].rows[0].run.name(
      spec.seed_overrides((), 2))
  result = json.loads((seed_2 / 'results.json').read_text())
  result['verification']['lfw']['accuracy'] = 0.47
  (seed_2 / 'results.json').write_text(json.dumps(result))
  assert dict(reproduce.check(str(docs), archive))['toy2'].startswith('differs from the archive')
  moved = reproduce.page_family('toy', str(docs), archive)
  write_pages(tables, docs, archive, lambda tid: moved)
  assert reproduce.check(str(docs), archive) == [('toy1', 'ok'), ('toy2', 'ok')]
  assert ('**within noise** (reproduced before the correction): holds in 3 of 3 seeds'
          in (docs / 'toy_table2.md').read_text())
