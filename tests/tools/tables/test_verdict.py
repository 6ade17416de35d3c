"""The verdict rule: an ordering judged seed by seed, decided over its page's family
(Benjamini-Hochberg), and how its verdict reads."""

import dataclasses
import math

import pytest

from fedjax_face.tools import claims
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict
from fedjax_face.tools.tables.spec import Row, Run, Table
from tests.tools.tables.fakes import fake_result, ordered_table


def p_two_dof(t):
  """Student's t with 2 degrees of freedom (3 seeds) has a closed form: P(T >= |t|) =
  1/2 - |t| / (2 sqrt(2 + t^2)). The known answer the tests below check the p-values against."""
  return 0.5 - abs(t) / (2 * math.sqrt(2 + t * t))


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
  # p = 1/2 - 0.72 / (2 sqrt(2.52)) = 0.27; the table alone is the family (m = 1), where the
  # adjusted p is p itself.
  text = markdown.render(table, results, 'cmd', seeds=(0, 1, 2))
  t = (4 / 3) / (math.sqrt(31 / 3) / math.sqrt(3))
  assert f'{p_two_dof(t):.2g}' == '0.27'
  assert ('- A above B (LFW): **within noise**: holds in 1 of 3 seeds (by -1.00 to +5.00; '
          '|t| = 0.72 ≤ 2.92, p = 0.27; BH-adjusted p = 0.27 > 0.05).' in text)
  assert verdict.VERDICT_RULE in text
  assert 'The family here is this table alone: 1 test; 0 of them pass the correction.' in text
  # One seed gives no estimate of the noise: not tested, however far ahead, and not in the
  # family.
  one = markdown.render(table, results, 'cmd', seeds=(0,))
  assert ('- A above B (LFW): **not tested (one seed)**: holds in 1 of 1 seed (by +5.00; one '
          'seed gives no noise estimate).' in one)
  assert 'this table alone: 0 tests' in one


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
    # Reversed needs every seed too: the same three margins, a fourth seed without a value.
    ({0: -1.5, 1: -2.0, 2: -2.5}, (0, 1, 2, 3), 'within noise'),
    # One seed: not tested, never "within noise".
    ({0: 5.0}, (0,), 'not tested (one seed)'),
    ({0: 5.0}, (0, 1), 'not tested (one seed)'),
    # Every seed the same margin: t is undefined, the exact sign-flip p is 2^-3 = 0.125, above
    # 0.05, whatever the margin; at five seeds 2^-5 = 0.03125 < 0.05.
    ({0: 1.0, 1: 1.0, 2: 1.0}, (0, 1, 2), 'within noise'),
    ({0: -0.36, 1: -0.36, 2: -0.36}, (0, 1, 2), 'within noise'),
    ({0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}, (0, 1, 2, 3, 4), 'reproduced'),
    ({0: -1.0, 1: -1.0, 2: -1.0, 3: -1.0, 4: -1.0}, (0, 1, 2, 3, 4), 'reversed'),
    # Five seeds, a smaller quantile: mean 1, sd 0.79, t = 2.83 > 2.13.
    ({0: 0.2, 1: 0.5, 2: 1.0, 3: 1.3, 4: 2.0}, (0, 1, 2, 3, 4), 'reproduced'),
    ({}, (0, 1, 2), 'not measured'),
])
def test_the_verdict_needs_every_seed_and_an_effect_above_the_noise(margins, seeds, expected):
  assert verdict.judge(margins, seeds).verdict == expected


def test_a_t_that_rounds_to_its_quantile_prints_the_digits_that_tell_them_apart():
  # Five seeds' quantile, 2.131847, and a t of 2.1334 (FedFR Table 1 has one such line), which two
  # decimals would print as "t = 2.13 > 2.13"; the margins only fill the seed count.
  close = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 2.1334, 2.131847, 0.049)
  assert verdict.verdict_detail(close, (0, 1)).endswith('t = 2.133 > 2.132, p = 0.049)')
  below = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), -2.1316, 2.131847, 0.05)
  assert verdict.verdict_detail(below, (0, 1)).endswith('|t| = 2.1316 ≤ 2.1318, p = 0.05)')
  usual = verdict.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 1.0, 2.131847, 0.19)
  assert verdict.verdict_detail(usual, (0, 1)).endswith('|t| = 1.00 ≤ 2.13, p = 0.19)')
  # So with an adjusted p that two significant digits would print as q itself.
  adjusted = dataclasses.replace(usual, adjusted=0.0504)
  assert verdict.verdict_detail(adjusted, (0, 1)).endswith('BH-adjusted p = 0.0504 > 0.05)')


