r"""The papers' tables: `python -m fedjax_face.reproduce --table=<paper><N>|<paper>|all`.

    python -m fedjax_face.reproduce --table=fedgc4 --seeds=0,1,2 --out=docs/fedgc_table4.md
    python -m fedjax_face.reproduce --table=fedfv --seeds=0,1,2 --out_dir=docs
    python -m fedjax_face.reproduce --table=all --dry_run      # the commands, and what exists

Tables are named after the paper and their number there (fedgc1-7: `proj/fedgc/reproduce.py`,
fedfv1-3: `proj/fedfv/reproduce.py`); a paper's name alone runs all of its tables. Runs whose
workdir under `--root` already holds results.json are read, not run again (`tools/tables/run.py`).
`--out_dir` writes `<paper>_table<N>.md` per table, and a paper's extras (FedFV's Fig. 5) beside.
Each table names the commits its runs came from; a table whose runs came from several commits is
refused unless `--allow_mixed_commits` (one line naming them, exit status 2, before any file is
written). A page's verdicts are decided over its paper's tables together (Benjamini-Hochberg,
`tools/tables/verdict.py`): the tables made now are judged on their runs, the paper's others on
what their pages in `--docs` record from `--archive`; so the runs of every chosen table are made
before any page is written, and a page made anew changes its siblings' verdicts
(`--table=<paper>` rewrites them all).

    python -m fedjax_face.reproduce --check     # every table in docs/ against results/, runs nothing

`--check` rebuilds each generated table from the run archive alone (`results/<paper>_tables`),
with the command its footnote records, and names every table that differs or whose runs the
archive lacks; a table's extra page (FedFV's Fig. 5) is rebuilt with its table's seeds. `--archive_to=results` copies a sweep's runs into the archive
(`tools/tables/archive.py:ARCHIVED`); `--spot_check --root=DIR` reruns one run per method of each
table at this checkout and compares its printed cells with the archived run's. `--park` shrinks a
stopped sweep's root to the files a commit carries, so that its queue goes on in another sitting.

    python -m fedjax_face.reproduce --numbers   # the figures of a page's prose results/ lacks

`--numbers` reports, per paper page, the figures its prose quotes that the archive does not hold
at their printed rounding (`quotable_forms`: a table's per-seed values, means, standard
deviations, differences of two rows, margins, the paper's numbers, each run's recorded
diagnostics; what the generated pages print) and those exempt (`tools/claims.py:figures`).
`python -m fedjax_face.tools.claims --check` fails on the same figures (and on quantifiers no
verdict line backs, and a seed's figure quoted as a mean); it looks `quotable_forms` up by name,
since tools/ sits below this module. A figure found may still be a chance match among the many
differences, so neither judges a figure quoted for another.

    python -m fedjax_face.reproduce --plan_seeds   # which tables need seeds 3-4, and their cost

`--plan_seeds` reads the archive as the pages record it (`archived_pages`; nothing is run) and
prints `tools/tables/seed_plan.py`'s plan: per page, each ordering of a table below five seeds
whose adjusted decision seeds 0-4 could change, what must run and its lane-hours, a selection
within `--plan_budget_hours` and its commands; then the same criterion tried on the 5-seed tables
read at seeds 0-2. What must run depends on the machine (`--plan_machine`, detected by default):
on the archived runs' kind a flagged table runs only its missing seeds, at its runs' commit; on
another kind it reruns whole, with the tables that share its runs.
"""

import contextlib
import importlib
import io
import itertools
import os
import re
import shlex
import statistics
import sys

from absl import app, flags

from fedjax_face.io import files
from fedjax_face.io import provenance
from fedjax_face.io import usage
from fedjax_face.tools import claims
from fedjax_face.tools.tables import archive
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import seed_plan
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict as verdict_lib

PAPERS = ('fedgc', 'fedfv', 'fedfr', 'pad', 'privacy', 'blocks',
          'personalization')   # fedjax_face/proj/<paper>/reproduce.py


def paper_module(paper: str):
  return importlib.import_module(f'fedjax_face.proj.{paper}.reproduce')


