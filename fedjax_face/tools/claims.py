r"""What reproduces, in one place: each paper's summary of verdicts, collected from its tables.

    python -m fedjax_face.tools.claims            # rewrite the summaries in docs/<paper>.md
    python -m fedjax_face.tools.claims --check    # exit 1 naming each summary that is stale, each
                                                  # figure the archive lacks, each count of
                                                  # verdicts the family does not have, each
                                                  # quantifier no verdict line backs, each
                                                  # judged line its sentence's verdict words
                                                  # do not match, each line said not to hold
                                                  # that is reproduced

The verdicts are made once, by `reproduce` (`tools/tables/verdict.py:judge`), at the end of each
generated table (docs/<paper>_table<N>.md, docs/<paper>_fig<N>.md, ...). A paper's page states no
verdict of its own: between the two markers below it holds a copy of its tables' verdict lines,
which this tool writes and `tests/tools/test_claims.py` checks, so a page cannot say more than its
tables show. Figures of earlier code states, kept as the record of how a result was found, go
between the two HISTORY markers.

`--check` also checks the prose (issue 63 part 3):
- every mean ± std it quotes is a cell of one of the paper's tables (`unsourced`);
- every other figure (a decimal number) is a value of the archive at its printed rounding: a
  table's per-seed value, mean, standard deviation, the difference of two rows, an ordering's
  margin (`reproduce.quotable_forms` gathers them from the table specs and results/), or a figure
  a generated page prints (`figure_failures`). A range "0.13–2.03" is two figures, each checked.
  A figure only one seed's value holds (no mean, std, difference of means or printed cell) needs
  a sentence that names a seed: a seed's figure is not quoted as if it were the mean;
- a universal quantifier over seeds or columns ("in every seed", "on all three pair sets",
  `QUANTIFIER`) restates a verdict line, named in its sentence by `<!-- judged: <line> -->`
  (the line's text before its verdict, e.g. `FedGC above FedPE (LFW)`, or an ordering judged on
  several columns by its name alone), and that line holds in every seed, on every column it has
  (`quantifier_failures`). A quantifier cannot be checked by matching words, so it names its line;
- a sentence with a `<!-- judged: -->` marker that states a decided verdict in words
  (`VERDICT_WORDS`: "reproduced", "reverses", "passes the correction", "stands"; "ahead" and
  "behind" for our own orderings) names only lines decided that way after the correction
  (judged: reproduced or ahead; judged reversed: reversed or behind). A sentence whose words say
  a verdict is undecided ("within noise", "before the correction", "the test alone"; `UNDECIDED`)
  or that quotes only the seed pattern is not held to it (`verdict_word_failures`);
- a sentence that says an ordering holds nowhere ("at no C is FedGC ahead of FedPE after the
  correction") names the lines it covers with `<!-- judged not reproduced: -->`, and none of
  them is reproduced after the correction (`not_reproduced_failures`);
- every count of verdicts it states as an integer in the family sentence's words (`COUNT_PHRASES`:
  "N tests", "N verdicts the test alone gave (N reproduced, N reversed)", "N stand (N and N)",
  "N of them pass the correction") is that count among the tests of the page's family, decided
  as `reproduce` decides them (`verdict.page_family` over the tables as their pages were made),
  or of the table it names ("Table 1's 30 tests"); one that names neither its table nor "this
  page's" may also be that of a table its paragraph names (`count_failures`).
A figure or quantifier is exempt only: in code (backticks), a table line, a link target, a
reference to an equation, table, figure or section ("Eq. 3.2"), the verdict and history
blocks, and a paragraph holding `<!-- unchecked: reason -->` (the reason is required). The check
prints, per page, how many figures it checked and how many each kind of exemption held.

What matching cannot see: a figure is found if ANY quotable value of the paper rounds to it, not
necessarily the one the sentence means (2-decimal figures below 10 are often found by chance);
a wrong figure that happens to equal another value passes. Likewise a count that says neither
its table nor its page passes when a table its paragraph names has it; counts written in words
("the other five") or in other words ("the 24 checks") are not found. Verdict words are read per
sentence: one undecided word frees all its markers, and a verdict it states of other lines holds
its markers' lines too (split the sentence).
"""

import collections
import functools
import importlib
import os
import re
import sys
from typing import Callable, NamedTuple

from absl import app, flags

from fedjax_face.io import files
from fedjax_face.tools.tables import verdict as verdict_lib

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


