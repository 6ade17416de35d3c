"""tools/bench/precision.py's structure, never its timings: the flags and their refusal, the
markdown of measured and skipped rows, the PyTorch AMP rows skipped with their reason here; in
the full tier, a tiny run of every dtype (float16 with its loss scaling) giving one measured row
each."""

import pytest

from fedjax_face.tools.bench import precision as bench_precision
from fedjax_face.tools.bench import torch_reference


def test_the_default_flags_are_iresnet50_at_112_px_in_every_dtype():
  s = bench_precision.parse_args([])
  assert (s.model, s.image_size, s.batch_size, s.dtypes) == (
      'iresnet50', 112, 64, ('float32', 'bfloat16', 'float16'))
  assert bench_precision.cpu_convolutions(s) == 'eigen'   # core/policy.py's rule for IResNets


def test_an_unknown_dtype_is_refused(capsys):
  with pytest.raises(SystemExit):
    bench_precision.parse_args(['--dtypes=float32,float64'])
  assert ('--dtypes=float32,float64; expected some of float32,bfloat16,float16'
          in capsys.readouterr().err)


def test_markdown_has_a_line_per_row():
  s = bench_precision.parse_args(['--model=small_cnn', '--image_size=16', '--dim=8'])
  rows = [{'name': 'engine, bfloat16', 'status': 'measured', 'images_per_s': 1234.5,
           'compile_s': 2.25},
          {'name': 'pytorch AMP', 'status': 'skipped', 'reason': 'no torch'}]
  lines = bench_precision.markdown_lines(s, rows)
  assert lines[0].startswith('## backbone training per compute dtype: small_cnn 16x16 d=8, ')
  assert lines[1:] == ['| how | images/s | compile s |', '| --- | ---: | ---: |',
                       '| engine, bfloat16 | 1,234.5 | 2.2 |',
                       '| pytorch AMP: skipped (no torch) | | |']


def test_the_amp_rows_say_why_they_are_skipped():
  s = bench_precision.parse_args([])
  rows = bench_precision.torch_amp_rows(s, 0, {})
  assert [row['status'] for row in rows] == ['skipped']
  if not torch_reference.available():
    assert rows[0]['reason'] == 'torch is not installed (optional: pip install torch)'


@pytest.mark.full
def test_a_tiny_run_measures_every_dtype(capsys):
  rows = bench_precision.main(['--model=small_cnn', '--width=4', '--image_size=16', '--dim=8',
                               '--batch_size=4', '--classes=3', '--repeats=1', '--torch=0'])
  assert [(row['dtype'], row['status']) for row in rows] == [
      ('float32', 'measured'), ('bfloat16', 'measured'), ('float16', 'measured')]
  assert '| engine, float16 |' in capsys.readouterr().out
