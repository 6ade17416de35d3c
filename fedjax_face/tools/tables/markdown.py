"""A table as markdown: ours beside the paper's (mean ± std over seeds), then the verdicts.

`render` prints the page `reproduce` writes to docs/<paper>_table<N>.md: the header, one line per
row, the notes on its diverged runs where the table evaluates them (`diverged_notes`: each row
marked, its cells its last accepted checkpoint's), the paper's orderings judged on ours
(verdict.py: each decided over its page's family of tests), and a footnote with the command that
made it, the setting, the seeds, the commits of its runs and those that ended on a dirty tree.
"""

import statistics

from fedjax_face.io import provenance
from fedjax_face.tools import claims
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict as verdict_lib
from fedjax_face.tools.tables.spec import Ordering, Row, Run, Table


def summarize(values: list[float], num_seeds: int = 1, digits: int = 2) -> str:
  """One cell: '—' without runs, the value of one run, mean ± sample std over several; a cell
  missing some of the `num_seeds` runs says how many it has."""
  if not values:
    return '—'
  cell = (f'{values[0]:.{digits}f}' if len(values) == 1 else
          f'{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}')
  return cell if len(values) == num_seeds else f'{cell} ({len(values)} of {num_seeds} seeds)'


def row_values(table: Table, row: Row, column: str, results: dict,
               seeds: tuple[int, ...]) -> list[float]:
  """Ours for one cell: one value per seed that has a finished run."""
  values = [spec.column_value(results.get((row.run, seed)), table, column) for seed in seeds]
  return [v for v in values if v is not None]


def ordering_line(table: Table, ordering: Ordering, verdict: verdict_lib.Verdict,
                  seeds: tuple[int, ...]) -> str:
  """'- FedFR above FedFace (generic LFW acc.): **reproduced**: holds in 3 of 3 seeds (by +0.35
  to +1.35; t = 4.10 > 2.92).'"""
  detail = verdict_lib.verdict_detail(verdict, seeds, table.own_orderings)
  return f'- {ordering.claim} ({spec.column_title(table, ordering.column)}): {detail}.'


def ordering_lines(table: Table, results: dict, seeds: tuple[int, ...],
                   family: verdict_lib.Family | None = None) -> list[str]:
  """Every ordering's line, decided over `family` (the page's; None: the table alone); a claim
  checked on several columns gets a line saying on how many it is reproduced, then one indented
  line per column."""
  by_claim = {}
  for ordering, verdict in zip(table.orderings,
                               verdict_lib.table_verdicts(table, results, seeds, family)):
    by_claim.setdefault(ordering.claim, []).append((ordering, verdict))
  lines = []
  for claim, judged in by_claim.items():
    if len(judged) == 1:
      lines.append(ordering_line(table, *judged[0], seeds))
      continue
    counts = {word: sum(v.verdict == word for _, v in judged)
              for word in ('reproduced', 'reversed')}
    said = verdict_lib.OWN_WORDS if table.own_orderings else {word: word for word in counts}
    lines.append(f'- {claim}: {said["reproduced"]} on {counts["reproduced"]} of {len(judged)} '
                 'columns' + (f', {said["reversed"]} on {counts["reversed"]}'
                              if counts['reversed'] else '') + ':')
    lines += [f'  - {spec.column_title(table, o.column)}: '
              f'{verdict_lib.verdict_detail(v, seeds, table.own_orderings)}.'
              for o, v in judged]
  return lines


def has_threats(table: Table) -> bool:
  """Whether the table has a threat-model column (a privacy table: some row states one)."""
  return any(row.threat for row in table.rows)


