"""A paper's page says what reproduces only by copying its generated tables' verdict lines, and
its prose quotes only what the archive holds: figures, verdict counts and quantifiers."""

import dataclasses
import os
import re

import pytest

from fedjax_face.tools import claims
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict
from tests import config_files
from tests.tools.tables.fakes import ordered_table

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


COUNTS = """# P

Over this page's 103 tests: of the 42 verdicts the test alone gave (33 reproduced, 9
reversed), 25 stand (19 and 6); 12 of them pass the correction, and 20 orderings pass BH.

Table 1's 30 tests, Table 2's 20 and Table III's 60; 15 of the 30 tests pass the correction.

Not counts: `7 tests`, FedUV-127 is reversed, TPIR@FPIR=1e-1 now passes, 5 passes; Sec. 5 test
sets; 1,500 tests.

<!-- unchecked: an earlier family --> 99 tests.
"""


def test_the_counts_of_verdicts_prose_states_and_the_tables_they_count():
  found = claims.counts(COUNTS, 'p')
  assert [(COUNTS.count('\n', 0, c.index) + 1, c.quantity, c.stated, c.owner) for c in found] == [
      (3, 'tests', 103, 'p.md'), (3, 'alone', 42, None), (3, 'alone reproduced', 33, None),
      (3, 'alone reversed', 9, None), (4, 'stand', 25, None), (4, 'reproduced', 19, None),
      (4, 'reversed', 6, None), (4, 'pass', 12, None), (4, 'pass', 20, None),
      (6, 'tests', 30, 'p_table1.md'), (6, 'tests', 20, 'p_table2.md'),
      (6, 'tests', 60, 'p_table3.md'), (6, 'pass', 15, None), (6, 'tests', 30, None)]
  assert all(re.match(rf'{c.stated}\b', COUNTS[c.index:]) for c in found)   # at its number
  assert claims.named_tables('Tables 1-3 and 12, Table III, Fig. 4 and [it](p_table9.md); '
                             "[q's](q_table5.md)", 'p') == [
      'p_table9.md', 'p_table1.md', 'p_table2.md', 'p_table3.md', 'p_table12.md', 'p_fig4.md']


def test_each_count_is_of_the_verdicts_as_the_tables_print_them(tmp_path):
  # Table T1: A (p = 0.010) and B (p = 0.048) reproduced by the test alone; T2: C reversed
  # (p = 0.0014), D within noise. Over the four, BH keeps A and C only: B's adjusted p is
  # 4 x 0.048 / 3 = 0.064, so 3 verdicts the test alone gave, 2 stand.
  def judged(title, *margins):   # A above B, A above C, ...: one ordering per margins
    table, _ = ordered_table()
    orderings = tuple(spec.Ordering(('A',), (behind,), 'lfw', f'A above {behind}')
                      for behind in 'BC'[:len(margins)])
    return (dataclasses.replace(table, title=title, orderings=orderings),
            [verdict.judge(dict(enumerate(m)), (0, 1, 2)) for m in margins])
  tests = claims.decided_tests('docs/p.md', [judged('T1', (1.5, 2.0, 2.5), (1.0, 2.0, 3.5)),
                                             judged('T2', (-1.0, -1.2, -1.1), (1.0, -1.0, 0.5))])
  (tmp_path / 'p_table1.md').write_text('## T1\n')
  (tmp_path / 'p_table2.md').write_text('## T2\n')
  assert list(claims.QUANTITIES) == ['tests', 'pass', 'alone', 'alone reproduced',
                                     'alone reversed', 'stand', 'reproduced', 'reversed']
  assert {name: [claims.tally(tests, quantity, str(tmp_path), name)
                 for quantity in claims.QUANTITIES]
          for name in (None, 'p_table1.md', 'p_table2.md', 'p_table3.md')} == {
              None: [4, 2, 3, 2, 1, 2, 1, 1], 'p_table1.md': [2, 1, 2, 2, 0, 1, 1, 0],
              'p_table2.md': [2, 1, 1, 0, 1, 1, 0, 1], 'p_table3.md': [0] * 8}
  # The verdicts the test alone gave, stated as the ones that stand; a table's count of its own.
  page = "Of the 3 verdicts the test alone gave, 3 stand; Table 2's 1 stands (0 and 1)."
  found = claims.counts(page, 'p')
  assert [(c.quantity, c.stated, c.owner) for c in found] == [
      ('alone', 3, None), ('stand', 3, None), ('stand', 1, 'p_table2.md'),
      ('reproduced', 0, 'p_table2.md'), ('reversed', 1, 'p_table2.md')]
  assert claims.count_failures('p.md', page, found, tests, str(tmp_path), 'p') == [
      "p.md:1: 3 verdicts standing after the correction; the page's family has 2 (the tables "
      'its paragraph names: p_table2.md 1)']

  # T3 prints T1's A above B again (the same runs and seeds): the page's family counts it once,
  # T3's own page counts its line.
  (tmp_path / 'p_table3.md').write_text('## T3\n')
  again = claims.decided_tests('docs/p.md', [
      judged('T1', (1.5, 2.0, 2.5), (1.0, 2.0, 3.5)), judged('T2', (-1.0, -1.2, -1.1),
                                                           (1.0, -1.0, 0.5)),
      judged('T3', (1.5, 2.0, 2.5))])
  assert [claims.tally(again, q, str(tmp_path), name) for name in (None, 'p_table3.md')
          for q in ('tests', 'stand')] == [4, 2, 1, 1]