def tables_of(paper: str) -> dict:
  """A paper's tables: those in docs (`TABLES`), and those whose sweep has not finished
  (`PENDING`: `--table` runs them, `--check` does not look for them; docs/<paper>.md names each
  with the command that resumes it, and its table joins `TABLES` once its runs are archived)."""
  module = paper_module(paper)
  return {**module.TABLES, **getattr(module, 'PENDING', {})}


def table_names(pending: bool = False) -> list[str]:
  """The tables in docs, or with `pending` also those whose sweep has not finished."""
  return [f'{paper}{tid}' for paper in PAPERS for tid in table_ids(paper, pending)]


def table_ids(paper: str, pending: bool = False) -> list:
  """A paper's table numbers, then its named tables ('_fig3': `--table=fedfr_fig3`)."""
  tables = tables_of(paper) if pending else paper_module(paper).TABLES
  return sorted(tables,
                key=lambda tid: (isinstance(tid, str), 0 if isinstance(tid, str) else tid, str(tid)))


def out_name(paper: str, tid) -> str:
  """docs file of a table: fedgc_table4.md, fedfr_fig3.md."""
  return f'{paper}{tid}.md' if isinstance(tid, str) else f'{paper}_table{tid}.md'


def select(name: str) -> list[tuple[str, int]]:
  """(paper, table number) for `--table`: 'fedgc4', a paper ('fedfv'), or 'all'."""
  known = table_names(pending=True)
  if name == 'all' or name in PAPERS:   # the tables in docs: a pending one is run by its name
    return [(paper, tid) for paper in PAPERS if name in ('all', paper)
            for tid in table_ids(paper)]
  if name not in known:
    raise app.UsageError(f'--table={name}; expected one of {known}, a paper {list(PAPERS)} or '
                         'all.')
  paper = next(p for p in PAPERS if name.startswith(p))
  tid = name[len(paper):]
  return [(paper, int(tid) if tid.isdigit() else tid)]


def table_results(table: spec.Table, root: str, extra: tuple, seeds: tuple[int, ...],
                  dry_run: bool) -> dict:
  """results.json of every (run, seed) of `table` under `root`, running what is missing unless
  `dry_run` (`tools/tables/run.py:run_all`)."""
  return table_runs.run_all(table, root, extra, dry_run, seeds)


def dirty_runs(run_dirs: list[str]) -> tuple[str, ...]:
  """The names of the runs whose results.json records a modified checkout at their end (its
  provenance's git.dirty): the commit line counts a run's start and resumes, not its end."""
  out = []
  for run_dir in run_dirs:
    path = files.join(run_dir, 'results.json')
    result = files.read_json(path) if files.exists(path) else {}
    if ((result.get('provenance') or {}).get('git') or {}).get('dirty'):
      out.append(os.path.basename(run_dir.rstrip('/')))
  return tuple(out)


def table_text(table: spec.Table, root: str, extra: tuple, seeds: tuple[int, ...],
               command: str, allow_mixed: bool, dry_run: bool,
               family: verdict_lib.Family | None = None, results: dict | None = None) -> str:
  """A table's markdown from the runs under `root` (`results` when already read; else running
  what is missing unless `dry_run`), its orderings decided over `family` (its page's:
  `page_family`; None: the table alone); MixedCommitsError when its runs came from several
  commits and `allow_mixed` is False."""
  if results is None:
    results = table_results(table, root, extra, seeds, dry_run)
  finished = table_runs.finished_workdirs(table, root, extra, seeds)
  counts = archive.commit_counts(finished)
  return markdown.render(table, results, command, seeds, archive.commits_line(counts, allow_mixed),
                         family, dirty_runs(finished))


