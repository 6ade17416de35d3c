"""tools/tables/seed_plan.py: which orderings five seeds could decide otherwise, on hand-made
tables whose margins are chosen so that each flag follows by hand (the t and p values in the
comments are Student's t with n - 1 degrees of freedom)."""

import json
import os

import pytest

from fedjax_face.io import provenance
from fedjax_face.tools.tables import seed_plan
from fedjax_face.tools.tables import spec
from fedjax_face.tools.tables import verdict

BASE = spec.Run('x/base')


def run(label):
  return spec.Run(f'x/{label}')


def make_table(margins: dict[str, dict[int, float]], title='T') -> tuple[spec.Table, dict]:
  """A table of a row 'base' (accuracy 0) and one row per label, each with the ordering 'label
  above base' on LFW, and the results giving each label its per-seed margin (in points)."""
  rows = [spec.Row('base', BASE, ())] + [spec.Row(label, run(label), ()) for label in margins]
  orderings = tuple(spec.Ordering((label,), ('base',), 'lfw', f'{label} above base')
                    for label in margins)
  table = spec.Table(title, 'verification', ('lfw',), tuple(rows), '', orderings=orderings)
  seeds = {seed for by_seed in margins.values() for seed in by_seed}
  results = {(BASE, seed): {'verification': {'lfw': {'accuracy': 0.0}}} for seed in seeds}
  for label, by_seed in margins.items():
    for seed, margin in by_seed.items():
      results[(run(label), seed)] = {'verification': {'lfw': {'accuracy': margin / 100}}}
  return table, results


def archived(margins, seeds, name='t', title='T', root='', headline=False):
  table, results = make_table(margins, title)
  return seed_plan.Archived(name, 'docs/x.md', table, results, seeds, root, (), headline)


def flags(assessed):
  return [(a.table, a.index, a.current, a.reachable, a.flagged) for a in assessed]


THREE = (0, 1, 2)
TINY = {0: 10.0, 1: 10.1, 2: 10.2}   # t = 10.1 / (0.1 / sqrt 3) = 174.9: p about 1.6e-5


def test_band_is_mean_two_sd_or_the_range():
  assert seed_plan.band([1.0, 2.0, 3.0]) == (0.0, 4.0)           # mean 2, sd 1
  assert seed_plan.band([1.0, 2.0, 3.0], 'range') == (1.0, 3.0)
  with pytest.raises(ValueError, match=r"band='iqr'; expected one of \['sd2', 'range'\]\."):
    seed_plan.band([1.0, 2.0], 'iqr')


def test_t_and_p_are_the_rules():
  values = [[1.0, 2.0, 3.0, 1.0, 1.0], [1.0, 2.0, 6.0, 3.0, 3.0], [2.0] * 5, [0.0] * 5]
  import numpy as np  # pylint: disable=g-import-not-at-top
  t, p = seed_plan.t_and_p(np.array(values))
  for row, (ti, pi) in enumerate(zip(t, p)):
    judged = verdict.judge(dict(enumerate(values[row])), (0, 1, 2, 3, 4))
    assert (ti, pi) == (judged.t, judged.p)


def test_bh_threshold_by_hand():
  # m = 4, q = 0.05: k q / m = 0.0125, 0.025, 0.0375, 0.05; others at most each: 1, 2, 2, 2;
  # k = 3 is the largest with at least k - 1 of them: 0.0375.
  assert seed_plan.bh_threshold([0.001, 0.02, 0.5]) == pytest.approx(0.0375)
  # The same as the procedure: at p = 0.0375 the test is rejected, just above it is not.
  assert verdict.bh_adjusted([0.001, 0.02, 0.5, 0.0375])[3] <= verdict.FDR
  assert verdict.bh_adjusted([0.001, 0.02, 0.5, 0.0376])[3] > verdict.FDR
  assert seed_plan.bh_threshold([]) == 0.05