def test_equal_margins_print_the_sign_flip_test_not_an_infinite_t():
  # Tuned Ditto against the pre-trained model on the worst client's TAR (personalization Table
  # 4): -0.36 in each of three seeds.
  flat = verdict.adjust(verdict.judge({0: -0.36, 1: -0.36, 2: -0.36}, (0, 1, 2)), 0.125)
  assert verdict.verdict_detail(flat, (0, 1, 2)) == (
      '**within noise**: holds in 0 of 3 seeds (by -0.36 to -0.36; every seed the same margin, '
      'no spread: exact sign-flip p = 0.125; BH-adjusted p = 0.12 > 0.05)')


def test_an_ordering_averages_rows_reads_lower_as_better_and_counts_missing_seeds_against():
  table, (a, b, c) = ordered_table(ahead=('A', 'C'), lower_is_better=True, claim='A, C below B')
  results = {(a, 0): fake_result(lfw=0.10), (c, 0): fake_result(lfw=0.20),
             (b, 0): fake_result(lfw=0.40), (a, 1): fake_result(lfw=0.10),
             (b, 1): {'failed': 'FloatingPointError: round 2'}}
  # Seed 0: mean(10, 20) = 15 lies 25 points below 40; seed 1 lacks C and B.
  assert verdict.ordering_margins(table, table.orderings[0], results, (0, 1)) == pytest.approx(
      {0: 25.0})
  text = markdown.render(table, results, 'cmd', seeds=(0, 1))
  assert ('- A, C below B (LFW): **not tested (one seed)**: holds in 1 of 2 seeds (by +25.00; '
          'one seed gives no noise estimate; seed 1: no value (not run or failed), counted '
          'against).' in text)
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
  # The table alone is the family, m = 2: margins (10, 11, 12) give t = 11 / (1 / sqrt 3) =
  # 19.05 and (-5, -6, -8) t = -(19/3) / (sqrt(7/3) / sqrt 3) = -7.18; in the closed form
  # p = 0.0014 and 0.0094; adjusted, the larger stays 0.0094 (m p / 2) and the smaller is
  # min(0.0094, 2 x 0.0014 / 1) = 0.0027.
  p_lfw, p_cfp = p_two_dof(11 * math.sqrt(3)), p_two_dof(19 / 3 / math.sqrt(7 / 9))
  assert (f'{p_lfw:.2g}', f'{p_cfp:.2g}', f'{2 * p_lfw:.2g}') == ('0.0014', '0.0094', '0.0027')
  assert lines == [
      '- A above B: reproduced on 1 of 2 columns, reversed on 1:',
      '  - LFW: **reproduced**: holds in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92, '
      'p = 0.0014; BH-adjusted p = 0.0027 ≤ 0.05).',
      '  - CFP-FP: **reversed**: holds in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92, '
      'p = 0.0094; BH-adjusted p = 0.0094 ≤ 0.05).']
  # The same orderings asked by us in a table no paper reports (the building blocks') read
  # 'ahead' and 'behind', under a head of their own that tools/claims.py still finds.
  ours = dataclasses.replace(table, own_orderings=True)
  assert markdown.ordering_lines(ours, results, (0, 1, 2)) == [
      '- A above B: ahead on 1 of 2 columns, behind on 1:',
      '  - LFW: **ahead**: ahead in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92, '
      'p = 0.0014; BH-adjusted p = 0.0027 ≤ 0.05).',
      '  - CFP-FP: **behind**: ahead in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92, '
      'p = 0.0094; BH-adjusted p = 0.0094 ≤ 0.05).']
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


