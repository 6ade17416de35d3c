"""The markdown of a table: ours beside the paper's, per kind of column, over seeds."""

import dataclasses

from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables.spec import Row, Run, Table
from tests.tools.tables.fakes import fake_result


def test_markdown_one_seed_and_several():
  a, b = Run('fedgc/fedpe', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'verification', ('lfw',), (Row('A', a, (94.77,)), Row('B', b, (None,))),
                'B > A', 'ours: X; paper: Y.')
  one = markdown.render(table, {(a, 0): fake_result(lfw=0.8352)}, 'cmd')
  assert '| A | 83.52 | 94.77 |' in one and '| B | — | — |' in one
  assert 'Paper: B > A.' in one and 'mean ±' not in one
  assert 'Made by `cmd`; ours: X; paper: Y.' in one
  several = markdown.render(
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
  text = markdown.render(table, {(run, 0): fake_result(rank_1=0.255, tpir=None)}, 'cmd')
  assert '| method | TPIR@FPIR=0.01 (ours) | TPIR@FPIR=0.01 (paper) | rank-1 (ours) |' in text
  assert '| C | — | 61.21 | 25.50 | 59.65 |' in text


def test_markdown_diagnostics_columns_and_a_pair_set_a_run_lacks():
  run = Run('fedgc/fedpe', 'loss=softmax,lookalikes')
  result = fake_result(lfw=0.75)
  result['diagnostics'] = {'lookalikes': {'class_cos_lookalike': 0.61234}}
  diag = Table('T9', 'diagnostics', ('lookalikes:class_cos_lookalike',
                                     'class_embedding_similarity:within_mean'),
               (Row('FedPE', run, (None, None)),), 'claim', digits=3)
  text = markdown.render(diag, {(run, 0): result}, 'cmd')
  # The paper has no number in the table: ours alone.
  assert '| method | class cos, look-alikes | within-client class cos |\n' in text
  assert '| FedPE | 0.612 | — |\n' in text
  # An older run without the sllfw pair set leaves its cell empty instead of failing.
  verif = Table('T8', 'verification', ('lfw', 'sllfw'), (Row('FedPE', run, (None, 80.42)),), 'c')
  assert '| FedPE | 75.00 | — | — | 80.42 |' in markdown.render(verif, {(run, 0): result},
                                                             'cmd')


def test_markdown_results_columns_with_their_own_decimals():
  run = Run('fedgc/fedpe', 'loss=softmax', (('dp.enabled', 'True'),))
  result = {'privacy': {'epsilon': 3.99871},
            'communication': {'bytes_per_client_round': {'up': 621504}}}
  table = Table('P', 'results', ('privacy/epsilon', 'communication/bytes_per_client_round/up'),
                (Row('FedPE', run, (None, None)),), 'none', titles=('epsilon', 'bytes up'),
                column_digits=(2, 0))
  assert '| FedPE | 4.00 | 621504 |' in markdown.render(table, {(run, 0): result}, 'cmd')


def test_a_row_not_built_keeps_the_papers_numbers_and_starts_nothing(tmp_path):
  run = Run('pad/fedpad', 'protocol=OCI_M')
  table = Table('T5', 'results', ('pad/hter',), (Row('FedAvg', run, (19.45,)),
                                                   Row('FedMA', None, (29.68,))), 'c',
                titles=('HTER',))
  text = markdown.render(table, {(run, 0): {'pad': {'hter': 0.25}}}, 'cmd')
  assert '| FedAvg | 25.00 | 19.45 |' in text and '| FedMA | not built | 29.68 |' in text
  assert table_runs.run_all(dataclasses.replace(table, rows=table.rows[1:]), str(tmp_path), (),
                        dry_run=True) == {}


def test_the_paper_s_column_keeps_its_own_title_where_it_measures_something_else():
  a = Run('fedgc/fedgc', 'loss=softmax')
  table = Table('T', 'identification', ('tpir_at_fpir:0.01', 'rank_1'),
                (Row('A', a, (69.87, 61.26)),), 'c',
                paper_titles=('MegaFace TPR@FPR=1e-6', 'MegaFace rank-1'))
  text = markdown.render(table, {(a, 0): fake_result(rank_1=0.5, tpir=0.25)}, 'cmd')
  assert ('| method | TPIR@FPIR=0.01 (ours) | MegaFace TPR@FPR=1e-6 (paper) | rank-1 (ours) | '
          'MegaFace rank-1 (paper) |' in text)
  assert '| A | 25.00 | 69.87 | 50.00 | 61.26 |' in text


def test_a_privacy_table_states_each_row_s_threat_model_in_its_second_column():
  off, dp = Run('fedgc/fedgc', 'loss=softmax'), Run('fedgc/fedgc', 'loss=softmax',
                                                    (('dp.enabled', 'True'),))
  table = Table('P', 'results', ('privacy/epsilon',),
                (Row('FedGC off', off, (None,), threat='server sees W_k'),
                 Row('FedGC eps=4', dp, (None,))), 'none', titles=('epsilon',))
  text = markdown.render(table, {(dp, 0): {'privacy': {'epsilon': 4.0}}}, 'cmd')
  assert '| method | threat model | epsilon |\n| --- | --- | --- |' in text
  assert '| FedGC off | server sees W_k | — |' in text and '| FedGC eps=4 | — | 4.00 |' in text
  plain = dataclasses.replace(table, rows=(Row('FedGC eps=4', dp, (None,)),))
  assert '| method | epsilon |' in markdown.render(plain, {}, 'cmd')
