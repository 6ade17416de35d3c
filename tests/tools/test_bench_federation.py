"""The bench's federation section (tools/bench/federation.py). Always: without flwr it is skipped
with its reason, and so is its table. With FEDJAX_FACE_FEDERATION=all: the section itself over two
holders and three rounds (real processes): the bytes of every round's messages, beside the
ledger's, and every figure it reports; never a comparison of seconds."""

import math
import os
import sys

import pytest

from fedjax_face.tools.bench import federation as bench_federation
from tests import config_files


def test_without_flwr_the_section_is_skipped_with_its_reason(monkeypatch):
  monkeypatch.setitem(sys.modules, 'flwr', None)   # `import flwr` raises ImportError
  result = bench_federation.bench_federation(config_files.load_config('bench', 'runlocal'))
  assert result == {'status': 'skipped',
                    'reason': "flwr is not installed; expected pip install -e '.[flower]'"}
  assert bench_federation.markdown_table(result) == (
      "skipped: flwr is not installed; expected pip install -e '.[flower]'")


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='real processes: FEDJAX_FACE_FEDERATION=all')
def test_the_section_measures_bytes_beside_the_ledger_and_seconds_per_round():
  pytest.importorskip('flwr')
  config = config_files.load_config('bench', 'runlocal')
  config.bench.federation.rounds = 3
  result = bench_federation.bench_federation(config, log=lambda _: None)
  assert result['status'] == 'measured'
  rounds = result['in_process_rounds']
  assert len(rounds) == 3 and len(result['simulator_round_s']) == 3
  assert len(result['real']['round_s']) == 3
  holders = config.bench.federation.num_clients
  assert [r['messages'] for r in rounds] == [holders] * 3   # FedPE runlocal samples every holder
  # Every round's messages are the same size: the same arrays, names and headers each time.
  assert len({(r['bytes_down'], r['bytes_up']) for r in rounds}) == 1
  b = result['bytes']
  assert (b['down'], b['up']) == (rounds[-1]['bytes_down'], rounds[-1]['bytes_up'])
  # The arrays are the ledger's bytes; the messages carry them with names, headers and the roster.
  assert b['up'] > b['ledger_up'] > 0 and b['down'] > b['ledger_down'] > 0
  assert b['ledger_up'] % holders == 0 and b['ledger_down'] % holders == 0
  seconds = [*result['simulator_round_s'], *result['real']['round_s'],
             *(r[k] for r in rounds for k in ('seconds', 'protobuf_s', 'holders_s'))]
  assert all(isinstance(x, float) and math.isfinite(x) and x > 0 for x in seconds)
  table = bench_federation.markdown_table(result)
  assert f"| up | {b['up']:,} | {b['ledger_up']:,} |" in table.splitlines()