def test_reproduced_flips_when_the_band_reaches_zero_and_not_within_the_range():
  # Margins 1, 2, 3: t = 3.46 > 2.92, p = 0.037, reproduced on its own.
  page = [archived({'a': {0: 1.0, 1: 2.0, 2: 3.0}}, THREE)]
  # mean ± 2 sd is [0, 4]: a new seed at 0 does not hold, so within noise is reachable.
  assert flags(seed_plan.assess(page, 'sd2')) == [
      ('t', 0, 'reproduced', ('reproduced', 'within noise'), True)]
  # Within [1, 3] every seed holds and p stays under 0.05 (the least t, 4.0 at new seeds 1, 1:
  # p = 0.008): it cannot flip.
  assert flags(seed_plan.assess(page, 'range')) == [('t', 0, 'reproduced', ('reproduced',), False)]


def test_reversed_needs_every_seed_too():
  page = [archived({'a': {0: -1.0, 1: -2.0, 2: -3.0}}, THREE)]
  assert flags(seed_plan.assess(page, 'sd2')) == [
      ('t', 0, 'reversed', ('within noise', 'reversed'), True)]   # band [-4, 0]
  assert flags(seed_plan.assess(page, 'range')) == [('t', 0, 'reversed', ('reversed',), False)]


def test_within_noise_can_become_reproduced():
  # Margins 1, 2, 6: t = 1.96, p = 0.094, within noise. With both new seeds at the mean 3:
  # sd = sqrt(14 / 4), t = 3 / (1.87 / sqrt 5) = 3.59, p = 0.012: reproduced.
  page = [archived({'a': {0: 1.0, 1: 2.0, 2: 6.0}}, THREE)]
  assessed = seed_plan.assess(page)
  assert flags(assessed) == [('t', 0, 'within noise', ('reproduced', 'within noise'), True)]
  assert assessed[0].central == 'reproduced'


def test_mixed_signs_and_missing_seeds_cannot_flip():
  # A seed behind already: no new seeds make every seed hold. A missing seed counts against.
  page = [archived({'a': {0: 1.0, 1: -1.0, 2: 2.0}, 'b': {0: 1.0, 1: 2.0}}, THREE)]
  assert flags(seed_plan.assess(page)) == [
      ('t', 0, 'within noise', ('within noise',), False),
      ('t', 1, 'within noise', ('within noise',), False)]


def test_one_seed_is_always_flagged():
  page = [archived({'a': {0: 1.0}}, (0,))]
  assert flags(seed_plan.assess(page)) == [('t', 0, verdict.ONE_SEED, (), True)]


def test_the_family_free_flags_what_held_does_not():
  # 'a' (margins 1, 2, 3, p = 0.037) beside seven orderings of p about 1.6e-5: every one is
  # rejected (a: rank 8, 8 * 0.037 / 8 ≤ 0.05). Held, a's threshold is 0.05 (`bh_threshold`:
  # the seven others under 8 q / 8), and within [1, 3] p stays under it: not flagged. Free,
  # the threshold may fall to q / 8 = 0.00625, above which new seeds 1, 1 put p (0.008):
  # within noise is reachable.
  margins = {'a': {0: 1.0, 1: 2.0, 2: 3.0}, **{f'z{i}': TINY for i in range(7)}}
  page = [archived(margins, THREE)]
  held = seed_plan.assess(page, 'range', 'held')
  free = seed_plan.assess(page, 'range', 'free')
  assert [a.current for a in held] == ['reproduced'] * 8
  assert flags(held)[0] == ('t', 0, 'reproduced', ('reproduced',), False)
  assert flags(free)[0] == ('t', 0, 'reproduced', ('reproduced', 'within noise'), True)
  assert [a.flagged for a in free[1:]] == [False] * 7


def test_tables_at_five_seeds_are_not_assessed():
  page = [archived({'a': {s: 1.0 + s for s in range(5)}}, (0, 1, 2, 3, 4), name='five'),
          archived({'a': {0: 1.0, 1: 2.0, 2: 6.0}}, THREE, name='three', title='U')]
  assert [a.table for a in seed_plan.assess(page)] == ['three']


