"""The embedded benchmark exported once into three holders' folders, for every federation test."""

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