def recorded_results(paper: str, tid, docs_dir: str, archive_dir: str) -> tuple[dict, tuple]:
  """(results, seeds) of a table as its page in docs was made: the archive's runs
  (`<archive_dir>/<paper>_tables`) at the seeds and overrides its footnote's command records
  (nothing is run); None when docs has no page of it or the page no command."""
  path = os.path.join(docs_dir, out_name(paper, tid))
  recorded = recorded_command(files.read_text(path)) if os.path.exists(path) else None
  if recorded is None:
    return None
  seeds = spec.parse_seeds(recorded['seeds'])
  root = os.path.join(archive_dir, f'{paper}_tables')
  with contextlib.redirect_stdout(io.StringIO()):   # a dry run prints what is missing
    results = table_results(tables_of(paper)[tid], root, spec.parse_overrides(recorded['set']),
                            seeds, dry_run=True)
  return results, seeds


def page_family(paper: str, docs_dir: str, archive_dir: str,
                built: dict | None = None) -> verdict_lib.Family:
  """The family docs/<paper>.md's verdicts are decided over (`verdict.page_family`): every
  ordering of each of the paper's tables in docs, all together. A table in `built` (tid ->
  (results, seeds), the tables this command makes) is judged on those; the others on their
  pages' records (`recorded_results`). A table with no page that is not being built is not in
  it yet (the family sentence on each page counts the tables it holds)."""
  built = built or {}
  judged = []
  for tid in table_ids(paper):
    table = tables_of(paper)[tid]
    got = built.get(tid) if tid in built else (
        recorded_results(paper, tid, docs_dir, archive_dir) if table.orderings else None)
    if table.orderings and got is not None:
      results, seeds = got
      judged.append((table, verdict_lib.judge_table(table, results, seeds)))
  for tid, (results, seeds) in built.items():   # a pending table, made by its own name
    table = tables_of(paper)[tid]
    if tid not in table_ids(paper) and table.orderings:
      judged.append((table, verdict_lib.judge_table(table, results, seeds)))
  return verdict_lib.page_family(f'docs/{paper}.md', judged)


MADE_BY = re.compile(r'Made by `python -m fedjax_face\.reproduce ([^`]*)`')


def recorded_command(doc: str) -> dict | None:
  """The flags of the command a generated table names in its footnote (None without one):
  {'command': its text, 'seeds', 'set', 'allow_mixed_commits'}."""
  match = MADE_BY.search(doc)
  if match is None:
    return None
  out = {'command': 'python -m fedjax_face.reproduce ' + match.group(1), 'seeds': ['0'],
         'set': [], 'allow_mixed_commits': False}
  for arg in shlex.split(match.group(1)):
    key, _, value = arg.partition('=')
    if key == '--seeds':
      out['seeds'] = value.split(',')
    elif key == '--set':
      out['set'].append(value)
    elif key == '--allow_mixed_commits':
      out['allow_mixed_commits'] = value.lower() not in ('false', '0')
  return out


def check_table(paper: str, tid, docs_dir: str, archive_dir: str,
                family: verdict_lib.Family | None = None) -> str:
  """'ok', or why the table in docs does not rebuild from the archive alone
  (`<archive_dir>/<paper>_tables`; nothing is run), its orderings decided over `family` (its
  page's from the archive, `page_family`, when None)."""
  path = os.path.join(docs_dir, out_name(paper, tid))
  if not os.path.exists(path):
    return 'no generated table in docs'
  doc = files.read_text(path)
  recorded = recorded_command(doc)
  if recorded is None:
    return 'no "Made by" command in its footnote'
  table = tables_of(paper)[tid]
  root = os.path.join(archive_dir, f'{paper}_tables')
  extra = spec.parse_overrides(recorded['set'])
  seeds = spec.parse_seeds(recorded['seeds'])
  if family is None and table.orderings:
    family = page_family(paper, docs_dir, archive_dir)
  try:
    with contextlib.redirect_stdout(io.StringIO()) as printed:   # dry run: "missing: $ ..."
      rebuilt = table_text(table, root, extra, seeds, recorded['command'],
                           recorded['allow_mixed_commits'], dry_run=True, family=family)
  except archive.MixedCommitsError as e:
    rebuilt = e
  missing = printed.getvalue().count('missing: ')
  if missing:
    return f'{missing} run{"" if missing == 1 else "s"} not in {root}'
  if isinstance(rebuilt, archive.MixedCommitsError):
    return str(rebuilt)
  return compare(rebuilt, doc)


