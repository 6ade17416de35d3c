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
  assert claims.papers_with_blocks(DOCS) == ['blocks', 'fedfr', 'fedfv', 'fedgc', 'pad']
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
                                             'privacy']
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