def toy_docs(tmp_path, monkeypatch):
  """docs/ of the toy paper (tests/tools/tables/test_family.py: Table 1's A at 51.50 / 52.00 /
  52.50 against B's 50.00, Table 2's A at 51.00 / 52.00 / 53.50), its tables made from the toy
  archive, and `check(prose)`: the page written with `prose` above its verdict block, then
  `claims.run --check` on it with what the archive holds: (exit status, printed lines). The
  tables are written each as its own family; the page's family (both tables, 2 tests, both
  reproduced after the correction) is what the prose counts."""
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
    status = claims.run(
        str(docs), True, lambda paper: reproduce.quotable_forms(paper, str(docs), archive),
        lambda paper: claims.judged_pages(reproduce.archived_pages(str(docs), archive))[
            f'docs/{paper}.md'])
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
      f'{path}: 4 figures checked; exempt: 1 reference, 1 unchecked, 14 verdicts; 0 verdict counts '
      'checked',
      '4 figures checked on 1 pages; exempt: 1 reference, 1 unchecked, 14 verdicts; 0 verdict '
      'counts checked',
      'every verdict block matches its tables; every figure, verdict count and quantifier of the '
      "prose is the archive's or exempt"])


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



def test_check_names_a_count_of_verdicts_the_page_s_family_does_not_have(tmp_path, monkeypatch,
                                                                          capsys):
  check, path = toy_docs(tmp_path, monkeypatch)
  true = ("Over this page's 2 tests: of the 2 verdicts the test alone gave (2 reproduced, 0 "
          'reversed), 2 stand (2 and 0); 2 of them pass the correction. Table 1\'s 1 tests and '
          "Table 2's 1.\n\n[Table 2](toy_table2.md) alone holds 1 tests.\n\n"
          '`3 tests` in code, and <!-- unchecked: an earlier family --> 3 tests.')
  status, lines = check(true, capsys)   # the two 3s exempt: in code, and unchecked
  assert (status, lines[-2]) == (0, '0 figures checked on 1 pages; exempt: 14 verdicts; 11 '
                                    'verdict counts checked')
  # A stale count of the page's family, planted among the true ones.
  status, lines = check(true.replace("page's 2 tests", "page's 3 tests"), capsys)
  assert (status, lines[0]) == (1, f"{path}:3: 3 tests; the page's family has 2")
  # One the sentence does not say is the page's may be a table's its paragraph names.
  named = '(the tables its paragraph names: toy_table1.md {0}, toy_table2.md {0})'
  status, lines = check(true.replace('0 reversed', '1 reversed'), capsys)
  assert (status, lines[0]) == (
      1, f"{path}:3: 1 reversed by the test alone; the page's family has 0 {named.format(0)}")
  assert check(true.replace('2 stand', '1 stand'), capsys)[0] == 0   # each table's 1
  status, lines = check(true.replace('2 stand', '3 stand'), capsys)
  assert (status, lines[0]) == (
      1, f"{path}:3: 3 verdicts standing after the correction; the page's family has 2 "
         f'{named.format(1)}')
  # "this page's" says whose: a table's count is no longer enough.
  status, lines = check(true.replace("page's 2 tests", "page's 1 tests"), capsys)
  assert (status, lines[0]) == (1, f"{path}:3: 1 tests; the page's family has 2")
  # A table's count: the page's family has 2 tests, Table 1 only 1; an item of the list too.
  status, lines = check(true.replace("Table 1's 1 tests", "Table 1's 2 tests"), capsys)
  assert (status, lines[0]) == (1, f'{path}:3: 2 tests in toy_table1.md; it has 1')
  status, lines = check(true.replace("Table 2's 1.", "Table 2's 2."), capsys)
  assert (status, lines[0]) == (1, f'{path}:3: 2 tests in toy_table2.md; it has 1')
  # A count that names no table may be one its paragraph names, and only that one.
  status, lines = check(true.replace('[Table 2](toy_table2.md) alone', 'It alone'), capsys)
  assert (status, lines[0]) == (1, f"{path}:5: 1 tests; the page's family has 2")
  status, lines = check(true.replace('alone holds 1 tests', 'alone holds 3 tests'), capsys)
  assert (status, lines[0]) == (
      1, f"{path}:5: 3 tests; the page's family has 2 (the tables its paragraph names: "
         'toy_table2.md 1)')


