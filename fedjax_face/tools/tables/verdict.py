"""The verdict rule: whether a paper's ordering holds on ours, judged on the seeds' paired margins.

An `Ordering` (spec.py) says that some rows beat others on one column. Per seed, its margin is how
far they lead (`ordering_margins`); over the seeds, `judge` applies `VERDICT_RULE` (a one-sided
paired t-test at `SIGNIFICANCE`, every seed required), and `verdict_detail` says the verdict and
its statistics in one line. `table_verdicts` judges every ordering of a table: the one place where
a rule that weighs a table's orderings together (a multiple-testing correction) would go. The
words and numbers of the rule are all here, so that changing the rule changes this file alone.
"""

import dataclasses
import statistics

from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables.spec import Ordering, Table

SIGNIFICANCE = 0.05   # one-sided, over the seeds' paired margins
OWN_WORDS = {'reproduced': 'ahead', 'reversed': 'behind'}   # the verdicts of our own orderings
VERDICT_RULE = ('Reproduced: the ordering holds in every seed asked for, and the mean of the '
                "seeds' margins passes a one-sided paired t-test at 5 % (t = mean / (sd / "
                "sqrt(n)) above Student's t quantile with n - 1 degrees of freedom: 2.92 for 3 "
                'seeds, 2.13 for 5). Reversed: the same for the opposite ordering. Otherwise '
                'within noise. A seed without a value (not run, failed or diverged) counts against '
                'the ordering, and one seed alone gives no noise estimate, so it never decides.')


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
  verdict: str                    # 'reproduced', 'reversed', 'within noise' or 'not measured'
  margins: dict[int, float]       # per seed with a value
  missing: tuple[int, ...]        # seeds asked for without a value
  t: float | None = None          # the paired t statistic (None under two margins)
  critical: float | None = None   # its one-sided 5 % quantile

  @property
  def held(self) -> int:
    return sum(margin > 0 for margin in self.margins.values())


def t_critical(n: int) -> float:
  """Student's t quantile 1 - SIGNIFICANCE with n - 1 degrees of freedom."""
  from scipy import stats  # pylint: disable=g-import-not-at-top  (only tables with orderings)
  return float(stats.t.ppf(1.0 - SIGNIFICANCE, n - 1))


def judge(margins: dict[int, float], seeds: tuple[int, ...]) -> Verdict:
  """`VERDICT_RULE` on the per-seed margins of one ordering and column."""
  missing = tuple(seed for seed in seeds if seed not in margins)
  values = list(margins.values())
  if not values:
    return Verdict('not measured', margins, missing)
  if len(values) < 2:
    return Verdict('within noise', margins, missing)
  mean, sd = statistics.mean(values), statistics.stdev(values)
  if sd > 0:
    t = mean / (sd / len(values) ** 0.5)
  else:   # every seed the same margin: no spread to weigh it against
    t = 0.0 if mean == 0 else float('inf') if mean > 0 else float('-inf')
  critical = t_critical(len(values))
  if not missing and all(v > 0 for v in values) and t > critical:
    verdict = 'reproduced'
  elif all(v < 0 for v in values) and t < -critical:
    verdict = 'reversed'
  else:
    verdict = 'within noise'
  return Verdict(verdict, margins, missing, t, critical)


def table_verdicts(table: Table, results: dict, seeds: tuple[int, ...]) -> list[Verdict]:
  """The verdict of each of `table.orderings`, in order (each judged on its own margins)."""
  return [judge(ordering_margins(table, ordering, results, seeds), seeds)
          for ordering in table.orderings]


def verdict_detail(verdict: Verdict, seeds: tuple[int, ...], own: bool = False) -> str:
  """'**reproduced**: holds in 3 of 3 seeds (by +0.35 to +1.35; t = 4.10 > 2.92)'; an ordering
  of our own (`own`) reads '**ahead**: ahead in 3 of 3 seeds ...'."""
  if not verdict.margins:
    return 'not measured: no seed has a value on both sides (not run, or failed)'
  low, high = min(verdict.margins.values()), max(verdict.margins.values())
  spread = f'by {low:+.2f}' if len(verdict.margins) == 1 else f'by {low:+.2f} to {high:+.2f}'
  if verdict.t is None:
    test = 'one seed gives no noise estimate'
  else:
    t, critical = verdict.t, verdict.critical
    # Two decimals, or as many as it takes (up to 6) for t not to print as the quantile it passed.
    d = next((digits for digits in range(2, 7)
              if f'{abs(t):.{digits}f}' != f'{critical:.{digits}f}'), 6)
    test = (f't = {t:.{d}f} > {critical:.{d}f}' if t > critical else
            f't = {t:.{d}f} < -{critical:.{d}f}' if t < -critical else
            f'|t| = {abs(t):.{d}f} ≤ {critical:.{d}f}')
  missing = ''
  if verdict.missing:
    names = ', '.join(map(str, verdict.missing))
    missing = (f'; seed{"" if len(verdict.missing) == 1 else "s"} {names}: no value (not run or '
               'failed), counted against')
  word = OWN_WORDS.get(verdict.verdict, verdict.verdict) if own else verdict.verdict
  return (f'**{word}**: {"ahead" if own else "holds"} in {verdict.held} of {len(seeds)} seed'
          f'{"" if len(seeds) == 1 else "s"} ({spread}; {test}{missing})')
