r"""What reproduces, in one place: each paper's summary of verdicts, collected from its tables.

    python -m fedjax_face.tools.claims            # rewrite the summaries in docs/<paper>.md
    python -m fedjax_face.tools.claims --check    # exit 1 naming each summary that is stale,
                                                  # and each mean ± std no table holds

The verdicts are made once, by `reproduce` (`tools/tables/verdict.py:judge`), at the end of each
generated table (docs/<paper>_table<N>.md, docs/<paper>_fig<N>.md, ...). A paper's page states no
verdict of its own: between the two markers below it holds a copy of its tables' verdict lines,
which this tool writes and `tests/tools/test_claims.py` checks, so a page cannot say more than its
tables show. The page's prose quotes numbers too: every mean ± std it quotes must be a cell of one
of its tables, so that a regenerated table cannot leave the prose behind. Figures of earlier code
states, kept as the record of how a result was found, go between the two HISTORY markers.

Every other figure (a decimal number) in the prose is looked for in the archive by `python -m
fedjax_face.reproduce --numbers` (`figures`, `unsourced_figures`; the values come from reproduce,
which knows the tables): a report for now, outside `--check`. A figure is exempt in code, a table,
a link, the two blocks, or a paragraph holding `<!-- unchecked: reason -->`.
"""

import collections
import os
import re
import sys

from absl import app, flags

from fedjax_face.io import files

BEGIN = ('<!-- verdicts: copied from the tables below by `python -m fedjax_face.tools.claims`; '
         'edit the tables, not this -->')
END = '<!-- /verdicts -->'
HISTORY = ('<!-- history: figures of earlier code states, not rebuilt from the tables -->',
           '<!-- /history -->')
MEAN_STD = re.compile(r'(-?\d+\.\d+)\s+±\s+(\d+\.\d+)')   # a cell "83.18 ± 0.61", even across lines
# The sentence that starts a generated table's verdict lines
# (`tools/tables/markdown.py:orderings_head`): the paper's orderings, or, in a table no paper
# reports, orderings of our own asking.
ORDERINGS_HEADS = ("The paper's orderings on ours", 'Our own orderings')


def verdict_lines(table_text: str) -> list[str]:
  """A generated table's verdict lines (the list after its orderings paragraph), or []."""
  lines = table_text.splitlines()
  start = next((i for i, line in enumerate(lines) if line.startswith(ORDERINGS_HEADS)),
               None)
  if start is None:
    return []
  out = []
  for line in lines[start + 1:]:
    if line.startswith(('- ', '  - ')):
      out.append(line)
    elif out and not line.strip():
      break
  return out


def table_files(docs_dir: str, paper: str) -> list[str]:
  """docs/<paper>_*.md in reading order: numbered tables first, by number, then the rest."""
  names = [n for n in os.listdir(docs_dir) if n.startswith(f'{paper}_') and n.endswith('.md')]

  def key(name):
    number = re.fullmatch(rf'{paper}_table(\d+)\.md', name)
    return (0, int(number.group(1)), '') if number else (1, 0, name)
  return sorted(names, key=key)


def summary(docs_dir: str, paper: str) -> str:
  """The block for docs/<paper>.md: per table with orderings, its title linked, then its lines."""
  parts = [BEGIN]
  for name in table_files(docs_dir, paper):
    text = files.read_text(os.path.join(docs_dir, name))
    lines = verdict_lines(text)
    if not lines:
      continue
    title = next((line[3:] for line in text.splitlines() if line.startswith('## ')), name)
    parts += ['', f'**[{title}]({name})**', ''] + lines
  return '\n'.join(parts + ['', END])


def replace_block(page: str, block: str, where: str) -> str:
  """`page` with its marked block replaced by `block`; ValueError naming `where` without one."""
  start, end = page.find(BEGIN), page.find(END)
  if start < 0 or end < start:
    raise ValueError(f'{where}: no verdict block; expected a line {BEGIN!r} and, after it, '
                     f'{END!r}.')
  return page[:start] + block + page[end + len(END):]


