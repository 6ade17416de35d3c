"""The verdict rule: an ordering judged seed by seed, and how its verdict reads."""

import dataclasses

import pytest

from fedjax_face.tools import claims
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict
from fedjax_face.tools.tables.spec import Row, Run, Table
from tests.tools.tables.fakes import fake_result, ordered_table


def lfw_results(runs, seeds_values):
  """{(run, seed): a result of that LFW accuracy}, from {seed: (accuracy per run)}."""
  return {(run, seed): fake_result(lfw=value)
          for seed, values in seeds_values.items() for run, value in zip(runs, values)}



def test_an_ordering_is_checked_seed_by_seed():
  table, (a, b, _) = ordered_table()
  results = lfw_results((a, b), {0: (0.80, 0.75), 1: (0.70, 0.71), 2: (0.72, 0.72)})
  margins = verdict.ordering_margins(table, table.orderings[0], results, (0, 1, 2))
  assert margins == pytest.approx({0: 5.0, 1: -1.0, 2: 0.0})
  # A tie (seed 2) does not hold the ordering; one seed ahead by 5 points is within the noise of
  # the three: mean 4/3, sd 3.21, t = 0.72.
  text = markdown.render(table, results, 'cmd', seeds=(0, 1, 2))
  assert ('- A above B (LFW): **within noise**: holds in 1 of 3 seeds (by -1.00 to +5.00; '
          '|t| = 0.72 ≤ 2.92).' in text)
  assert verdict.VERDICT_RULE in text
  # One seed gives no estimate of the noise: never reproduced, however far ahead.
  one = markdown.render(table, results, 'cmd', seeds=(0,))
  assert ('- A above B (LFW): **within noise**: holds in 1 of 1 seed (by +5.00; one seed gives '
          'no noise estimate).' in one)


def test_the_stated_quantiles_are_student_s():
  # VERDICT_RULE quotes them: t(0.95) with 2 and 4 degrees of freedom.
  assert round(verdict.t_critical(3), 2) == 2.92 and round(verdict.t_critical(5), 2) == 2.13
  assert '2.92 for 3 seeds, 2.13 for 5' in verdict.VERDICT_RULE


@pytest.mark.parametrize('margins, seeds, expected', [
    # Ahead in every seed by more than the spread: t = 2.0 / (0.5 / sqrt 3) = 6.93.
    ({0: 1.5, 1: 2.0, 2: 2.5}, (0, 1, 2), 'reproduced'),
    # Ahead in every seed, but by margins the size of their spread (the one-pair-in-3,000 case:
    # +0.03 to +0.20): t = 2.25.
    ({0: 0.03, 1: 0.10, 2: 0.20}, (0, 1, 2), 'within noise'),
    # The same sign pattern as the first, one seed missing: it counts against.
    ({0: 1.5, 1: 2.0}, (0, 1, 2), 'within noise'),
    # A tie in one seed breaks "in every seed", however far the others lead.
    ({0: 5.0, 1: 5.1, 2: 0.0}, (0, 1, 2), 'within noise'),
    # One seed reversed.
    ({0: 3.0, 1: 3.2, 2: -0.1}, (0, 1, 2), 'within noise'),
    # Behind in every seed beyond the noise.
    ({0: -1.5, 1: -2.0, 2: -2.5}, (0, 1, 2), 'reversed'),
    # Every seed the same margin: no spread, the sign decides.
    ({0: 1.0, 1: 1.0, 2: 1.0}, (0, 1, 2), 'reproduced'),
    # Five seeds, a smaller quantile: mean 1, sd 0.79, t = 2.83 > 2.13.
    ({0: 0.2, 1: 0.5, 2: 1.0, 3: 1.3, 4: 2.0}, (0, 1, 2, 3, 4), 'reproduced'),
    ({}, (0, 1, 2), 'not measured'),
])
def test_the_verdict_needs_every_seed_and_an_effect_above_the_noise(margins, seeds, expected):
  assert verdict.judge(margins, seeds).verdict == expected


def test_a_t_that_rounds_to_its_quantile_prints_the_digits_that_tell_them_apart():
  # Five seeds' quantile, 2.131847, and a t of 2.1334 (FedFR Table 1 has one such line), which two
  # decimals would print as "t = 2.13 > 2.13"; the margins only fill the seed count.
  close = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 2.1334, 2.131847)
  assert verdict.verdict_detail(close, (0, 1)).endswith('t = 2.133 > 2.132)')
  below = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), -2.1316, 2.131847)
  assert verdict.verdict_detail(below, (0, 1)).endswith('|t| = 2.1316 ≤ 2.1318)')
  usual = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 1.0, 2.131847)
  assert verdict.verdict_detail(usual, (0, 1)).endswith('|t| = 1.00 ≤ 2.13)')


