"""The table sweeps' machinery: run naming, seeds, overrides, reading finished runs, the markdown."""

import dataclasses
import json
import subprocess
import sys
import time

import pytest

from fedjax_face.io import files
from fedjax_face.tools import claims
from fedjax_face.tools import tables
from fedjax_face.tools.tables import Row, Run, Table


def test_run_names_and_commands():
  run = Run('fedgc/fedgc', 'loss=softmax', (('federated.participation', '0.5'),))
  assert run.name() == 'fedgc-fedgc_loss-softmax_participation-0.5'
  cmd = run.command('/w', (('num_rounds', '3'),))
  assert cmd[1:] == ['-m', 'fedjax_face.main', '--config=configs/fedgc/fedgc.py:loss=softmax',
                     '--workdir=/w', '--config.federated.participation=0.5',
                     '--config.num_rounds=3']
  # The paper's folder is in the name: two papers' 'centralized' runs never share a workdir.
  assert Run('fedfv/centralized').name() != Run('fedgc/centralized').name()
  assert Run('fedfv/centralized').command('/w')[3] == '--config=configs/fedfv/centralized.py'


def test_seed_zero_shares_the_default_run_and_others_add_the_seed():
  run = Run('fedgc/fedpe', 'loss=cosface')
  assert tables.seed_overrides((), 0) == ()
  assert run.name(tables.seed_overrides((), 0)) == 'fedgc-fedpe_loss-cosface'
  extra = tables.seed_overrides((('num_rounds', '3'),), 2)
  assert run.name(extra) == 'fedgc-fedpe_loss-cosface_num_rounds-3_seed-2'
  assert run.command('/w', extra)[-2:] == ['--config.num_rounds=3', '--config.seed=2']


@pytest.mark.parametrize('items, message', [
    (['a'], r'--seeds=a; expected integers'),
    (['0', '0'], r'--seeds=0,0; expected distinct non-negative'),
    (['-1'], r'--seeds=-1; expected distinct non-negative'),
])
def test_bad_seeds(items, message):
  with pytest.raises(ValueError, match=message):
    tables.parse_seeds(items)


def test_seeds_and_overrides_parse():
  assert tables.parse_seeds(['0', '3', '1']) == (0, 3, 1)
  assert tables.parse_overrides(['num_rounds=3', 'a.b=x=y']) == (('num_rounds', '3'),
                                                                 ('a.b', 'x=y'))
  with pytest.raises(ValueError, match=r"--set='num_rounds'; expected field=value"):
    tables.parse_overrides(['num_rounds'])


def fake_result(lfw=None, rank_1=None, tpir=None):
  out = {}
  if lfw is not None:
    out['verification'] = {'lfw': {'accuracy': lfw}}
  if rank_1 is not None:
    out['identification'] = {'rank_1': rank_1, 'tpir_at_fpir': {'0.01': tpir}}
  return out


def test_markdown_one_seed_and_several():
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (94.77,)), Row('B', b, (None,))),
                'B > A', 'ours: X; paper: Y.')
  one = tables.markdown(table, {(a, 0): fake_result(lfw=0.8352)}, 'cmd')
  assert '| A | 83.52 | 94.77 |' in one and '| B | — | — |' in one
  assert 'Paper: B > A.' in one and 'mean ±' not in one
  assert 'Made by `cmd`; ours: X; paper: Y.' in one
  several = tables.markdown(
      table, {(a, 0): fake_result(lfw=0.78), (a, 1): fake_result(lfw=0.82),
              (b, 1): fake_result(lfw=0.9)}, 'cmd', seeds=(0, 1))
  # mean 80, sample std sqrt(8) = 2.83; a row missing a seed says so.
  assert '| A | 80.00 ± 2.83 | 94.77 |' in several
  assert '| B | 90.00 (1 of 2 seeds) | — |' in several
  assert 'mean ± standard deviation over config.seed = 0, 1.' in several


def test_markdown_identification_columns():
  run = Run('fedgc/centralized', 'loss=softmax')
  table = Table('T6', 'identification', ('tpir_at_fpir:0.01', 'rank_1'),
                (Row('C', run, (61.21, 59.65)),), 'claim')
  text = tables.markdown(table, {(run, 0): fake_result(rank_1=0.255, tpir=None)}, 'cmd')
  assert '| method | TPIR@FPIR=0.01 (ours) | TPIR@FPIR=0.01 (paper) | rank-1 (ours) |' in text
  assert '| C | — | 61.21 | 25.50 | 59.65 |' in text


