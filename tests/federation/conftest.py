"""The embedded benchmark exported once into the holders' folders, for every federation test:
FedGC's setting (several identities per holder) over three holders and over two (the default
suite's real-process test), and FedFV's (one identity per holder)."""

import pytest

from fedjax_face.federation import export
from tests import config_files
from tests.federation import test_equal_to_simulator as direct


@pytest.fixture(scope='session')
def holders_root(tmp_path_factory):
  config = config_files.load_config('fedpe')
  config.federated.num_clients = direct.NUM_HOLDERS
  root = str(tmp_path_factory.mktemp('holders') / 'data')
  export.export(config, root)
  return root


@pytest.fixture(scope='session')
def two_holders_root(tmp_path_factory):
  """FedGC's setting over two holders: the real-process test of the default suite."""
  config = config_files.load_config('fedpe')
  config.federated.num_clients = 2
  root = str(tmp_path_factory.mktemp('two_holders') / 'data')
  export.export(config, root)
  return root


@pytest.fixture(scope='session')
def one_per_client_root(tmp_path_factory):
  config = config_files.load_config('fedfv')
  config.federated.num_clients = direct.NUM_HOLDERS
  config.data.synthetic.num_identities = direct.NUM_HOLDERS
  root = str(tmp_path_factory.mktemp('holders_one_each') / 'data')
  export.export(config, root)
  return root


@pytest.fixture(scope='session')
def pad_lists_fields(tmp_path_factory):
  """FedPAD's embedded data centers written as lists (tools/export_pad.py, the authors' layout):
  the `config.data.pad_lists` fields that read them back, one root per data center."""
  from fedjax_face.tools import export_pad   # pylint: disable=import-outside-toplevel
  config = config_files.load_config('pad/fedpad')
  return export_pad.export(config, 'fedgpad', str(tmp_path_factory.mktemp('pad_lists')))