def test_flips_and_the_five_seed_check():
  # Seeds 0-2: margins 1, 2, 6 (p = 0.094, within noise); 0-4 with 3, 3: p = 0.012, reproduced.
  five = archived({'a': {0: 1.0, 1: 2.0, 2: 6.0, 3: 3.0, 4: 3.0}}, (0, 1, 2, 3, 4), name='five')
  three = archived({'a': {0: 1.0, 1: 2.0, 2: 6.0, 3: 3.0, 4: 3.0}}, THREE, name='five')
  assert seed_plan.flips([three], [five]) == [
      ('five', 0, 'a above base (lfw)', 'within noise', 'reproduced')]
  assert seed_plan.five_seed_check([[five]]) == [
      'Check: of the 1 orderings of the tables archived at five seeds, 1 are decided otherwise '
      'at seeds 0-2; the plan on seeds 0-2 flags 1 of them (1 of the 1 in all).',
      '  five [0] a above base (lfw): within noise at seeds 0-2, reproduced at 0-4; flagged']


def test_run_seconds_adds_back_the_rounds_before_a_resume():
  assert seed_plan.run_seconds({'rounds': 40, 'timing': {'total_s': 50.0}}) == 50.0
  # 10 of 40 rounds were trained in an earlier sitting: 30 rounds took 30 s, so 10 more.
  assert seed_plan.run_seconds({'rounds': 40, 'timing': {
      'total_s': 50.0, 'train_s': 30.0, 'resumed_from_round': 10}}) == 60.0
  assert seed_plan.run_seconds({'rounds': 40}) is None


def sitting(kind, commit):
  """A sitting's provenance as `provenance.collect` records it (the fields the plan reads)."""
  return {'git': {'commit': commit, 'dirty': False},
          'platform': {'cpu': {'model': kind, 'usable': 2}}}


def write_result(root, run_, seed, seconds, kind=None, commit=None, resumed=()):
  """A finished run's results.json; with `kind` (and `commit`) also its config.json's record of
  its start at them and of each `resumed` (kind, commit) sitting."""
  run_dir = spec.workdir(str(root), run_, (), seed)
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, 'results.json'), 'w') as f:
    json.dump({'rounds': 1, 'timing': {'total_s': seconds}}, f)
  if kind is not None:
    with open(os.path.join(run_dir, 'config.json'), 'w') as f:
      json.dump({'provenance': {'start': sitting(kind, commit), 'resumed': [
          sitting(*later) | {'from_round': 1} for later in resumed]}}, f)


def test_run_costs_stand_in_with_the_same_runs_archived_seeds(tmp_path):
  write_result(tmp_path, run('a'), 0, 100.0)
  write_result(tmp_path, run('a'), 1, 200.0)
  write_result(tmp_path, BASE, 0, 60.0)
  item = archived({'a': {0: 1.0, 1: 2.0}}, (0, 1), root=str(tmp_path))
  assert seed_plan.run_costs(item, (0, 1, 2)) == {
      'x-base': (60.0, True), 'x-base_seed-1': (60.0, False), 'x-base_seed-2': (60.0, False),
      'x-a': (100.0, True), 'x-a_seed-1': (200.0, True), 'x-a_seed-2': (150.0, False)}


def test_units_greedy_priority_and_headline():
  runs_of = {'x': {1, 2}, 'y': {2, 3}, 'z': {4}, 'w': {3}}
  items = [seed_plan.Archived(n, '', None, {}, THREE, '') for n in runs_of]
  assert seed_plan.units(items, runs_of) == [['x', 'y', 'w'], ['z']]
  # a: 10 s; b: its run r2 is a's, so 4 s more; c: 3 s more passes 14 s.
  candidates = [('a', {'r1': 5.0, 'r2': 5.0}), ('b', {'r2': 5.0, 'r3': 4.0}), ('c', {'r4': 3.0})]
  assert seed_plan.greedy(candidates, 14.0) == (['a', 'b'], 14.0)
  assert seed_plan.greedy(candidates, 13.0) == (['a', 'c'], 13.0)
  ordered = seed_plan.priority([('p', False, 10, 3600.0), ('q', True, 1, 7200.0),
                                ('r', False, 4, 720.0)])
  assert [name for name, *_ in ordered] == ['q', 'r', 'p']
  page = 'See [Table 8](x_table8.md), then [Table 1](x_table1.md).'
  assert seed_plan.headline_table(page, ['x1', 'x8', 'x2'], {
      'x1': 'x_table1.md', 'x8': 'x_table8.md', 'x2': 'x_table2.md'}) == 'x8'