def test_markdown_diagnostics_columns_and_a_pair_set_a_run_lacks():
  run = Run('fedgc/fedpe', 'loss=softmax,lookalikes')
  result = fake_result(lfw=0.75)
  result['diagnostics'] = {'lookalikes': {'class_cos_lookalike': 0.61234}}
  diag = Table('T9', 'diagnostics', ('lookalikes:class_cos_lookalike',
                                     'class_embedding_similarity:within_mean'),
               (Row('FedPE', run, (None, None)),), 'claim', digits=3)
  text = tables.markdown(diag, {(run, 0): result}, 'cmd')
  # The paper has no number in the table: ours alone.
  assert '| method | class cos, look-alikes | within-client class cos |\n' in text
  assert '| FedPE | 0.612 | — |\n' in text
  # An older run without the sllfw pair set leaves its cell empty instead of failing.
  verif = Table('T8', 'verification', ('lfw', 'sllfw'), (Row('FedPE', run, (None, 80.42)),), 'c')
  assert '| FedPE | 75.00 | — | — | 80.42 |' in tables.markdown(verif, {(run, 0): result}, 'cmd')


def test_markdown_results_columns_with_their_own_decimals():
  run = Run('fedgc/fedpe', 'loss=softmax', (('dp.enabled', 'True'),))
  result = {'privacy': {'epsilon': 3.99871},
            'communication': {'bytes_per_client_round': {'up': 621504}}}
  table = Table('P', 'results', ('privacy/epsilon', 'communication/bytes_per_client_round/up'),
                (Row('FedPE', run, (None, None)),), 'none', titles=('epsilon', 'bytes up'),
                column_digits=(2, 0))
  assert '| FedPE | 4.00 | 621504 |' in tables.markdown(table, {(run, 0): result}, 'cmd')


def test_a_row_not_built_keeps_the_papers_numbers_and_starts_nothing(tmp_path):
  run = Run('pad/fedpad', 'protocol=OCI_M')
  table = Table('T5', 'results', ('pad/hter',), (Row('FedAvg', run, (19.45,)),
                                                   Row('FedMA', None, (29.68,))), 'c',
                titles=('HTER',))
  text = tables.markdown(table, {(run, 0): {'pad': {'hter': 0.25}}}, 'cmd')
  assert '| FedAvg | 25.00 | 19.45 |' in text and '| FedMA | not built | 29.68 |' in text
  assert tables.run_all(dataclasses.replace(table, rows=table.rows[1:]), str(tmp_path), (),
                        dry_run=True) == {}


def test_run_all_reads_finished_runs_and_dry_run_starts_nothing(tmp_path, capsys):
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (1.0,))), 'c')
  for run, seed, acc in ((a, 0, 0.5), (a, 1, 0.6)):
    workdir = tmp_path / run.name(tables.seed_overrides((), seed))
    workdir.mkdir()
    (workdir / 'results.json').write_text(json.dumps(fake_result(lfw=acc)))
  got = tables.run_all(table, str(tmp_path), (), dry_run=True, seeds=(0, 1))
  assert got == {(a, 0): fake_result(lfw=0.5), (a, 1): fake_result(lfw=0.6)}
  # Nothing was started; the missing runs are listed with the commands that would make them.
  missing = capsys.readouterr().out.splitlines()
  assert [line.split(' --workdir=')[1].split()[0] for line in missing] == [
      str(tmp_path / b.name(tables.seed_overrides((), 0))),
      str(tmp_path / b.name(tables.seed_overrides((), 1)))]
  assert all(line.startswith('missing: $ python -m fedjax_face.main --config=') for line in missing)
  assert not (tmp_path / b.name()).exists()


def test_a_failed_run_is_recorded_not_retried_and_shown(tmp_path, monkeypatch, capsys):
  # A run that diverges ends in an error: the sweep goes on, writes failed.json with the error
  # line, does not start it again, and the table says 'failed' with the error in a footnote.
  a, b = Run('fedgc/fedgc', 'loss=softmax'), Run('fedgc/fedpe', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (2.0,))), 'c')
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    if self == a:
      return [sys.executable, '-c', 'raise FloatingPointError("round 15: non-finite")']
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              'open(os.path.join(sys.argv[1], "results.json"), "w").write(sys.argv[2])')
    return [sys.executable, '-c', script, workdir, json.dumps(fake_result(lfw=0.7))]

  monkeypatch.setattr(Run, 'command', command)
  got = tables.run_all(table, str(tmp_path), ())
  assert got == {(a, 0): {'failed': 'FloatingPointError: round 15: non-finite'},
                 (b, 0): fake_result(lfw=0.7)}
  assert 'failed (exit 1): FloatingPointError: round 15: non-finite' in capsys.readouterr().out
  assert json.loads((tmp_path / a.name() / 'failed.json').read_text())['returncode'] == 1
  assert tables.run_all(table, str(tmp_path), ()) == got and started == [a, b]   # not retried
  text = tables.markdown(table, got, 'cmd')
  assert '| A | failed | 1.00 |' in text and '| B | 70.00 | 2.00 |' in text
  assert 'Failed runs ended with: `FloatingPointError: round 15: non-finite`' in text


