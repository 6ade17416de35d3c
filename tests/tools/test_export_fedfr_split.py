"""The config's own partition exported in FedFR's pre-split layout reads back as the same clients,
and FedFR on the exported files equals the in-memory run bit for bit."""

import json
import os

import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.tools import export_fedfr_split
from tests import config_files


def _digests(workdir) -> dict:
  digests = workdir / 'checkpoint_digests'
  last = max(int(n[:-5]) for n in os.listdir(digests))
  return json.loads((digests / f'{last}.json').read_text())


def test_fedfr_on_the_exported_split_equals_the_in_memory_run(tmp_path):
  config = config_files.load_config('fedfr/fedfr')
  del config.evals.identification   # a 1:N gallery of held-out identities: not in the layout
  memory = experiment.train_and_evaluate(config, str(tmp_path / 'memory'))
  fields = export_fedfr_split.export(config, str(tmp_path / 'split'))
  assert fields == {'data.fedfr_split.root': str(tmp_path / 'split'),
                    'federated.num_clients': 4, 'data.public_identities': 8,
                    'data.private_test_fraction': 0.0}
  assert sorted(os.listdir(tmp_path / 'split')) == [
      'agedb_30.bin', 'cfp_fp.bin', 'lfw.bin', 'local_gallery_8', 'local_veri_8',
      'split_pretrain_8', 'split_train_i0008c0004']
  config.data.source = 'fedfr_split'
  config.data.fedfr_split.root = fields['data.fedfr_split.root']
  config.federated.num_clients = fields['federated.num_clients']
  config.data.private_test_fraction = fields['data.private_test_fraction']
  read = experiment.train_and_evaluate(config, str(tmp_path / 'read'))
  assert read['personalized'] == memory['personalized']
  # The same numbers; only the title differs (the synthetic sets say so, a .bin keeps its name).
  untitled = lambda v: {name: {k: x for k, x in r.items() if k != 'title'} for name, r in v.items()}
  assert untitled(read['verification']) == untitled(memory['verification'])
  assert read['verification']['lfw']['title'] == 'lfw'
  # Every array of the final state, bit for bit.
  read_digests, memory_digests = _digests(tmp_path / 'read'), _digests(tmp_path / 'memory')
  assert read_digests['arrays'] == memory_digests['arrays']
  # The logged mean class-embedding norm sums the identities' norms in their numbering's order,
  # which the layout changes (client-major): equal but for float32 rounding.
  logged = lambda d: d['run'].pop('last_logged')
  read_logged, memory_logged = logged(read_digests), logged(memory_digests)
  assert read_digests == memory_digests
  assert read_logged == pytest.approx(memory_logged, rel=1e-6)
  assert np.isfinite(read['verification']['lfw']['accuracy'])
