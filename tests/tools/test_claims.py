"""A paper's page says what reproduces only by copying its generated tables' verdict lines."""

import os

import pytest

from fedjax_face.tools import claims
from tests import config_files

DOCS = os.path.join(config_files.ROOT, 'docs')

TABLE = """## T1: a table

| method | LFW |
| --- | --- |

The paper's orderings on ours, seed by seed (...). Reproduced: ...

- A above B (LFW): **reproduced**: holds in 3 of 3 seeds (by +1.00 to +2.00; t = 6.93 > 2.92).
- C above D: reproduced on 0 of 2 columns:
  - LFW: **within noise**: holds in 2 of 3 seeds (by -0.10 to +0.50; |t| = 1.00 ≤ 2.92).
  - CFP-FP: **within noise**: holds in 1 of 3 seeds (by -0.30 to +0.10; |t| = 0.50 ≤ 2.92).

Made by `cmd`; ours: x.
"""


def test_every_paper_page_copies_its_tables_verdicts():
  assert claims.papers_with_blocks(DOCS) == ['blocks', 'fedfr', 'fedfv', 'fedgc', 'pad',
                                            'personalization']
  assert claims.stale(DOCS) == []


def test_the_block_is_the_tables_lines_under_their_titles(tmp_path):
  (tmp_path / 'p_table1.md').write_text(TABLE)
  (tmp_path / 'p_table2.md').write_text('## T2\n\nno orderings\n')
  (tmp_path / 'p.md').write_text(f'# P\n\nintro\n\n{claims.BEGIN}\nold\n{claims.END}\n\nafter\n')
  assert claims.verdict_lines(TABLE) == TABLE.split('\n\n')[3].splitlines()
  assert claims.stale(str(tmp_path)) == [str(tmp_path / 'p.md')]
  claims.write_all(str(tmp_path))
  lines = TABLE.split('\n\n')[3]
  assert (tmp_path / 'p.md').read_text() == (
      f'# P\n\nintro\n\n{claims.BEGIN}\n\n**[T1: a table](p_table1.md)**\n\n{lines}\n\n'
      f'{claims.END}\n\nafter\n')
  assert claims.stale(str(tmp_path)) == []
  # An edit of a table makes the page stale again.
  (tmp_path / 'p_table1.md').write_text(TABLE.replace('**reproduced**', '**reversed**'))
  assert claims.stale(str(tmp_path)) == [str(tmp_path / 'p.md')]


def test_a_page_without_both_markers_is_named():
  with pytest.raises(ValueError, match=r"^docs/x.md: no verdict block; expected a line '<!-- "
                     r"verdicts: .*' and, after it, '<!-- /verdicts -->'\.$"):
    claims.replace_block(f'# X\n{claims.END}\n{claims.BEGIN}\n', 'new', 'docs/x.md')


def test_every_mean_a_paper_page_quotes_is_a_cell_of_its_tables():
  assert claims.papers_with_tables(DOCS) == ['blocks', 'fedfr', 'fedfv', 'fedgc', 'pad',
                                             'personalization', 'privacy']
  assert [line for paper in claims.papers_with_tables(DOCS)
          for line in claims.unsourced(DOCS, paper)] == []


def test_a_mean_no_table_holds_is_named_by_its_line_unless_it_is_history(tmp_path):
  (tmp_path / 'p_table1.md').write_text('| A | 83.18 ± 0.61 | -0.070 ± 0.001 |\n')
  begin, end = claims.HISTORY
  (tmp_path / 'p.md').write_text(
      'A gives 83.18\n± 0.61 and -0.070 ± 0.001, B 82.00 ± 0.50.\n'   # the first across lines
      f'{claims.BEGIN}\nC 1.00 ± 2.00\n{claims.END}\n'                   # the verdicts' own
      f'{begin}\nthen A gave 70.69 ± 0.36\n{end}\n'
      'and -0.07 ± 0.001 rounded.\n')
  assert claims.unsourced(str(tmp_path), 'p') == [
      f'{tmp_path / "p.md"}:2: 82.00 ± 0.50', f'{tmp_path / "p.md"}:9: -0.07 ± 0.001']
  assert claims.papers_with_tables(str(tmp_path)) == ['p']


def test_a_page_whose_tables_judge_orderings_needs_a_block(tmp_path):
  (tmp_path / 'p_table1.md').write_text(TABLE)
  (tmp_path / 'p.md').write_text('# P\n')
  (tmp_path / 'q_table1.md').write_text('## T\n\nno orderings\n')
  (tmp_path / 'q.md').write_text('# Q\n')   # nothing to copy: no block needed
  with pytest.raises(ValueError, match=r'p\.md: no verdict block'):
    claims.stale(str(tmp_path))
  (tmp_path / 'p.md').write_text(f'# P\n{claims.BEGIN}\n{claims.END}\n')
  assert claims.stale(str(tmp_path)) == [str(tmp_path / 'p.md')]


PROSE = f"""# P

Ours 83.18 at seed 0, `lr = 0.05` in code, a gap of 0.13 and 0.14 [there](v/1.5/p_table1.md).

| row | 9.99 |
| --- | --- |

```bash
run --lr=0.25
```

<!-- unchecked: from a run not archived --> it read 7.77,
and 6.66 in the same paragraph.

{claims.BEGIN}
- A above B: (by +1.00; t = 6.93 > 2.92)
{claims.END}

A figure from nowhere, 12.34; a version 1.2.3 is none.
"""