def test_last_error_picks_the_exception_line():
  stderr = 'W1124 font\nTraceback (most recent call last):\n  File "x"\nValueError: bad\n\n'
  assert tables.last_error(stderr) == 'ValueError: bad'
  assert tables.last_error('killed\n') == 'killed'


def test_a_run_that_starts_from_another_runs_it_first_with_the_same_seed(tmp_path, monkeypatch,
                                                                        capsys):
  start = Run('fedfr/pretrain')
  run = Run('fedfr/fedfr', 'row=hn', init_from=start)
  table = Table('T', 'results', ('personalized/tar/0.001', 'last_logged_round/steps_run'),
                (Row('A', run, (None, None)),), 'c')
  commands = []

  def command(self, workdir, extra=()):
    commands.append((self, dict(extra)))
    value = 0.5 if self == run else 0.25
    result = {'personalized': {'tar': {'0.001': value}}, 'last_logged_round': {'steps_run': 7.0}}
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              f'json.dump({result!r}, open(os.path.join(sys.argv[1], "results.json"), "w"))')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  got = tables.run_all(table, str(tmp_path), (), seeds=(1,))
  start_dir = str(tmp_path / start.name(tables.seed_overrides((), 1)))
  assert commands == [(start, {'seed': '1'}), (run, {'seed': '1', 'init_from': start_dir})]
  text = tables.markdown(table, got, 'cmd', seeds=(1,))
  assert '| A | 50.00 | 7.00 |' in text   # rates in %, counts as they are; no paper column
  # A start that failed is the dependent row's failure, and nothing is started after it.
  (tmp_path / 'failed_root').mkdir()
  failed_dir = tmp_path / 'failed_root' / start.name()
  failed_dir.mkdir()
  (failed_dir / tables.FAILED).write_text(json.dumps({'returncode': 1, 'error': 'boom'}))
  commands.clear()
  got = tables.run_all(table, str(tmp_path / 'failed_root'), (), seeds=(0,))
  assert commands == [] and got == {(run, 0): {'failed': 'boom'}}


def ordered_table(**ordering):
  a, b, c = Run('fedfr/fedfr'), Run('fedfr/fedface'), Run('fedfr/pretrain')
  fields = dict(ahead=('A',), behind=('B',), column='lfw', claim='A above B') | ordering
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (None,)), Row('B', b, (None,)),
                                                Row('C', c, (None,))), 'c',
                orderings=(tables.Ordering(**fields),))
  return table, (a, b, c)


def lfw_results(runs, seeds_values):
  """{(run, seed): a result of that LFW accuracy}, from {seed: (accuracy per run)}."""
  return {(run, seed): fake_result(lfw=value)
          for seed, values in seeds_values.items() for run, value in zip(runs, values)}


def test_an_ordering_is_checked_seed_by_seed():
  table, (a, b, _) = ordered_table()
  results = lfw_results((a, b), {0: (0.80, 0.75), 1: (0.70, 0.71), 2: (0.72, 0.72)})
  margins = tables.ordering_margins(table, table.orderings[0], results, (0, 1, 2))
  assert margins == pytest.approx({0: 5.0, 1: -1.0, 2: 0.0})
  # A tie (seed 2) does not hold the ordering; one seed ahead by 5 points is within the noise of
  # the three: mean 4/3, sd 3.21, t = 0.72.
  text = tables.markdown(table, results, 'cmd', seeds=(0, 1, 2))
  assert ('- A above B (LFW): **within noise**: holds in 1 of 3 seeds (by -1.00 to +5.00; '
          '|t| = 0.72 ≤ 2.92).' in text)
  assert tables.VERDICT_RULE in text
  # One seed gives no estimate of the noise: never reproduced, however far ahead.
  one = tables.markdown(table, results, 'cmd', seeds=(0,))
  assert ('- A above B (LFW): **within noise**: holds in 1 of 1 seed (by +5.00; one seed gives '
          'no noise estimate).' in one)