def compare(rebuilt: str, doc: str) -> str:
  """'ok', or the first line where the page in docs differs from the one rebuilt."""
  if rebuilt == doc:
    return 'ok'
  differing = [i + 1 for i, (a, b) in enumerate(zip(rebuilt.splitlines(), doc.splitlines()))
               if a != b]
  first = differing[0] if differing else min(len(rebuilt.splitlines()), len(doc.splitlines())) + 1
  return f'differs from the archive from line {first}'


def check_extra(paper: str, tid, docs_dir: str, archive_dir: str) -> str:
  """'ok', or why a table's extra page (the paper module's `EXTRAS`: FedFV's Fig. 5) in docs does
  not rebuild from the archive alone with the seeds and overrides its table's footnote records.
  Its picture is not compared: PNG bytes follow the matplotlib version."""
  file_name, make = paper_module(paper).EXTRAS[tid]
  path = os.path.join(docs_dir, file_name)
  if not os.path.exists(path):
    return 'no generated page in docs'
  table_path = os.path.join(docs_dir, out_name(paper, tid))
  recorded = (recorded_command(files.read_text(table_path)) if os.path.exists(table_path)
              else None)
  if recorded is None:
    return f'no "Made by" command in the footnote of {out_name(paper, tid)}'
  rebuilt = make(os.path.join(archive_dir, f'{paper}_tables'),
                 spec.parse_overrides(recorded['set']), spec.parse_seeds(recorded['seeds']), None)
  return compare(rebuilt, files.read_text(path))


def check(docs_dir: str, archive_dir: str) -> list[tuple[str, str]]:
  """(table name, `check_table`) for every table of every paper, then (page name,
  `check_extra`) for every extra page ('fedfv_fig5.md')."""
  families = {paper: page_family(paper, docs_dir, archive_dir) for paper in PAPERS}
  table_checks = [(f'{paper}{tid}',
                   check_table(paper, tid, docs_dir, archive_dir, families[paper]))
                  for paper in PAPERS for tid in table_ids(paper)]
  extras = [(file_name, check_extra(paper, tid, docs_dir, archive_dir))
            for paper in PAPERS
            for tid, (file_name, _) in getattr(paper_module(paper), 'EXTRAS', {}).items()]
  return table_checks + extras


DECIDED = ('reproduced', 'reversed')


def verdict_counts(paper: str, docs_dir: str, archive_dir: str) -> str:
  """One line on what the correction does to docs/<paper>.md's verdicts, from its tables'
  records (`recorded_results`): the tests of its family (two seeds or more; a comparison two
  tables print is one test), how many the test alone decides (reproduced or reversed, at
  `verdict.SIGNIFICANCE`) and how many survive Benjamini-Hochberg, and the orderings one seed
  leaves untested."""
  family = page_family(paper, docs_dir, archive_dir)
  tested, one_seed = [], 0   # (comparison, verdict) of each tested line
  for tid in table_ids(paper):
    table = tables_of(paper)[tid]
    got = recorded_results(paper, tid, docs_dir, archive_dir) if table.orderings else None
    if got is None:
      continue
    for index, v in enumerate(verdict_lib.table_verdicts(table, *got, family)):
      one_seed += v.verdict == verdict_lib.ONE_SEED
      if v.p is not None:
        tested.append((family.comparisons[(table.title, index)], v))
  tests = verdict_lib.one_per_comparison(tested)
  alone, after = [v.alone for v in tests], [v.verdict for v in tests]
  count = lambda verdicts: (f'{sum(v in DECIDED for v in verdicts)} ('
                            + ', '.join(f'{verdicts.count(v)} {v}' for v in DECIDED) + ')')
  return (f'docs/{paper}.md: {family.tests} tests; decided by the test alone {count(alone)}, '
          f'after the correction {count(after)}; {one_seed} not tested (one seed)')


def side_means(table: spec.Table, labels: tuple[str, ...], column: str, results: dict,
               seeds: tuple[int, ...]) -> list[float]:
  """Per seed whose rows all have a value, the mean of `labels`' values on `column` (an
  ordering's side: the PAD tables' average over the four protocols)."""
  rows = {row.label: row for row in table.rows}
  out = []
  for seed in seeds:
    values = [spec.column_value(results.get((rows[label].run, seed)), table, column)
              for label in labels]
    if None not in values:
      out.append(statistics.mean(values))
  return out


