"""The privacy tables of attacks (Tables 4-6, proj/privacy/attacks.py): each run is Table 1's or
Table 2's run of the same row with only evaluator and checkpoint fields added, so it trains the
same model; the attacks it asks are those its method reveals, and its checkpoints cover them."""

import dataclasses

from fedjax_face.eval.privacy import leakage
from fedjax_face.proj.privacy import attacks, reproduce
from fedjax_face.run import schedule
from tests import config_files

ALL = reproduce.TABLES
BASE_RUNS = {row.run for table in (reproduce.TABLES[1], reproduce.TABLES[2])
             for row in table.rows}
ADDED = ('evals.', 'checkpoint_keep')   # what the attacked runs add to their base runs


def test_each_attacked_run_trains_as_its_privacy_table_row_and_keeps_what_it_replays():
  for number in (4, 5, 6):
    for row in ALL[number].rows:
      base = dataclasses.replace(row.run, overrides=tuple(
          (k, v) for k, v in row.run.overrides if not k.startswith(ADDED)))
      assert base in BASE_RUNS, row.label   # Table 1's or 2's run, the attacks added
      c = config_files.run_config(row.run)
      schedule.check_replay_checkpoints(c)   # the run keeps every checkpoint it replays from
      asked = schedule.replayed_rounds(c)
      assert ('leakage' in asked) == bool(leakage.REVEALS.get(c.algorithm)), row.label
      assert row.threat.startswith('server: ') and row.threat.endswith(
          '' if row.label.endswith(' off') else 'server noise after receipt')


def test_the_tables_cover_each_method_at_each_dp_level():
  levels = [level for level, _ in attacks.DP_LEVELS]
  for number, methods in ((4, ('FedPE', 'FedGC')), (5, ('FedFV', 'FedAwS', 'FedUV', 'FedFace')),
                          (6, ('FedPAD', 'FedGPAD'))):
    labels = [row.label for row in ALL[number].rows]
    assert labels == [f'{m} {level}' for m in methods for level in levels]