def test_the_stated_quantiles_are_student_s():
  # VERDICT_RULE quotes them: t(0.95) with 2 and 4 degrees of freedom.
  assert round(tables.t_critical(3), 2) == 2.92 and round(tables.t_critical(5), 2) == 2.13
  assert '2.92 for 3 seeds, 2.13 for 5' in tables.VERDICT_RULE


@pytest.mark.parametrize('margins, seeds, verdict', [
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
def test_the_verdict_needs_every_seed_and_an_effect_above_the_noise(margins, seeds, verdict):
  assert tables.judge(margins, seeds).verdict == verdict


def test_a_t_that_rounds_to_its_quantile_prints_the_digits_that_tell_them_apart():
  # Five seeds' quantile, 2.131847, and a t of 2.1334 (FedFR Table 1 has one such line), which two
  # decimals would print as "t = 2.13 > 2.13"; the margins only fill the seed count.
  verdict = tables.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 2.1334, 2.131847)
  assert tables._verdict_detail(verdict, (0, 1)).endswith('t = 2.133 > 2.132)')
  below = tables.Verdict('within noise', {0: 1.0, 1: 0.0}, (), -2.1316, 2.131847)
  assert tables._verdict_detail(below, (0, 1)).endswith('|t| = 2.1316 ≤ 2.1318)')
  usual = tables.Verdict('within noise', {0: 1.0, 1: 0.0}, (), 1.0, 2.131847)
  assert tables._verdict_detail(usual, (0, 1)).endswith('|t| = 1.00 ≤ 2.13)')


def test_an_ordering_averages_rows_reads_lower_as_better_and_counts_missing_seeds_against():
  table, (a, b, c) = ordered_table(ahead=('A', 'C'), lower_is_better=True, claim='A, C below B')
  results = {(a, 0): fake_result(lfw=0.10), (c, 0): fake_result(lfw=0.20),
             (b, 0): fake_result(lfw=0.40), (a, 1): fake_result(lfw=0.10),
             (b, 1): {'failed': 'FloatingPointError: round 2'}}
  # Seed 0: mean(10, 20) = 15 lies 25 points below 40; seed 1 lacks C and B.
  assert tables.ordering_margins(table, table.orderings[0], results, (0, 1)) == pytest.approx(
      {0: 25.0})
  text = tables.markdown(table, results, 'cmd', seeds=(0, 1))
  assert ('- A, C below B (LFW): **within noise**: holds in 1 of 2 seeds (by +25.00; one seed '
          'gives no noise estimate; seed 1: no value (not run or failed), counted against).'
          in text)
  assert tables.ordering_line(table, table.orderings[0], {}, (0,)).endswith(
      'not measured: no seed has a value on both sides (not run, or failed).')


def test_a_claim_on_several_columns_is_checked_on_each():
  a, b = Run('fedfr/fedfr'), Run('fedfr/fedface')
  claim = 'A above B'
  table = Table('T', 'verification', ('lfw', 'cfp_fp'),
                (Row('A', a, (None, None)), Row('B', b, (None, None))), 'c',
                orderings=(tables.Ordering(('A',), ('B',), 'lfw', claim),
                           tables.Ordering(('A',), ('B',), 'cfp_fp', claim)))
  values = {0: ((0.80, 0.60), (0.70, 0.65)), 1: ((0.81, 0.61), (0.70, 0.67)),
            2: ((0.82, 0.62), (0.70, 0.70))}   # seed: ((A's lfw, cfp_fp), (B's lfw, cfp_fp))
  results = {(run, seed): {'verification': {'lfw': {'accuracy': lfw},
                                            'cfp_fp': {'accuracy': cfp}}}
             for seed, rows in values.items() for run, (lfw, cfp) in zip((a, b), rows)}
  lines = tables.ordering_lines(table, results, (0, 1, 2))
  assert lines == [
      '- A above B: reproduced on 1 of 2 columns, reversed on 1:',
      '  - LFW: **reproduced**: holds in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92).',
      '  - CFP-FP: **reversed**: holds in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92).']
  # The same orderings asked by us in a table no paper reports (the building blocks') read
  # 'ahead' and 'behind', under a head of their own that tools/claims.py still finds.
  ours = dataclasses.replace(table, own_orderings=True)
  assert tables.ordering_lines(ours, results, (0, 1, 2)) == [
      '- A above B: ahead on 1 of 2 columns, behind on 1:',
      '  - LFW: **ahead**: ahead in 3 of 3 seeds (by +10.00 to +12.00; t = 19.05 > 2.92).',
      '  - CFP-FP: **behind**: ahead in 0 of 3 seeds (by -8.00 to -5.00; t = -7.18 < -2.92).']
  text = tables.markdown(ours, results, 'cmd', (0, 1, 2))
  assert '\nOur own orderings (no paper states them), on ours seed by seed' in text
  assert "The paper's orderings" not in text
  assert claims.verdict_lines(text) == tables.ordering_lines(ours, results, (0, 1, 2))
  assert claims.verdict_lines(tables.markdown(table, results, 'cmd', (0, 1, 2))) == lines


@pytest.mark.parametrize('field, value, message', [
    ('ahead', ('Z',), r"ordering 'A above B' names row 'Z'; expected one of \['A', 'B', 'C'\]"),
    ('column', 'cfp_fp', r"ordering 'A above B' reads column 'cfp_fp'; expected one of \['lfw'\]"),
])
def test_an_ordering_must_name_the_tables_rows_and_columns(field, value, message):
  with pytest.raises(ValueError, match=message):
    ordered_table(**{field: value})


def test_equal_measurements_tie_despite_the_percent_scaling():
  table, (a, b, _) = ordered_table()
  # 0.1 * 3 and 0.3 differ in the last bit; the same measurement must tie.
  results = {(a, 0): fake_result(lfw=0.1 * 3), (b, 0): fake_result(lfw=0.3)}
  assert 0.1 * 3 * 100 != 0.3 * 100
  assert tables.ordering_margins(table, table.orderings[0], results, (0,)) == {0: 0.0}
  # Either way round, and printed without a sign that suggests a loss.
  swapped = {(a, 0): results[(b, 0)], (b, 0): results[(a, 0)]}
  assert '(by +0.00; ' in tables.markdown(table, swapped, 'cmd')


def write_run(root, run: Run, seed: int, result: dict, config: dict | None = None) -> str:
  """A finished run's workdir under `root`: results.json, and config.json when given."""
  run_dir = root / run.name(tables.seed_overrides((), seed))
  run_dir.mkdir(parents=True)
  (run_dir / 'results.json').write_text(json.dumps(result))
  if config is not None:
    (run_dir / 'config.json').write_text(json.dumps(config))
  return str(run_dir)


def at(commit: str, dirty: bool = False) -> dict:
  """A provenance record (`io/provenance.collect()`) at the commit `commit * 40`."""
  return {'git': {'commit': commit * 40, 'dirty': dirty, 'version': None}}


def two_row_table():
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  return Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (1.0,))), 'c'), a, b