def title_of(table_text: str) -> str | None:
  """A generated table's title (its '## ' line: `Table.title`), or None."""
  return next((line[3:] for line in table_text.splitlines() if line.startswith('## ')), None)


def summary(docs_dir: str, paper: str) -> str:
  """The block for docs/<paper>.md: per table with orderings, its title linked, then its lines."""
  parts = [BEGIN]
  for name in table_files(docs_dir, paper):
    text = files.read_text(os.path.join(docs_dir, name))
    lines = verdict_lines(text)
    if not lines:
      continue
    parts += ['', f'**[{title_of(text) or name}]({name})**', ''] + lines
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


# Issue 63 part 3: every figure (a decimal number) a page's prose quotes must be found in the
# archive at its printed rounding. `figures` finds them outside the places a number may be exempt;
# the values (a table's cells, per-seed values, differences and margins) need the papers' table
# specs, which sit above this layer: `reproduce.quotable_forms` gathers them.
FIGURE = re.compile(r'(?<![\w.])\d+\.\d+(?![\w]|\.\d)')   # 83.18, 0.05; not 1.2.3 or v0.1
UNCHECKED = re.compile(r'<!-- unchecked:([^>]*)-->')
# A reference whose number names a place, not a value: "Eq. 3.2", "Table 4.1", "Fig. 2.3",
# "Section 3.1", "§ 4.2", "Alg. 1.1". (A seed or a commit is named by an integer or a hash, which
# are no figures.)
REFERENCE = re.compile(r'(?i)(?:\beqs?\.|\bequations?|\btables?|\bfigs?\.|\bfigures?|\bsec\.|'
                       r'\bsections?|§|\balg\.|\balgorithms?)\s*(\d+\.\d+)')
FIGURE_DIGITS = 6   # the most decimals a figure is matched at
PARAGRAPH_BREAK = re.compile(r'\n[ \t]*\n|\n(?=[ \t]*- )')   # a blank line, or a list item's start


def exempt_spans(page: str) -> list[tuple[int, int, str]]:
  """(start, end, kind) of each part of `page` whose figures are exempt: references ("Eq. 3.2"),
  the verdict and history blocks, code (fenced or in backticks), table lines, link targets, and
  each paragraph (or list item) that holds an `<!-- unchecked: reason -->` marker."""
  spans = [(m.start(1), m.end(1), 'reference') for m in REFERENCE.finditer(page)]
  for kind, pattern in (('verdicts', re.escape(BEGIN) + '.*?' + re.escape(END)),
                        ('history', re.escape(HISTORY[0]) + '.*?' + re.escape(HISTORY[1])),
                        ('code', r'```.*?```'),
                        ('code', r'`[^`\n]*`'),
                        ('table', r'(?m)^[ \t]*\|[^\n]*$'),
                        ('link', r'\]\([^)\s]*\)')):
    spans += [(m.start(), m.end(), kind) for m in re.finditer(pattern, page, flags=re.DOTALL)]
  for marker in UNCHECKED.finditer(page):   # its paragraph, or its item of a list
    spans.append((*paragraph_at(page, marker.start(), marker.end()), 'unchecked'))
  return spans


def paragraph_at(page: str, start: int, end: int) -> tuple[int, int]:
  """(start, end) of the paragraph (or list item, `PARAGRAPH_BREAK`) holding page[start:end]."""
  begin = max((m.end() for m in PARAGRAPH_BREAK.finditer(page, 0, start)), default=0)
  found = PARAGRAPH_BREAK.search(page, end)
  return begin, found.start() if found else len(page)


def figure_matches(page: str) -> list[tuple[re.Match, str | None]]:
  """Each figure of `page` with the kind of exemption that holds it (None: checked); the first
  span holding a figure names its kind."""
  spans = sorted(exempt_spans(page))
  return [(match, next((k for start, end, k in spans if start <= match.start() < end), None))
          for match in FIGURE.finditer(page)]


def figures(page: str) -> tuple[list[tuple[int, str]], collections.Counter]:
  """(line number, figure) of every figure in `page` outside `exempt_spans`, and how many figures
  each kind of exemption held."""
  checked, exempt = [], collections.Counter()
  for match, kind in figure_matches(page):
    if kind:
      exempt[kind] += 1
    else:
      checked.append((page.count('\n', 0, match.start()) + 1, match.group(0)))
  return checked, exempt