def table_quotables(table: spec.Table, results: dict,
                    seeds: tuple[int, ...]) -> tuple[list[float], list[float]]:
  """The values prose may quote from one table, as (over the seeds, of one seed).

  Over the seeds: per row and column the mean and standard deviation; per column the difference
  of two rows' means, and of any two of the paper's numbers (and the paper's numbers); per
  ordering its mean margin and its two sides' means; per run the mean over the seeds of each
  number its results.json records beside the columns (`run_records`). Of one seed: each seed's
  value, two rows' difference in a seed, an ordering's margin and its sides' means in a seed, and
  each seed's records. With one seed, a seed's values are the table's cells: they count as both.
  """
  over, one = [], []
  for index, column in enumerate(table.columns):
    per_row = {}
    for row in table.rows:
      if row.run is None:
        continue
      by_seed = {seed: spec.column_value(results.get((row.run, seed)), table, column)
                 for seed in seeds}
      per_row[row.label] = {seed: v for seed, v in by_seed.items() if v is not None}
      one += per_row[row.label].values()
      if len(per_row[row.label]) > 1:
        over += [statistics.mean(per_row[row.label].values()),
                 statistics.stdev(per_row[row.label].values())]
    for a, b in itertools.combinations(per_row.values(), 2):
      one += [a[seed] - b[seed] for seed in a if seed in b]
      if a and b:
        over.append(statistics.mean(a.values()) - statistics.mean(b.values()))
    papers = [row.paper[index] for row in table.rows
              if index < len(row.paper) and row.paper[index] is not None]
    over += papers + [a - b for a, b in itertools.combinations(papers, 2)]
  for ordering in table.orderings:
    margins = list(verdict_lib.ordering_margins(table, ordering, results, seeds).values())
    one += margins
    over += [statistics.mean(margins)] if margins else []
    for labels in (ordering.ahead, ordering.behind):
      means = side_means(table, labels, ordering.column, results, seeds)
      one += means
      over += [statistics.mean(means)] if means else []
  by_run = {}
  for (run, _), result in results.items():
    records = run_records(result)
    one += records.values()
    for key, value in records.items():
      by_run.setdefault((run, key), []).append(value)
  over += [statistics.mean(values) for values in by_run.values()]
  return (over + one, one) if len(seeds) == 1 else (over, one)


RECORDED_SECTIONS = ('diagnostics', 'last_logged_round', 'membership', 'privacy')


def run_records(result: dict | None) -> dict[str, float]:
  """The numbers of a run's results.json sections `RECORDED_SECTIONS` (class-embedding norms
  and cosines, the last logged round's training loss, the membership attacks' per-identity
  scores, the DP noise multiplier and ε) by their path, which the archive keeps whether or not a table prints them."""
  out, todo = {}, [(section, (result or {}).get(section) or {}) for section in RECORDED_SECTIONS]
  while todo:
    path, section = todo.pop()
    for key, value in section.items():
      if isinstance(value, dict):
        todo.append((f'{path}/{key}', value))
      elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[f'{path}/{key}'] = float(value)
  return out


GENERATED_LINK = re.compile(r'\]\(([a-z]+_[\w]+\.md)\)')   # [Table 1](privacy_table1.md)