def test_runs_made_before_provenance_are_unrecorded_and_accepted(tmp_path):
  table, a, b = two_row_table()
  write_run(tmp_path, a, 0, fake_result(lfw=0.5), config={'seed': 0})
  write_run(tmp_path, b, 0, fake_result(lfw=0.6))
  dirs = tables.finished_workdirs(table, str(tmp_path), (), (0, 1))
  assert dirs == [str(tmp_path / a.name()), str(tmp_path / b.name())]
  assert tables.commit_counts(dirs) == {'unrecorded': 2}
  line = tables.commits_line({'unrecorded': 2})
  assert line == 'commit: unrecorded (runs made before provenance was recorded)'
  results = tables.run_all(table, str(tmp_path), (), dry_run=True)
  assert line + '\n' in tables.markdown(table, results, 'cmd', commits=line)
  assert tables.commits_line({}) == ''   # nothing finished yet: nothing to say


def test_runs_of_one_commit_name_it():
  assert tables.commits_line({'aaaaaaaaaaaa': 3}) == 'commit: aaaaaaaaaaaa (3 runs)'
  assert tables.commits_line({'aaaaaaaaaaaa+dirty': 1}) == 'commit: aaaaaaaaaaaa+dirty (1 run)'


def test_a_table_of_mixed_commits_is_refused_unless_allowed(tmp_path):
  table, a, b = two_row_table()
  write_run(tmp_path, a, 0, fake_result(lfw=0.5) | {'provenance': at('a')})
  write_run(tmp_path, a, 1, fake_result(lfw=0.5) | {'provenance': at('a')})
  write_run(tmp_path, b, 0, fake_result(lfw=0.6) | {'provenance': at('a', dirty=True)})
  write_run(tmp_path, b, 1, fake_result(lfw=0.6))   # archived before provenance
  counts = tables.commit_counts(tables.finished_workdirs(table, str(tmp_path), (), (0, 1)))
  assert counts == {'aaaaaaaaaaaa': 2, 'aaaaaaaaaaaa+dirty': 1, 'unrecorded': 1}
  with pytest.raises(tables.MixedCommitsError) as refused:
    tables.commits_line(counts)
  assert str(refused.value) == (
      'the runs come from 3 commits: aaaaaaaaaaaa (2 runs), aaaaaaaaaaaa+dirty (1 run), '
      'unrecorded (1 run); rerun them at one commit, or pass --allow_mixed_commits to make the '
      'table anyway.')
  line = tables.commits_line(counts, allow_mixed=True)
  assert line == ('commits (mixed, --allow_mixed_commits): aaaaaaaaaaaa (2 runs), '
                  'aaaaaaaaaaaa+dirty (1 run), unrecorded (1 run)')
  # Seed 0 alone is one commit per run but still two labels (a dirty tree is code of its own).
  with pytest.raises(tables.MixedCommitsError, match=r'2 commits: aaaaaaaaaaaa \(1 run\), '
                     r'aaaaaaaaaaaa\+dirty \(1 run\)'):
    tables.commits_line(tables.commit_counts(
        tables.finished_workdirs(table, str(tmp_path), (), (0,))))


