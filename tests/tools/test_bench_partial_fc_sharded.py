"""The bench's sharded Partial FC rows (section (p), tools/bench/partial_fc.py): their table under
the one-device rows with the memory per device, a head that does not split into equal shards
skipped with its reason before anything is built. (The rows themselves are measured with forced
CPU devices or several accelerators: docs/partial_fc.md; never timings here.)"""

import pytest

from fedjax_face.tools.bench import partial_fc as bench_partial_fc
from tests import config_files, forced_devices

ONE_DEVICE = {'classes': 100_000, 'sample_rate': 0.1, 'sampled_centers': 10_000,
              'images_per_s': 205.3, 'compile_s': 11.4, 'head_state_bytes': 100 * 2**20,
              'argument_bytes': 101 * 2**20, 'temp_bytes': 55 * 2**20, 'peak_bytes': 156 * 2**20}


def test_sharded_rows_get_their_own_table_per_device_and_skipped_rows_are_left_out():
  sharded = {**ONE_DEVICE, 'devices': 4, 'status': 'measured', 'images_per_s': 56.1,
             'compile_s': 13.1, 'head_state_bytes': 25 * 2**20, 'argument_bytes': 26 * 2**20,
             'temp_bytes': 43 * 2**20, 'peak_bytes': 69 * 2**20}
  skipped = {'classes': 10, 'sample_rate': 0.1, 'devices': 4, 'status': 'skipped',
             'reason': '10 classes do not split into 4 equal shards'}
  lines = bench_partial_fc.markdown_lines({'model': 'small_cnn', 'batch_size': 128,
                                           'loss': 'cosface', 'rows': [ONE_DEVICE],
                                           'sharded_rows': [sharded, skipped]})
  assert lines[3] == '| 100,000 | 0.1 | 10,000 | 205.3 | 11.4 | 100.0 | 101.0 | 55.0 | 156.0 |'
  assert lines[4:6] == ['', 'W and its optimizer state split over 4 devices, one shard each '
                        '(algorithms/sharded_classes.py); memory per device:']
  assert lines[8:] == ['| 100,000 | 0.1 | 10,000 | 56.1 | 13.1 | 25.0 | 26.0 | 43.0 | 69.0 |']
  # Without sharded rows (one device) the section is the one table, as before.
  assert bench_partial_fc.markdown_lines({'model': 'small_cnn', 'batch_size': 128,
                                          'loss': 'cosface', 'rows': [ONE_DEVICE]}) == lines[:4]


def test_a_head_that_does_not_split_into_equal_shards_is_skipped_with_its_reason():
  config = config_files.load_config('bench', 'runlocal')
  row = bench_partial_fc.sharded_row(config, 10, 0.1, 4, timing={})
  assert row == {'name': '10 classes, sample_rate 0.1, 4 shards', 'classes': 10,
                 'sample_rate': 0.1, 'devices': 4, 'status': 'skipped',
                 'reason': '10 classes do not split into 4 equal shards'}


_FOUR_DEVICES = """
from fedjax_face.tools.bench import partial_fc as bench_partial_fc
from tests import config_files
config = config_files.load_config('bench', 'runlocal')
config.bench.repeats = 1
config.bench.partial_fc.sample_rates = (0.1,)
result = bench_partial_fc.bench_partial_fc(config, log=lambda _: None)
(row,) = result['sharded_rows']
d = config.model.embedding_dim
# 400 rows in 4 shards of 100: int(0.1 * 100) = 10 >= batch 8 a shard; W and SGD's momentum of
# it, float32, a quarter on each device.
assert (row['devices'], row['status'], row['sampled_centers']) == (4, 'measured', 40), row
assert row['head_state_bytes'] == 2 * 400 * d * 4 // 4
assert row['peak_bytes'] >= row['argument_bytes'] >= row['head_state_bytes']
print('sharded row ok')
"""


@pytest.mark.full   # a compiled small_cnn step on 4 forced CPU devices (~20 s of CPU, loaded)
def test_four_devices_give_a_sharded_row_with_a_quarter_of_the_head_on_each():
  out = forced_devices.run(_FOUR_DEVICES, num_devices=4)
  assert [line for line in out.splitlines() if line.endswith(' ok')] == ['sharded row ok']