def quotable_forms(paper: str, docs_dir: str, archive_dir: str) -> claims.Forms:
  """Every printed form (`claims.printed_forms`) of what docs/<paper>.md may quote, all of them
  and those over the seeds: each of its tables' `table_quotables`, from the archive as the
  table's page records it, and (over the seeds: a page prints means) every figure printed on the
  paper's generated pages and on another paper's generated page the page links to (a figure
  quoted across papers names its source by the link)."""
  over, one = [], []
  for tid in table_ids(paper):
    got = recorded_results(paper, tid, docs_dir, archive_dir)
    if got is not None:
      table_over, table_one = table_quotables(tables_of(paper)[tid], *got)
      over += table_over
      one += table_one
  page = os.path.join(docs_dir, f'{paper}.md')
  linked = GENERATED_LINK.findall(files.read_text(page)) if os.path.exists(page) else []
  names = dict.fromkeys(claims.table_files(docs_dir, paper)
                        + [n for n in linked if os.path.exists(os.path.join(docs_dir, n))])
  tokens = [token for name in names
            for token in claims.FIGURE.findall(files.read_text(os.path.join(docs_dir, name)))]
  over_seeds = claims.printed_forms(over, tokens)
  return claims.Forms(over_seeds | claims.printed_forms(one), over_seeds)


def numbers_report(docs_dir: str, archive_dir: str) -> list[str]:
  """Per paper page, how many figures its prose quotes, how many the archive does not hold
  (`quotable_forms`), and how many are exempt and where; then each one not held, 'page:line:
  figure'."""
  lines = []
  for paper in PAPERS:
    path = os.path.join(docs_dir, f'{paper}.md')
    if not os.path.exists(path):
      continue
    missing, checked, exempt = claims.unsourced_figures(
        files.read_text(path), quotable_forms(paper, docs_dir, archive_dir).all)
    where = ', '.join(f'{n} {kind}' for kind, n in sorted(exempt.items())) or 'none'
    lines.append(f'{path}: {checked} figures checked, {len(missing)} not found in the archive; '
                 f'exempt: {where}')
    lines += [f'  {path}:{line}: {figure}' for line, figure in missing]
  return lines


def archived_pages(docs_dir: str, archive_dir: str) -> list[list[seed_plan.Archived]]:
  """Per paper with a page, its tables as their pages were made (`recorded_results`), the one
  the page leads with marked (`seed_plan.headline_table`): what `--plan_seeds` reads."""
  pages = []
  for paper in PAPERS:
    recorded = {tid: recorded_results(paper, tid, docs_dir, archive_dir)
                for tid in table_ids(paper)}
    recorded = {tid: got for tid, got in recorded.items() if got is not None}
    page = os.path.join(docs_dir, f'{paper}.md')
    names = {f'{paper}{tid}': out_name(paper, tid) for tid in recorded}
    lead = seed_plan.headline_table(files.read_text(page) if os.path.exists(page) else '',
                                    list(names), names)
    pages.append([seed_plan.Archived(
        f'{paper}{tid}', f'docs/{paper}.md', tables_of(paper)[tid], results, seeds,
        os.path.join(archive_dir, f'{paper}_tables'),
        spec.parse_overrides(recorded_command(files.read_text(
            os.path.join(docs_dir, out_name(paper, tid))))['set']),
        f'{paper}{tid}' == lead)
        for tid, (results, seeds) in recorded.items()])
  return pages