def test_plan_lines(tmp_path, monkeypatch):
  monkeypatch.setattr(provenance, 'cpu', lambda: {'model': 'Kind B', 'usable': 2})
  for seed in THREE:   # 5 seeds x (6 + 12 minutes): 1.5 lane-hours
    write_result(tmp_path, BASE, seed, 360.0)
    write_result(tmp_path, run('a'), seed, 720.0)
  page = [archived({'a': {0: 1.0, 1: 2.0, 2: 6.0}}, THREE, root=str(tmp_path), headline=True)]
  lines = seed_plan.plan([page], budget_hours=1.0, commit='abc1234', sweep_root='R')
  # Runs without a recorded machine are not this machine's kind: the table reruns whole.
  assert lines[0] == (
      'Seed plan: band sd2, family free; a flagged table reruns whole at seeds 0,1,2,3,4 (the '
      "machine changed: here Kind B, the flagged tables' archived runs unrecorded (1 of 1)); "
      "lane-hours from the archived runs' timing.total_s.")
  assert lines[1:] == [
      '== docs/x.md: 1 of 1 orderings below five seeds flagged',
      't (seeds 0,1,2, headline): 1 of 1 flagged; 10 runs at seeds 0-4 (6 timed in the archive, '
      '4 stand-ins): 1.5 lane-hours',
      '  [0] a above base (lfw): within noise -> could be reproduced; with the new seeds at the '
      'mean: reproduced',
      'Units that rerun together (tables sharing a run; flagged tables at seeds 0-4, the others '
      'at their seeds now):',
      '  t: 1 flagged, 10 runs, 1.5 lane-hours (holds a headline table)',
      'All: 1 orderings flagged, 1 units, 10 runs, 1.5 lane-hours, against a budget of 1 h.',
      'Greedy within 1 h (units holding a headline table first, then flagged orderings per '
      'lane-hour): none (0.0 lane-hours); left out: t.',
      'Commands (a worktree of one commit; at the end of each sitting stop, park, commit the '
      'root, and go on from a worktree of the same commit):',
      '  git worktree add /tmp/seeds5 abc1234 && cd /tmp/seeds5']
  lines = seed_plan.plan([page], budget_hours=2.0, commit='abc1234', sweep_root='R')
  assert lines[-3:] == ['  git worktree add /tmp/seeds5 abc1234 && cd /tmp/seeds5',
                        '  python -m fedjax_face.reproduce --table=t --seeds=0,1,2,3,4 --root=R',
                        '  python -m fedjax_face.reproduce --table=t --seeds=0,1,2,3,4 --root=R '
                        '--park']


KIND_A, KIND_B = 'AMD EPYC', 'Intel(R) Xeon(R) Processor'
SHA, OTHER_SHA = '23bfe48' + '0' * 33, 'abcdef0' + '0' * 33


def here_is(monkeypatch, kind):
  """This machine's kind, as the provenance function that records it in each run reads it."""
  monkeypatch.setattr(provenance, 'cpu', lambda: {'model': kind, 'usable': 2})


def shared_page(archive, b_seed_2=(KIND_A, SHA)):
  """Tables t (headline) and u at seeds 0-2, each with one flagged ordering (margins 1, 2, 6:
  within noise, could be reproduced), and f at seeds 0-4, all three reading the base run. The
  archive holds base at seeds 0-4 (6 minutes each: f's seeds 3-4 too), a (t's) and b (u's) at
  0-2 (12 and 18 minutes), c (f's) at 0-4 (6 minutes); every run on KIND_A at SHA but u's b at
  seed 2 (`b_seed_2`)."""
  for seed in range(5):
    write_result(archive, BASE, seed, 360.0, KIND_A, SHA)
    write_result(archive, run('c'), seed, 360.0, KIND_A, SHA)
  for seed in THREE:
    write_result(archive, run('a'), seed, 720.0, KIND_A, SHA)
    write_result(archive, run('b'), seed, 1080.0, *((KIND_A, SHA) if seed < 2 else b_seed_2))
  margins = {0: 1.0, 1: 2.0, 2: 6.0}
  return [archived({'a': margins}, THREE, name='t', title='T', root=str(archive), headline=True),
          archived({'b': margins}, THREE, name='u', title='U', root=str(archive)),
          archived({'c': {s: 1.0 + s for s in range(5)}}, (0, 1, 2, 3, 4), name='f', title='F',
                   root=str(archive))]


