r"""The FedGC paper's tables, scaled down to the embedded benchmark, with the paper's numbers beside ours.

    python -m fedjax_face.proj.fedgc.reproduce --table=1 --root=/tmp/fedgc_tables --out=docs/fedgc_table1.md
    python -m fedjax_face.proj.fedgc.reproduce --table=all --root=/tmp/fedgc_tables --out_dir=docs

Each table is a list of runs of `python -m fedjax_face.main` (one subprocess per run, the command
printed before it starts). `--seeds=0,1,2` repeats every run with `--config.seed=S` (which redraws
the benchmark and the training randomness) and reports mean ± standard deviation over the seeds:
single runs differ by a few points from seed to seed on the embedded benchmark (BUILD_NOTES.md),
so a gap smaller than that is not an ordering. A run whose workdir already holds `results.json` is
not run again, so a sweep can be stopped and resumed, and runs shared by several tables (FedGC
with the defaults is in Tables 1-5) are trained once. Extra `--set=field=value` overrides apply to
every run (and so change every workdir name: runs with different overrides never share a workdir).

The paper trains ResNet-34 on CASIA-WebFace and tests on the real LFW / CFP-FP / AgeDB-30 (Tables
1-5), MegaFace (Table 6) and IJB-B/C (Table 7). Ours is the small CNN on the synthetic benchmark, so
only orderings can be compared, never values. Tables 6 and 7 are read from the same runs as Table 5:
our 1:N analogue (rank-1 and TPIR@FPIR on held-out identities with distractors) stands in for both.
"""

import dataclasses
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

from fedjax_face.io import files