def test_a_run_resumed_across_commits_counts_for_each_of_them(tmp_path):
  table, a, b = two_row_table()
  # config.json's record (start, then resumes) is read over results.json's (the last of them).
  resumed = {'seed': 0, 'provenance': {'start': at('a'), 'resumed': [
      at('b') | {'from_round': 2}, at('a') | {'from_round': 4}]}}
  write_run(tmp_path, a, 0, fake_result(lfw=0.5) | {'provenance': at('a')}, config=resumed)
  write_run(tmp_path, b, 0, fake_result(lfw=0.6) | {'provenance': at('a')},
            config={'seed': 0, 'provenance': {'start': at('a'), 'resumed': []}})
  assert tables.run_commits(str(tmp_path / a.name())) == ['aaaaaaaaaaaa', 'bbbbbbbbbbbb']
  counts = tables.commit_counts(tables.finished_workdirs(table, str(tmp_path), (), (0,)))
  assert counts == {'aaaaaaaaaaaa': 2, 'bbbbbbbbbbbb': 1}
  with pytest.raises(tables.MixedCommitsError):
    tables.commits_line(counts)


def test_the_commits_include_the_runs_a_table_combines_or_starts_from(tmp_path):
  start = Run('fedfr/pretrain')
  run = Run('fedfr/fedfr', 'row=hn', init_from=start)
  single = Run('pad/single', 'channel=rgb')
  fused = tables.Combined('fused', (single,), lambda dirs: {})
  table = Table('T', 'results', ('x',), (Row('A', run, (None,)), Row('F', fused, (None,)),
                                         Row('S', single, (None,))), 'c')
  for each, commit in ((start, 'a'), (run, 'b'), (single, 'c')):
    write_run(tmp_path, each, 0, {'provenance': at(commit)})
  dirs = tables.finished_workdirs(table, str(tmp_path), (), (0,))
  assert dirs == [str(tmp_path / name) for name in (run.name(), start.name(), single.name())]
  assert tables.commit_counts(dirs) == {'aaaaaaaaaaaa': 1, 'bbbbbbbbbbbb': 1, 'cccccccccccc': 1}


def test_the_paper_s_column_keeps_its_own_title_where_it_measures_something_else():
  a = Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'identification', ('tpir_at_fpir:0.01', 'rank_1'),
                (Row('A', a, (69.87, 61.26)),), 'c',
                paper_titles=('MegaFace TPR@FPR=1e-6', 'MegaFace rank-1'))
  text = tables.markdown(table, {(a, 0): fake_result(rank_1=0.5, tpir=0.25)}, 'cmd')
  assert ('| method | TPIR@FPIR=0.01 (ours) | MegaFace TPR@FPR=1e-6 (paper) | rank-1 (ours) | '
          'MegaFace rank-1 (paper) |' in text)
  assert '| A | 25.00 | 69.87 | 50.00 | 61.26 |' in text