class Forms(NamedTuple):
  """What a page may quote, as printed (`printed_forms`): all of it, and what holds over the
  seeds (means, standard deviations, differences of means, the paper's numbers, what a
  generated page prints) rather than of one seed."""
  all: set[str]
  over_seeds: set[str]


def printed_forms(values, tokens=()) -> set[str]:
  """Every way a value can be quoted: its magnitude at 0 to FIGURE_DIGITS decimals (a figure
  quoted at 2 decimals is found when a value rounds to it there); `tokens` (figures printed on the
  generated pages) are taken as printed, not rounded again (a t of 2.12 is no value of 2.1)."""
  forms = {token.lstrip('+-−') for token in tokens}
  for value in values:
    forms.update(f'{abs(value):.{digits}f}' for digits in range(FIGURE_DIGITS + 1))
  return forms


def unsourced_figures(page: str, forms: set[str]) -> tuple[list[tuple[int, str]], int,
                                                             collections.Counter]:
  """(the figures of `page` that no form holds, how many figures it checked, the exempt counts)."""
  checked, exempt = figures(page)
  return [(line, text) for line, text in checked if text not in forms], len(checked), exempt


# A universal quantifier over seeds or columns, as a claim states it: "in every seed", "in each of
# five seeds", "on all three pair sets", "in every one of five seeds", "on both columns". Without
# its preposition the phrase names a procedure ("for each seed it exports"), not a result.
QUANTIFIER = re.compile(r'(?i)\b(?:in|on|across)\s+(?:every|each|all|both)(?:\s+one)?(?:\s+of)?'
                        r'(?:\s+the)?(?:\s+[\w-]+)?\s+(?:seeds?|columns?|pair\s+sets?|protocols?)\b')
SEED_NOUN = re.compile(r'(?i)seeds?\b')
JUDGED = re.compile(r'<!-- judged( reversed)?: ([^>]*?) -->')
# A sentence ends at a full stop before a capital, a bullet, or a blank line ("Eq. 5" and
# "e.g. the" do not end one; "vs. FedPE" does, so a marker sits close to its quantifier).
SENTENCE_END = re.compile(r'\.\s+(?=[A-Z*(\[])|\n\s*\n|\n\s*- ')
HOLDS = re.compile(r'(?:holds|ahead) in (\d+) of (\d+) seeds? \(by ([+-]?\d+\.\d+)(?: to ([+-]?\d+\.\d+))?')


class Judged(NamedTuple):
  """One verdict line as a quantifier may cite it: in how many of how many seeds the ordering
  holds, its smallest and largest per-seed margin, its verdict after the correction as printed
  ('reproduced', 'within noise', 'behind', ...), and whether it is one of our own orderings
  (its seeds read 'ahead in', its verdicts 'ahead' and 'behind': `verdict.OWN_WORDS`)."""
  holds: int
  seeds: int
  low: float
  high: float
  verdict: str
  own: bool


def judged_lines(page: str) -> dict[str, list[Judged]]:
  """The verdict block's lines, by the names a `<!-- judged: -->` marker may give: a line's
  text before its verdict ('FedGC above FedPE (LFW)'); for an ordering judged on several
  columns its name alone (all its column lines) and '<name> (<column>)' (one); each name also
  prefixed with its table's file ('fedgc_table3.md: FedGC above FedPE (LFW)')."""
  start, end = page.find(BEGIN), page.find(END)
  out = collections.defaultdict(list)
  table, ordering = '', None
  for line in page[start:end].splitlines() if start >= 0 else []:
    title = re.match(r'\*\*\[.*\]\(([^)]+)\)\*\*$', line)
    if title:
      table = title.group(1)
      continue
    holds = HOLDS.search(line)
    if line.startswith('- ') and not holds:
      ordering = re.sub(r': [^:]* on \d+ of \d+ columns.*$', '', line[2:])
      continue
    if not holds:
      continue
    judged = Judged(int(holds.group(1)), int(holds.group(2)), float(holds.group(3)),
                    float(holds.group(4) or holds.group(3)),
                    re.search(r': \*\*([^*]+)\*\*', line).group(1),
                    holds.group(0).startswith('ahead'))
    if line.startswith('- '):
      names = [line[2:line.index(': **')]]
    else:   # '  - LFW: **reproduced**: ...', a column of `ordering`
      names = [ordering, f'{ordering} ({line.strip()[2:line.strip().index(": **")]})']
    for name in names:
      out[name].append(judged)
      out[f'{table}: {name}'].append(judged)
  return dict(out)