def papers_with_blocks(docs_dir: str) -> list[str]:
  """The papers whose page docs/<paper>.md holds a verdict block."""
  out = []
  for name in sorted(os.listdir(docs_dir)):
    stem, ext = os.path.splitext(name)
    if ext == '.md' and '_' not in stem and BEGIN in files.read_text(os.path.join(docs_dir, name)):
      out.append(stem)
  return out


def papers_with_tables(docs_dir: str) -> list[str]:
  """The papers whose page docs/<paper>.md has generated tables beside it (docs/<paper>_*.md)."""
  names = os.listdir(docs_dir)
  return [stem for stem in sorted(os.path.splitext(n)[0] for n in names if n.endswith('.md'))
          if '_' not in stem and any(n.startswith(f'{stem}_') and n.endswith('.md')
                                     for n in names)]


def pages(docs_dir: str) -> list[tuple[str, str, str]]:
  """(path, page as it is, page with its block rewritten) for every paper page with a block, and
  for every page whose tables judge orderings (ValueError if it has no block to copy them to)."""
  out = []
  for paper in papers_with_tables(docs_dir):
    path = os.path.join(docs_dir, f'{paper}.md')
    page, block = files.read_text(path), summary(docs_dir, paper)
    if BEGIN in page or block != '\n'.join([BEGIN, '', END]):
      out.append((path, page, replace_block(page, block, path)))
  return out


def blank(page: str, begin: str, end: str) -> str:
  """`page` with each span from `begin` to `end` blanked out, its line breaks kept (so that line
  numbers still name the page's lines)."""
  def keep_lines(match):
    return '\n' * match.group(0).count('\n')
  return re.sub(re.escape(begin) + '.*?' + re.escape(end), keep_lines, page, flags=re.DOTALL)


def cell(match: re.Match) -> str:
  """A matched mean ± std as a table prints it, whatever space or line break it spanned."""
  return f'{match.group(1)} ± {match.group(2)}'


def mean_stds(text: str) -> set[str]:
  return {cell(match) for match in MEAN_STD.finditer(text)}


def unsourced(docs_dir: str, paper: str) -> list[str]:
  """'<page>:<line>: <mean ± std>' for each mean ± std docs/<paper>.md quotes outside its verdict
  and history blocks that is no cell of the paper's tables."""
  path = os.path.join(docs_dir, f'{paper}.md')
  prose = blank(blank(files.read_text(path), BEGIN, END), *HISTORY)
  cells = set()
  for name in table_files(docs_dir, paper):
    cells |= mean_stds(files.read_text(os.path.join(docs_dir, name)))
  out = []
  for match in MEAN_STD.finditer(prose):
    if cell(match) not in cells:
      out.append(f'{path}:{prose.count(chr(10), 0, match.start()) + 1}: {cell(match)}')
  return out


# Issue 63 part 3, its first piece: every figure (a decimal number) a page's prose quotes should be
# found in the archive at its printed rounding. `figures` finds them outside the places a number
# may be exempt; `unsourced_figures` names those that no source holds. The sources (a table's
# cells, per-seed values, differences and margins) need the papers' table specs, so
# `reproduce.quotable_values` gathers them and `python -m fedjax_face.reproduce --numbers` reports
# per page; it does not fail `--check` until the pages are brought to it.
FIGURE = re.compile(r'(?<![\w.])\d+\.\d+(?![\w]|\.\d)')   # 83.18, 0.05; not 1.2.3 or v0.1
UNCHECKED = re.compile(r'<!-- unchecked: [^>]*-->')
FIGURE_DIGITS = 6   # the most decimals a figure is matched at