FLAGGED_LINE = ('  [0] {0} above base (lfw): within noise -> could be reproduced; with the new '
                'seeds at the mean: reproduced')


def test_on_the_archives_machine_kind_only_the_missing_seeds_run_each_table_on_its_own(
    tmp_path, monkeypatch):
  here_is(monkeypatch, KIND_A)
  archive = tmp_path / 'x_tables'
  page = shared_page(archive, b_seed_2=(KIND_A, OTHER_SHA))
  lines = seed_plan.plan([page], budget_hours=0.5, sweep_root='R')
  # t lacks a at seeds 3-4 (stand-ins: a's mean, 12 min each: 0.4 h); base there is archived
  # (f's), so it is read, not trained. u likewise b (18 min each: 0.6 h), its runs at two
  # commits: most (base 0-4, b 0-1) at SHA.
  assert lines == [
      'Seed plan: band sd2, family free; a flagged table runs only the seeds its archive lacks, '
      "on its own, at a worktree of its runs' commit (the same machine kind: here AMD EPYC, the "
      "flagged tables' archived runs AMD EPYC (2 of 2)); lane-hours from the archived runs' "
      'timing.total_s.',
      '== docs/x.md: 2 of 2 orderings below five seeds flagged',
      't (seeds 0,1,2, headline): 1 of 1 flagged; 2 runs to train at seeds 3,4 (2 of its 4 '
      'there archived already, 0 of them starts that train again), at 23bfe48: 0.4 lane-hours',
      FLAGGED_LINE.format('a'),
      'u (seeds 0,1,2): 1 of 1 flagged; 2 runs to train at seeds 3,4 (2 of its 4 there archived '
      'already, 0 of them starts that train again), at 23bfe48 (its runs mix commits 23bfe48 (7 '
      'runs), abcdef0 (1 run)): 0.6 lane-hours',
      FLAGGED_LINE.format('b'),
      'Units (the same machine kind: each flagged table on its own, at the seeds its archive '
      'lacks; a run two tables need counts once):',
      '  t: 1 flagged, 2 runs, 0.4 lane-hours (holds a headline table)',
      '  u: 1 flagged, 2 runs, 0.6 lane-hours',
      'All: 2 orderings flagged, 2 units, 4 runs, 1.0 lane-hours, against a budget of 0.5 h.',
      'Greedy within 0.5 h (units holding a headline table first, then flagged orderings per '
      'lane-hour): t (0.4 lane-hours); left out: u.',
      "Commands (the same machine kind: per commit of the archived runs, a worktree of it; at "
      "the first sitting a root per paper begun as a copy of the paper's archive, so that only "
      'the runs it lacks train, less the archived starts that train again; at the end of each '
      'sitting stop, park, commit the root, and go on from a worktree of the same commit):',
      '  git worktree add /tmp/seeds5_23bfe48 23bfe48 && cd /tmp/seeds5_23bfe48',
      f'  mkdir -p R/x_tables && cp -rn {archive}/. R/x_tables/',
      '  python -m fedjax_face.reproduce --table=t --seeds=3,4 --root=R/x_tables',
      '  python -m fedjax_face.reproduce --table=t --seeds=3,4 --root=R/x_tables --park']
  lines = seed_plan.plan([page], budget_hours=1.0, sweep_root='R')
  assert lines[-5:] == [
      '  # u: its runs mix commits 23bfe48 (7 runs), abcdef0 (1 run)',
      '  python -m fedjax_face.reproduce --table=t --seeds=3,4 --root=R/x_tables',
      '  python -m fedjax_face.reproduce --table=u --seeds=3,4 --root=R/x_tables',
      '  python -m fedjax_face.reproduce --table=t --seeds=3,4 --root=R/x_tables --park',
      '  python -m fedjax_face.reproduce --table=u --seeds=3,4 --root=R/x_tables --park']