def test_the_real_pages_pass_the_check(capsys):
  from fedjax_face import reproduce
  archive = os.path.join(config_files.ROOT, 'results')
  judged = claims.judged_pages(reproduce.archived_pages(DOCS, archive))
  status = claims.run(DOCS, True, lambda paper: reproduce.quotable_forms(paper, DOCS, archive),
                      lambda paper: judged.get(f'docs/{paper}.md', []))
  out = capsys.readouterr().out
  assert status == 0, out


# A verdict block of our own orderings ('ahead in', verdicts 'ahead' and 'behind': X behind Y on
# LFW, within noise on CFP though behind in every seed) and of the paper's ('holds in').
VERDICT_BLOCK = f"""{claims.BEGIN}

**[T1](p_table1.md)**

- X, against Y: ahead on 0 of 2 columns, behind on 1:
  - LFW: **behind**: ahead in 0 of 3 seeds (by -2.28 to -1.62; t = -9.35 < -2.92).
  - CFP: **within noise** (behind before the correction): ahead in 0 of 3 seeds (by -1.12 to -0.25).
- A above B (LFW): **within noise**: holds in 3 of 3 seeds (by +0.10 to +0.50; |t| = 2.50).
- C above D (LFW): **reproduced**: holds in 3 of 3 seeds (by +1.00 to +2.00; t = 6.93 > 2.92).

{claims.END}
"""


def test_a_verdict_line_is_read_with_its_verdict_after_the_correction():
  lines = claims.judged_lines(VERDICT_BLOCK)
  assert lines['X, against Y'] == [claims.Judged(0, 3, -2.28, -1.62, 'behind', True),
                                   claims.Judged(0, 3, -1.12, -0.25, 'within noise', True)]
  assert lines['p_table1.md: A above B (LFW)'] == [
      claims.Judged(3, 3, 0.10, 0.50, 'within noise', False)]


CFP = '<!-- judged reversed: X, against Y (CFP) -->'
WANTED = ('is within noise after the correction; say so, or name only lines decided as the marker '
          'says')


