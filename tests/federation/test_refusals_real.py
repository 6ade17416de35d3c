"""Bad holders over real processes (behind FEDJAX_FACE_FEDERATION=all): a SuperLink and three
SuperNodes on loopback (test_faults_real's `Federation`), `flwr run` of FedPE. The server refuses
before round 0 in one line naming the holder (the log's `refused: ` line and the file the
launcher raises as a UsageError, no traceback) and writes no server state:

- a holder whose process runs other code: its SuperNode's Python imports the package from a
  checkout of the previous commit (its own git repository, so its commit label differs);
- a holder whose data folder is missing.
"""

import os
import re
import subprocess

import pytest

pytest.importorskip('flwr')

from fedjax_face.federation import apps   # pylint: disable=g-import-not-at-top
from tests.federation import test_equal_to_simulator as direct
from tests.federation import test_faults_real as real

pytestmark = real.pytestmark


def other_checkout(folder: str) -> str:
  """The package and configs of HEAD~1 in a git repository of their own at `folder`."""
  os.makedirs(folder)
  archive = subprocess.run(['git', '-C', direct.config_files.ROOT, 'archive', 'HEAD~1',
                            'fedjax_face', 'configs'], check=True, capture_output=True).stdout
  subprocess.run(['tar', '-x', '-C', folder], input=archive, check=True)
  git = ['git', '-C', folder, '-c', 'user.name=t', '-c', 'user.email=t@t']
  subprocess.run(git + ['init', '-q'], check=True)
  subprocess.run(git + ['add', '-A'], check=True)
  subprocess.run(git + ['commit', '-q', '-m', 'other code'], check=True)
  return folder


def start(holders_root: str, workdir: str, **nodes) -> real.Federation:
  """The federation, its SuperNodes started with `nodes` (`Federation.start_nodes`' env_of and
  data_of)."""
  fed = real.Federation(workdir, holders_root, f'federated.num_clients={direct.NUM_HOLDERS} '
                        'num_rounds=1')
  fed.start_link()
  fed.start_nodes(**nodes)
  return fed


def refused(fed: real.Federation) -> str:
  """The ServerApp's one-line refusal: in its workdir's REFUSED (what the launcher raises as a
  UsageError) and as the log's one 'refused: ' line; no traceback, no server state."""
  run = fed.run('flwr_run')
  run.wait(timeout=600)
  server = os.path.join(fed.workdir, 'server')
  assert not os.path.exists(os.path.join(server, 'server_000001.npz'))
  log = fed.log('flwr_run')
  assert 'Traceback' not in log, log[-3000:]
  with open(os.path.join(server, apps.REFUSED)) as f:
    line = f.read()
  assert line.endswith('\n') and line.count('\n') == 1
  assert [l for l in log.splitlines() if l.startswith('refused: ')] == ['refused: ' + line[:-1]]
  return line[:-1]


def test_a_holder_running_other_code_is_refused_in_one_line(holders_root, tmp_path):
  other = other_checkout(str(tmp_path / 'other_code'))
  fed = start(holders_root, str(tmp_path / 'run'), env_of={2: {'PYTHONPATH': other}})
  try:
    log = refused(fed)
  finally:
    fed.stop()
  assert re.fullmatch(r'data holder of client 2 runs [0-9a-f]{12} .*; the server runs '
                      r'[0-9a-f]{12}(\+dirty)? .*: expected the same code on every party\.', log)


def test_a_holder_without_its_data_folder_is_refused_in_one_line(holders_root, tmp_path):
  missing = str(tmp_path / 'no_such_folder')
  fed = start(holders_root, str(tmp_path / 'run'), data_of={1: missing})
  try:
    log = refused(fed)
  finally:
    fed.stop()
  assert log.startswith(f'describe: data holder of client 1: {missing} is not a directory; '
                        'expected '), log