def sentence_at(page: str, index: int) -> tuple[int, int]:
  """(start, end) of the sentence of `page` holding `index` (`SENTENCE_END`; a comment's text,
  as a marker's 'pers. TAR', ends none)."""
  text = re.sub(r'<!--.*?-->', lambda m: ' ' * len(m.group(0)), page, flags=re.DOTALL)
  start = max((m.end() for m in SENTENCE_END.finditer(text, 0, index)), default=0)
  found = SENTENCE_END.search(text, index)
  return start, found.start() if found else len(text)


def unexempt(path: str, page: str, pattern: re.Pattern):
  """(match, '<path>:<line>') for each match of `pattern` in `page` outside `exempt_spans`."""
  spans = exempt_spans(page)
  for match in pattern.finditer(page):
    if not any(start <= match.start() < end for start, end, _ in spans):
      yield match, f'{path}:{page.count(chr(10), 0, match.start()) + 1}'


def quantifier_failures(path: str, page: str) -> list[str]:
  """'<path>:<line>: ...' for each quantifier of the prose (outside `exempt_spans`) whose sentence
  names no verdict line (`<!-- judged: <name> -->`, several separated by ' ; '), names one the
  block lacks, or names lines that do not hold in every seed (reversed: whose reverse does not),
  or, for a quantifier over columns, fewer than two column lines."""
  lines = judged_lines(page)
  out = []
  for match, where in unexempt(path, page, QUANTIFIER):
    phrase = ' '.join(match.group(0).split())
    start, end = sentence_at(page, match.start())
    markers = list(JUDGED.finditer(page, start, end))
    if not markers:
      out.append(f'{where}: "{phrase}" is a quantifier no verdict line backs; name the line it '
                 'restates in its sentence, <!-- judged: <line> -->, or put it under '
                 '<!-- unchecked: reason -->')
      continue
    cited = []
    for marker in markers:
      for name in marker.group(2).split(' ; '):
        if name not in lines:
          out.append(f'{where}: <!-- judged: {name} --> names no verdict line of the page')
          continue
        cited += [(name, marker.group(1), judged) for judged in lines[name]]
    for name, reversed_, judged in cited:
      holds = (judged.holds == 0 and judged.high < 0) if reversed_ else (
          judged.holds == judged.seeds and judged.low > 0)
      if not holds:
        out.append(f'{where}: "{phrase}" is false: {name} holds in {judged.holds} of '
                   f'{judged.seeds} seeds (by {judged.low:+.2f} to {judged.high:+.2f})')
    if not SEED_NOUN.search(match.group(0)) and cited and len(cited) < 2:
      out.append(f'{where}: "{phrase}" is over columns, but <!-- judged: --> names one column '
                 'line; name the ordering (all its columns) or each column line')
  return out


# A verdict the prose states in words, as the verdict lines print it after the correction: a
# reader takes "reproduced", "reverses", "passes the correction", "stands" for the decided verdict,
# not for the seed pattern a `<!-- judged: -->` marker checks. "ahead" and "behind" are verdicts
# only of our own orderings (`verdict.OWN_WORDS`); elsewhere they are the sign of a margin
# ("seed 0 has both ahead of FedFR").
DECIDED_WORDS = (r"reproduced|reproduces|reversed|reverses|stands?|after\s+the\s+correction|"
                 r"pass(?:es)?\s+(?:the\s+)?(?:page['’]s\s+)?correction|"
                 r"survives?\s+the\s+correction")
VERDICT_WORDS = {own: re.compile(r'(?i)\b(?:' + DECIDED_WORDS + extra + r')\b')
                 for own, extra in ((False, ''),
                                    (True, '|' + '|'.join(verdict_lib.OWN_WORDS.values())))}
# Words that say a verdict is undecided: its sentence states no decided verdict to hold.
UNDECIDED = re.compile(r'(?i)(?:within|inside)\s+(?:the\s+)?noise|before\s+the\s+correction|'
                       r'test\s+alone|\bnot\s+(?:survive|pass)')
DIRECTIONS = {False: ('reproduced', verdict_lib.OWN_WORDS['reproduced']),   # judged
              True: ('reversed', verdict_lib.OWN_WORDS['reversed'])}       # judged reversed


