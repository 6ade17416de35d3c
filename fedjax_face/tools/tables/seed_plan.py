"""Which orderings need seeds 3-4, and what rerunning their tables costs (issue 63 part 2).

`reproduce --plan_seeds` reads the archive (nothing is run) and, per page family, names each
(ordering, column) of a table archived at fewer than five seeds whose adjusted decision
(`verdict.VERDICT_RULE`) **could differ** at seeds 0-4, costs the tables that hold one from their
runs' recorded times, and picks those that fit a budget.

"Could differ", precisely (`reachable`): the two (or, for a 2-seed table, three) new seeds'
margins may each take any value in a band of the archived seeds' margins. The band is
`mean ± 2 sd` of the archived margins (`band='sd2'`, the default; sample sd, n - 1), or the
range they span (`band='range'`, narrower: three points never reach past 1.16 sd of their mean).
The decision at five seeds is `verdict.sign_verdict` on the five margins, decided by the test's
p against the page family's Benjamini-Hochberg threshold; an ordering is flagged when some
point of the band gives another decision than the archived one. So:
- a "reproduced" (or "reversed") verdict, which needs every seed on its side, is flagged as soon
  as a new seed can land on the other side or on zero (the band reaches past 0), or the new seeds
  can push its p above the threshold;
- a "within noise" verdict is flagged when its archived seeds all lie on one side, the band lets
  the new seeds stay there, and they can bring p under the threshold;
- "not tested (one seed)" is always flagged: one seed has no spread to bound the others by, and
  five seeds decide it one way or the other;
- a seed the archive lacks (a failed or diverged run) is taken to fail again (the same config),
  so it still counts against the ordering and its "within noise" cannot change.

The family. BH rejects a test exactly when its p is at most a threshold set by the other tests'
p-values (`bh_threshold`), and rerunning tables moves those too. `family='free'` (the default)
lets every other test of the page move: the threshold can then lie anywhere from q/m (every
other p large: Bonferroni over the m tests) to q (every other p tiny: no correction), and an
ordering is flagged when its decision differs anywhere in that range. `family='held'` holds the
others at their archived p, so the threshold is today's; it flags fewer, and on the four 5-seed
tables read at seeds 0-2 it misses one of the 22 decisions that five seeds changed (FedFR Table 1,
FedAvg above the pre-trained model on TAR@FAR=1e-4: its own p fell from 0.086 to 0.0095, but the
family around it moved too). A table archived at one seed is outside today's family; joining it
at five seeds adds tests (m grows), which 'free' covers only as far as q/m with today's m.

Whether a point of the band is reached is computed on candidate points (`candidate_points`):
each new margin at the band's low end, its high end, or one shared value on a grid of
`GRID` points over the band (plus the archived mean and zero). For two new margins these are the
band's diagonal and its four edges, which hold the extremes of t: for a fixed sum (a fixed mean)
the spread is least with equal values (the diagonal: the largest |t|) and greatest at the edges
(the smallest |t|), and t is continuous, so every value in between is reached too.

Costs (`run_costs`): a run's lane-seconds are its archived results.json `timing.total_s` (wall
time of one process, the sweep's two lanes side by side on two cores, as `launch/share_runs.py
--hours` reads them), scaled up where it was resumed (`resumed_from_round`: total_s covers only its
last sitting); a seed the archive lacks (seeds 3-4 of a 3-seed table, a failed run) stands in
with the mean of that run's archived seeds. The hours are a guide, not a promise.

What runs depends on the machine (`same_machine`, `--plan_machine`). Within one machine kind the
same commit gives the same digits, and XLA's code on another kind gives other last bits
(BUILD_NOTES, "The run archive"). The kind is the CPU model `provenance.cpu` records in each
run's provenance: this machine's is read by the same function, a table's from its archived runs
(`origin`: config.json's record of each sitting, as `archive.run_commits` reads commits).
- The same kind as every archived run of a flagged table: only the seeds its page lacks run
  (`rerun_seeds`: seeds 3-4 of a 3-seed table, 1-4 of a one-seed one), at a worktree of its
  runs' commit (`commit_group`: the commit of most of them, the table saying so when they mix),
  into a root per paper begun as a copy of the paper's archive folder: its runs at those seeds
  that another table archived are read, not trained, and a run the archive holds trains again
  only as the start of a new one (`runs_to_train`: no checkpoints are archived). New runs
  replace no archived one, so each flagged table is a unit of its own; a run two of them need
  counts once.
- Another kind (the archive's runs an Intel Xeon's, say, and this an AMD EPYC): a flagged table
  reruns whole at every seed of `TARGET_SEEDS`. And since the archive holds one workdir per run
  and paper, which every table that reads the run shares, a rerun run would put a second machine
  into each of those tables: the tables that share runs rerun together (`units`), the flagged
  ones at seeds 0-4 and the others at the seeds their pages have, at this checkout's commit.
  A table of the same kind that shares a run with such a table reruns with it.
The budget is spent on units (`greedy`), each run counted once.
"""

