"""The bench's Partial FC section (p) on bench.py's runlocal sizes: a row per head size and rate,
the centers each step trains and the head's state bytes as counted by hand, XLA's memory figures
present, the markdown row per row, and the section's config refusals. Never timings."""

import math

import pytest

from fedjax_face.tools.bench import common as bench_common
from fedjax_face.tools.bench import partial_fc as bench_partial_fc
from tests import config_files


def test_a_row_per_head_size_and_rate_with_its_centers_and_bytes():
  config = config_files.load_config('bench', 'runlocal')
  config.bench.repeats = 1
  s = config.bench.partial_fc
  assert (s.classes, s.sample_rates, s.batch_size) == ((400,), (1.0, 0.1), 8)
  result = bench_partial_fc.bench_partial_fc(config, log=lambda _: None)
  rows = result['rows']
  assert [(r['classes'], r['sample_rate']) for r in rows] == [(400, 1.0), (400, 0.1)]
  # int(0.1 * 400) = 40 >= batch 8; rate 1 trains all 400.
  assert [r['sampled_centers'] for r in rows] == [400, 40]
  d = config.model.embedding_dim
  # W and SGD's momentum of it, float32, whatever the rate: every center is kept.
  assert [r['head_state_bytes'] for r in rows] == [2 * 400 * d * 4] * 2
  for r in rows:
    assert r['argument_bytes'] >= r['head_state_bytes']
    assert r['peak_bytes'] >= r['argument_bytes']
    assert isinstance(r['images_per_s'], float) and math.isfinite(r['images_per_s'])
    assert r['images_per_s'] > 0 and r['images_per_round'] == 8
  lines = bench_partial_fc.markdown_lines(result)
  assert lines[0].startswith('## (p) Partial FC: small_cnn w=2 d=8 8x8, batch 8, cosface')
  assert [line.split(' | ')[:3] for line in lines[3:]] == [['| 400', '1', '400'],
                                                           ['| 400', '0.1', '40']]


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