@pytest.mark.parametrize('sentence, failures', [
    # "behind" is the verdict of our own orderings: the line it names must be behind.
    (f'X is behind Y in every seed {CFP}.',
     [f'p.md:1: "behind" states a decided verdict, but X, against Y (CFP) {WANTED}']),
    ('X is behind Y in every seed <!-- judged reversed: X, against Y (LFW) -->.', []),
    # An ordering's name is all its columns; "reversed" is a verdict of every ordering.
    ('X is behind Y in every seed on both columns (reversed) '
     '<!-- judged reversed: X, against Y -->.',
     ['p.md:1: "behind" states a decided verdict, but X, against Y is behind / within noise '
      'after the correction; say so, or name only lines decided as the marker says']),
    # Words that say it is undecided, or only the seed pattern (the marker's own "reversed" is
    # no word of the sentence): not held.
    (f'X is behind Y in every seed, within noise {CFP}.', []),
    (f'X is behind Y in every seed, just inside the noise {CFP}.', []),
    (f'X is behind Y in every seed, reversed by the test alone {CFP}.', []),
    (f'X is behind Y in every seed {CFP}, but that reversal does not survive the correction.', []),
    (f'X trails Y in every seed {CFP}.', []),
    # The paper's orderings: "ahead" is the sign of a margin, "reproduces" the verdict.
    ('A is ahead of B in every seed <!-- judged: p_table1.md: A above B (LFW) -->.', []),
    ('A above B reproduces, in every seed <!-- judged: A above B (LFW) -->.',
     [f'p.md:1: "reproduces" states a decided verdict, but A above B (LFW) {WANTED}']),
    ('C above D passes the correction, in every seed <!-- judged: C above D (LFW) -->.', []),
    # A sentence ends at its full stop: the next one's verdict words are not this one's.
    (f'X trails Y in every seed {CFP}. On LFW X is behind Y.', []),
    (f'<!-- unchecked: an exempt paragraph --> X is behind Y in every seed {CFP}.', []),
])
def test_a_sentence_that_states_a_decided_verdict_names_lines_decided_so(sentence, failures):
  assert claims.verdict_word_failures('p.md', f'{sentence}\n\n{VERDICT_BLOCK}') == failures


@pytest.mark.parametrize('sentence, failures', [
    # Within noise (A above B) and behind (X against Y, on LFW; CFP within noise): neither holds.
    ('Nowhere is A ahead of B or X ahead of Y after the correction <!-- judged not reproduced: '
     'A above B (LFW) ; X, against Y -->.', []),
    ('Neither A nor C leads <!-- judged not reproduced: A above B (LFW) ; p_table1.md: C above D '
     '(LFW) -->.',
     ['p.md:1: the sentence says p_table1.md: C above D (LFW) is not reproduced, but it is '
      'reproduced after the correction']),
    ('E never leads <!-- judged not reproduced: E above F -->.',
     ['p.md:1: <!-- judged not reproduced: E above F --> names no verdict line of the page']),
    ('<!-- unchecked: an exempt paragraph --> C never leads <!-- judged not reproduced: C above D '
     '(LFW) -->.', []),
])
def test_a_sentence_that_says_an_ordering_holds_nowhere_names_lines_not_reproduced(
    sentence, failures):
  assert claims.not_reproduced_failures('p.md', f'{sentence}\n\n{VERDICT_BLOCK}') == failures


def test_the_prose_check_holds_a_judged_line_to_its_sentence_s_verdict_words(tmp_path):
  (tmp_path / 'p_table1.md').write_text('## T1\n')
  (tmp_path / 'p.md').write_text(f'X is behind Y in every seed {CFP}.\n\n{VERDICT_BLOCK}')
  failures, _ = claims.prose_check(str(tmp_path), lambda paper: claims.Forms(set(), set()),
                                   lambda paper: [])
  assert failures == [f'{tmp_path / "p.md"}:1: "behind" states a decided verdict, but X, '
                      f'against Y (CFP) {WANTED}']