def verdict_word_failures(path: str, page: str) -> list[str]:
  """'<path>:<line>: ...' for each line a `<!-- judged: -->` marker names (outside
  `exempt_spans`) whose sentence states a verdict in words (`VERDICT_WORDS`) and says none is
  undecided (`UNDECIDED`), but whose verdict after the correction is not the marker's direction
  (judged: reproduced or ahead; judged reversed: reversed or behind)."""
  lines = judged_lines(page)
  out = []
  for marker, where in unexempt(path, page, JUDGED):
    start, end = sentence_at(page, marker.start())
    words = re.sub(r'<!--.*?-->', ' ', page[start:end], flags=re.DOTALL)   # not the lines' names
    if UNDECIDED.search(words):
      continue
    for name in marker.group(2).split(' ; '):
      judged = lines.get(name, [])   # a name the block lacks: `quantifier_failures` says so
      said = VERDICT_WORDS[any(j.own for j in judged)].search(words)
      verdicts = [j.verdict for j in judged]
      if said and not set(verdicts) <= set(DIRECTIONS[bool(marker.group(1))]):
        out.append(f'{where}: "{" ".join(said.group(0).split())}" states a decided verdict, but '
                   f'{name} is {" / ".join(verdicts)} after the correction; say so, or name '
                   'only lines decided as the marker says')
  return out


# A sentence that says an ordering holds nowhere ("at no C is FedGC ahead of FedPE after the
# correction") names the lines it covers; each must be within noise or reversed.
NOT_REPRODUCED = re.compile(r'<!-- judged not reproduced: ([^>]*?) -->')


def not_reproduced_failures(path: str, page: str) -> list[str]:
  """'<path>:<line>: ...' for each line a `<!-- judged not reproduced: -->` marker names (outside
  `exempt_spans`) that the verdict block lacks, or whose verdict after the correction is
  reproduced (ahead, for our own orderings)."""
  lines = judged_lines(page)
  out = []
  for marker, where in unexempt(path, page, NOT_REPRODUCED):
    for name in marker.group(1).split(' ; '):
      if name not in lines:
        out.append(f'{where}: <!-- judged not reproduced: {name} --> names no verdict line of '
                   'the page')
        continue
      decided = [j.verdict for j in lines[name] if j.verdict in DIRECTIONS[False]]
      if decided:
        out.append(f'{where}: the sentence says {name} is not reproduced, but it is '
                   f'{" / ".join(decided)} after the correction')
  return out


def empty_reasons(path: str, page: str) -> list[str]:
  """'<path>:<line>: ...' for each `<!-- unchecked: -->` marker without a reason."""
  return [f'{path}:{page.count(chr(10), 0, m.start()) + 1}: <!-- unchecked: --> gives no reason; '
          'say where its figures come from' for m in UNCHECKED.finditer(page)
          if not m.group(1).strip()]


SEED_WORD = re.compile(r'(?i)\bseeds?\b')


def figure_failures(path: str, page: str, forms: Forms) -> tuple[list[str], int,
                                                                 collections.Counter]:
  """('<path>:<line>: <figure> ...' for each figure of the prose no form holds, and for each
  that only one seed's value holds in a sentence naming no seed (a seed's figure quoted as if it
  were the mean); how many figures were checked; how many each kind of exemption held)."""
  missing, checked, exempt = unsourced_figures(page, forms.all)
  out = [f'{path}:{line}: {figure} is no value of the archive at its printed rounding (a cell, a '
         'per-seed value, a difference of two rows, a margin); correct it, or put it under '
         '<!-- unchecked: reason -->' for line, figure in missing]
  for match, kind in figure_matches(page):
    figure = match.group(0)
    if kind or figure not in forms.all or figure in forms.over_seeds:
      continue
    start, end = sentence_at(page, match.start())
    if not SEED_WORD.search(page[start:end]):
      out.append(f"{path}:{page.count(chr(10), 0, match.start()) + 1}: {figure} is one seed's "
                 'value, no mean, in a sentence that names no seed; say which seed, or quote the '
                 'mean')
  return out, checked, exempt


