"""The paper-table sweeps: run naming, seeds, overrides that exist, and the markdown they print."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from fedjax_face.proj.fedgc import reproduce
from fedjax_face.proj.fedgc.reproduce import Row, Run, Table
from tests import config_files

ROOT = config_files.ROOT


load_config = config_files.load_config


def test_run_names_and_commands():
  run = reproduce._fedgc(**{'federated.participation': '0.5'})  # pylint: disable=protected-access
  assert run.name() == 'fedgc_loss-softmax_participation-0.5'
  cmd = run.command('/w', (('num_rounds', '3'),))
  assert cmd[1:] == ['-m', 'fedjax_face.main', '--config=configs/fedgc/fedgc.py:loss=softmax',
                     '--workdir=/w', '--config.federated.participation=0.5',
                     '--config.num_rounds=3']
  # Overrides equal to the defaults are dropped, so tables share the default runs.
  assert reproduce._fedgc(**{'fedgc.reg_lambda': '20.0'}) == reproduce._fedgc()  # pylint: disable=protected-access


def test_seed_zero_shares_the_default_run_and_others_add_the_seed():
  run = Run('fedpe', 'loss=cosface')
  assert reproduce.seed_overrides((), 0) == ()
  assert run.name(reproduce.seed_overrides((), 0)) == 'fedpe_loss-cosface'
  extra = reproduce.seed_overrides((('num_rounds', '3'),), 2)
  assert run.name(extra) == 'fedpe_loss-cosface_num_rounds-3_seed-2'
  assert run.command('/w', extra)[-2:] == ['--config.num_rounds=3', '--config.seed=2']


@pytest.mark.parametrize('items, message', [
    (['a'], r'--seeds=a; expected integers'),
    (['0', '0'], r'--seeds=0,0; expected distinct non-negative'),
    (['-1'], r'--seeds=-1; expected distinct non-negative'),
])
def test_bad_seeds(items, message):
  with pytest.raises(ValueError, match=message):
    reproduce.parse_seeds(items)


def test_seeds_and_overrides_parse():
  assert reproduce.parse_seeds(['0', '3', '1']) == (0, 3, 1)
  assert reproduce.parse_overrides(['num_rounds=3', 'a.b=x=y']) == (('num_rounds', '3'),
                                                                    ('a.b', 'x=y'))
  with pytest.raises(ValueError, match=r"--set='num_rounds'; expected field=value"):
    reproduce.parse_overrides(['num_rounds'])


def test_every_table_run_names_real_config_fields():
  for table in reproduce.TABLES.values():
    for row in table.rows:
      config = load_config(row.run.config, row.run.arg)
      for key, value in row.run.overrides:
        node = config
        for part in key.split('.'):
          assert part in node, f'{row.label}: {key} is not a config field'
          node = node[part]
        type(node)(value)   # raises if the value does not parse as the field's type


def fake_result(lfw=None, rank_1=None, tpir=None):
  out = {}
  if lfw is not None:
    out['verification'] = {'lfw': {'accuracy': lfw}}
  if rank_1 is not None:
    out['identification'] = {'rank_1': rank_1, 'tpir_at_fpir': {'0.01': tpir}}
  return out


def test_markdown_one_seed_and_several():
  a, b = Run('fedpe', 'loss=softmax'), Run('fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (94.77,)), Row('B', b, (None,))),
                'B > A')
  one = reproduce.markdown(table, {(a, 0): fake_result(lfw=0.8352)}, 'cmd')
  assert '| A | 83.52 | 94.77 |' in one and '| B | — | — |' in one
  assert 'Paper: B > A.' in one and 'mean ±' not in one
  several = reproduce.markdown(
      table, {(a, 0): fake_result(lfw=0.78), (a, 1): fake_result(lfw=0.82),
              (b, 1): fake_result(lfw=0.9)}, 'cmd', seeds=(0, 1))
  # mean 80, sample std sqrt(8) = 2.83; a row missing a seed says so.
  assert '| A | 80.00 ± 2.83 | 94.77 |' in several
  assert '| B | 90.00 (1 of 2 seeds) | — |' in several
  assert 'mean ± standard deviation over config.seed = 0, 1.' in several


def test_markdown_identification_columns():
  run = Run('centralized', 'loss=softmax')
  table = Table('T6', 'identification', ('tpir_at_fpir:0.01', 'rank_1'),
                (Row('C', run, (61.21, 59.65)),), 'claim')
  text = reproduce.markdown(table, {(run, 0): fake_result(rank_1=0.255, tpir=None)}, 'cmd')
  assert '| method | TPIR@FPIR=0.01 (ours) | TPIR@FPIR=0.01 (paper) | rank-1 (ours) |' in text
  assert '| C | — | 61.21 | 25.50 | 59.65 |' in text


def test_run_all_reads_finished_runs_and_dry_run_starts_nothing(tmp_path, capsys):
  a, b = Run('fedpe', 'loss=softmax'), Run('fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (1.0,)), Row('B', b, (1.0,))), 'c')
  for run, seed, acc in ((a, 0, 0.5), (a, 1, 0.6)):
    workdir = tmp_path / run.name(reproduce.seed_overrides((), seed))
    workdir.mkdir()
    (workdir / 'results.json').write_text(json.dumps(fake_result(lfw=acc)))
  got = reproduce.run_all(table, str(tmp_path), (), dry_run=True, seeds=(0, 1))
  assert got == {(a, 0): fake_result(lfw=0.5), (a, 1): fake_result(lfw=0.6)}
  assert capsys.readouterr().out == ''   # nothing was started
  assert not (tmp_path / b.name()).exists()


def test_command_line_dry_run_with_seeds(tmp_path):
  """The program end to end (flags included) on finished runs: no training is started."""
  fedpe = reproduce._fedpe()  # pylint: disable=protected-access
  for seed, acc in ((0, 0.8), (1, 0.9)):
    workdir = tmp_path / fedpe.name(reproduce.seed_overrides((), seed))
    workdir.mkdir()
    (workdir / 'results.json').write_text(json.dumps(fake_result(lfw=acc)))
  out_file = tmp_path / 'table4.md'
  cmd = [sys.executable, '-m', 'fedjax_face.proj.fedgc.reproduce', '--table=4', f'--root={tmp_path}',
         '--seeds=0,1', '--dry_run', f'--out={out_file}']
  proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
  text = out_file.read_text()
  assert text in proc.stdout
  assert '| FedPE | 85.00 ± 7.07 | 94.77 |' in text and '| FedGC | — | 98.40 |' in text
  bad = subprocess.run(cmd[:3] + ['--table=9'], cwd=ROOT, capture_output=True, text=True)
  assert bad.returncode != 0 and '--table=9; expected one of [1, 2, 3, 4, 5, 6, 7] or all' in (
      bad.stderr + bad.stdout)
