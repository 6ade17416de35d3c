"""`reproduce --numbers`: each figure a paper page's prose quotes, looked up in the archive."""

from fedjax_face import reproduce
from tests.tools.tables.test_family import toy_paper, write_pages


def test_a_figure_from_nowhere_is_named_and_the_archive_s_are_found(tmp_path, monkeypatch):
  tables, archive = toy_paper(tmp_path, monkeypatch)
  docs = tmp_path / 'docs'
  docs.mkdir()
  write_pages(tables, docs, archive, lambda tid: None)
  # Table 1's A at seed 1 is 52.00, B 50.00 in every seed, and its margins 1.5 / 2.0 / 2.5
  # average 2.0: all found. 3.21 is no value, difference or margin of either table; nor is 2.1
  # at one decimal (table 2's mean margin, 13/6, prints as 2.2).
  (docs / 'toy.md').write_text(
      '# Toy\n\nA reads 52.00 at seed 1 against 50.00, ahead by 2.0 on average; 3.21 and 2.1 '
      'are from nowhere.\n\n<!-- unchecked: a figure of the paper --> The paper: 99.10.\n')
  lines = reproduce.numbers_report(str(docs), archive)
  path = docs / 'toy.md'
  assert lines == [f'{path}: 5 figures checked, 2 not found in the archive; exempt: 1 unchecked',
                   f'  {path}:3: 3.21', f'  {path}:3: 2.1']