def test_an_ordering_averages_rows_reads_lower_as_better_and_counts_missing_seeds_against():
  table, (a, b, c) = ordered_table(ahead=('A', 'C'), lower_is_better=True, claim='A, C below B')
  results = {(a, 0): fake_result(lfw=0.10), (c, 0): fake_result(lfw=0.20),
             (b, 0): fake_result(lfw=0.40), (a, 1): fake_result(lfw=0.10),
             (b, 1): {'failed': 'FloatingPointError: round 2'}}
  # Seed 0: mean(10, 20) = 15 lies 25 points below 40; seed 1 lacks C and B.
  assert verdict.ordering_margins(table, table.orderings[0], results, (0, 1)) == pytest.approx(
      {0: 25.0})
  text = markdown.render(table, results, 'cmd', seeds=(0, 1))
  assert ('- A, C below B (LFW): **within noise**: holds in 1 of 2 seeds (by +25.00; one seed '
          'gives no noise estimate; seed 1: no value (not run or failed), counted against).'
          in text)
  assert markdown.ordering_line(table, table.orderings[0], verdict.judge({}, (0,)), (0,)).endswith(
      'not measured: no seed has a value on both sides (not run, or failed).')


def test_a_claim_on_several_columns_is_checked_on_each():
  a, b = Run('fedfr/fedfr'), Run('fedfr/fedface')
  claim = 'A above B'
  table = Table('T', 'verification', ('lfw', 'cfp_fp'),
                (Row('A', a, (None, None)), Row('B', b, (None, None))), 'c',
                orderings=(spec.Ordering(('A',), ('B',), 'lfw', claim),
                           spec.Ordering(('A',), ('B',), 'cfp_fp', claim)))
  values = {0: ((0.80, 0.60), (0.70, 0.65)), 1: ((0.81, 0.61), (0.70, 0.67)),
            2: ((0.82, 0.62), (0.70, 0.70))}   # seed: ((A's lfw, cfp_fp), (B's lfw, cfp_fp))
  results = {(run, seed): {'verification': {'lfw': {'accuracy': lfw},
                                            'cfp_fp': {'accuracy': cfp}}}
             for seed, rows in values.items() for run, (lfw, cfp) in zip((a, b), rows)}
  lines = markdown.ordering_lines(table, results, (0, 1, 2))
  assert lines == [
      '- A above B: reproduced on 1 of 2 columns, reversed on 1:',
      '  - LFW: **reproduced**: holds in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92).',
      '  - CFP-FP: **reversed**: holds in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92).']
  # The same orderings asked by us in a table no paper reports (the building blocks') read
  # 'ahead' and 'behind', under a head of their own that tools/claims.py still finds.
  ours = dataclasses.replace(table, own_orderings=True)
  assert markdown.ordering_lines(ours, results, (0, 1, 2)) == [
      '- A above B: ahead on 1 of 2 columns, behind on 1:',
      '  - LFW: **ahead**: ahead in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92).',
      '  - CFP-FP: **behind**: ahead in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92).']
  text = markdown.render(ours, results, 'cmd', (0, 1, 2))
  assert '\nOur own orderings (no paper states them), on ours seed by seed' in text
  assert "The paper's orderings" not in text
  assert claims.verdict_lines(text) == markdown.ordering_lines(ours, results, (0, 1, 2))
  assert claims.verdict_lines(markdown.render(table, results, 'cmd', (0, 1, 2))) == lines


def test_equal_measurements_tie_despite_the_percent_scaling():
  table, (a, b, _) = ordered_table()
  # 0.1 * 3 and 0.3 differ in the last bit; the same measurement must tie.
  results = {(a, 0): fake_result(lfw=0.1 * 3), (b, 0): fake_result(lfw=0.3)}
  assert 0.1 * 3 * 100 != 0.3 * 100
  assert verdict.ordering_margins(table, table.orderings[0], results, (0,)) == {0: 0.0}
  # Either way round, and printed without a sign that suggests a loss.
  swapped = {(a, 0): results[(b, 0)], (b, 0): results[(a, 0)]}
  assert '(by +0.00; ' in markdown.render(table, swapped, 'cmd')