def define_flags():
  """The flags, defined only when run as a program: other tools define an `out` flag too, and absl
  refuses a flag defined twice in one process (e.g. a test session importing both)."""
  flags.DEFINE_string('table', None, "'fedgc4', a paper ('fedfv': all of its tables), or 'all'.")
  flags.DEFINE_string('root', '/tmp/fedjax_face_tables', "Directory of the runs' workdirs.")
  flags.DEFINE_string('out', None, 'Markdown file for one table (default: print only).')
  flags.DEFINE_string('out_dir', None, 'Write <paper>_table<N>.md (and extras) here.')
  flags.DEFINE_multi_string('set', [], 'field=value override applied to every run.')
  flags.DEFINE_bool('dry_run', False, 'Print the commands and the table of what exists.')
  flags.DEFINE_list('seeds', ['0'], 'config.seed values; several: mean ± std over them.')
  flags.DEFINE_string('archive_to', None, "Copy each run's results, config, failure record and "
                      'the files tables read (tools/tables/archive.py:ARCHIVED) to '
                      '<archive_to>/<paper>_tables/<run>/, e.g. --archive_to=results.')
  flags.DEFINE_bool('spot_check', False, "Rerun one run per method of each --table's at seed 0 "
                    'under --root (this checkout) and compare its printed cells with the '
                    "archive's (--archive/<paper>_tables); exit 1 if any differ.")
  flags.DEFINE_bool('park', False, "Shrink --root's runs of each --table (at --seeds) to their "
                    'archived files, so that a commit carries the sweep to another sitting; '
                    'removes the runs that have not ended (stop the sweep first). Trains nothing.')
  flags.DEFINE_bool('check', False, 'Rebuild every table in --docs from the archive alone '
                    '(--archive/<paper>_tables; nothing is run) and fail on any difference.')
  flags.DEFINE_bool('numbers', False, "Report each figure a paper page's prose quotes that the "
                    'archive does not hold at its printed rounding (a report, exit 0; '
                    '`tools.claims --check` fails on them).')
  flags.DEFINE_string('docs', 'docs', 'The generated tables (--check; and the footnotes of the '
                      "tables of a page not made now, for the page's family of verdicts).")
  flags.DEFINE_string('archive', 'results', 'The run archive (--check; and the runs of the '
                      "tables of a page not made now, for the page's family of verdicts).")
  flags.DEFINE_bool('plan_seeds', False, 'Print which orderings of the tables archived at fewer '
                    'than five seeds could be decided otherwise at seeds 0-4, the runs and '
                    "lane-hours that rerun their tables, and a selection within "
                    '--plan_budget_hours (tools/tables/seed_plan.py; reads --docs and --archive, '
                    'runs nothing).')
  flags.DEFINE_float('plan_budget_hours', seed_plan.BUDGET_HOURS, '--plan_seeds: lane-hours.')
  flags.DEFINE_enum('plan_band', 'sd2', seed_plan.BANDS, "--plan_seeds: where a new seed's "
                    'margin may land: mean ± 2 sd of the archived seeds, or their range.')
  flags.DEFINE_enum('plan_family', 'free', seed_plan.FAMILIES, "--plan_seeds: the page family's "
                    "other tests free (BH's threshold anywhere from q/m to q), or held at their "
                    'archived p.')
  flags.DEFINE_enum('plan_machine', 'here', seed_plan.MACHINES, '--plan_seeds: whether this '
                    "machine is the archived runs' kind (the CPU model their provenance names): "
                    "'here' compares it with this machine's; 'same' runs only the seeds a "
                    "flagged table lacks, at its runs' commit; 'other' reruns it whole at seeds "
                    '0-4 with the tables sharing its runs.')
  flags.DEFINE_bool('allow_mixed_commits', False, 'Make a table whose runs came from several '
                    'commits (the table names them) instead of refusing it.')