def test_on_another_machine_kind_the_tables_sharing_runs_rerun_whole(tmp_path, monkeypatch):
  here_is(monkeypatch, KIND_B)
  page = shared_page(tmp_path / 'x_tables')
  lines = seed_plan.plan([page], budget_hours=4.0, commit='abc1234', sweep_root='R')
  # t at seeds 0-4: base 5 x 6 min, a 5 x 12 min (two stand-ins): 1.5 h; u: base and b 5 x 18
  # min: 2.0 h. Sharing base, t, u and f rerun together (f at its seeds 0-4: c 5 x 6 min):
  # 30 + 60 + 90 + 30 minutes.
  assert lines == [
      'Seed plan: band sd2, family free; a flagged table reruns whole at seeds 0,1,2,3,4 (the '
      "machine changed: here Intel(R) Xeon(R) Processor, the flagged tables' archived runs AMD "
      "EPYC (2 of 2)); lane-hours from the archived runs' timing.total_s.",
      '== docs/x.md: 2 of 2 orderings below five seeds flagged',
      't (seeds 0,1,2, headline): 1 of 1 flagged; 10 runs at seeds 0-4 (8 timed in the archive, '
      '2 stand-ins): 1.5 lane-hours',
      FLAGGED_LINE.format('a'),
      'u (seeds 0,1,2): 1 of 1 flagged; 10 runs at seeds 0-4 (8 timed in the archive, 2 '
      'stand-ins): 2.0 lane-hours',
      FLAGGED_LINE.format('b'),
      'Units that rerun together (tables sharing a run; flagged tables at seeds 0-4, the others '
      'at their seeds now):',
      '  t+u+f: 2 flagged, 20 runs, 3.5 lane-hours (holds a headline table)',
      'All: 2 orderings flagged, 1 units, 20 runs, 3.5 lane-hours, against a budget of 4 h.',
      'Greedy within 4 h (units holding a headline table first, then flagged orderings per '
      'lane-hour): t+u+f (3.5 lane-hours); left out: none.',
      'Commands (a worktree of one commit; at the end of each sitting stop, park, commit the '
      'root, and go on from a worktree of the same commit):',
      '  git worktree add /tmp/seeds5 abc1234 && cd /tmp/seeds5',
      '  python -m fedjax_face.reproduce --table=t --seeds=0,1,2,3,4 --root=R',
      '  python -m fedjax_face.reproduce --table=u --seeds=0,1,2,3,4 --root=R',
      '  python -m fedjax_face.reproduce --table=f --seeds=0,1,2,3,4 --root=R',
      '  python -m fedjax_face.reproduce --table=t --seeds=0,1,2,3,4 --root=R --park',
      '  python -m fedjax_face.reproduce --table=u --seeds=0,1,2,3,4 --root=R --park',
      '  python -m fedjax_face.reproduce --table=f --seeds=0,1,2,3,4 --root=R --park']
  # Forced, either case holds whatever the kinds: the same plan as when they match.
  forced = seed_plan.plan([page], budget_hours=4.0, sweep_root='R', machine='same')
  assert forced[0].endswith("(--plan_machine=same: here Intel(R) Xeon(R) Processor, the flagged "
                            "tables' archived runs AMD EPYC (2 of 2)); lane-hours from the "
                            "archived runs' timing.total_s.")
  here_is(monkeypatch, KIND_A)
  assert forced[1:] == seed_plan.plan([page], budget_hours=4.0, sweep_root='R')[1:]
  assert seed_plan.plan([page], 4.0, commit='abc1234', sweep_root='R', machine='other')[1:] == (
      lines[1:])