def test_the_p_value_is_student_s_on_the_side_of_the_mean_and_agrees_with_the_quantile():
  for t in (0.72, -0.72, 2.5, -4.1, 19.05):
    assert verdict.one_sided_p(t, 3) == pytest.approx(p_two_dof(t), rel=1e-12)
  assert verdict.one_sided_p(0.0, 3) == 0.5
  # No spread: the exact sign-flip test's 2^-n, on either side.
  assert verdict.one_sided_p(float('inf'), 3) == 0.125
  assert verdict.one_sided_p(float('-inf'), 5) == 0.03125
  # p < 0.05 exactly where |t| passes the stated quantile, for 3 and 5 seeds.
  for n in (3, 5):
    critical = verdict.t_critical(n)
    assert verdict.one_sided_p(critical, n) == pytest.approx(verdict.SIGNIFICANCE, rel=1e-9)
    assert verdict.one_sided_p(critical * 1.001, n) < verdict.SIGNIFICANCE
    assert verdict.one_sided_p(-critical * 0.999, n) > verdict.SIGNIFICANCE


@pytest.mark.parametrize('p_values, adjusted, surviving', [
    # Sorted: 0.001, 0.012, 0.035, 0.041, 0.20 against k q / m = 0.01, 0.02, 0.03, 0.04, 0.05.
    # The largest k with p_(k) ≤ k q / m is 2 (0.012 ≤ 0.02; 0.035 > 0.03, 0.041 > 0.04,
    # 0.20 > 0.05): the two smallest survive. Adjusted, from the largest down: 0.20;
    # min(0.20, 5 x 0.041 / 4 = 0.05125); min(0.05125, 5 x 0.035 / 3 = 0.0583) = 0.05125;
    # min(0.05125, 5 x 0.012 / 2 = 0.03); min(0.03, 5 x 0.001 / 1 = 0.005).
    ([0.035, 0.001, 0.20, 0.041, 0.012], [0.05125, 0.005, 0.20, 0.05125, 0.03], [1, 4]),
    # Step-up: p_(5) = 0.042 ≤ 5 q / 5, so all five survive, though p_(3) = 0.039 > 3 q / 5
    # (and 0.042 would not survive alone at a Bonferroni 0.01). Adjusted: 0.042, min(0.042,
    # 0.05125), min(0.042, 0.065), 5 x 0.008 / 2 = 0.02, 0.005.
    ([0.001, 0.008, 0.039, 0.041, 0.042], [0.005, 0.02, 0.042, 0.042, 0.042], [0, 1, 2, 3, 4]),
    # One test: its own p, the uncorrected rule.
    ([0.049], [0.049], [0]),
])
def test_benjamini_hochberg_by_hand(p_values, adjusted, surviving):
  got = verdict.bh_adjusted(p_values)
  assert got == pytest.approx(adjusted, rel=1e-12)
  assert [i for i, p in enumerate(got) if p <= verdict.FDR] == surviving


