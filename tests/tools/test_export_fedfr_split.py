"""The config's own partition exported in FedFR's pre-split layout reads back as the same clients,
and FedFR on the exported files equals the in-memory run bit for bit, the public set in one
pre-training folder or in several (as FedFR's `split_pretrain.py` writes it)."""

import json
import os

import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.core import checks
from fedjax_face.data.formats import fedfr_split
from fedjax_face.tools import export_fedfr_split
from tests import config_files


def _digests(workdir) -> dict:
  digests = workdir / 'checkpoint_digests'
  last = max(int(n[:-5]) for n in os.listdir(digests))
  return json.loads((digests / f'{last}.json').read_text())


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
  """(folder, the config reading the exported split, the in-memory run's results) of FedFR's
  runlocal config, run in memory and exported once for the module."""
  tmp_path = tmp_path_factory.mktemp('fedfr_split')
  config = config_files.load_config('fedfr/fedfr')
  del config.evals.identification   # a 1:N gallery of held-out identities: not in the layout
  memory = experiment.train_and_evaluate(config, str(tmp_path / 'memory'))
  fields = export_fedfr_split.export(config, str(tmp_path / 'split'))
  assert fields == {'data.fedfr_split.root': str(tmp_path / 'split'),
                    'federated.num_clients': 4, 'data.public_identities': 8,
                    'data.private_test_fraction': 0.0}
  config.data.source = 'fedfr_split'
  config.data.fedfr_split.root = fields['data.fedfr_split.root']
  config.federated.num_clients = fields['federated.num_clients']
  config.data.private_test_fraction = fields['data.private_test_fraction']
  return tmp_path, config, memory


def test_fedfr_on_the_exported_split_equals_the_in_memory_run(exported):
  tmp_path, config, memory = exported
  assert sorted(os.listdir(tmp_path / 'split')) == [
      'agedb_30.bin', 'cfp_fp.bin', 'lfw.bin', 'local_gallery_8', 'local_veri_8',
      'split_pretrain_8', 'split_train_i0008c0004']
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
  # The files just read, exported again with the public set in 3 pre-training folders of 3, 3, 2
  # identities, each labelled from 0 under a flag-2 header as split_pretrain.py writes them (read
  # back shifted: tests/data/test_fedfr_split.py's
  # test_every_pretraining_folder_is_read_with_its_labels_shifted; the run on them: below).
  _export_in_three(config, tmp_path / 'split3')
  with pytest.raises(checks.UsageError, match=r'--pretrain_folders=9; expected 1 .. 8'):
    export_fedfr_split.export(config, str(tmp_path / 'nine'), pretrain_folders=9)


def _export_in_three(config, folder):
  export_fedfr_split.export(config, str(folder), pretrain_folders=3)
  pretrain = folder / 'split_pretrain_8'
  assert sorted(os.listdir(pretrain)) == ['client_0000', 'client_0001', 'client_0002']
  headers = [fedfr_split.check_set(str(pretrain / f'client_{i:04d}'), 'train') for i in range(3)]
  assert [(h.num_ids, h.id_base) for h in headers] == [(3, None), (3, None), (2, None)]


@pytest.mark.full   # the equality above, on another layout of the same files
def test_fedfr_on_the_split_with_three_pretraining_folders_equals_the_in_memory_run(exported):
  tmp_path, config, memory = exported
  _export_in_three(config, tmp_path / 'split3_full')
  config = config.copy_and_resolve_references()
  config.data.fedfr_split.root = str(tmp_path / 'split3_full')
  read3 = experiment.train_and_evaluate(config, str(tmp_path / 'read3'))
  assert read3['personalized'] == memory['personalized']
  assert _digests(tmp_path / 'read3')['arrays'] == _digests(tmp_path / 'memory')['arrays']