def test_the_figures_prose_quotes_outside_the_exempt_places():
  checked, exempt = claims.figures(PROSE)
  assert checked == [(3, '83.18'), (3, '0.13'), (3, '0.14'), (19, '12.34')]
  assert exempt == {'code': 2, 'link': 1, 'table': 1, 'unchecked': 2, 'verdicts': 3}


def test_a_figure_is_found_at_its_printed_rounding_or_named():
  # Sources: a per-seed value 83.181 and a difference 0.1334 (FedFR Fig. 4's smallest gain,
  # which the prose once quoted as 0.14, the difference of two rounded cells).
  forms = claims.printed_forms([83.181, -0.1334], tokens=['+2.92'])
  assert {'83.18', '83.2', '83', '0.13', '0.133', '2.92'} <= forms and '0.14' not in forms
  missing, checked, _ = claims.unsourced_figures(PROSE, forms)
  assert (missing, checked) == ([(3, '0.14'), (19, '12.34')], 4)


def toy_docs(tmp_path, monkeypatch):
  """docs/ of the toy paper (tests/tools/tables/test_family.py: Table 1's A at 51.50 / 52.00 /
  52.50 against B's 50.00, Table 2's A at 51.00 / 52.00 / 53.50), its tables made from the toy
  archive, and `check(prose)`: the page written with `prose` above its verdict block, then
  `claims.run --check` on it with what the archive holds: (exit status, printed lines)."""
  from fedjax_face import reproduce
  from tests.tools.tables.test_family import toy_paper, write_pages
  tables, archive = toy_paper(tmp_path, monkeypatch)
  docs = tmp_path / 'docs'
  docs.mkdir()
  write_pages(tables, docs, archive, lambda tid: None)
  page = docs / 'toy.md'

  def check(prose, capsys):
    page.write_text(f'# Toy\n\n{prose}\n\n{claims.BEGIN}\n{claims.END}\n')
    claims.write_all(str(docs))
    capsys.readouterr()
    status = claims.run(str(docs), True,
                        lambda paper: reproduce.quotable_forms(paper, str(docs), archive))
    return status, capsys.readouterr().out.splitlines()
  return check, str(page)



def test_check_passes_a_page_whose_figures_and_quantifiers_the_archive_holds(
    tmp_path, monkeypatch, capsys):
  check, path = toy_docs(tmp_path, monkeypatch)
  prose = ('A reads 52.00 at seed 1 against 50.00, ahead in every seed by 1.5 to 2.5 '
           '<!-- judged: toy_table1.md: A above B (LFW) -->. In Table 2.1 (a reference) it is '
           'ahead in all three seeds <!-- judged: toy_table2.md: A above B (LFW) -->.\n\n'
           '<!-- unchecked: the paper\'s own figure --> The paper: 99.10.')
  status, lines = check(prose, capsys)
  assert (status, lines[-3:]) == (0, [
      f'{path}: 4 figures checked; exempt: 1 reference, 1 unchecked, 14 verdicts',
      '4 figures checked on 1 pages; exempt: 1 reference, 1 unchecked, 14 verdicts',
      'every verdict block matches its tables; every figure and quantifier of the prose is the '
      "archive's or exempt"])


def test_check_names_a_wrong_figure_a_false_quantifier_a_seed_as_mean_and_a_figure_from_nowhere(
    tmp_path, monkeypatch, capsys):
  check, path = toy_docs(tmp_path, monkeypatch)
  # 52.30 is no value of either table (A's seeds are 51.50-53.50, its means 52.00 and 52.17).
  status, lines = check('A reads 52.30 at seed 1.', capsys)
  assert (status, lines[0]) == (1, (
      f'{path}:3: 52.30 is no value of the archive at its printed rounding (a cell, a per-seed '
      'value, a difference of two rows, a margin); correct it, or put it under '
      '<!-- unchecked: reason -->'))
  # B is behind A in every seed of Table 1: "B ahead in every seed" cites its reverse.
  status, lines = check('B is ahead in every seed '
                        '<!-- judged reversed: toy_table1.md: A above B (LFW) -->.', capsys)
  assert (status, lines[0]) == (1, (
      f'{path}:3: "in every seed" is false: toy_table1.md: A above B (LFW) holds in 3 of 3 seeds '
      '(by +1.50 to +2.50)'))
  # Seed 2's value of A in Table 1 quoted as if it were A's mean (52.00), no seed named.
  status, lines = check('A reads 52.50 against 50.00.', capsys)
  assert (status, lines[0]) == (1, (
      f"{path}:3: 52.50 is one seed's value, no mean, in a sentence that names no seed; say which "
      'seed, or quote the mean'))
  assert check('A reads 52.50 at seed 2 against 50.00.', capsys)[0] == 0
  # A quantifier that names no verdict line, a figure from nowhere, a marker without a reason.
  status, lines = check('A leads in each seed by 3.21.\n\n<!-- unchecked: --> 7.7', capsys)
  assert (status, lines[:3]) == (1, [
      f'{path}:3: 3.21 is no value of the archive at its printed rounding (a cell, a per-seed '
      'value, a difference of two rows, a margin); correct it, or put it under '
      '<!-- unchecked: reason -->',
      f'{path}:3: "in each seed" is a quantifier no verdict line backs; name the line it restates '
      'in its sentence, <!-- judged: <line> -->, or put it under <!-- unchecked: reason -->',
      f'{path}:5: <!-- unchecked: --> gives no reason; say where its figures come from'])



def test_the_real_pages_pass_the_check(capsys):
  from fedjax_face import reproduce
  archive = os.path.join(config_files.ROOT, 'results')
  status = claims.run(DOCS, True, lambda paper: reproduce.quotable_forms(paper, DOCS, archive))
  out = capsys.readouterr().out
  assert status == 0, out