def test_archive_keeps_what_a_table_is_rebuilt_from_and_nothing_else(tmp_path):
  start, failing = Run('fedfr/pretrain'), Run('fedfr/fedface')
  run = Run('fedfr/fedfr', init_from=start)
  table = Table('T', 'verification', ('lfw',), (Row('A', run, (None,)),
                                                Row('B', failing, (None,))), 'c',
                archived_files=('class_embedding_similarity.npz',))   # as FedFV Table 3's
  root, archive = tmp_path / 'sweep', tmp_path / 'results' / 'toy_tables'
  ended = {start: ('results.json', fake_result(lfw=0.7)),
           run: ('results.json', fake_result(lfw=0.8)),
           failing: (tables.FAILED, {'returncode': 1, 'error': 'boom'})}
  for r, (name, content) in ended.items():
    run_dir = root / r.name()
    (run_dir / 'checkpoints' / '4').mkdir(parents=True)
    (run_dir / name).write_text(json.dumps(content))
    for extra in ('config.json', 'pad_video_scores.npz', 'pad_video_scores_O.npz',
                  'class_embedding_similarity.npz', 'report.md', 'pad_roc.png', 'log.txt'):
      (run_dir / extra).write_text('x')
  kept = tables.archive_runs(table, str(root), (), (0,), str(archive))
  assert sorted(kept) == sorted(str(archive / r.name()) for r in ended)
  assert sorted(p.name for p in (archive / run.name()).iterdir()) == [
      'class_embedding_similarity.npz', 'config.json', 'pad_video_scores.npz',
      'pad_video_scores_O.npz', 'results.json']
  assert sorted(p.name for p in (archive / failing.name()).iterdir()) == [
      'class_embedding_similarity.npz', 'config.json', tables.FAILED, 'pad_video_scores.npz',
      'pad_video_scores_O.npz']
  # The archive is a root that `run_all` reads back as it read the sweep, nothing started.
  assert (tables.run_all(table, str(archive), (), dry_run=True)
          == tables.run_all(table, str(root), (), dry_run=True)
          == {(run, 0): fake_result(lfw=0.8), (failing, 0): {'failed': 'boom'}})


def test_park_leaves_what_a_commit_carries_and_the_queue_resumes_from_it(tmp_path):
  start, failing, unfinished = Run('fedfr/pretrain'), Run('fedfr/fedface'), Run('fedgc/fedpe')
  run = Run('fedfr/fedfr', init_from=start)
  outside = Run('fedgc/fedgc')   # in the root, but no run of this table
  table = Table('T', 'verification', ('lfw',), (Row('A', run, (None,)), Row('B', failing, (None,)),
                                                Row('C', unfinished, (None,))), 'c')
  root = tmp_path / 'sweep'
  everything = ('config.json', 'pad_video_scores.npz', 'report.md', '.hidden', 'log.txt',
                'class_embedding_similarity.npz')   # kept only where a table names it
  for r, ended in ((start, 'results.json'), (run, 'results.json'), (failing, tables.FAILED),
                   (unfinished, None), (outside, 'results.json')):
    run_dir = root / r.name()
    (run_dir / 'checkpoints' / '4').mkdir(parents=True)
    (run_dir / 'checkpoints' / '4' / 'state').write_text('x')
    for name in everything:
      (run_dir / name).write_text('x')
    if ended == tables.FAILED:
      (run_dir / ended).write_text(json.dumps({'returncode': 1, 'error': 'boom'}))
    elif ended:
      (run_dir / ended).write_text(json.dumps(fake_result(lfw=0.8)))
  before = tables.run_all(table, str(root), (), dry_run=True)

  lines = tables.park(table, str(root), (), (0, 1))
  assert lines == [f'pruned to its archived files: {root / run.name()}',
                   f'kept whole, other runs start from it: {root / start.name()}',
                   f'pruned to its archived files: {root / failing.name()}',
                   f'removed, not ended: {root / unfinished.name()}']
  listing = lambda r: sorted(p.name for p in (root / r.name()).iterdir())
  assert listing(run) == ['config.json', 'pad_video_scores.npz', 'results.json']
  assert listing(failing) == ['config.json', tables.FAILED, 'pad_video_scores.npz']
  assert listing(start) == sorted(everything + ('checkpoints', 'results.json'))
  assert (root / start.name() / 'checkpoints' / '4' / 'state').exists()
  assert listing(outside) == sorted(everything + ('checkpoints', 'results.json'))
  assert not (root / unfinished.name()).exists()
  # Read back, the parked root is the same table; only the unfinished run is missing again.
  assert tables.run_all(table, str(root), (), dry_run=True) == before
  assert tables.park(table, str(root), (), (0, 1)) == [
      f'kept whole, other runs start from it: {root / start.name()}']   # nothing more to do
  # A run shared with a table that keeps more of it (FedFV Table 3's cosines) keeps that too,
  # and only that run.
  shared = root / outside.name()
  (root / unfinished.name()).mkdir()
  for name in everything + ('results.json',):
    (root / unfinished.name() / name).write_text('x')
  wider = Table('U', 'verification', ('lfw',),
                (Row('D', outside, (None,)), Row('E', unfinished, (None,))), 'c')
  tables.park(wider, str(root), (), (0,),
              also_kept={str(shared): ('class_embedding_similarity.npz',)})
  assert listing(outside) == ['class_embedding_similarity.npz', 'config.json',
                              'pad_video_scores.npz', 'results.json'] and shared.exists()
  assert listing(unfinished) == ['config.json', 'pad_video_scores.npz', 'results.json']


