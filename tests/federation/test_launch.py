"""The one-machine launcher (federation/launch.py). Always: the files it writes (a CA and the
SuperLink's certificate for 127.0.0.1 that verifies against it, SuperNode keys in the OpenSSH form
flwr reads, the app's pyproject.toml naming the apps and the config), its one-line refusal, and
one federation of real processes: a SuperLink and two SuperNodes on 127.0.0.1, each with its
resident ClientApp process (federation/resident.py), `flwr run`, FedPE for two rounds, ending at
the simulator's state bit for bit. With FEDJAX_FACE_FEDERATION=all, three SuperNodes each time:
FedPE with each message in its own `flwr-clientapp` (Flower's default isolation), TLS and
SuperNode authentication (the SuperLink on 127.0.0.2); FedGC (W_k crossing as per-client rows);
FedPAD's three data centers, each reading its own root of the lists (tools/export_pad.py), the
depth maps its per-sample targets. Each ends at the simulator's state bit for bit."""

import concurrent.futures
import os
import re
import tomllib

import jax
import numpy as np
import pytest

pytest.importorskip('flwr')

from cryptography import x509   # pylint: disable=g-import-not-at-top
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedjax_face.core import checks
from fedjax_face.federation import apps, launch, roster, wire
from tests.federation import test_equal_to_simulator as direct

CONFIG = os.path.join(direct.config_files.ROOT, 'configs/fedgc/fedpe.py') + ':runlocal'


def test_the_certificate_verifies_against_the_ca_for_the_loopback_address(tmp_path):
  paths = launch.write_certificates(str(tmp_path))
  ca = x509.load_pem_x509_certificate(open(paths.ca, 'rb').read())
  cert = x509.load_pem_x509_certificate(open(paths.cert, 'rb').read())
  cert.verify_directly_issued_by(ca)   # raises if the CA did not sign it
  names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
  assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ['127.0.0.1']
  assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
  key = serialization.load_pem_private_key(open(paths.key, 'rb').read(), None)
  assert key.public_key().public_numbers() == cert.public_key().public_numbers()


def test_node_keys_are_p384_in_the_openssh_form(tmp_path):
  private, public = launch.write_node_key(str(tmp_path), 2)
  key = serialization.load_ssh_private_key(open(private, 'rb').read(), None)
  pub = serialization.load_ssh_public_key(open(public, 'rb').read())
  assert isinstance(key.curve, ec.SECP384R1)
  assert key.public_key().public_numbers() == pub.public_numbers()


def test_the_app_names_the_apps_and_the_config(tmp_path):
  folder = launch.write_app(str(tmp_path / 'app'), 'configs/fedgc/fedpe.py:runlocal',
                            'num_rounds=2', str(tmp_path / 'server'))
  with open(os.path.join(folder, 'pyproject.toml'), 'rb') as f:
    flwr = tomllib.load(f)['tool']['flwr']
  assert flwr['app']['components'] == {
      'serverapp': 'fedjax_face.federation.apps:server_app',
      'clientapp': 'fedjax_face.federation.apps:client_app'}
  assert flwr['app']['config'] == {
      'config': os.path.abspath('configs/fedgc/fedpe.py') + ':runlocal',
      'overrides': 'num_rounds=2', 'workdir': str(tmp_path / 'server'),
      'round-timeout-s': 0, 'min-replies': 0}
  folder = launch.write_app(str(tmp_path / 'app2'), 'configs/fedgc/fedpe.py', '',
                            str(tmp_path / 'server'), round_timeout=2.5, min_replies=2)
  with open(os.path.join(folder, 'pyproject.toml'), 'rb') as f:
    config = tomllib.load(f)['tool']['flwr']['app']['config']
  assert (config['round-timeout-s'], config['min-replies']) == (2.5, 2)


def test_the_holders_mask_secret_is_theirs_alone_and_never_overwritten(tmp_path):
  path = launch.write_mask_secret(str(tmp_path))
  assert os.stat(path).st_mode & 0o777 == 0o600 and os.path.getsize(path) == 32
  with pytest.raises(FileExistsError):
    launch.write_mask_secret(str(tmp_path))


def test_a_folder_without_holders_is_refused_in_one_line(tmp_path):
  with pytest.raises(checks.UsageError, match=r'^--holders=.* holds no client_000 folder; '
                     r'expected the folders python -m fedjax_face.federation.export writes\.$'):
    launch.holder_folders(str(tmp_path))


def assert_ends_at_the_simulators_state(final: str, run_dir, config, simulated=None):
  """The final server state and every holder's last private state (read from its folder) are the
  simulator's of the same folders and seed (`simulated`, or run here), bit for bit."""
  if simulated is None:
    simulated, _ = direct.simulate(config)
  direct.assert_trees_equal(
      wire.load(final, jax.tree.map(np.asarray, simulated.server)), simulated.server)
  for k in range(config.federated.num_clients):
    row = jax.tree.map(lambda x, k=k: np.asarray(x[k]), simulated.clients)
    kept = wire.load(str(run_dir / 'state' / str(k) / f'private_{config.num_rounds:06d}.npz'), row)
    direct.assert_trees_equal(kept, row)