# Counts of verdicts the prose states as integers, in the words of the tables' family sentence
# (`markdown.family_sentence`) and of the pages' summaries: "this page's 103 tests", "of the 42
# verdicts the test alone gave (33 reproduced, 9 reversed), 25 stand (19 and 6)", "12 of them pass
# the correction", "Table 1's 30 tests, Table 2's 20 and Table 4's 60". A family's counts move
# whenever a table joins it or a run is redone, and a sentence quoting the old ones still reads
# as true.
COUNT = r'(?<![\w.,@=+\-−])(\d+)'   # an integer, not 1e-3's 3, 0.05's 05 or 1,500's 500
# Whose count it says it is: "Table 1's 30 tests" that table's, "this page's 103 tests" the
# family's; a count that says neither may be either (`count_failures`).
OWNER = r"(?:\b(Table|Fig\.)\s+(\d+|[IVXL]+)['’]s\s+|\b(page)['’]s\s+)?"
COUNT_PHRASES = (   # (what each integer of the phrase counts, in order; the phrase)
    (('tests',), COUNT + r'\s+tests\b'),
    (('alone', 'alone reproduced', 'alone reversed'),
     COUNT + r'\s+verdicts\s+(?:that\s+)?the\s+test\s+alone\s+gave(?:\s+\(' + COUNT
     + r'\s+reproduced,\s+' + COUNT + r'\s+reversed\))?'),
    (('stand', 'reproduced', 'reversed'),
     COUNT + r'\s+stands?\b(?:\s+\(' + COUNT + r'\s+and\s+' + COUNT + r'\))?'),
    (('pass',), COUNT + r"(?:\s+(?:tests|orderings))?(?:\s+of\s+(?:them|the\s+\d+\s+tests))?"
     r"\s+pass(?:es)?\s+(?:the\s+(?:page['’]s\s+)?correction|BH\b)"),
)
# The rest of a list whose first item named the table and the noun: ", Table 2's 20 and Table
# 4's 60".
OWNED_ITEM = re.compile(r"(?:,\s*|,?\s+and\s+)(Table|Fig\.)\s+(\d+|[IVXL]+)['’]s\s+(\d+)\b"
                        r'(?![.,]\d)')
# The tables a paragraph names, whose counts a count it does not own may be: "Tables 1-8 and 12",
# "Table III", "Fig. 4", and each generated page it links to.
NAMED_TABLES = re.compile(r'\b(Tables?|Figs?\.)\s+((?:\d+|[IVXL]+)\b(?:\s*(?:,|and|-|–|to)\s*'
                          r'(?:\d+|[IVXL]+)\b)*)')
ROMAN = {'I': 1, 'V': 5, 'X': 10, 'L': 50}
DECIDED = ('reproduced', 'reversed')
QUANTITIES = {   # what a count counts among the tests of a page (or of one table): words, test
    'tests': ('tests', lambda v: True),
    'pass': ('tests passing the correction', lambda v: v.adjusted <= verdict_lib.FDR),
    'alone': ('verdicts the test alone gave', lambda v: v.alone in DECIDED),
    'alone reproduced': ('reproduced by the test alone', lambda v: v.alone == 'reproduced'),
    'alone reversed': ('reversed by the test alone', lambda v: v.alone == 'reversed'),
    'stand': ('verdicts standing after the correction', lambda v: v.verdict in DECIDED),
    'reproduced': ('reproduced after the correction', lambda v: v.verdict == 'reproduced'),
    'reversed': ('reversed after the correction', lambda v: v.verdict == 'reversed'),
}


class Count(NamedTuple):
  """An integer the prose states as a count of verdicts."""
  index: int          # where in the page
  quantity: str       # a key of QUANTITIES
  stated: int
  owner: str | None   # the generated page of the table it counts ('pad_table3.md'), its own
                      # page ('pad.md': the family's), or None: not said


def table_number(numeral: str) -> int:
  """'12' -> 12, 'III' -> 3 (the PAD page numbers its tables as the paper does)."""
  if numeral.isdigit():
    return int(numeral)
  values = [ROMAN[c] for c in numeral]
  return sum(-v if v < after else v for v, after in zip(values, values[1:] + [0]))


def table_file(paper: str, kind: str, number: int) -> str:
  """The generated page of `paper`'s "Table <number>" or "Fig. <number>": 'pad_table3.md',
  'fedfr_fig4.md'."""
  return f'{paper}_{"fig" if kind.startswith("Fig") else "table"}{number}.md'