def test_a_run_another_lane_is_training_is_waited_for_and_read_not_started_again(tmp_path,
                                                                                monkeypatch):
  run = Run('fedgc/fedpe')
  run_dir = tmp_path / run.name()
  run_dir.mkdir()
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    # Refused as files.workdir_lock refuses, by a lane that finished just before the refusal.
    script = ('import json, os, sys; d = sys.argv[1]; '
              f'json.dump({fake_result(lfw=0.7)!r}, open(os.path.join(d, "results.json"), "w")); '
              f'sys.exit("RuntimeError: --workdir={{d}} {files.IN_USE} pid 1 on host h")')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  # Another process holds the workdir's lock and writes results.json before it lets go.
  holder = subprocess.Popen([sys.executable, '-c', (
      'import fcntl, json, os, sys, time; d = sys.argv[1]; '
      'h = open(os.path.join(d, ".lock"), "a+"); fcntl.flock(h, fcntl.LOCK_EX); '
      'open(os.path.join(d, "locked"), "w").close(); time.sleep(1); '
      f'json.dump({fake_result(lfw=0.8)!r}, open(os.path.join(d, "results.json"), "w"))'),
      str(run_dir)])
  while not (run_dir / 'locked').exists():
    time.sleep(0.01)
  assert tables.ensure_run(run, str(tmp_path), (), 0, dry_run=False) == str(run_dir)
  holder.wait()
  assert started == [] and json.loads((run_dir / 'results.json').read_text()) == fake_result(
      lfw=0.8)
  # Refused by a lock taken between the check and the start: read, no failed.json written.
  (run_dir / 'results.json').unlink()
  assert tables.ensure_run(run, str(tmp_path), (), 0, dry_run=False) == str(run_dir)
  assert started == [run] and not (run_dir / tables.FAILED).exists()
  assert tables.run_all(Table('T', 'verification', ('lfw',), (Row('A', run, (None,)),), 'c'),
                        str(tmp_path), ()) == {(run, 0): fake_result(lfw=0.7)}


def test_spot_check_reruns_one_run_per_method_and_compares_the_printed_cells(tmp_path,
                                                                           monkeypatch):
  a1, a2 = Run('fedgc/fedgc', 'loss=softmax'), Run('fedgc/fedgc', 'loss=cosface')
  b = Run('fedgc/fedpe')
  table = Table('T', 'verification', ('lfw',), (Row('A1', a1, (None,)), Row('A2', a2, (None,)),
                                                Row('B', b, (None,))), 'c')
  assert tables.spot_runs(table) == [a1, b]   # one per config file: the first row's
  archive = tmp_path / 'archive'
  write_run(archive, a1, 0, fake_result(lfw=0.812341))
  def on(os_build, extensions):   # provenance of a machine (io/provenance.py:machine)
    return {'provenance': {'platform': {'os': os_build, 'cpu': {
        'model': 'AMD EPYC', 'vector_extensions': extensions, 'usable': 2}}}}
  write_run(archive, b, 0, fake_result(lfw=0.75) | on('v769', ['avx2']))
  # The same at 2 decimals (81.23), and not (75.00 -> 75.12, on another machine kind).
  rerun = {a1: fake_result(lfw=0.812344), b: fake_result(lfw=0.7512) | on('v669', ['avx2', 'f16c'])}
  started = []

  def command(self, workdir, extra=()):
    started.append(self)
    result = rerun[self]
    script = ('import json, os, sys; os.makedirs(sys.argv[1], exist_ok=True); '
              f'json.dump({result!r}, open(os.path.join(sys.argv[1], "results.json"), "w"))')
    return [sys.executable, '-c', script, workdir]

  monkeypatch.setattr(Run, 'command', command)
  lines = tables.spot_check(table, str(archive), str(tmp_path / 'fresh'))
  assert started == [a1, b]
  assert lines == [
      f'{a1.name()}: same digits (archive at unrecorded, rerun at unrecorded)',
      f'differs: {b.name()}: LFW 75.00 -> 75.12 (archive at unrecorded, rerun at unrecorded; '
      'machine: os v769 -> v669; CPU gained f16c)']