def exempt_spans(page: str) -> list[tuple[int, int, str]]:
  """(start, end, kind) of each part of `page` whose figures are exempt: the verdict and history
  blocks, code (fenced or in backticks), table lines, link targets, and each paragraph that holds
  an `<!-- unchecked: reason -->` marker."""
  spans = []
  for kind, pattern in (('verdicts', re.escape(BEGIN) + '.*?' + re.escape(END)),
                        ('history', re.escape(HISTORY[0]) + '.*?' + re.escape(HISTORY[1])),
                        ('code', r'```.*?```'),
                        ('code', r'`[^`\n]*`'),
                        ('table', r'(?m)^[ \t]*\|[^\n]*$'),
                        ('link', r'\]\([^)\s]*\)')):
    spans += [(m.start(), m.end(), kind) for m in re.finditer(pattern, page, flags=re.DOTALL)]
  for marker in UNCHECKED.finditer(page):
    start = page.rfind('\n\n', 0, marker.start())
    end = page.find('\n\n', marker.end())
    spans.append((start + 1 if start >= 0 else 0, len(page) if end < 0 else end, 'unchecked'))
  return spans


def figures(page: str) -> tuple[list[tuple[int, str]], collections.Counter]:
  """(line number, figure) of every figure in `page` outside `exempt_spans`, and how many figures
  each kind of exemption held (the first span holding a figure names its kind)."""
  spans = sorted(exempt_spans(page))
  checked, exempt = [], collections.Counter()
  for match in FIGURE.finditer(page):
    kind = next((k for start, end, k in spans if start <= match.start() < end), None)
    if kind:
      exempt[kind] += 1
    else:
      checked.append((page.count('\n', 0, match.start()) + 1, match.group(0)))
  return checked, exempt


def printed_forms(values, tokens=()) -> set[str]:
  """Every way a value can be quoted: its magnitude at 0 to FIGURE_DIGITS decimals (a figure
  quoted at 2 decimals is found when a value rounds to it there); `tokens` (figures printed on the
  generated pages) are taken as printed."""
  forms = {token.lstrip('+-−') for token in tokens}
  for value in values:
    forms.update(f'{abs(value):.{digits}f}' for digits in range(FIGURE_DIGITS + 1))
  return forms


def unsourced_figures(page: str, forms: set[str]) -> tuple[list[tuple[int, str]], int,
                                                             collections.Counter]:
  """(the figures of `page` that no form holds, how many figures it checked, the exempt counts)."""
  checked, exempt = figures(page)
  return [(line, text) for line, text in checked if text not in forms], len(checked), exempt


def stale(docs_dir: str) -> list[str]:
  """The pages whose block differs from their tables' verdicts."""
  return [path for path, page, updated in pages(docs_dir) if updated != page]


def write_all(docs_dir: str) -> list[str]:
  """Rewrites every stale page's block; returns those pages."""
  changed = []
  for path, page, updated in pages(docs_dir):
    if updated != page:
      files.write_text_atomic(path, updated)
      changed.append(path)
  return changed


def main(argv):
  del argv
  try:
    run(flags.FLAGS.docs, flags.FLAGS.check)
  except ValueError as e:   # a page without its verdict block: one line naming it
    sys.exit(str(e))


def run(docs_dir: str, check: bool):
  """Rewrites the stale verdict blocks of `docs_dir`, or with `check` names what is stale (the
  blocks, and the means quoted beside them) and exits 1 if anything is."""
  if check:
    paths = stale(docs_dir)
    quoted = [line for paper in papers_with_tables(docs_dir)
              for line in unsourced(docs_dir, paper)]
    if paths:
      print('stale verdict blocks (run python -m fedjax_face.tools.claims): ' + ', '.join(paths))
    if quoted:
      print('means quoted in prose that no table holds (update them from the tables, or move '
            f'them between {HISTORY[0]} and {HISTORY[1]}):\n  ' + '\n  '.join(quoted))
    if paths or quoted:
      sys.exit(1)
    print('every verdict block matches its tables, and every mean quoted beside them is a cell')
    return
  for path in write_all(docs_dir):
    print(f'rewrote {path}')


if __name__ == '__main__':
  flags.DEFINE_string('docs', 'docs', 'The docs directory.')
  flags.DEFINE_bool('check', False, 'Only check; exit 1 naming each stale page.')
  app.run(main)