def header_lines(table: Table, has_paper: bool) -> list[str]:
  """The title, the paper's claim and the table's two header lines (ours and the paper's title
  per column when the paper has numbers)."""
  header = ['method'] + (['threat model'] if has_threats(table) else [])
  for i, column in enumerate(table.columns):
    title = spec.column_title(table, column)
    paper_title = table.paper_titles[i] if table.paper_titles else title
    header += [f'{title} (ours)', f'{paper_title} (paper)'] if has_paper else [title]
  return [f'## {table.title}', '', f'Paper: {table.claim}.', '',
          '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]


def checkpoint_values(table: Table, row: Row, column: str, results: dict,
                      seeds: tuple[int, ...]) -> list[float]:
  """A row's values at its diverged runs' last accepted checkpoints (`run.last_accepted`): one
  per seed whose checkpoint was evaluated and has one."""
  values = [spec.column_value(results.get((row.run, seed), {}).get('checkpoint'), table, column)
            for seed in seeds]
  return [v for v in values if v is not None]


def row_line(table: Table, row: Row, results: dict, seeds: tuple[int, ...],
             has_paper: bool, marks: tuple[str, ...] = ()) -> str:
  """One row: per column, ours over the seeds (with how many failed) and the paper's number. A
  row whose every seed diverged shows its evaluated checkpoints instead (—: a column they have
  no value for), its label followed by `marks` (`diverged_notes`)."""
  label = row.label + (f' ({"; ".join(marks)})' if marks else '')
  cells = [label] + ([row.threat or '—'] if has_threats(table) else [])
  failed = sum('failed' in results.get((row.run, seed), {}) for seed in seeds)
  evaluated = sum('checkpoint' in results.get((row.run, seed), {}) for seed in seeds)
  for column, paper in zip(table.columns, row.paper):
    values = [] if row.run is None else row_values(table, row, column, results, seeds)
    digits = spec.column_digits(table, column)
    cell = summarize(values, len(seeds) - failed, digits) if values else 'failed'
    if failed and values:
      cell += f' ({failed} failed)'
    if evaluated and failed == len(seeds):
      checkpointed = checkpoint_values(table, row, column, results, seeds)
      cell = summarize(checkpointed, evaluated, digits) if checkpointed else '—'
    cells.append('not built' if row.run is None else cell if values or failed else '—')
    if has_paper:
      cells.append('—' if paper is None else f'{paper:.2f}')
  return '| ' + ' | '.join(cells) + ' |'


def _span(rounds) -> str:
  """'round 21', or 'rounds 5-8'."""
  rounds = list(rounds)
  return f'round {rounds[0]}' if len(rounds) == 1 else f'rounds {rounds[0]}-{rounds[-1]}'


def diverged_note(table: Table, row: Row, result: dict, results: dict,
                  seeds: tuple[int, ...]) -> tuple[str, str]:
  """(the mark after the row's label, the note under the table) for one diverged run: where the
  guard stopped it, and what its cells show: its last accepted checkpoint, evaluated afterwards
  (at which commit, beside the run's own; which rounds its attacks replayed), or nothing."""
  record = result['last_accepted']
  stopped, held = record['stopped_at_round'], record['checkpoints']
  head = f'the divergence guard stopped it at round {stopped}'
  if not held:
    return (f'diverged at round {stopped}, before any checkpoint',
            f'{head}, before its first checkpoint (checkpoint_every = '
            f'{record["checkpoint_every"]}): no state to evaluate, so its cells stay "failed".')
  last = held[-1]
  if 'checkpoint' not in result:
    return (f'diverged at round {stopped}; the evaluation of its round-{last} checkpoint failed',
            f'{head}; the evaluation of its last accepted checkpoint (round {last}) ended with '
            f'`{record.get("error", "no results")}`.')
  evaluated = provenance.commit_label(result['checkpoint'].get('provenance'))
  trained = result['trained_at']
  other = ('' if evaluated in trained else
           '; another commit than its training and than the finished rows\' attacks, so its '
           'numbers may differ by code as well as by state')
  note = (f"{head}; its cells are its last accepted checkpoint's, round {last} (checkpoints "
          f'held: {", ".join(map(str, held))}), evaluated afterwards by `python -m '
          f'fedjax_face.evaluate` (evaluations/last_accepted/) at commit {evaluated}, the run '
          f'trained at {", ".join(trained)}{other}: a state {stopped - last} rounds before the '
          "stop, not a finished run's.")
  if sum('failed' in results.get((row.run, s), {}) for s in seeds) < len(seeds):
    note += " The row's cells are its finished seeds'; this checkpoint is not among them."
  moved = [f'{kind} replays {_span(r["replayed"])} ({_span(r["asked"])} asked)'
           if r['replayed'] else f'{kind} is off ({_span(r["asked"])} asked; no round up to '
           f'{last} can be replayed)'
           for kind, r in record.get('replayed', {}).items() if r['replayed'] != r['asked']]
  if moved:
    said = '; '.join(moved)
    note += (f' {said[0].upper()}{said[1:]}: a replay of round r starts from the checkpoint of '
             'round r-1.')
  finished = [r for r in results.values() if 'failed' not in r]
  lacking = [spec.column_title(table, column) for column in table.columns
             if spec.column_value(result['checkpoint'], table, column) is None
             and any(spec.column_value(r, table, column) is not None for r in finished)]
  if lacking:
    note += f' Its evaluation has no {", ".join(lacking)} (—).'
  return f"diverged at round {stopped}: its round-{last} checkpoint", note


def diverged_notes(table: Table, results: dict,
                   seeds: tuple[int, ...]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
  """(row label -> the marks after it, the numbered notes under the table) for every run of a
  table that evaluates diverged runs (`Table.evaluate_diverged`) that the guard stopped."""
  marks, notes = {}, []
  for row in table.rows:
    for seed in seeds:
      result = results.get((row.run, seed), {})
      if row.run is None or 'last_accepted' not in result:
        continue
      mark, note = diverged_note(table, row, result, results, seeds)
      who = f'seed {seed} ' if len(seeds) > 1 else ''
      notes.append(f'[{len(notes) + 1}] {row.label}{f", seed {seed}" if who else ""}: {note}')
      marks[row.label] = marks.get(row.label, ()) + (f'{who}{mark} [{len(notes)}]',)
  return marks, notes


def family_sentence(family: verdict_lib.Family) -> str:
  """How many tests the correction weighed together, and how many it kept."""
  plural = lambda n, word: f'{n} {word}{"" if n == 1 else "s"}'
  passes = 'passes' if family.discoveries == 1 else 'pass'
  kept = f'{family.discoveries} of them {passes} the correction.'
  if not family.page:
    return f' The family here is this table alone: {plural(family.tests, "test")}; {kept}'
  return (f' The family of {family.page}: {plural(family.tests, "test")} (ordering and column, '
          f'two seeds or more; a comparison several tables print is one test) on its '
          f'{plural(family.tables, "table")} with orderings; {kept}'
          # A sibling's new seeds or runs move every p-value's rank, so a verdict of a table
          # left at its seeds can move too (PAD Table VI's did when Tables V, VIII-X reached 5).
          ' A verdict here can move when another table of the page gains seeds or runs: the '
          "correction ranks the page's tests together.")


def orderings_head(table: Table, family: verdict_lib.Family) -> str:
  """The sentence before the verdict lines (`claims.ORDERINGS_HEADS` finds it there)."""
  heads = claims.ORDERINGS_HEADS
  if table.own_orderings:
    return (f"{heads[1]} (no paper states them), on ours seed by seed (by: how far the first "
            "leads, per seed, in the column's unit). " + verdict_lib.VERDICT_RULE
            + family_sentence(family)
            + " Here 'ahead' stands for reproduced and 'behind' for reversed.")
  return (f"{heads[0]}, seed by seed (by: how far the first leads, per seed, in the column's "
          'unit). ' + verdict_lib.VERDICT_RULE + family_sentence(family))


def dirty_line(dirty: tuple[str, ...]) -> str:
  """The footnote's line naming the runs that ended on a modified checkout ('' for none)."""
  if not dirty:
    return ''
  return (f'Ended on a dirty tree (tracked files modified; results.json provenance git.dirty at '
          f'the end, while the commit line counts each run\'s start and resumes): '
          f'{", ".join(dirty)}.')


def render(table: Table, results: dict[tuple[Run, int], dict], command: str,
           seeds: tuple[int, ...] = (0,), commits: str = '',
           family: verdict_lib.Family | None = None, dirty: tuple[str, ...] = ()) -> str:
  """The table with ours and the paper's value side by side per column (ours alone when the
  paper has no number anywhere in it); `commits` (`archive.commits_line`) goes under the
  footnote, then the runs that ended `dirty` (their names). The orderings are decided over
  `family`, their page's (`verdict.page_family`; None: the table alone)."""
  has_paper = any(v is not None for row in table.rows for v in row.paper)
  marks, notes = diverged_notes(table, results, seeds)
  lines = header_lines(table, has_paper)
  lines += [row_line(table, row, results, seeds, has_paper, marks.get(row.label, ()))
            for row in table.rows]
  if notes:
    lines += ['', 'Diverged runs:', ''] + [f'- {note}' for note in notes]
  spread = ('' if len(seeds) == 1 else
            f' Ours: mean ± standard deviation over config.seed = {", ".join(map(str, seeds))}.')
  errors = sorted({result['failed'] for result in results.values() if 'failed' in result})
  if table.orderings:
    verdicts = verdict_lib.judge_table(table, results, seeds)
    family = family or verdict_lib.page_family('', [(table, verdicts)])
    lines += ['', orderings_head(table, family), '']
    lines += ordering_lines(table, results, seeds, family)
  lines += ['', f'Made by `{command}`; {table.setting}' + spread, '']
  if commits:
    lines += [commits, '']
  if dirty:
    lines += [dirty_line(dirty), '']
  if errors:
    lines += ['Failed runs ended with: ' + '; '.join(f'`{e}`' for e in errors), '']
  return '\n'.join(lines)
