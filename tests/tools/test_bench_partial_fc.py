"""The bench's Partial FC section (p): the head's state bytes counted by hand, the markdown row per
row, the section's config refusals; on bench.py's runlocal sizes (full tier: two small_cnn steps
compiled, ~9 s of CPU on a loaded 2-core machine) a row per head size and rate with the centers
each step trains and XLA's memory figures present. Never timings."""

import math

import numpy as np
import optax
import pytest

from fedjax_face.tools.bench import common as bench_common
from fedjax_face.tools.bench import partial_fc as bench_partial_fc
from tests import config_files


def test_head_state_bytes_are_w_and_its_momentum():
  params = {'backbone': {'Dense_0': {'kernel': np.zeros((5, 3), np.float32)}},
            'W': np.zeros((40, 8), np.float32)}
  opt_state = optax.sgd(0.1, momentum=0.9).init(params)
  assert bench_partial_fc._head_state_bytes(params, opt_state) == 2 * 40 * 8 * 4


def test_markdown_has_a_row_per_row():
  row = {'classes': 100_000, 'sample_rate': 0.1, 'sampled_centers': 10_000,
         'images_per_s': 174.4, 'compile_s': 2.5, 'head_state_bytes': 100 * 2**20,
         'argument_bytes': 101 * 2**20, 'temp_bytes': 55 * 2**20, 'peak_bytes': 156 * 2**20}
  lines = bench_partial_fc.markdown_lines({'model': 'small_cnn', 'batch_size': 128,
                                           'loss': 'cosface', 'rows': [row]})
  assert lines[0] == ('## (p) Partial FC: small_cnn, batch 128, cosface, SGD with momentum and '
                      'weight decay')
  assert lines[3] == '| 100,000 | 0.1 | 10,000 | 174.4 | 2.5 | 100.0 | 101.0 | 55.0 | 156.0 |'


@pytest.mark.full
def test_a_row_per_head_size_and_rate_with_its_centers_and_bytes():
  config = config_files.load_config('bench', 'runlocal')
  config.bench.repeats = 1
  s = config.bench.partial_fc
  assert (s.classes, s.sample_rates, s.batch_size) == ((400,), (1.0, 0.1), 8)
  # Two head sizes at rate 0.1 (the rate-1.0 row is the plain step, compiled as often as 0.1's):
  # each step compiles once, a few seconds on a loaded 2-core machine.
  s.classes, s.sample_rates = (400, 40), (0.1,)
  result = bench_partial_fc.bench_partial_fc(config, log=lambda _: None)
  rows = result['rows']
  assert [(r['classes'], r['sample_rate']) for r in rows] == [(400, 0.1), (40, 0.1)]
  # int(0.1 * 400) = 40 >= batch 8; int(0.1 * 40) = 4, raised to the batch's 8.
  assert [r['sampled_centers'] for r in rows] == [40, 8]
  d = config.model.embedding_dim
  # W and SGD's momentum of it, float32: every center is kept whatever the rate.
  assert [r['head_state_bytes'] for r in rows] == [2 * 400 * d * 4, 2 * 40 * d * 4]
  for r in rows:
    assert r['argument_bytes'] >= r['head_state_bytes']
    assert r['peak_bytes'] >= r['argument_bytes']
    assert isinstance(r['images_per_s'], float) and math.isfinite(r['images_per_s'])
    assert r['images_per_s'] > 0 and r['images_per_round'] == 8
  lines = bench_partial_fc.markdown_lines(result)
  assert lines[0].startswith('## (p) Partial FC: small_cnn w=2 d=8 8x8, batch 8, cosface')
  assert [line.split(' | ')[:3] for line in lines[3:]] == [['| 400', '0.1', '40'],
                                                           ['| 40', '0.1', '8']]


@pytest.mark.parametrize('field, value, message', [
    ('sample_rates', (1.0, 0.0),
     'config.bench.partial_fc.sample_rates[...]=0.0; expected a fraction in (0, 1].'),
    ('classes', (), 'config.bench.partial_fc.classes is empty; expected at least one of ().'),
    ('loss', 'positive_dot',
     "config.bench.partial_fc.loss='positive_dot'; expected one of ('softmax', 'cosface', "
     "'arcface')."),
])
def test_the_section_s_bad_fields_are_named(field, value, message):
  config = config_files.load_config('bench', 'runlocal')
  config.bench.partial_fc[field] = value
  with pytest.raises(ValueError) as raised:
    bench_common.validate(config)
  assert str(raised.value) == message