def main(argv):
  del argv
  f = flags.FLAGS
  if f.numbers:
    print('\n'.join(numbers_report(f.docs, f.archive)))
    return
  if f.plan_seeds:
    commit = provenance.git_state().get('commit') or 'COMMIT'
    pages = archived_pages(f.docs, f.archive)
    # The sweep's root lives in this checkout (committed when parked), the worktree runs it.
    root = os.path.abspath(os.path.join(f.archive, 'seeds5'))
    print('\n'.join(seed_plan.plan(pages, f.plan_budget_hours, f.plan_band, f.plan_family,
                                    commit[:7], root, f.plan_machine)
                     + seed_plan.five_seed_check(pages, f.plan_band, f.plan_family)))
    return
  if f.check:
    verdicts = check(f.docs, f.archive)
    for name, status in verdicts:
      print(f'{name}: {status}')
    bad = [name for name, status in verdicts if status != 'ok']
    if not bad:
      for paper in PAPERS:
        print(verdict_counts(paper, f.docs, f.archive))
    if bad:
      sys.exit(f'{len(bad)} of {len(verdicts)} tables do not rebuild from {f.archive}: '
               + ', '.join(bad))
    return
  if f.table is None:
    raise app.UsageError(f'--table is required: one of {table_names()}, a paper or all.')
  try:
    extra = spec.parse_overrides(f.set)
    seeds = spec.parse_seeds(f.seeds)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if any(key == 'seed' for key, _ in extra):
    raise app.UsageError('--set=seed=... is not allowed; use --seeds.')
  chosen = select(f.table)
  if f.spot_check:
    differing = 0
    for paper, tid in chosen:
      archive_root = os.path.join(f.archive, f'{paper}_tables')
      for line in archive.spot_check(tables_of(paper)[tid], archive_root, f.root,
                                    f.dry_run):
        print(f'{paper}{tid}: {line}', flush=True)
        differing += line.startswith('differs')
    if differing:
      sys.exit(f'{differing} spot-checked runs differ from the archive')
    return
  if f.park:
    # A run may be shared with a table that keeps more of it (FedFV Table 3's cosines).
    also_kept = {}
    for paper, tid in select('all'):
      other = tables_of(paper)[tid]
      if other.archived_files:
        for run_dir in table_runs.table_workdirs(other, f.root, extra, seeds):
          also_kept[run_dir] = also_kept.get(run_dir, ()) + other.archived_files
    for paper, tid in chosen:
      for line in archive.park(tables_of(paper)[tid], f.root, extra, seeds, also_kept):
        print(f'{paper}{tid}: {line}', flush=True)
    return
  if f.out and len(chosen) > 1:
    raise app.UsageError(f'--out names one file but --table={f.table} is {len(chosen)} tables; '
                         'use --out_dir.')
  # The footnote names the command that makes the table; --dry_run only reads finished runs.
  command = 'python -m fedjax_face.reproduce ' + ' '.join(
      a for a in sys.argv[1:] if a not in ('--dry_run', '--dry_run=true', '--dry_run=True'))
  # A page's verdicts are decided over all of its paper's tables together (`page_family`), so
  # every chosen table's runs are made and read first, then the pages are written.
  built = {(paper, tid): table_results(tables_of(paper)[tid], f.root, extra, seeds, f.dry_run)
           for paper, tid in chosen}
  families = {paper: page_family(paper, f.docs, f.archive,
                                 {tid: (results, seeds) for (p, tid), results in built.items()
                                  if p == paper})
              for paper in dict.fromkeys(paper for paper, _ in chosen)}
  # Every table is rendered before the first file is written, so that a refusal (runs of mixed
  # commits) leaves no page half made.
  texts = {}
  for paper, tid in chosen:
    try:
      texts[(paper, tid)] = table_text(tables_of(paper)[tid], f.root, extra, seeds, command,
                                       f.allow_mixed_commits, f.dry_run, families[paper],
                                       built[(paper, tid)])
    except archive.MixedCommitsError as e:
      raise app.UsageError(f'--table={paper}{tid}: {e}') from None
  for (paper, tid), text in texts.items():
    module = paper_module(paper)
    table = tables_of(paper)[tid]
    print(text, flush=True)
    out = f.out or (os.path.join(f.out_dir, out_name(paper, tid)) if f.out_dir else None)
    if out:
      files.write_text_atomic(out, text)
    if f.archive_to:
      target = os.path.join(f.archive_to, f'{paper}_tables')
      kept = archive.archive_runs(table, f.root, extra, seeds, target)
      print(f'archived {len(kept)} runs of {paper}{tid} in {target}', flush=True)
    extras = getattr(module, 'EXTRAS', {})
    if tid in extras:
      file_name, make = extras[tid]
      text = make(f.root, extra, seeds, f.out_dir)
      print(text, flush=True)
      if f.out_dir:
        files.write_text_atomic(os.path.join(f.out_dir, file_name), text)


def refuse(message: str):
  """A usage error: `message` as one line on stderr and exit status 2 (not absl's help text)."""
  usage.print_refusal(message, sys.argv[0])
  sys.exit(usage.USAGE_EXIT)


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing; an error in it (an unknown flag, a value an enum does not hold) is
  `refuse`d with the last line of absl's message."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    refuse([line for line in str(error).splitlines() if line.strip()][-1])


def run(argv: list[str]) -> None:
  """`main`, with its usage errors (`app.UsageError`) `refuse`d."""
  try:
    main(argv)
  except app.UsageError as error:
    refuse(str(error))


if __name__ == '__main__':
  define_flags()
  app.run(run, flags_parser=parse_flags)