def test_two_resident_holders_over_real_processes_end_at_the_simulators_state(two_holders_root,
                                                                               tmp_path):
  run_dir = tmp_path / 'run'
  config = direct.folder_config('fedpe', two_holders_root)
  config.federated.num_clients = 2
  # The simulator runs here while the federation's processes mostly wait on Flower's polls.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    simulated = pool.submit(direct.simulate, config)
    final = launch.launch(CONFIG, f'federated.num_clients=2 num_rounds={direct.ROUNDS} '
                          'engine.backend=loop engine.loop_threads=1', two_holders_root,
                          str(run_dir), resident=True, timeout=600)
    assert_ends_at_the_simulators_state(final, run_dir, config, simulated.result()[0])
  for k in range(2):
    with open(run_dir / 'logs' / f'clientapp_{k}.log') as f:
      tasks = re.findall(r'^task \d+: (\S+) (\w+) in', f.read(), re.M)
    # Every message ran in the holder's one process: the roster's question, then each round.
    assert tasks == [('query.describe', 'completed')] + [('train', 'completed')] * direct.ROUNDS
    with open(run_dir / 'logs' / f'supernode_{k}.log') as f:
      assert 'flwr-clientapp' not in f.read()   # its SuperNode started no process per message
  ends = launch.round_seconds(str(run_dir))
  assert sorted(ends) == [1, 2] and 0 < ends[1] < ends[2]


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='real processes, about 2 min: FEDJAX_FACE_FEDERATION=all')
def test_real_processes_with_tls_and_node_auth_end_at_the_simulators_state(holders_root,
                                                                            tmp_path):
  # The SuperLink on 127.0.0.2, the SuperNodes on 127.0.0.1: two addresses, as two hosts.
  overrides = (f'federated.num_clients={direct.NUM_HOLDERS} num_rounds={direct.ROUNDS} '
               'engine.backend=loop engine.loop_threads=1')
  final = launch.launch(CONFIG, overrides, holders_root, str(tmp_path / 'run'), tls=True,
                        auth=True, host='127.0.0.2', timeout=900)
  assert_ends_at_the_simulators_state(final, tmp_path / 'run',
                                      direct.folder_config('fedpe', holders_root))
  with open(tmp_path / 'run' / 'logs' / 'superlink.log') as f:
    assert 'Uvicorn running on https://127.0.0.2:' in f.read()   # TLS was on, at 127.0.0.2


def written_pad_config(folder, fields: dict) -> str:
  """A config file that is `configs/pad/fedpad.py` reading the exported lists (`fields`, as
  `direct.pad_config` sets them): the one file the server, the holders and the simulator read."""
  base = os.path.join(direct.config_files.ROOT, 'configs', 'pad', 'fedpad.py')
  path = os.path.join(str(folder), 'fedpad_lists.py')
  with open(path, 'w') as f:
    f.write(f'''import importlib.util


def get_config(arg=None):
  spec = importlib.util.spec_from_file_location('fedpad_base', {base!r})
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(arg)
  config.data.source = 'pad_lists'
  config.data.pad_lists.update({dict(fields)!r})
  config.engine.backend = 'loop'
  config.engine.loop_threads = 1
  return config
''')
  return path


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='real processes, FedGC: FEDJAX_FACE_FEDERATION=all')
def test_fedgc_over_real_processes_ends_at_the_simulators_state(holders_root, tmp_path):
  final = launch.launch(
      direct.config_files.config_path('fedgc') + ':runlocal',
      f'federated.num_clients={direct.NUM_HOLDERS} num_rounds={direct.ROUNDS} '
      'engine.backend=loop engine.loop_threads=1', holders_root, str(tmp_path / 'run'),
      resident=True, timeout=900)
  assert_ends_at_the_simulators_state(final, tmp_path / 'run',
                                      direct.folder_config('fedgc', holders_root))


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='real processes, FedPAD: FEDJAX_FACE_FEDERATION=all')
def test_fedpad_data_centers_over_real_processes_end_at_the_simulators_state(pad_lists_fields,
                                                                             tmp_path):
  # Each data center's SuperNode names its own root of the lists; the config file names them all
  # (the simulator reads every root, a data center only its own).
  spec = written_pad_config(tmp_path, pad_lists_fields) + ':runlocal'
  final = launch.launch(spec, '', pad_lists_fields['roots'], str(tmp_path / 'run'),
                        resident=True, timeout=900)
  assert_ends_at_the_simulators_state(final, tmp_path / 'run',
                                      direct.pad_config('fedpad', pad_lists_fields))


def test_the_roster_a_holder_receives_carries_every_holders_targets():
  # A data center checks its own description in the roster (FedPAD's depth maps among it).
  descriptions = [roster.Description(0, 12, 2, (32, 32, 3), 'c', ('depth:32x32:float32',)),
                  roster.Description(1, 9, 2, (32, 32, 3), 'c', ('depth:32x32:float32',)),
                  roster.Description(2, 7, 3, (32, 32, 3), 'c')]
  assert apps.roster_from_record(apps.roster_record(descriptions)) == descriptions


def test_listed_holder_folders_are_taken_in_order_and_a_missing_one_is_refused(tmp_path):
  (tmp_path / 'b').mkdir()
  (tmp_path / 'a').mkdir()
  listed = [str(tmp_path / 'b'), str(tmp_path / 'a')]
  assert launch.holder_folders(listed) == listed   # client order, as given
  with pytest.raises(checks.UsageError, match=r"^holder folder 1 .*/nope does not exist; expected "
                     r"each data holder's own folder\.$"):
    launch.holder_folders([str(tmp_path / 'a'), str(tmp_path / 'nope')])


def test_round_ends_are_read_from_the_servers_round_lines_only(tmp_path):
  (tmp_path / 'logs').mkdir()
  (tmp_path / 'logs' / 'flwr_run.log').write_text(
      '     6.5 Successfully started run 1\n'
      '    30.0 round 0: waiting for nodes [7] after 30 s (for every reply: round-timeout-s=0)\n'
      '    44.9 round 1: train_loss=2.0904\n'
      '    54.3 round 2: loss_cls=0.7918, train_loss=0.7918\n')
  assert launch.round_seconds(str(tmp_path)) == {1: 44.9, 2: 54.3}