PAIR_SETS = ('lfw', 'cfp_fp', 'agedb_30')
PAIR_TITLES = {'lfw': 'LFW', 'cfp_fp': 'CFP-FP', 'agedb_30': 'AgeDB-30'}


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run: a config file, its variant argument and field overrides."""
  config: str                      # configs/fedgc/<config>.py
  arg: str = ''                    # get_config argument, e.g. 'loss=cosface'
  overrides: tuple[tuple[str, str], ...] = ()

  def name(self, extra: tuple[tuple[str, str], ...] = ()) -> str:
    parts = [self.config] + ([self.arg.replace('=', '-').replace(',', '_')] if self.arg else [])
    parts += [f'{k.split(".")[-1]}-{v}' for k, v in self.overrides + extra]
    return '_'.join(parts)

  def command(self, workdir: str, extra: tuple[tuple[str, str], ...] = ()) -> list[str]:
    config = f'configs/fedgc/{self.config}.py' + (f':{self.arg}' if self.arg else '')
    return ([sys.executable, '-m', 'fedjax_face.main', f'--config={config}', f'--workdir={workdir}']
            + [f'--config.{k}={v}' for k, v in self.overrides + extra])


# Overrides equal to the default config are dropped, so the same run is shared between tables.
_DEFAULTS = {'federated.participation': '1.0', 'fedgc.reg_lambda': '20.0'}


def _run(config: str, loss: str, overrides: dict) -> Run:
  kept = {k: v for k, v in overrides.items() if _DEFAULTS.get(k) != v}
  return Run(config, f'loss={loss}', tuple(sorted(kept.items())))


def _fedgc(loss='softmax', **overrides):
  return _run('fedgc', loss, overrides)


def _fedpe(loss='softmax', **overrides):
  return _run('fedpe', loss, overrides)


@dataclasses.dataclass(frozen=True)
class Row:
  label: str
  run: Run
  paper: tuple[float | None, ...]   # the paper's numbers, one per column


@dataclasses.dataclass(frozen=True)
class Table:
  title: str
  metric: str                       # 'verification' or 'identification'
  columns: tuple[str, ...]          # pair-set names, or identification metric keys
  rows: tuple[Row, ...]
  claim: str                        # the ordering the paper reports


_C = ('0.25', '0.5', '0.75', '1.0')
TABLES = {
    1: Table('Table 1: participation fraction C (Softmax, LFW)', 'verification', ('lfw',), tuple(
        [Row(f'FedPE C={c}', _fedpe(**{'federated.participation': c}), (p,))
         for c, p in zip(_C, (93.12, 93.83, 94.32, 94.77))] +
        [Row(f'FedGC C={c}', _fedgc(**{'federated.participation': c}), (p,))
         for c, p in zip(_C, (97.07, 97.98, 98.13, 98.40))]),
        'FedGC > FedPE at every C; accuracy grows with C'),
    2: Table('Table 2: regularizer multiplier lambda (Softmax FedGC, LFW)', 'verification', ('lfw',),
             tuple(Row(f'FedGC lambda={lam}', _fedgc(**{'fedgc.reg_lambda': lam}), (p,))
                   for lam, p in (('1.0', 95.20), ('20.0', 98.40), ('50.0', 97.42))),
             'an interior optimum (lambda = 20); a too large lambda collapses'),
    3: Table('Table 3: balanced vs log-normal partition (Softmax)', 'verification', PAIR_SETS, (
        Row('Balanced-FedPE', _fedpe(), (94.77, 81.90, 78.38)),
        Row('Balanced-FedGC', _fedgc(), (98.40, 90.20, 85.85)),
        Row('Unbalanced-FedPE', _fedpe(**{'federated.partition': 'lognormal'}), (96.27, 85.26, 81.22)),
        Row('Unbalanced-FedGC', _fedgc(**{'federated.partition': 'lognormal'}), (98.80, 91.56, 88.78))),
        'FedGC > FedPE on both partitions'),
    4: Table('Table 4: form of the regularizer (Softmax, LFW)', 'verification', ('lfw',), (
        Row('FedPE', _fedpe(), (94.77,)),
        Row('FedCos', Run('fedcos', 'loss=softmax'), (96.63,)),
        Row('FedGC', _fedgc(), (98.40,))),
        'FedGC > FedCos > FedPE'),
}


def _table5_rows():
  paper = {
      'softmax': ((99.84, 89.39, 87.62), (94.77, 81.90, 78.38), (96.11, 83.67, 80.28),
                  (98.40, 90.20, 85.85)),
      'cosface': ((99.10, 90.79, 91.37), (98.17, 86.90, 86.28), (96.35, 73.01, 81.77),
                  (98.83, 88.60, 90.00)),
      'arcface': ((97.62, 90.50, 83.37), (98.18, 87.23, 86.13), (95.85, 64.43, 79.15),
                  (98.65, 87.77, 89.27)),
  }
  rows = []
  for loss, (central, pe, fixed, gc) in paper.items():
    rows += [Row(f'{loss} centralized', Run('centralized', f'loss={loss}'), central),
             Row(f'{loss} FedPE', _fedpe(loss), pe),
             Row(f'{loss} FedPE+Fixed', Run('fedpe_fixed', f'loss={loss}'), fixed),
             Row(f'{loss} FedGC', _fedgc(loss), gc)]
  return tuple(rows)


TABLES[5] = Table('Table 5: losses x methods on the three pair sets', 'verification', PAIR_SETS,
                  _table5_rows(), 'FedGC > FedPE for every loss; FedGC >= FedPE+Fixed for CosFace '
                  'and ArcFace; centralized >= FedGC')


def _identification_rows(paper: dict[str, tuple]) -> tuple[Row, ...]:
  runs = {'centralized': lambda loss: Run('centralized', f'loss={loss}'), 'FedPE': _fedpe,
          'FedGC': _fedgc}
  return tuple(Row(f'{loss} {method}', runs[method](loss), paper[(loss, method)])
               for loss in ('softmax', 'cosface', 'arcface') for method in runs)


TABLES[6] = Table(
    'Table 6 analogue: 1:N identification (paper: MegaFace TPR@FPR=1e-6 verification, rank-1 id)',
    'identification', ('tpir_at_fpir:0.01', 'rank_1'), _identification_rows({
        ('softmax', 'centralized'): (61.21, 59.65), ('softmax', 'FedPE'): (36.83, 34.08),
        ('softmax', 'FedGC'): (69.87, 61.26), ('cosface', 'centralized'): (83.30, 79.09),
        ('cosface', 'FedPE'): (62.62, 57.91), ('cosface', 'FedGC'): (72.82, 70.96),
        ('arcface', 'centralized'): (50.51, 35.18), ('arcface', 'FedPE'): (64.53, 58.12),
        ('arcface', 'FedGC'): (71.96, 68.75)}),
    'FedGC > FedPE for every loss')
TABLES[7] = Table(
    'Table 7 analogue: 1:N identification (paper: IJB-C TPR@FPR=1e-3 verification, rank-1 id)',
    'identification', ('tpir_at_fpir:0.1', 'rank_1'), _identification_rows({
        ('softmax', 'centralized'): (75.06, 76.05), ('softmax', 'FedPE'): (57.85, 65.35),
        ('softmax', 'FedGC'): (71.33, 79.52), ('cosface', 'centralized'): (79.45, 79.90),
        ('cosface', 'FedPE'): (77.12, 79.10), ('cosface', 'FedGC'): (83.40, 83.44),
        ('arcface', 'centralized'): (59.38, 59.79), ('arcface', 'FedPE'): (75.74, 76.82),
        ('arcface', 'FedGC'): (78.13, 79.28)}),
    'FedGC > FedPE for every loss')


def parse_overrides(items: list[str]) -> tuple[tuple[str, str], ...]:
  out = []
  for item in items:
    key, sep, value = item.partition('=')
    if not sep or not key:
      raise ValueError(f'--set={item!r}; expected field=value, e.g. --set=num_rounds=30.')
    out.append((key, value))
  return tuple(out)


def parse_seeds(items: list[str]) -> tuple[int, ...]:
  try:
    seeds = tuple(int(item) for item in items)
  except ValueError:
    raise ValueError(f'--seeds={",".join(items)}; expected integers, e.g. --seeds=0,1,2.') from None
  if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
    raise ValueError(f'--seeds={",".join(items)}; expected distinct non-negative integers.')
  return seeds


def seed_overrides(extra: tuple[tuple[str, str], ...], seed: int) -> tuple[tuple[str, str], ...]:
  """Seed 0 is the default config (its runs are shared with single-seed tables); others add it."""
  return extra if seed == 0 else extra + (('seed', str(seed)),)


def run_all(table: Table, root: str, extra: tuple, dry_run: bool = False,
            seeds: tuple[int, ...] = (0,)) -> dict[tuple[Run, int], dict]:
  """Runs what is missing; returns results.json of every (run, seed) that has one."""
  results = {}
  for row in table.rows:
    for seed in seeds:
      overrides = seed_overrides(extra, seed)
      workdir = files.join(root, row.run.name(overrides))
      path = files.join(workdir, 'results.json')
      if not files.exists(path) and not dry_run:
        cmd = row.run.command(workdir, overrides)
        print('$ ' + ' '.join(cmd[1:]).replace(sys.executable, 'python'), flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        print(f'  done in {time.perf_counter() - t0:.0f} s', flush=True)
      if files.exists(path):
        results[(row.run, seed)] = files.read_json(path)
  return results


def _ours(result: dict | None, table: Table, column: str) -> float | None:
  if result is None:
    return None
  if table.metric == 'verification':
    return result['verification'][column]['accuracy'] * 100
  ident = result.get('identification')
  if not ident:
    return None
  key, _, fpir = column.partition(':')
  value = ident[key].get(fpir) if fpir else ident[key]
  return None if value is None else value * 100


def _column_title(table: Table, column: str) -> str:
  if table.metric == 'verification':
    return PAIR_TITLES.get(column, column)
  key, _, fpir = column.partition(':')
  return {'rank_1': 'rank-1'}.get(key, f'TPIR@FPIR={fpir}')


def summarize(values: list[float], num_seeds: int = 1) -> str:
  """One cell: '—' without runs, the value of one run, mean ± sample std over several; a cell
  missing some of the `num_seeds` runs says how many it has."""
  if not values:
    return '—'
  cell = (f'{values[0]:.2f}' if len(values) == 1 else
          f'{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}')
  return cell if len(values) == num_seeds else f'{cell} ({len(values)} of {num_seeds} seeds)'


def markdown(table: Table, results: dict[tuple[Run, int], dict], command: str,
             seeds: tuple[int, ...] = (0,)) -> str:
  """The table with ours and the paper's value side by side per column."""
  header = ['method'] + [f'{_column_title(table, c)} {who}' for c in table.columns
                         for who in ('(ours)', '(paper)')]
  lines = [f'## {table.title}', '', f'Paper: {table.claim}.', '',
           '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for row in table.rows:
    cells = [row.label]
    for column, paper in zip(table.columns, row.paper):
      ours = [_ours(results.get((row.run, seed)), table, column) for seed in seeds]
      cells += [summarize([v for v in ours if v is not None], len(seeds)),
                '—' if paper is None else f'{paper:.2f}']
    lines.append('| ' + ' | '.join(cells) + ' |')
  spread = ('' if len(seeds) == 1 else
            f' Ours: mean ± standard deviation over config.seed = {", ".join(map(str, seeds))}.')
  lines += ['', f'Made by `{command}`; ours: small CNN on the synthetic benchmark (default '
            'config), 10-fold accuracy (%) of the insightface protocol or the 1:N metrics of '
            '`eval/recognition/identification.py`; paper: ResNet-34 on CASIA-WebFace and the real test sets.'
            + spread, '']
  return '\n'.join(lines)


def define_flags():
  """The flags, defined only when run as a program: other tools define an `out` flag too, and absl
  refuses a flag defined twice in one process (e.g. a test session importing both)."""
  flags.DEFINE_string('table', None, "1-7, or 'all'.")
  flags.DEFINE_string('root', '/tmp/fedgc_tables', "Directory of the runs' workdirs.")
  flags.DEFINE_string('out', None, 'Markdown file for one table (default: print only).')
  flags.DEFINE_string('out_dir', None, "With --table=all: write fedgc_table<N>.md here.")
  flags.DEFINE_multi_string('set', [], 'field=value override applied to every run.')
  flags.DEFINE_bool('dry_run', False, 'Print the commands and the table of what exists.')
  flags.DEFINE_list('seeds', ['0'], 'config.seed values; several: mean ± std over them.')


def main(argv):
  del argv
  f = flags.FLAGS
  if f.table is None:
    raise app.UsageError('--table is required: 1-7 or all.')
  extra = parse_overrides(f.set)
  if any(key == 'seed' for key, _ in extra):
    raise app.UsageError('--set=seed=... is not allowed; use --seeds.')
  seeds = parse_seeds(f.seeds)
  if f.table != 'all' and f.table not in map(str, TABLES):
    raise app.UsageError(f'--table={f.table}; expected one of {sorted(TABLES)} or all.')
  ids = sorted(TABLES) if f.table == 'all' else [int(f.table)]
  command = 'python -m fedjax_face.proj.fedgc.reproduce ' + ' '.join(sys.argv[1:])
  for tid in ids:
    table = TABLES[tid]
    results = run_all(table, f.root, extra, f.dry_run, seeds)
    text = markdown(table, results, command, seeds)
    print(text, flush=True)
    out = f.out if len(ids) == 1 else None
    if f.out_dir:
      out = os.path.join(f.out_dir, f'fedgc_table{tid}.md')
    if out:
      files.write_text_atomic(out, text)


if __name__ == '__main__':
  define_flags()
  app.run(main)
