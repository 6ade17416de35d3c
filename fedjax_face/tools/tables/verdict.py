"""The verdict rule: whether a paper's ordering holds on ours, judged on the seeds' paired margins
and corrected for the number of orderings a page judges.

An `Ordering` (spec.py) says that some rows beat others on one column. Per seed, its margin is how
far they lead (`ordering_margins`); over the seeds, `judge` applies the per-test half of
`VERDICT_RULE` (a one-sided paired t-test, every seed required) and gives its p-value. A page
judges many orderings at once, so the decision is taken over its family (`page_family`: every
ordering and column judged on one docs/<paper>.md, all of its tables together, each
comparison once: `comparison_key`) by the Benjamini-Hochberg procedure at `FDR`
(`bh_adjusted`), and `adjust` turns each test's adjusted p-value into the verdict the page
prints. `verdict_detail` says the verdict and its
statistics in one line. The words and numbers of the rule are all here, so that changing the
rule changes this file alone.
"""

import dataclasses
import math
import statistics

from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Ordering, Table

SIGNIFICANCE = 0.05   # one test alone: one-sided, over the seeds' paired margins
FDR = 0.05            # q of Benjamini-Hochberg over a page's family
OWN_WORDS = {'reproduced': 'ahead', 'reversed': 'behind'}   # the verdicts of our own orderings
ONE_SEED = 'not tested (one seed)'
VERDICT_RULE = ('Reproduced: the ordering holds in every seed asked for, and the mean of the '
                "seeds' margins passes a one-sided paired t-test (t = mean / (sd / sqrt(n)); p "
                "from Student's t with n - 1 degrees of freedom, on the side the mean falls; p < "
                '0.05 alone is t above 2.92 for 3 seeds, 2.13 for 5) that survives the '
                "Benjamini-Hochberg correction at q = 0.05 over the page's family: every "
                'ordering and column judged on one docs/<paper>.md, all of its tables together, '
                'one comparison counted once where several tables print it (the same runs on '
                'each side, column and seeds) (BH-adjusted p ≤ 0.05). Reversed: the same for the '
                'opposite ordering, also in every seed. Otherwise within noise; where the test '
                'alone decided otherwise, the line says so. Where every seed gives the same '
                'nonzero margin, t is undefined (no spread): p is then the exact sign-flip '
                "test's, 2^-n (0.125 for 3 seeds, 0.031 for 5). A seed without a value (not run, "
                'failed or diverged) counts against the ordering; one seed gives no noise '
                'estimate: not tested (one seed).')


def ordering_margins(table: Table, ordering: Ordering, results: dict,
                     seeds: tuple[int, ...]) -> dict[int, float]:
  """Per seed whose runs all have a value: how far `ahead` leads `behind` (positive: the
  ordering holds; in the column's unit, HTER points for the PAD tables)."""
  rows = {row.label: row for row in table.rows}

  def mean(labels, seed):
    values = [spec.column_value(results.get((rows[label].run, seed)), table, ordering.column)
              for label in labels]
    return None if None in values else statistics.mean(values)

  margins = {}
  for seed in seeds:
    ahead, behind = mean(ordering.ahead, seed), mean(ordering.behind, seed)
    if ahead is not None and behind is not None:
      # Rounded so that equal measurements (HTERs count whole videos) tie instead of leaving a
      # last-bit difference of the percent scaling; + 0.0 turns a rounded -0.0 into 0.0.
      margin = behind - ahead if ordering.lower_is_better else ahead - behind
      margins[seed] = round(margin, 9) + 0.0
  return margins


@dataclasses.dataclass(frozen=True)
class Verdict:
  """An ordering's verdict on one column over the seeds asked for (`VERDICT_RULE`)."""
  verdict: str                    # 'reproduced', 'reversed', 'within noise', ONE_SEED or
                                  # 'not measured'
  margins: dict[int, float]       # per seed with a value
  missing: tuple[int, ...]        # seeds asked for without a value
  t: float | None = None          # the paired t statistic (None under two margins)
  critical: float | None = None   # its one-sided 5 % quantile
  p: float | None = None          # one-sided, on the side the mean margin falls
  adjusted: float | None = None   # p adjusted over the page's family (`bh_adjusted`); None
                                  # before `adjust`
  alone: str | None = None        # the verdict of the test alone, before the correction

  @property
  def held(self) -> int:
    return sum(margin > 0 for margin in self.margins.values())