def test_a_table_of_another_kind_takes_the_tables_sharing_its_runs_with_it(tmp_path,
                                                                          monkeypatch):
  here_is(monkeypatch, KIND_A)
  page = shared_page(tmp_path / 'x_tables', b_seed_2=(KIND_B, SHA))
  lines = seed_plan.plan([page], budget_hours=4.0, sweep_root='R')
  # u's b at seed 2 is KIND_B's: u reruns whole, and t, sharing base, with it.
  assert lines[0] == (
      "Seed plan: band sd2, family free; a flagged table on this machine's kind runs only the "
      "seeds its archive lacks, on its own, at a worktree of its runs' commit, one of another "
      'reruns whole at seeds 0,1,2,3,4 with the tables sharing its runs (1 and 1 of the flagged '
      "tables; the kinds differ: here AMD EPYC, the flagged tables' archived runs AMD EPYC (2 of "
      "2), Intel(R) Xeon(R) Processor (1 of 2)); lane-hours from the archived runs' "
      'timing.total_s.')
  assert lines[2].endswith('at 23bfe48: 0.4 lane-hours')
  assert lines[4].endswith('10 runs at seeds 0-4 (8 timed in the archive, 2 stand-ins): 2.0 '
                           'lane-hours')
  assert lines[6:9] == [
      'Units that rerun together (tables sharing a run; flagged tables at seeds 0-4, the others '
      'at their seeds now):',
      '  t+u+f: 2 flagged, 20 runs, 3.5 lane-hours (holds a headline table)',
      'All: 2 orderings flagged, 1 units, 20 runs, 3.5 lane-hours, against a budget of 4 h.']


def starts_table():
  """Runs k and l, each starting from another (start, bad)."""
  start, bad = spec.Run('x/start'), spec.Run('x/bad')
  table = spec.Table('T', 'verification', ('lfw',), (
      spec.Row('k', spec.Run('x/k', init_from=start), ()),
      spec.Row('l', spec.Run('x/l', init_from=bad), ())), '')
  return table, start, bad


def test_runs_to_train(tmp_path):
  table, start, bad = starts_table()
  write_result(tmp_path, start, 3, 60.0)
  failed_dir = spec.workdir(str(tmp_path), bad, (), 3)
  os.makedirs(failed_dir)
  with open(os.path.join(failed_dir, 'failed.json'), 'w') as f:
    json.dump({'returncode': 1, 'error': 'diverged'}, f)
  item = seed_plan.Archived('t', '', table, {}, THREE, str(tmp_path))
  # Seed 3: start is archived but keeps no checkpoint, so k's start trains again, first; l's
  # start failed there, so l cannot start. Seed 4: nothing archived, each start before its run.
  assert seed_plan.runs_to_train(item, (3, 4)) == [
      'x-start_seed-3', 'x-k_seed-3', 'x-start_seed-4', 'x-k_seed-4', 'x-bad_seed-4',
      'x-l_seed-4']
  assert seed_plan.runs_to_train(item, (3,)) == ['x-start_seed-3', 'x-k_seed-3']


def test_run_kinds_and_the_machine_case(tmp_path):
  write_result(tmp_path, run('a'), 0, 1.0, KIND_A, SHA, resumed=[(KIND_B, SHA), (KIND_A, SHA)])
  write_result(tmp_path, run('b'), 0, 1.0)
  assert seed_plan.run_kinds(spec.workdir(str(tmp_path), run('a'), (), 0)) == [KIND_A, KIND_B]
  assert seed_plan.run_kinds(spec.workdir(str(tmp_path), run('b'), (), 0)) == ['unrecorded']
  assert seed_plan.same_machine({KIND_A: 3}, KIND_A)
  assert not seed_plan.same_machine({KIND_A: 3, KIND_B: 1}, KIND_A)
  assert not seed_plan.same_machine({KIND_A: 3}, KIND_B)
  assert not seed_plan.same_machine({KIND_A: 3}, None)
  assert seed_plan.same_machine({KIND_B: 3}, KIND_A, 'same')
  assert not seed_plan.same_machine({KIND_A: 3}, KIND_A, 'other')
  with pytest.raises(ValueError, match=r"machine='there'; expected one of \['here', 'same', "
                                       r"'other'\]\."):
    seed_plan.same_machine({}, KIND_A, 'there')
  assert seed_plan.commit_group({'23bfe4806baa': 5}) == ('23bfe48', '')
  assert seed_plan.commit_group({'ba036250000a': 1, '23bfe4806baa': 2}) == (
      '23bfe48', 'its runs mix commits 23bfe48 (2 runs), ba03625 (1 run)')