def counts(page: str, paper: str) -> list[Count]:
  """Every count of verdicts `page` states (`COUNT_PHRASES`) outside `exempt_spans`, in order."""
  spans = exempt_spans(page)
  found = []
  for quantities, phrase in COUNT_PHRASES:
    for match in re.finditer(OWNER + phrase, page):
      table = match.group(1) and table_file(paper, match.group(1), table_number(match.group(2)))
      owner = table or (f'{paper}.md' if match.group(3) else None)
      found += [Count(match.start(group), quantity, int(match.group(group)), owner)
                for group, quantity in enumerate(quantities, 4) if match.group(group)]
      end = match.end()
      while table and (item := OWNED_ITEM.match(page, end)):   # the noun said once for all
        found.append(Count(item.start(3), quantities[0], int(item.group(3)),
                           table_file(paper, item.group(1), table_number(item.group(2)))))
        end = item.end()
  return sorted(c for c in found if not any(start <= c.index < end for start, end, _ in spans))


def named_tables(paragraph: str, paper: str) -> list[str]:
  """The generated pages of the tables `paragraph` names (`NAMED_TABLES`) or links to."""
  names = re.findall(rf'\]\(({paper}_\w+\.md)\)', paragraph)
  for match in NAMED_TABLES.finditer(paragraph):
    for part in re.split(r'\s*(?:,|and)\s*', match.group(2)):
      bounds = [table_number(n) for n in re.split(r'\s*(?:-|–|to)\s*', part)]   # "1-8", "12"
      names += [table_file(paper, match.group(1), n) for n in range(bounds[0], bounds[-1] + 1)]
  return list(dict.fromkeys(names))


def decided_tests(page: str, judged: list) -> list[tuple[str, verdict_lib.Verdict, tuple]]:
  """(table title, verdict as the table prints it, its comparison) for each tested line of a
  page: `judged`, its tables with orderings each with its tests alone (`verdict.judge_table`),
  decided over them all by the correction as `reproduce` decides them (`verdict.page_family`,
  `adjust`); two lines of one comparison (`verdict.comparison_key`) are one test of the family."""
  family = verdict_lib.page_family(page, judged)
  return [(table.title, verdict_lib.adjust(v, family.adjusted[(table.title, index)]),
           family.comparisons[(table.title, index)])
          for table, verdicts in judged for index, v in enumerate(verdicts) if v.p is not None]


def tally(tests: list[tuple[str, verdict_lib.Verdict, tuple]], quantity: str, docs_dir: str,
          name: str | None = None) -> int:
  """How many of `tests` (`decided_tests`) `quantity` counts: the page family's (a comparison
  several tables print counted once), or the lines of the table whose generated page is
  docs/`name` (none if there is no such page)."""
  holds = QUANTITIES[quantity][1]
  if name is None:
    return sum(holds(v) for v in verdict_lib.one_per_comparison((c, v) for _, v, c in tests))
  path = os.path.join(docs_dir, name)
  title = title_of(files.read_text(path)) if os.path.exists(path) else None
  return sum(holds(v) for table, v, _ in tests if table == title)


def count_failures(path: str, page: str, found: list[Count],
                   tests: list[tuple[str, verdict_lib.Verdict, tuple]], docs_dir: str,
                   paper: str) -> list[str]:
  """'<path>:<line>: ...' for each of the counts `found` on `page` that is not what it counts
  among `tests` (`decided_tests`): the table's it names ("Table 1's 30 tests"), the page's
  family's ("this page's 103 tests"); one that names neither, the family's or that of a table its
  paragraph names."""
  out = []
  for count in found:
    where = f'{path}:{page.count(chr(10), 0, count.index) + 1}'
    words = QUANTITIES[count.quantity][0]
    if count.owner not in (None, f'{paper}.md'):   # a table's
      true = tally(tests, count.quantity, docs_dir, count.owner)
      if count.stated != true:
        out.append(f'{where}: {count.stated} {words} in {count.owner}; it has {true}')
      continue
    named = [] if count.owner else named_tables(
        page[slice(*paragraph_at(page, count.index, count.index))], paper)
    tables = {name: tally(tests, count.quantity, docs_dir, name) for name in named}
    true = tally(tests, count.quantity, docs_dir)
    if count.stated != true and count.stated not in tables.values():
      said = ', '.join(f'{name} {n}' for name, n in tables.items())
      out.append(f"{where}: {count.stated} {words}; the page's family has {true}"
                 + (f' (the tables its paragraph names: {said})' if said else ''))
  return out


