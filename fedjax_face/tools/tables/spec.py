"""A paper's table as data: which runs make it, what each column reads, what the paper claims.

A paper's tables (`fedjax_face/proj/<paper>/reproduce.py:TABLES`) are `Table`s of `Row`s; each
row is a `Run` of `python -m fedjax_face.main` (a config file, its variant argument and field
overrides), or a `Combined` row computed from several runs, beside the paper's numbers. A column
names what it reads from a run's results.json (`column_value`), and how it is titled and printed.
"""

import dataclasses
import sys
from typing import Callable

from fedjax_face.io import files

PERCENT_SECTIONS = ('verification', 'identification', 'personalized', 'pad', 'leakage')   # rates, shown in %
PAIR_TITLES = {'lfw': 'LFW', 'cfp_fp': 'CFP-FP', 'agedb_30': 'AgeDB-30', 'sllfw': 'SLLFW',
               'cplfw': 'CPLFW', 'calfw': 'CALFW'}
# 'diagnostics' columns: '<results.json diagnostics section>:<key>' -> title.
DIAGNOSTIC_TITLES = {
    'lookalikes:class_cos_lookalike': 'class cos, look-alikes',
    'lookalikes:class_cos_stranger': 'class cos, strangers',
    'lookalikes:feature_cos_lookalike': 'feature cos, look-alikes',
    'lookalikes:feature_cos_stranger': 'feature cos, strangers',
    'lookalikes:feature_cos_same_identity': 'feature cos, same identity',
    'class_embedding_similarity:within_mean': 'within-client class cos',
    'class_embedding_similarity:cross_mean': 'cross-client class cos',
    'class_embedding_norm:class_embeddings/norm_mean': 'class-embedding norm',
}


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run: a config file, its variant argument and field overrides."""
  config: str                      # configs/<config>.py, e.g. 'fedgc/fedpe'
  arg: str = ''                    # get_config argument, e.g. 'loss=cosface'
  overrides: tuple[tuple[str, str], ...] = ()
  init_from: 'Run | None' = None   # a run this one starts from (FedFR: its pre-training), run
                                   # first with the same seed; passed as --config.init_from

  def name(self, extra: tuple[tuple[str, str], ...] = ()) -> str:
    """The workdir's name: the config path, argument and overrides (unique per run)."""
    parts = [self.config.replace('/', '-')]
    parts += [self.arg.replace('=', '-').replace(',', '_')] if self.arg else []
    parts += [f'{k.split(".")[-1]}-{v}' for k, v in self.overrides + extra]
    return '_'.join(parts)

  def command(self, workdir: str, extra: tuple[tuple[str, str], ...] = ()) -> list[str]:
    config = f'configs/{self.config}.py' + (f':{self.arg}' if self.arg else '')
    return ([sys.executable, '-m', 'fedjax_face.main', f'--config={config}', f'--workdir={workdir}']
            + [f'--config.{k}={v}' for k, v in self.overrides + extra])

  def evaluate_command(self, run_dir: str, name: str, extra: tuple[tuple[str, str], ...] = (),
                       changed: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """`python -m fedjax_face.evaluate` of this run's own state in `run_dir` into
    `<run_dir>/evaluations/<name>/`: its config and overrides (`extra` after them), each field of
    `changed` given its value there instead (or added), and `init_from` the run itself."""
    config = f'configs/{self.config}.py' + (f':{self.arg}' if self.arg else '')
    replaced = dict(changed)
    overrides = ([(k, replaced.pop(k, v)) for k, v in self.overrides + extra]
                 + list(replaced.items()) + [('init_from', run_dir)])
    return ([sys.executable, '-m', 'fedjax_face.evaluate', f'--config={config}',
             f'--workdir={run_dir}', f'--name={name}']
            + [f'--config.{k}={v}' for k, v in overrides])


@dataclasses.dataclass(frozen=True)
class Combined:
  """A row computed from several finished runs rather than trained itself (the PAD paper's Fused:
  the Single runs' scores averaged): `combine(workdirs)` gives a results.json-like dict."""
  name: str
  runs: tuple[Run, ...]
  combine: Callable[[list[str]], dict]


@dataclasses.dataclass(frozen=True)
class Row:
  label: str
  run: 'Run | Combined | None'      # None: a paper's row this project does not build (shown so
                                    # that its numbers stay beside ours; the docs say why)
  paper: tuple[float | None, ...]   # the paper's numbers, one per column
  threat: str = ''                  # the threat model its columns assume (who attacks, what they
                                    # see): the privacy tables' second column, where any row has one


@dataclasses.dataclass(frozen=True)
class Ordering:
  """One of the paper's orderings, checked on ours seed by seed: the rows `ahead` beat the rows
  `behind` on `column` (several rows are averaged first, as the PAD paper's average HTER over
  its protocols; lower beats higher when `lower_is_better`, as for an HTER)."""
  ahead: tuple[str, ...]            # row labels
  behind: tuple[str, ...]
  column: str
  claim: str                        # how the docs say it, e.g. 'FedFR above FedFace'
  lower_is_better: bool = False


@dataclasses.dataclass(frozen=True)
class Compacted:
  """A run file a table reads only a summary of: the archive keeps the summary, `name`, in its
  place (FedFV Fig. 5 reads histogram counts and moments, not a run's 499,500 cosines)."""
  source: str                         # the run's file, e.g. 'class_embedding_similarity.npz'
  name: str                           # the summary's file name
  write: Callable[[str, str], None]   # (source path, summary path): writes the summary


@dataclasses.dataclass(frozen=True)
class Table:
  title: str
  metric: str                       # 'verification', 'identification', 'diagnostics' or
                                    # 'results'
  columns: tuple[str, ...]          # pair-set names, identification metric keys,
                                    # DIAGNOSTIC_TITLES keys, or ('results') '/' paths into
                                    # results.json ('personalized/tar/0.001')
  rows: tuple[Row, ...]
  claim: str                        # the ordering the paper reports
  setting: str = ''                 # ours against the paper's (data, backbone), for the footnote
  digits: int = 2                   # decimals of ours (3 for cosines)
  titles: tuple[str, ...] = ()      # column titles ('results' tables)
  column_digits: tuple[int, ...] = ()   # decimals per column where they differ (0 for bytes)
  orderings: tuple[Ordering, ...] = ()  # the paper's orderings, judged per seed (`verdict.py`)
  archived_files: tuple[str | Compacted, ...] = ()   # run files kept beyond
                                    # `archive.ARCHIVED`, that it reads (or their summaries)
  own_orderings: bool = False       # the orderings are questions of ours, not a paper's claims:
                                    # they read 'ahead' / 'behind' (`verdict.OWN_WORDS`), not
                                    # 'reproduced'
  paper_titles: tuple[str, ...] = ()  # the paper's columns where they measure something else
                                      # than ours (FedGC Table 6: MegaFace TPR@FPR=1e-6)
  evaluate_diverged: bool = False   # a run the divergence guard stopped is evaluated at its
                                    # last accepted checkpoint (`run.last_accepted`), and its
                                    # row shows that evaluation, marked as the checkpoint's

  def __post_init__(self):
    labels = [row.label for row in self.rows]
    for ordering in self.orderings:
      for label in ordering.ahead + ordering.behind:
        if label not in labels:
          raise ValueError(f'{self.title}: ordering {ordering.claim!r} names row {label!r}; '
                           f'expected one of {labels}.')
      if ordering.column not in self.columns:
        raise ValueError(f'{self.title}: ordering {ordering.claim!r} reads column '
                         f'{ordering.column!r}; expected one of {list(self.columns)}.')


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


def workdir(root: str, run: Run, extra: tuple, seed: int) -> str:
  return files.join(root, run.name(seed_overrides(extra, seed)))


def column_digits(table: Table, column: str) -> int:
  """The decimals a table prints `column` with."""
  return (table.column_digits[table.columns.index(column)] if table.column_digits
          else table.digits)


def column_value(result: dict | None, table: Table, column: str) -> float | None:
  """The run's value for one column (None when the run has no such value, e.g. a pair set it
  did not evaluate)."""
  if result is None or 'failed' in result:
    return None
  if table.metric == 'verification':
    pair_set = result['verification'].get(column)
    return None if pair_set is None else pair_set['accuracy'] * 100
  if table.metric == 'diagnostics':
    section, _, key = column.partition(':')
    return result.get('diagnostics', {}).get(section, {}).get(key)
  if table.metric == 'results':
    value = result
    for key in column.split('/'):
      value = value.get(key) if isinstance(value, dict) else None
    if value is None:
      return None
    return value * 100 if column.split('/')[0] in PERCENT_SECTIONS else value
  ident = result.get('identification')
  if not ident:
    return None
  key, _, fpir = column.partition(':')
  value = ident[key].get(fpir) if fpir else ident[key]
  return None if value is None else value * 100


def column_title(table: Table, column: str) -> str:
  """The column's title in the table's header and in its orderings' lines."""
  if table.titles:
    return table.titles[table.columns.index(column)]
  if table.metric == 'verification':
    return PAIR_TITLES.get(column, column)
  if table.metric == 'diagnostics':
    return DIAGNOSTIC_TITLES.get(column, column)
  key, _, fpir = column.partition(':')
  return {'rank_1': 'rank-1'}.get(key, f'TPIR@FPIR={fpir}')