def t_critical(n: int) -> float:
  """Student's t quantile 1 - SIGNIFICANCE with n - 1 degrees of freedom."""
  from scipy import stats  # pylint: disable=g-import-not-at-top  (only tables with orderings)
  return float(stats.t.ppf(1.0 - SIGNIFICANCE, n - 1))


def one_sided_p(t: float, n: int) -> float:
  """P(T ≥ |t|) for Student's T with n - 1 degrees of freedom: the p-value on the side the
  seeds' mean falls (0.5 for t = 0), so that p < SIGNIFICANCE is exactly |t| above
  `t_critical(n)`. An infinite t (every seed the same nonzero margin) has no spread to weigh the
  mean against, and Student's p of 0 would take a metric that moves in steps (a TAR over few
  pairs, an HTER over whole videos) landing on the same step for a certainty: its p is the exact
  sign-flip test's, `sign_flip_p(n)`."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  return sign_flip_p(n) if math.isinf(t) else float(stats.t.sf(abs(t), n - 1))


def sign_flip_p(n: int) -> float:
  """The one-sided p of n paired margins all on one side under the exact sign-flip test (each
  margin's sign a fair coin under no effect): 2^-n, the smallest p any test of n signs gives."""
  return 0.5 ** n


def sign_verdict(values: list[float], missing: tuple, significant: bool) -> str:
  """'reproduced' / 'reversed' when every seed asked for has a value, all on one side, and the
  test on that side is `significant`; else 'within noise'."""
  if significant and not missing and all(v > 0 for v in values):
    return 'reproduced'
  if significant and not missing and all(v < 0 for v in values):
    return 'reversed'
  return 'within noise'


def judge(margins: dict[int, float], seeds: tuple[int, ...]) -> Verdict:
  """The test alone on the per-seed margins of one ordering and column: its verdict at
  SIGNIFICANCE, its t and its p (`adjust` then decides over the page's family)."""
  missing = tuple(seed for seed in seeds if seed not in margins)
  values = list(margins.values())
  if not values:
    return Verdict('not measured', margins, missing)
  if len(values) < 2:
    return Verdict(ONE_SEED, margins, missing)
  mean, sd = statistics.mean(values), statistics.stdev(values)
  if sd > 0:
    t = mean / (sd / len(values) ** 0.5)
  else:   # every seed the same margin: no spread to weigh it against
    t = 0.0 if mean == 0 else float('inf') if mean > 0 else float('-inf')
  critical, p = t_critical(len(values)), one_sided_p(t, len(values))
  verdict = sign_verdict(values, missing, p < SIGNIFICANCE)
  return Verdict(verdict, margins, missing, t, critical, p)


def bh_adjusted(p_values: list[float]) -> list[float]:
  """Benjamini and Hochberg (1995), step-up: with the m p-values sorted, p_(1) ≤ ... ≤ p_(m),
  reject the k smallest for the largest k with p_(k) ≤ k q / m. Equivalently each test's
  adjusted p-value, min over j ≥ its rank i of min(1, m p_(j) / j), is ≤ q exactly when the
  procedure at q rejects it; returned in the order given."""
  m = len(p_values)
  order = sorted(range(m), key=lambda i: p_values[i])
  adjusted, running = [0.0] * m, 1.0
  for rank in range(m, 0, -1):   # from the largest p down: the running minimum over j ≥ i
    i = order[rank - 1]
    running = min(running, m * p_values[i] / rank)
    adjusted[i] = running
  return adjusted


@dataclasses.dataclass(frozen=True)
class Family:
  """The tests a page judges together: each (table title, ordering index) with a p-value, the
  comparison it makes (`comparison_key`: two tables printing the same comparison make one test)
  and that comparison's BH-adjusted p."""
  page: str                                   # 'docs/pad.md', or '' for a table on its own
  tables: int                                 # tables with orderings in it
  adjusted: dict[tuple[str, int], float]
  comparisons: dict[tuple[str, int], tuple]

  @property
  def tests(self) -> int:
    return len(set(self.comparisons.values()))

  @property
  def discoveries(self) -> int:
    decided = {self.comparisons[key]: p for key, p in self.adjusted.items()}
    return sum(p <= FDR for p in decided.values())


def comparison_key(table: Table, ordering: Ordering, verdict: Verdict) -> tuple:
  """What one ordering's test compares, the same wherever a page prints it: the runs on its two
  sides (several rows are averaged, so their order does not matter), the measure, and the seeds'
  margins oriented from the first side to the second. An ordering and its opposite are one
  test (p is on the side the mean falls); a page's counts take its verdict from the line that
  prints it first. FedGC against FedPE with Softmax is one test in FedGC's Tables 1, 3, 5 and
  12: counting it four times would count one discovery four times and make the correction
  stricter for every other test of the page."""
  runs = {row.label: row.run for row in table.rows}
  def side(labels):
    return tuple(sorted((runs[label] for label in labels), key=repr))
  ahead, behind = side(ordering.ahead), side(ordering.behind)
  first, second = sorted((ahead, behind), key=repr)
  # margin = ahead - behind (behind - ahead where lower is better); oriented first - second.
  sign = 1 if (ahead == first) != ordering.lower_is_better else -1
  margins = tuple(sorted((seed, sign * m + 0.0) for seed, m in verdict.margins.items()))
  return (table.metric, ordering.column, first, second, margins, verdict.missing)


def page_family(page: str, judged: list[tuple[Table, list[Verdict]]]) -> Family:
  """The family of one page: every ordering and column of its tables (`judge`d) that has a
  p-value, one test per comparison (`comparison_key`), adjusted together (`bh_adjusted`).
  ValueError if two tables share a title, or a table's verdicts are not one per ordering."""
  titles = [table.title for table, _ in judged]
  if len(set(titles)) != len(titles):
    raise ValueError(f'{page}: two tables share a title among {titles}; expected distinct titles '
                     '(they name the tests of the family).')
  comparisons, p_values = {}, {}
  for table, verdicts in judged:
    if len(verdicts) != len(table.orderings):
      raise ValueError(f'{table.title}: {len(verdicts)} verdicts for {len(table.orderings)} '
                       'orderings; expected one per ordering (`judge_table`).')
    for index, (ordering, verdict) in enumerate(zip(table.orderings, verdicts)):
      if verdict.p is not None:
        key = comparison_key(table, ordering, verdict)
        comparisons[(table.title, index)] = key
        p_values[key] = verdict.p
  adjusted = dict(zip(p_values, bh_adjusted(list(p_values.values()))))
  return Family(page, len(judged), {line: adjusted[key] for line, key in comparisons.items()},
                comparisons)


def one_per_comparison(lines) -> list[Verdict]:
  """The verdicts of a page's tested `lines` ((comparison, verdict) in page order), one per
  comparison (`comparison_key`): its first line's, as the page's counts take it."""
  first = {}
  for comparison, verdict in lines:
    first.setdefault(comparison, verdict)
  return list(first.values())


def adjust(verdict: Verdict, adjusted: float | None) -> Verdict:
  """The verdict the page prints: the test alone's signs, decided by its BH-adjusted p."""
  if verdict.p is None:
    return verdict
  values = list(verdict.margins.values())
  decided = sign_verdict(values, verdict.missing, adjusted <= FDR)
  return dataclasses.replace(verdict, verdict=decided, adjusted=adjusted, alone=verdict.verdict)


def judge_table(table: Table, results: dict, seeds: tuple[int, ...]) -> list[Verdict]:
  """The test alone of each of `table.orderings`, in order."""
  return [judge(ordering_margins(table, ordering, results, seeds), seeds)
          for ordering in table.orderings]


def table_verdicts(table: Table, results: dict, seeds: tuple[int, ...],
                   family: Family | None = None) -> list[Verdict]:
  """The verdict of each of `table.orderings`, in order, adjusted over `family` (the table's
  page's; None: the table on its own is the family)."""
  verdicts = judge_table(table, results, seeds)
  family = family or page_family('', [(table, verdicts)])
  absent = [i for i, v in enumerate(verdicts)
            if v.p is not None and (table.title, i) not in family.adjusted]
  if absent:
    raise ValueError(f'{table.title}: orderings {absent} are not in the family of '
                     f'{family.page or "its table"}; expected the family made with this table.')
  return [adjust(v, family.adjusted.get((table.title, i))) for i, v in enumerate(verdicts)]


def _digits_apart(value: float, bound: float, fmt: str) -> int:
  """The fewest digits (2 to 6) in `fmt` ('f' or 'g') at which `value` does not print as
  `bound`."""
  return next((d for d in range(2, 7) if f'{value:.{d}{fmt}}' != f'{bound:.{d}{fmt}}'), 6)


def statistics_text(verdict: Verdict) -> str:
  """'t = 4.10 > 2.92, p = 0.0026; BH-adjusted p = 0.011 ≤ 0.05'."""
  t, critical = verdict.t, verdict.critical
  if math.isinf(t):
    return (f'every seed the same margin, no spread: exact sign-flip p = {verdict.p:.3g}'
            + _adjusted_text(verdict))
  # Two decimals, or as many as it takes (up to 6) for t not to print as the quantile it passed.
  d = _digits_apart(abs(t), critical, 'f')
  text = (f't = {t:.{d}f} > {critical:.{d}f}' if t > critical else
          f't = {t:.{d}f} < -{critical:.{d}f}' if t < -critical else
          f'|t| = {abs(t):.{d}f} ≤ {critical:.{d}f}')
  return text + f', p = {verdict.p:.2g}' + _adjusted_text(verdict)


def _adjusted_text(verdict: Verdict) -> str:
  """'; BH-adjusted p = 0.011 ≤ 0.05', or '' before `adjust`."""
  if verdict.adjusted is None:
    return ''
  g = _digits_apart(verdict.adjusted, FDR, 'g')
  return (f'; BH-adjusted p = {verdict.adjusted:.{g}g} '
          f'{"≤" if verdict.adjusted <= FDR else ">"} {FDR:g}')


def verdict_detail(verdict: Verdict, seeds: tuple[int, ...], own: bool = False) -> str:
  """'**reproduced**: holds in 3 of 3 seeds (by +0.35 to +1.35; t = 4.10 > 2.92, p = 0.027;
  BH-adjusted p = 0.04 ≤ 0.05)'; '**within noise** (reproduced alone): ...' where the correction
  changed the decision; an ordering of our own (`own`) reads '**ahead**: ahead in 3 of 3 seeds
  ...'."""
  if not verdict.margins:
    return 'not measured: no seed has a value on both sides (not run, or failed)'
  word = lambda v: OWN_WORDS.get(v, v) if own else v
  low, high = min(verdict.margins.values()), max(verdict.margins.values())
  spread = f'by {low:+.2f}' if len(verdict.margins) == 1 else f'by {low:+.2f} to {high:+.2f}'
  test = 'one seed gives no noise estimate' if verdict.t is None else statistics_text(verdict)
  missing = ''
  if verdict.missing:
    names = ', '.join(map(str, verdict.missing))
    missing = (f'; seed{"" if len(verdict.missing) == 1 else "s"} {names}: no value (not run or '
               'failed), counted against')
  changed = (f' ({word(verdict.alone)} before the correction)'
             if verdict.alone and verdict.alone != verdict.verdict else '')
  return (f'**{word(verdict.verdict)}**{changed}: {"ahead" if own else "holds"} in '
          f'{verdict.held} of {len(seeds)} seed{"" if len(seeds) == 1 else "s"} ({spread}; '
          f'{test}{missing})')