import dataclasses
import os
import statistics

import numpy as np

from fedjax_face.io import checkpoint
from fedjax_face.io import files
from fedjax_face.io import provenance
from fedjax_face.tools.tables import archive
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict as verdict_lib

TARGET_SEEDS = (0, 1, 2, 3, 4)
BANDS = ('sd2', 'range')
FAMILIES = ('held', 'free')
MACHINES = ('here', 'same', 'other')   # detect from the runs' provenance, or force either case
GRID = 101            # grid points of the shared free value over the band
BUDGET_HOURS = 12.0   # issue 63 part 2: about 12 hours of one process
REPRODUCED, REVERSED, NOISE = 'reproduced', 'reversed', 'within noise'


@dataclasses.dataclass(frozen=True)
class Archived:
  """One table as its page was made: its runs' results at the seeds its footnote records."""
  name: str                    # 'fedgc5'
  page: str                    # 'docs/fedgc.md'
  table: spec.Table
  results: dict                # (run, seed) -> results.json, as `table_runs.run_all` reads them
  seeds: tuple[int, ...]
  root: str                    # the archive folder of its runs, results/<paper>_tables
  extra: tuple = ()            # the --set overrides its footnote records
  headline: bool = False       # the table its page leads with (`headline_table`)


@dataclasses.dataclass(frozen=True)
class Assessment:
  """One (ordering, column) of an archived table, and the decisions five seeds can give."""
  table: str
  index: int                   # in `table.orderings`
  claim: str
  column: str
  current: str                 # the page's decision at the archived seeds
  reachable: tuple[str, ...]   # the decisions some point of the band gives at seeds 0-4
  central: str                 # the decision with every new seed at the archived mean (at the
                               # lower BH threshold: q / m under family 'free')

  @property
  def flagged(self) -> bool:
    return self.current == verdict_lib.ONE_SEED or any(d != self.current for d in self.reachable)


def band(margins: list[float], kind: str = 'sd2') -> tuple[float, float]:
  """Where a new seed's margin may land: the archived mean ± 2 sd ('sd2') or their range
  ('range'). ValueError for another kind or under two margins."""
  if kind not in BANDS:
    raise ValueError(f'band={kind!r}; expected one of {list(BANDS)}.')
  if len(margins) < 2:
    raise ValueError(f'{len(margins)} margin(s); expected at least two to make a band.')
  if kind == 'range':
    return min(margins), max(margins)
  mean, sd = statistics.mean(margins), statistics.stdev(margins)
  return mean - 2 * sd, mean + 2 * sd


def candidate_points(low: float, high: float, new: int, also: tuple[float, ...] = ()
                     ) -> np.ndarray:
  """[points, new]: each new margin at `low`, at `high`, or at one value shared by the others,
  taken from a grid of GRID points over [low, high] and `also` (those inside it)."""
  grid = np.unique(np.concatenate([np.linspace(low, high, GRID),
                                   [v for v in also if low <= v <= high]]))
  rows = []
  for pattern in np.ndindex(*(3,) * new):     # 0: low, 1: high, 2: the shared value
    for value in grid:
      rows.append([low if k == 0 else high if k == 1 else value for k in pattern])
  return np.unique(np.array(rows, dtype=np.float64), axis=0)


