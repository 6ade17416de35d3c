"""tools/fedma_widths: the widths a FedMA run reached (its results.json, or its final checkpoint),
as a table."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.algorithms.fedma import layers
from fedjax_face.core.algorithm import RoundState
from fedjax_face.io import checkpoint
from fedjax_face.tools import fedma_widths


def _finished_run(workdir, widths, cap_width=3, client_width=2):
  config = {'num_rounds': 1, 'model': {'width': cap_width}, 'fedma': {'client_width': client_width}}
  masks = tuple(jnp.asarray(np.arange(layer.channels(cap_width)) < w, jnp.float32)
                for layer, w in zip(layers.MATCHED, widths))
  ckpt = checkpoint.Checkpointer(str(workdir))
  ckpt.save(1, RoundState(server={'masks': masks}, clients={}, round=jnp.int32(1)))
  ckpt.close()
  (workdir / 'results.json').write_text('{}')
  (workdir / 'config.json').write_text(json.dumps(config))


def test_the_table_has_each_run_s_widths_and_how_many_reached_the_cap(tmp_path):
  caps = [layer.channels(3) for layer in layers.MATCHED]
  widths = [c - (i % 2) for i, c in enumerate(caps)]    # every other layer at its cap
  _finished_run(tmp_path / 'pad-fedma_protocol-OCI_M', widths)
  (tmp_path / 'pad-fedpad_protocol-OCI_M').mkdir()         # not FedMA: left out
  assert fedma_widths.run_widths(str(tmp_path / 'pad-fedma_protocol-OCI_M')) == widths
  table = fedma_widths.widths_table(str(tmp_path)).splitlines()
  assert table[2] == '| a data center | ' + ' | '.join(
      str(layer.channels(2)) for layer in layers.MATCHED) + ' | |'
  assert table[3] == '| the cap | ' + ' | '.join(map(str, caps)) + ' | |'
  assert table[4] == ('| pad-fedma_protocol-OCI_M | ' + ' | '.join(map(str, widths))
                      + f' | {layers.NUM_MATCHED // 2} |')
  assert len(table) == 5


def test_widths_recorded_in_results_json_need_no_checkpoint(tmp_path):
  workdir = tmp_path / 'pad-fedma_protocol-OMI_C'
  workdir.mkdir()
  widths = [layer.channels(3) for layer in layers.MATCHED]
  (workdir / 'results.json').write_text(json.dumps({'method_state': {'widths': widths}}))
  (workdir / 'config.json').write_text(json.dumps(
      {'model': {'width': 3}, 'fedma': {'client_width': 2}}))
  assert fedma_widths.run_widths(str(workdir)) == widths
  assert fedma_widths.widths_table(str(tmp_path)).splitlines()[4] == (
      '| pad-fedma_protocol-OMI_C | ' + ' | '.join(map(str, widths)) + f' | {layers.NUM_MATCHED} |')


def test_a_root_without_fedma_runs_is_named(tmp_path):
  match = f'no finished pad-fedma\\* workdir under {tmp_path}'
  with pytest.raises(FileNotFoundError, match=match):
    fedma_widths.widths_table(str(tmp_path))