def test_a_page_decides_its_tables_together():
  table, _ = ordered_table()
  other = dataclasses.replace(table, title='U', orderings=tuple(
      spec.Ordering(ahead, behind, 'lfw', f'{ahead[0]} above {behind[0]}')
      for ahead, behind in ((('A',), ('B',)), (('A',), ('C',)), (('B',), ('C',)))))
  ahead = {0: 1.5, 1: 2.0, 2: 2.5}   # mean 2, sd 0.5: t = 6.93, p = 0.010
  close = {0: 1.0, 1: 2.0, 2: 3.5}   # mean 13/6, sd sqrt(19/12): t = 2.98 > 2.92, p = 0.048
  noisy = {0: 5.0, 1: -1.0, 2: 0.0}  # p = 0.27
  seeds = (0, 1, 2)
  alone = verdict.judge(close, seeds)
  t_close = (13 / 6) / math.sqrt(19 / 12 / 3)
  assert alone.verdict == 'reproduced' and alone.p == pytest.approx(p_two_dof(t_close))
  assert f'{alone.p:.2g}, {3 * alone.p / 2:.2g}' == '0.048, 0.072'
  judged = [(table, [verdict.judge(ahead, seeds)]),
            (other, [alone, verdict.judge(noisy, seeds), verdict.judge({0: 1.0}, seeds)])]
  family = verdict.page_family('docs/toy.md', judged)
  # Three tests (the one-seed margin has no p); sorted p = 0.010, 0.048, 0.27 against 0.0167,
  # 0.0333, 0.05: only the first survives; the second's adjusted p is min(0.27, 3 x 0.048 / 2).
  assert (family.tests, family.discoveries, family.tables) == (3, 1, 2)
  assert family.adjusted[('U', 0)] == pytest.approx(3 * alone.p / 2, rel=1e-12)
  decided = verdict.adjust(alone, family.adjusted[('U', 0)])
  assert (decided.verdict, decided.alone) == ('within noise', 'reproduced')
  assert verdict.verdict_detail(decided, seeds).startswith(
      '**within noise** (reproduced before the correction): holds in 3 of 3 seeds')
  assert verdict.adjust(judged[0][1][0], family.adjusted[('T', 0)]).verdict == 'reproduced'
  # A table of the page decided on its own family would keep it: the correction is the page's.
  results = lfw_results(ordered_table()[1][:2], {s: (0.5 + m / 100, 0.5) for s, m in close.items()})
  assert verdict.table_verdicts(other, results, seeds)[0].verdict == 'reproduced'
  assert 'p = 0.048; BH-adjusted p = 0.072 > 0.05' in markdown.ordering_lines(
      other, results, seeds, family)[0]
  with pytest.raises(ValueError, match='share a title'):
    verdict.page_family('docs/toy.md', judged + [(table, [])])
  with pytest.raises(ValueError, match='2 verdicts for 3 orderings'):
    verdict.page_family('docs/toy.md', [(other, judged[1][1][:2])])


def test_one_comparison_printed_by_two_tables_is_one_test():
  # A above B in T, B below A (the opposite ordering, lower read as better) in U on the same
  # runs and seeds: one test, whose p both lines take. A above C is another test; so is D above
  # B, D a twin of A (other runs with equal margins, as two runs both at chance).
  table, (a, b, c) = ordered_table()
  d = Run('fedfr/fedbn')
  twin = dataclasses.replace(table, title='U', rows=table.rows + (Row('D', d, (None,)),),
                             orderings=(
      spec.Ordering(('B',), ('A',), 'lfw', 'B below A', lower_is_better=True),
      spec.Ordering(('A',), ('C',), 'lfw', 'A above C'),
      spec.Ordering(('D',), ('B',), 'lfw', 'D above B')))
  seeds = (0, 1, 2)
  # A - B = D - B: 1.5, 2.0, 2.5 (p = 0.010); A - C: 1.0, 2.0, 3.5 (p = 0.048).
  results = lfw_results((a, b, c, d), {0: (0.515, 0.5, 0.505, 0.515), 1: (0.52, 0.5, 0.5, 0.52),
                                       2: (0.525, 0.5, 0.49, 0.525)})
  judged = [(t, verdict.judge_table(t, results, seeds)) for t in (table, twin)]
  (a_b,), (b_a, a_c, d_b) = judged[0][1], judged[1][1]
  assert a_b.margins == b_a.margins == d_b.margins == {0: 1.5, 1: 2.0, 2: 2.5}
  assert a_c.margins == {0: 1.0, 1: 2.0, 2: 3.5}
  family = verdict.page_family('docs/toy.md', judged)
  assert family.comparisons[('T', 0)] == family.comparisons[('U', 0)]
  assert family.comparisons[('U', 2)] != family.comparisons[('T', 0)]
  # Four lines, three tests: A-B (both lines), A-C and D-B, adjusted over m = 3.
  assert (len(family.adjusted), family.tests, family.discoveries) == (4, 3, 3)
  # Sorted p: 0.010, 0.010, 0.048 against 0.0167, 0.0333, 0.05: all three pass alone at their
  # rank; adjusted, from the largest down: 0.048; min(0.048, 3 x 0.010 / 2); the same.
  expected = {('T', 0): 1.5 * a_b.p, ('U', 0): 1.5 * a_b.p, ('U', 1): a_c.p,
              ('U', 2): 1.5 * a_b.p}
  assert family.adjusted == pytest.approx(expected, rel=1e-12)
  assert (f'{a_b.p:.2g}', f'{a_c.p:.2g}') == ('0.01', '0.048')