def t_and_p(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Per row of `values` [points, n], `verdict.judge`'s paired t and one-sided p (vectorized:
  an infinite t where every margin is the same nonzero value, whose p is the exact sign-flip
  test's, `verdict.sign_flip_p`; t = 0 where all are 0)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  n = values.shape[1]
  mean = values.mean(axis=1)
  sd = values.std(axis=1, ddof=1)
  with np.errstate(divide='ignore', invalid='ignore'):
    t = np.where(sd > 0, mean / (sd / np.sqrt(n)), np.sign(mean) * np.inf)
  t = np.where((sd == 0) & (mean == 0), 0.0, t)
  p = np.where(np.isinf(t), verdict_lib.sign_flip_p(n), stats.t.sf(np.abs(t), n - 1))
  return t, p


def decisions(values: np.ndarray, p: np.ndarray, missing: bool, threshold: float) -> set[str]:
  """The verdicts (`verdict.sign_verdict`) of the rows of `values` [points, n] with p-values
  `p`, each decided by p ≤ `threshold`."""
  significant = p <= threshold
  if missing:
    return {NOISE}
  positive = (values > 0).all(axis=1) & significant
  negative = (values < 0).all(axis=1) & significant
  out = set()
  out |= {REPRODUCED} if positive.any() else set()
  out |= {REVERSED} if negative.any() else set()
  out |= {NOISE} if (~positive & ~negative).any() else set()
  return out


def bh_threshold(others: list[float], q: float = verdict_lib.FDR) -> float:
  """The largest p a test may have and be rejected by Benjamini-Hochberg at `q` (1995, the
  step-up rule of `verdict.bh_adjusted`), the other tests' p-values `others` held: k q / m for
  the largest k at which at least k - 1 of the others are at most k q / m (m = len(others) + 1;
  k = 1 always qualifies)."""
  m = len(others) + 1
  return max(k * q / m for k in range(1, m + 1)
             if sum(p <= k * q / m for p in others) >= k - 1)


def reachable(margins: dict[int, float], seeds: tuple[int, ...], thresholds: tuple[float, float],
              band_kind: str = 'sd2') -> tuple[tuple[str, ...], str]:
  """(the decisions seeds `TARGET_SEEDS` can give, the one with each new seed at the archived
  mean, decided at the lower threshold) for an ordering with archived `margins` at `seeds`,
  decided at any BH threshold in `thresholds` (low, high). Seeds asked for without a margin stay
  without one; the new seeds are those of TARGET_SEEDS not in `seeds`."""
  observed = [margins[s] for s in seeds if s in margins]
  missing = any(s not in margins for s in seeds)
  new = len([s for s in TARGET_SEEDS if s not in seeds])
  mean = statistics.mean(observed)
  low, high = band(observed, band_kind)
  points = candidate_points(low, high, new, (mean, 0.0))
  values = np.concatenate([np.tile(observed, (len(points), 1)), points], axis=1)
  _, p = t_and_p(values)
  found = set()
  for threshold in thresholds:   # a decision is monotone in the threshold: its ends suffice
    found |= decisions(values, p, missing, threshold)
  central_values = np.array([observed + [mean] * new])
  central = decisions(central_values, t_and_p(central_values)[1], missing, thresholds[0])
  order = (REPRODUCED, NOISE, REVERSED)
  return tuple(d for d in order if d in found), central.pop()


def assess(archived: list[Archived], band_kind: str = 'sd2',
           family: str = 'free') -> list[Assessment]:
  """Every (ordering, column) of `archived` (one page's tables, all of them: they are its
  family) at fewer than five seeds, with the decisions five seeds can give (`reachable`)."""
  if family not in FAMILIES:
    raise ValueError(f'family={family!r}; expected one of {list(FAMILIES)}.')
  judged = [(item, verdict_lib.judge_table(item.table, item.results, item.seeds))
            for item in archived if item.table.orderings]
  fam = verdict_lib.page_family(archived[0].page if archived else '',
                                [(item.table, verdicts) for item, verdicts in judged])
  tests = {fam.comparisons[key]: p for key, p in
           (((item.table.title, i), v.p) for item, verdicts in judged
            for i, v in enumerate(verdicts)) if p is not None}   # one p per comparison
  out = []
  for item, verdicts in judged:
    if len(item.seeds) >= len(TARGET_SEEDS):
      continue
    for index, (ordering, v) in enumerate(zip(item.table.orderings, verdicts)):
      key = (item.table.title, index)
      current = verdict_lib.adjust(v, fam.adjusted.get(key)).verdict
      if v.p is None:   # one seed (or none): nothing bounds the new seeds
        out.append(Assessment(item.name, index, ordering.claim, ordering.column, current,
                              (), current))
        continue
      others = [p for k, p in tests.items() if k != fam.comparisons[key]]
      m = len(others) + 1
      thresholds = ((bh_threshold(others),) * 2 if family == 'held'
                    else (verdict_lib.FDR / m, verdict_lib.FDR))
      found, central = reachable(v.margins, item.seeds, thresholds, band_kind)
      out.append(Assessment(item.name, index, ordering.claim, ordering.column, current,
                            found, central))
  return out


def run_seconds(result: dict) -> float | None:
  """A finished run's lane-seconds from its results.json `timing` (None without one): total_s,
  with the training of the rounds before a resume added back at its last sitting's pace."""
  timing = result.get('timing') or {}
  if 'total_s' not in timing:
    return None
  resumed, rounds = timing.get('resumed_from_round') or 0, result.get('rounds') or 0
  if 0 < resumed < rounds:
    return timing['total_s'] + timing['train_s'] * resumed / (rounds - resumed)
  return timing['total_s']


def table_run_list(table: spec.Table) -> list[spec.Run]:
  """Every run a table is made of (`table_runs.table_workdirs`): its rows' runs, a Combined
  row's, and the runs they start from, each once, in the order met."""
  out = []
  for row in table.rows:
    todo = list(() if row.run is None else row.run.runs if isinstance(row.run, spec.Combined)
                else (row.run,))
    while todo:
      run = todo.pop()
      if run not in out:
        out.append(run)
      if run.init_from is not None:
        todo.append(run.init_from)
  return out


def table_runs_at(table: spec.Table, root: str, extra: tuple,
                  seeds: tuple[int, ...]) -> dict[str, list[str]]:
  """Per workdir name a table is made of at `seeds` (`table_run_list`), the workdirs of the
  same run at every seed of `seeds` (whose times stand in for a seed the archive lacks)."""
  out = {}
  for run in table_run_list(table):
    same = [spec.workdir(root, run, extra, s) for s in seeds]
    for seed_dir in same:
      out[os.path.basename(seed_dir)] = same
  return out


def archived_seconds(run_dir: str) -> float | None:
  path = files.join(run_dir, 'results.json')
  return run_seconds(files.read_json(path)) if files.exists(path) else None


def run_costs(item: Archived, seeds: tuple[int, ...]) -> dict[str, tuple[float, bool]]:
  """Per run (workdir name) of `item`'s table at `seeds`: (lane-seconds, whether the archive
  holds its own time; else the mean of the same run's archived seeds, else of the table's
  runs)."""
  runs = table_runs_at(item.table, item.root, item.extra, seeds)
  own = {name: archived_seconds(files.join(item.root, name)) for name in runs}
  known = [s for s in own.values() if s is not None]
  table_mean = statistics.mean(known) if known else 0.0
  out = {}
  for name, same in runs.items():
    siblings = [own[os.path.basename(d)] for d in same if own[os.path.basename(d)] is not None]
    out[name] = ((own[name], True) if own[name] is not None else
                 (statistics.mean(siblings) if siblings else table_mean, False))
  return out


def rerun_seeds(item: Archived, flagged: bool, same: bool = False) -> tuple[int, ...]:
  """The seeds a table runs at. On another machine kind than its runs' (`same` False): all of
  TARGET_SEEDS when one of its orderings is flagged, else the seeds its page has now (it shares
  runs with one that reruns). On theirs (`same`): the seeds of TARGET_SEEDS its page lacks, as
  the archived ones are what a rerun would give."""
  if same and flagged:
    return tuple(s for s in TARGET_SEEDS if s not in item.seeds)
  return TARGET_SEEDS if flagged else item.seeds


def machine_kind(prov: dict | None) -> str:
  """The machine kind a provenance record (`provenance.collect`) names: the CPU model
  `provenance.cpu` reads ('unrecorded' where the record predates it)."""
  return (((prov or {}).get('platform') or {}).get('cpu') or {}).get('model') or 'unrecorded'


def run_kinds(run_dir: str) -> list[str]:
  """The machine kinds (`machine_kind`) a finished run was trained on, each once: its
  config.json's record of its start and resumes when it has one (results.json's provenance is
  that of the last of them), else its results.json's; as `archive.run_commits` reads commits."""
  config_path = files.join(run_dir, 'config.json')
  record = (files.read_json(config_path) if files.exists(config_path) else {}).get(
      checkpoint.PROVENANCE_KEY)
  sittings = ([record.get('start')] + list(record.get('resumed', [])) if record else
              [files.read_json(files.join(run_dir, 'results.json')).get(
                  checkpoint.PROVENANCE_KEY)])
  return list(dict.fromkeys(machine_kind(prov) for prov in sittings))


@dataclasses.dataclass(frozen=True)
class Origin:
  """Where a table's archived runs came from: runs per machine kind and per commit label."""
  kinds: dict[str, int]
  commits: dict[str, int]      # `archive.commit_counts`


def origin(item: Archived) -> Origin:
  """The machine kinds and commits of `item`'s runs at TARGET_SEEDS that the archive holds
  finished (its seeds', and those of its missing seeds that another table archived)."""
  dirs = [files.join(item.root, name)
          for name in table_runs_at(item.table, item.root, item.extra, TARGET_SEEDS)
          if files.exists(files.join(item.root, name, 'results.json'))]
  kinds = {}
  for run_dir in dirs:
    for kind in run_kinds(run_dir):
      kinds[kind] = kinds.get(kind, 0) + 1
  return Origin(kinds, archive.commit_counts(dirs))


def same_machine(kinds: dict[str, int], here: str | None, machine: str = 'here') -> bool:
  """Whether a table whose archived runs are of `kinds` (runs per machine kind) is on this
  machine's kind `here`: every run made on it, when `machine` is 'here' (detect); 'same' or
  'other' force the answer. On the same kind the same commit gives the archive's digits, so the
  runs a table lacks can join its archived ones."""
  if machine not in MACHINES:
    raise ValueError(f'machine={machine!r}; expected one of {list(MACHINES)}.')
  if machine != 'here':
    return machine == 'same'
  return here is not None and list(kinds) == [here]


def runs_to_train(item: Archived, seeds: tuple[int, ...]) -> list[str]:
  """The workdir names of `item`'s runs at `seeds` that must train to join its archived ones:
  each the archive has not ended (neither results.json nor a failure's record, which the same
  run would give again), and the run each starts from even where the archive holds it (it keeps
  no checkpoints to start from), and so on; a start that failed leaves its run unstarted. Starts
  first."""
  def ended(run, seed):
    run_dir = spec.workdir(item.root, run, item.extra, seed)
    return next((name for name in ('results.json', table_runs.FAILED)
                 if files.exists(files.join(run_dir, name))), None)

  out = []

  def train(run, seed):
    name = os.path.basename(spec.workdir(item.root, run, item.extra, seed))
    if name in out:
      return
    if run.init_from is not None:
      if ended(run.init_from, seed) == table_runs.FAILED:
        return
      train(run.init_from, seed)
    out.append(name)

  for run in table_run_list(item.table):
    for seed in seeds:
      if ended(run, seed) is None:
        train(run, seed)
  return out


def commit_group(commits: dict[str, int]) -> tuple[str, str]:
  """(the commit a table's missing runs train at: that of most of its archived runs, short;
  what to say of it: '' for one commit, else each with its number of runs)."""
  short = lambda label: label[:7] if len(label) == 12 else label   # `commit_label`'s sha
  ranked = sorted(commits.items(), key=lambda item: (-item[1], item[0]))
  if not ranked:
    return 'unrecorded', 'no archived run to take a commit from'
  note = ('' if len(ranked) == 1 else 'its runs mix commits ' + ', '.join(
      f'{short(label)} ({n} run{"" if n == 1 else "s"})' for label, n in ranked))
  return short(ranked[0][0]), note


def units(items: list[Archived], runs_of: dict[str, set[str]]) -> list[list[str]]:
  """The tables that rerun together: the archive keeps one folder per paper with one workdir per
  run, so a rerun run replaces it for every table that reads it, and a table may not read runs
  of two machines (nor commits: `archive.commits_line`). So tables that share a run (`runs_of`:
  name -> workdir names at its rerun seeds) rerun together, and so on through their sharers:
  the connected parts of the sharing, each in the order of `items`."""
  names = [item.name for item in items]
  parent = {name: name for name in names}

  def root(name):
    while parent[name] != name:
      name = parent[name]
    return name

  for i, a in enumerate(names):
    for b in names[i + 1:]:
      if runs_of[a] & runs_of[b]:
        parent[root(b)] = root(a)
  out = {}
  for name in names:
    out.setdefault(root(name), []).append(name)
  return list(out.values())


def greedy(candidates: list[tuple[str, dict[str, float]]], budget_s: float
           ) -> tuple[list[str], float]:
  """The candidates taken in the order given while they fit `budget_s`: each costs its runs not
  already taken (shared runs once); one that does not fit is skipped and the next tried.
  Returns (names taken, seconds used)."""
  taken, runs, used = [], set(), 0.0
  for name, cost in candidates:
    extra = sum(s for run, s in cost.items() if run not in runs)
    if used + extra <= budget_s:
      taken.append(name)
      runs |= set(cost)
      used += extra
  return taken, used


def priority(items: list[tuple[str, bool, int, float]]) -> list[tuple[str, bool, int, float]]:
  """The order units are taken in: those holding a page's headline table first, then by flagged
  orderings per lane-hour, most first; ties by name. Items: (name, headline, flagged, seconds)."""
  return sorted(items, key=lambda it: (not it[1], -it[2] / max(it[3] / 3600, 1e-9), it[0]))


def headline_table(page_text: str, names: list[str], files_of: dict[str, str]) -> str | None:
  """The table a page leads with: the first of `names` whose generated file (`files_of`:
  name -> 'fedgc_table8.md') the page links to, by the link's position in the page."""
  found = [(page_text.find(f']({files_of[name]})'), name) for name in names]
  found = [(at, name) for at, name in found if at >= 0]
  return min(found)[1] if found else None


def flagged_line(a: Assessment, own: bool) -> str:
  word = lambda d: verdict_lib.OWN_WORDS.get(d, d) if own else d
  if a.current == verdict_lib.ONE_SEED:
    return f'  [{a.index}] {a.claim} ({a.column}): {a.current}; five seeds decide it'
  other = [word(d) for d in a.reachable if d != a.current]
  central = '' if a.central == a.current else f'; with the new seeds at the mean: {word(a.central)}'
  return (f'  [{a.index}] {a.claim} ({a.column}): {word(a.current)} -> could be '
          f'{" or ".join(other)}{central}')


def hours(seconds: float) -> str:
  return f'{seconds / 3600:.1f} lane-hours'


def machine_header(cases: dict[str, bool], kinds: dict[str, dict[str, int]], here: str | None,
                   machine: str) -> str:
  """What the plan does with a flagged table, and why: `cases` says per flagged table whether it
  is on this machine's kind `here` (`same_machine`), `kinds` its archived runs' kinds."""
  tables = {}
  for by_kind in kinds.values():
    for kind in by_kind:
      tables[kind] = tables.get(kind, 0) + 1
  named = ', '.join(f'{kind} ({n} of {len(kinds)})' for kind, n in
                    sorted(tables.items(), key=lambda item: (-item[1], item[0])))
  kinds_named = f"here {here or 'unrecorded'}, the flagged tables' archived runs {named or 'none'}"
  forced = '' if machine == 'here' else f'--plan_machine={machine}'
  same = sum(cases.values())
  whole = f'reruns whole at seeds {",".join(map(str, TARGET_SEEDS))}'
  missing = "runs only the seeds its archive lacks, on its own, at a worktree of its runs' commit"
  if same and same < len(cases):
    return (f"a flagged table on this machine's kind {missing}, one of another {whole} with the "
            f'tables sharing its runs ({same} and {len(cases) - same} of the flagged tables; '
            f'{forced or "the kinds differ"}: {kinds_named})')
  if same or (not cases and machine == 'same'):
    return f'a flagged table {missing} ({forced or "the same machine kind"}: {kinds_named})'
  return f'a flagged table {whole} ({forced or "the machine changed"}: {kinds_named})'


def plan(pages: list[list[Archived]], budget_hours: float = BUDGET_HOURS, band_kind: str = 'sd2',
         family: str = 'free', commit: str = 'COMMIT', sweep_root: str = 'results/seeds5',
         machine: str = 'here') -> list[str]:
  """The plan's lines: per page family (in the order given; its headline table first, then in
  the order given) each table below five seeds with its flagged orderings, the runs it needs
  and their lane-hours; the units that run (`units`) and their cost; the greedy selection of
  units within `budget_hours` (`priority`, `greedy`); the commands that run it.

  A flagged table whose archived runs are this machine's kind (`same_machine`: `machine` 'here'
  detects it by `provenance.cpu`, 'same' and 'other' force it) runs the seeds its archive lacks
  (`runs_to_train`) on its own, at a worktree of its runs' commit (`commit_group`); one of
  another kind reruns whole at `commit` with the tables sharing its runs."""
  if machine not in MACHINES:
    raise ValueError(f'machine={machine!r}; expected one of {list(MACHINES)}.')
  here = provenance.cpu().get('model')
  lines, cases, kinds = [], {}, {}
  all_flagged, unit_rows, unit_costs, unit_tables, unit_commit = 0, [], {}, {}, {}
  for archived in pages:
    if not archived:
      continue
    assessed = assess(archived, band_kind, family)
    flagged = {item.name: [a for a in assessed if a.table == item.name and a.flagged]
               for item in archived}
    all_flagged += sum(map(len, flagged.values()))
    lines.append(f'== {archived[0].page}: {sum(map(len, flagged.values()))} of {len(assessed)} '
                 'orderings below five seeds flagged')
    origins = {item.name: origin(item) for item in archived if flagged[item.name]}
    same = {name: same_machine(o.kinds, here, machine) for name, o in origins.items()}
    cases.update(same)
    kinds.update({name: o.kinds for name, o in origins.items()})
    trained = {}   # a flagged table on this machine's kind: its runs to train, their seconds
    for item in sorted(archived, key=lambda it: not it.headline):
      if len(item.seeds) >= len(TARGET_SEEDS) or not item.table.orderings:
        continue
      head = (f'{item.name} (seeds {",".join(map(str, item.seeds))}'
              f'{", headline" if item.headline else ""})')
      if not flagged[item.name]:
        lines.append(f'{head}: none of {len(item.table.orderings)} flagged')
        continue
      counts = f'{len(flagged[item.name])} of {len(item.table.orderings)} flagged'
      if same[item.name]:
        detail, trained[item.name] = missing_seeds_row(item, origins[item.name])
        lines.append(f'{head}: {counts}; {detail}')
      else:
        cost = run_costs(item, TARGET_SEEDS)
        own = sum(known for _, known in cost.values())
        lines.append(f'{head}: {counts}; '
                     f'{len(cost)} runs at seeds 0-4 ({own} timed in the archive, '
                     f'{len(cost) - own} stand-ins): '
                     f'{hours(sum(s for s, _ in cost.values()))}')
      lines += [flagged_line(a, item.table.own_orderings) for a in flagged[item.name]]
    seeds_of = {item.name: rerun_seeds(item, bool(flagged[item.name])) for item in archived}
    costs = {item.name: {n: s for n, (s, _) in run_costs(item, seeds_of[item.name]).items()}
             for item in archived}
    by_name = {item.name: item for item in archived}
    for unit in units(archived, {name: set(c) for name, c in costs.items()}):
      if not any(flagged[name] for name in unit):
        continue
      # A run rerun on another kind replaces the archived one for every table that reads it;
      # runs added on the same kind replace none, so each table goes on its own.
      whole = any(flagged[name] and not same[name] for name in unit)
      for part in ([unit] if whole else [[name] for name in unit if flagged[name]]):
        label = '+'.join(part)
        runs = ({run: s for name in part for run, s in costs[name].items()} if whole
                else trained[part[0]])
        unit_rows.append((label, any(by_name[name].headline for name in part),
                          sum(len(flagged[name]) for name in part), sum(runs.values())))
        unit_costs[label] = runs
        unit_tables[label] = [(name, seeds_of[name] if whole else
                               rerun_seeds(by_name[name], True, True), by_name[name].root)
                              for name in part]
        unit_commit[label] = None if whole else commit_group(origins[part[0]].commits)
  lines.insert(0, f'Seed plan: band {band_kind}, family {family}; '
                  f'{machine_header(cases, kinds, here, machine)}; lane-hours from the '
                  "archived runs' timing.total_s.")
  on_own = [label for label in unit_commit if unit_commit[label] is not None]
  rerun_whole = len(on_own) < len(unit_commit) or not unit_commit
  total = {run: s for runs in unit_costs.values() for run, s in runs.items()}
  lines.append('Units that rerun together (tables sharing a run; flagged tables at seeds 0-4, '
               'the others at their seeds now):' if not on_own else
               'Units (the same machine kind: each flagged table on its own, at the seeds its '
               'archive lacks; a run two tables need counts once):' if not rerun_whole else
               'Units (a flagged table of another machine kind reruns with the tables sharing '
               'its runs, flagged ones at seeds 0-4, the others at their seeds now; the rest '
               'each on its own, at the seeds its archive lacks):')
  for label, headline, n, seconds in unit_rows:
    lines.append(f'  {label}: {n} flagged, {len(unit_costs[label])} runs, {hours(seconds)}'
                 f'{" (holds a headline table)" if headline else ""}')
  lines.append(f'All: {all_flagged} orderings flagged, {len(unit_rows)} units, {len(total)} runs, '
               f'{hours(sum(total.values()))}, against a budget of {budget_hours:g} h.')
  ordered = priority(unit_rows)
  taken, used = greedy([(label, unit_costs[label]) for label, _, _, _ in ordered],
                       budget_hours * 3600)
  left = [label for label, _, _, _ in ordered if label not in taken]
  lines.append(f'Greedy within {budget_hours:g} h (units holding a headline table first, then '
               f'flagged orderings per lane-hour): {", ".join(taken) or "none"} '
               f'({hours(used)}); left out: {", ".join(left) or "none"}.')
  if rerun_whole:
    lines += rerun_commands([t for label in taken if unit_commit[label] is None
                             for t in unit_tables[label]], commit, sweep_root)
  if on_own:
    lines += missing_seed_commands([(*unit_commit[label], *unit_tables[label][0],
                                     unit_costs[label])
                                    for label in taken if unit_commit[label] is not None],
                                   sweep_root)
  return lines


def missing_seeds_row(item: Archived, origin_: Origin) -> tuple[str, dict[str, float]]:
  """What a flagged table on its runs' machine kind needs (`runs_to_train` at the seeds it
  lacks, at `commit_group`'s commit), said, and the runs' lane-seconds keyed by `paper_run`."""
  seeds = rerun_seeds(item, True, True)
  cost = run_costs(item, TARGET_SEEDS)
  train = runs_to_train(item, seeds)
  at_seeds = table_runs_at(item.table, item.root, item.extra, seeds)
  there = [name for name in at_seeds if any(files.exists(files.join(item.root, name, f))
                                            for f in ('results.json', table_runs.FAILED))]
  at, note = commit_group(origin_.commits)
  # Keyed by the paper's folder too: a run of another paper may have the same name (the
  # personalization runs' FedFR pre-training) at another commit.
  seconds = {paper_run(item, name): cost[name][0] for name in train}
  return (f'{len(train)} runs to train at seeds {",".join(map(str, seeds))} ({len(there)} of its '
          f'{len(at_seeds)} there archived already, {sum(n in there for n in train)} of them '
          f'starts that train again), at {at}{f" ({note})" if note else ""}: '
          f'{hours(sum(seconds.values()))}'), seconds


def table_commands(chosen: list[tuple[str, tuple[int, ...], str]]) -> list[str]:
  """Each chosen table run at its seeds into its root ((table, seeds, root)), then each parked."""
  return [f'  python -m fedjax_face.reproduce --table={name} '
          f'--seeds={",".join(map(str, seeds))} --root={root}{flag}'
          for flag in ('', ' --park') for name, seeds, root in chosen]


def rerun_commands(chosen: list[tuple[str, tuple[int, ...], str]], commit: str,
                   sweep_root: str) -> list[str]:
  """The commands that rerun the `chosen` tables (table, seeds, archive folder) whole at
  `commit`, into one root."""
  return (['Commands (a worktree of one commit; at the end of each sitting stop, park, commit the '
           'root, and go on from a worktree of the same commit):',
           f'  git worktree add /tmp/seeds5 {commit} && cd /tmp/seeds5']
          + table_commands([(name, seeds, sweep_root) for name, seeds, _ in chosen]))


def paper_run(item: Archived, name: str) -> str:
  """A run's workdir under its paper's archive folder ('fedfr_tables/fedfr-pretrain_seed-3'):
  where the archive and a sweep root that mirrors it keep it."""
  return files.join(os.path.basename(item.root), name)


def missing_seed_commands(chosen: list[tuple[str, str, str, tuple[int, ...], str, dict]],
                          sweep_root: str) -> list[str]:
  """The commands that add the seeds the `chosen` tables lack ((commit, note, table, seeds,
  archive folder, runs to train by `paper_run`)), per commit in the order met: a worktree of
  it; at the first sitting, a root per paper under `sweep_root` begun as a copy of its archive
  folder (a run with results.json is read, not trained), less the archived runs that must train
  again as starts; then the tables' runs."""
  lines = ["Commands (the same machine kind: per commit of the archived runs, a worktree of it; "
           "at the first sitting a root per paper begun as a copy of the paper's archive, so "
           'that only the runs it lacks train, less the archived starts that train again; at the '
           'end of each sitting stop, park, commit the root, and go on from a worktree of the '
           'same commit):']
  root_of = lambda archived: files.join(sweep_root, os.path.basename(archived))
  for at in dict.fromkeys(row[0] for row in chosen):
    group = [row[1:] for row in chosen if row[0] == at]
    lines.append(f'  git worktree add /tmp/seeds5_{at} {at} && cd /tmp/seeds5_{at}')
    for archived in dict.fromkeys(archived for _, _, _, archived, _ in group):
      lines.append(f'  mkdir -p {root_of(archived)} && cp -rn {os.path.abspath(archived)}/. '
                   f'{root_of(archived)}/')
    again = list(dict.fromkeys(
        run for _, _, _, archived, runs in group for run in runs
        if files.exists(files.join(os.path.dirname(archived), run, 'results.json'))))
    if again:
      lines.append(f'  rm -rf {" ".join(files.join(sweep_root, run) for run in again)}')
    lines += [f'  # {name}: {note}' for note, name, _, _, _ in group if note]
    lines += table_commands([(name, seeds, root_of(archived))
                             for _, name, seeds, archived, _ in group])
  return lines


def five_seed_check(pages: list[list[Archived]], band_kind: str = 'sd2',
                    family: str = 'free') -> list[str]:
  """The planner tried where the answer is known: each table archived at five seeds read at seeds
  0-2 (its page's other tables as they are), the orderings whose page decision seeds 0-4 change
  (`flips`), and whether `assess` on seeds 0-2 flags each."""
  lines, changed, caught, judged, flagged_all = [], 0, 0, 0, 0
  for archived in pages:
    fives = [i for i in archived if len(i.seeds) >= len(TARGET_SEEDS) and i.table.orderings]
    if not fives:
      continue
    three = [dataclasses.replace(i, seeds=(0, 1, 2)) if i in fives else i for i in archived]
    flagged = {(a.table, a.index): a.flagged for a in assess(three, band_kind, family)}
    judged += sum(len(i.table.orderings) for i in fives)
    flagged_all += sum(flagged[(i.name, k)] for i in fives for k in range(len(i.table.orderings)))
    for name, index, claim, before, after in flips(three, archived):
      changed += 1
      caught += flagged[(name, index)]
      lines.append(f'  {name} [{index}] {claim}: {before} at seeds 0-2, {after} at 0-4; '
                   f'{"flagged" if flagged[(name, index)] else "NOT flagged"}')
  return ([f'Check: of the {judged} orderings of the tables archived at five seeds, {changed} '
           f'are decided otherwise at seeds 0-2; the plan on seeds 0-2 flags {caught} of them '
           f'({flagged_all} of the {judged} in all).']
          + lines)


def flips(three: list[Archived], five: list[Archived]) -> list[tuple[str, int, str, str, str]]:
  """The orderings whose page decision differs between seeds 0-2 and seeds 0-4 of the same
  tables: `three` and `five` are one page's tables, the 5-seed ones read at seeds (0, 1, 2) in
  `three` and at their own in `five`. (table, index, claim, decision at 3, decision at 5)."""
  def decided(pages):
    judged = [(item, verdict_lib.judge_table(item.table, item.results, item.seeds))
              for item in pages if item.table.orderings]
    fam = verdict_lib.page_family(pages[0].page, [(i.table, v) for i, v in judged])
    return {(item.name, k): (f'{item.table.orderings[k].claim} ({item.table.orderings[k].column})',
                             verdict_lib.adjust(v, fam.adjusted.get((item.table.title, k))).verdict)
            for item, verdicts in judged for k, v in enumerate(verdicts)}
  before, after = decided(three), decided(five)
  fives = {item.name for item in five if len(item.seeds) >= len(TARGET_SEEDS)}
  return [(name, k, claim, d3, after[(name, k)][1]) for (name, k), (claim, d3) in before.items()
          if name in fives and after[(name, k)][1] != d3]