def prose_check(docs_dir: str, forms_of: Callable[[str], Forms],
                judged_of: Callable[[str], list]) -> tuple[list[str], list[str]]:
  """(each failure of the prose of every paper page, one line each; per page how many figures
  were checked and how many each kind of exemption held, and how many verdict counts were
  checked, then a closing line of the totals). `forms_of(paper)` gives what the page may quote
  (`reproduce.quotable_forms`), `judged_of(paper)` its tables' tests alone (`decided_tests`;
  asked only of a page that states a count)."""
  failures, notes, totals = [], [], collections.Counter()
  for paper in papers_with_tables(docs_dir):
    path = os.path.join(docs_dir, f'{paper}.md')
    page = files.read_text(path)
    figure_lines, checked, exempt = figure_failures(path, page, forms_of(paper))
    found = counts(page, paper)
    tests = decided_tests(path, judged_of(paper)) if found else []
    failures += (unsourced(docs_dir, paper) + figure_lines + quantifier_failures(path, page)
                 + verdict_word_failures(path, page) + not_reproduced_failures(path, page)
                 + count_failures(path, page, found, tests, docs_dir, paper)
                 + empty_reasons(path, page))
    where = ', '.join(f'{n} {kind}' for kind, n in sorted(exempt.items())) or 'none'
    notes.append(f'{path}: {checked} figures checked; exempt: {where}; {len(found)} verdict '
                 'counts checked')
    totals.update(exempt)
    totals['checked'] += checked
    totals['counted'] += len(found)
  checked, counted = totals.pop('checked', 0), totals.pop('counted', 0)
  notes.append(f'{checked} figures checked on {len(notes)} pages; exempt: '
               + (', '.join(f'{n} {kind}' for kind, n in sorted(totals.items())) or 'none')
               + f'; {counted} verdict counts checked')
  return failures, notes


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


# The module that knows the papers' table specs, and so what their pages may quote and which runs
# their tables were made of. It sits in the top layer (WORKSPACE.md, "Layers"), which this module
# may not import: the command looks it up by name when it runs, as the registries look up a
# method; tests pass `forms_of` and `judged_of` themselves.
QUOTABLE_FORMS = ('fedjax_face.reproduce', 'quotable_forms')
ARCHIVED_PAGES = ('fedjax_face.reproduce', 'archived_pages')


def judged_pages(archived: list[list]) -> dict[str, list]:
  """Per page ('docs/<paper>.md'), its tables with orderings as their pages were made
  (`reproduce.archived_pages`: the runs and seeds each footnote records, as
  `reproduce.page_family` reads them), each with its tests alone (`verdict.judge_table`)."""
  out = collections.defaultdict(list)
  for item in (item for page in archived for item in page if item.table.orderings):
    out[item.page].append(
        (item.table, verdict_lib.judge_table(item.table, item.results, item.seeds)))
  return dict(out)


def main(argv):
  del argv
  f = flags.FLAGS
  quotable, archived = (getattr(importlib.import_module(module), name)
                        for module, name in (QUOTABLE_FORMS, ARCHIVED_PAGES))
  judged = functools.cache(lambda: judged_pages(archived(f.docs, f.archive)))   # read once
  try:
    sys.exit(run(f.docs, f.check, lambda paper: quotable(paper, f.docs, f.archive),
                 lambda paper: judged().get(f'docs/{paper}.md', [])))
  except ValueError as e:   # a page without its verdict block: one line naming it
    sys.exit(str(e))


def run(docs_dir: str, check: bool, forms_of: Callable[[str], Forms],
        judged_of: Callable[[str], list]) -> int:
  """Rewrites the stale verdict blocks of `docs_dir`, or with `check` prints what is stale (the
  blocks) and each failure of the prose (`prose_check`: `forms_of` and `judged_of` are its),
  then the exemptions per page; returns the exit status (1 if anything failed)."""
  if not check:
    for path in write_all(docs_dir):
      print(f'rewrote {path}')
    return 0
  paths = stale(docs_dir)
  failures, notes = prose_check(docs_dir, forms_of, judged_of)
  if paths:
    print('stale verdict blocks (run python -m fedjax_face.tools.claims): ' + ', '.join(paths))
  print('\n'.join(failures + notes))
  if paths or failures:
    return 1
  print('every verdict block matches its tables; every figure, verdict count and quantifier of '
        "the prose is the archive's or exempt")
  return 0


if __name__ == '__main__':
  flags.DEFINE_string('docs', 'docs', 'The docs directory.')
  flags.DEFINE_bool('check', False, 'Only check; exit 1 naming each stale page and each figure, '
                    'verdict count or quantifier of the prose the archive does not back.')
  flags.DEFINE_string('archive', 'results', 'The run archive the figures are looked up in.')
  app.run(main)
