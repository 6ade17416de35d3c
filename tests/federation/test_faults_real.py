"""Faults over real processes (behind FEDJAX_FACE_FEDERATION=all): a SuperLink and three
SuperNodes on loopback (federation/launch.py's process helpers), `flwr run` of FedPE.

- A SuperNode killed in round 1 (its process group, the ClientApp it started included), the
  rounds waiting for every reply (no round timeout): its SuperLink answers for it once its
  heartbeats stop (flwr 1.42: 2 x 30 s), which the server says in one line; without DP the round
  goes on with the two others at `min-replies=2`, and says so, and so does round 2; under DP the
  run stops with one line.
- The SuperLink killed after round 1 (its ServerApp with it) and started again on its own
  `--database`: the SuperNodes reconnect, a new `flwr run` resumes the ServerApp from its
  checkpoint of round 1, each holder from the private state it kept, and the federation ends at
  the simulator's state bit for bit.
- DP and secure aggregation (each SuperNode naming the holders' mask secret in its node config)
  end at the simulator's state bit for bit; under DP the server writes ε in privacy.json.
"""

import json
import os
import re
import signal
import subprocess
import time

import jax
import numpy as np
import pytest

pytest.importorskip('flwr')

from fedjax_face.federation import launch, wire   # pylint: disable=g-import-not-at-top
from tests.federation import test_equal_to_simulator as direct

pytestmark = pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                                reason='real processes: FEDJAX_FACE_FEDERATION=all')

CONFIG = os.path.join(direct.config_files.ROOT, 'configs/fedgc/fedpe.py') + ':runlocal'
ROUNDS = 3
ROUND_DONE = r'round {}: [\w/]+='   # the ServerApp's line after a round (apps.say_round)


class Federation:
  """A SuperLink (insecure, on its own database) and one SuperNode per holder folder, on loopback,
  started by launch.py's helpers; `run` starts `flwr run`. Every process is stopped by `stop`."""

  def __init__(self, workdir: str, holders: str, overrides: str):
    self.workdir, self.folders = workdir, launch.holder_folders(holders)
    self.port = launch.free_port()
    self.address = f'{launch.LOOPBACK}:{self.port}'
    commands = os.path.dirname(launch.executable('flower-superlink'))
    env = dict(os.environ, PATH=os.pathsep.join([commands, os.environ.get('PATH', '')]),
               FLWR_HOME=launch.write_connection(os.path.join(workdir, 'flwr_home'),
                                                 self.address, None))
    self.app = launch.write_app(os.path.join(workdir, 'app'), CONFIG, overrides,
                                os.path.join(workdir, 'server'))
    self.processes = launch.Processes(os.path.join(workdir, 'logs'), env)
    self.nodes, self.starts, self.others = {}, 0, []

  def start_link(self):
    self.starts += 1
    self.link = self.processes.start(f'superlink_{self.starts}', [
        launch.executable('flower-superlink'), '--insecure',
        '--disable-runtime-dependency-installation',
        '--database', os.path.join(self.workdir, 'superlink.db'),
        '--host', launch.LOOPBACK, '--port', str(self.port)])
    launch.wait_listening(launch.LOOPBACK, self.port, self.link, 'flower-superlink', 60)

  def start_nodes(self, node_config: str = '', env_of=None, data_of=None):
    """One SuperNode per holder folder; `node_config` is added to each one's node config. Holder
    k's SuperNode runs with `env_of[k]` added to the environment and reads `data_of[k]` instead
    of its folder, where given (a holder on other code, or without its data)."""
    for k, folder in enumerate(self.folders):
      processes = self.processes
      if env_of and k in env_of:   # its own Processes, stopped with the others (`stop`)
        processes = launch.Processes(os.path.join(self.workdir, 'logs'),
                                     dict(self.processes.env, **env_of[k]))
        self.others.append(processes)
      folder = (data_of or {}).get(k, folder)
      self.nodes[k] = processes.start(f'supernode_{k}', [
          launch.executable('flower-supernode'), '--insecure', '--superlink', self.address,
          '--host', launch.LOOPBACK, '--port', str(launch.free_port()), '--node-config',
          f'client-index={k} data-path="{os.path.abspath(folder)}" '
          f'state-path="{os.path.abspath(os.path.join(self.workdir, "state", str(k)))}" '
          f'{node_config}'.strip()])

  def run(self, name: str, run_config: str = '') -> subprocess.Popen:
    """`flwr run` in the background, its output in logs/<name>.log."""
    extra = ['--run-config', run_config] if run_config else []
    return self.processes.start(name, [launch.executable('flwr'), 'run', self.app, 'federation',
                                       '--stream'] + extra)

  def log(self, name: str) -> str:
    with open(os.path.join(self.workdir, 'logs', f'{name}.log'), errors='replace') as f:
      return f.read()

  def wait_for(self, name: str, pattern: str, process: subprocess.Popen, timeout: float):
    """Waits until logs/<name>.log has a line matching `pattern` (or `process` exits)."""
    end = time.time() + timeout
    while time.time() < end:
      if re.search(pattern, self.log(name), re.MULTILINE):
        return
      if process.poll() is not None:
        break
      time.sleep(0.5)
    raise AssertionError(f'{name}: no {pattern!r} after {timeout:.0f} s:\n'
                         + self.log(name)[-3000:])

  @staticmethod
  def kill(process: subprocess.Popen):
    """SIGKILL to the process group this test started (the process and its children)."""
    try:
      os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:   # it had exited (flwr run, once its SuperLink was gone)
      pass
    process.wait()

  def stop(self):
    for processes in self.others:
      processes.stop()
    self.processes.stop()


@pytest.fixture
def federation(holders_root, tmp_path):
  started = []
  def start(overrides: str, node_config: str = '') -> Federation:
    fed = Federation(str(tmp_path), holders_root,
                     f'federated.num_clients={direct.NUM_HOLDERS} num_rounds={ROUNDS} '
                     f'checkpoint_every=1 {overrides}'.strip())
    started.append(fed)
    fed.start_link()
    fed.start_nodes(node_config)
    return fed
  yield start
  for fed in started:
    fed.stop()


def folder_config(root: str, dp: bool = False, secure: bool = False):
  config = direct.folder_config('fedpe', root)
  config.num_rounds = ROUNDS
  config.dp.enabled = dp
  config.secure_aggregation.enabled = secure
  return config


def assert_ends_at_the_simulators_state(fed: Federation, config):
  simulated, _ = direct.simulate(config)
  final = os.path.join(fed.workdir, 'server', f'server_{ROUNDS:06d}.npz')
  direct.assert_trees_equal(wire.load(final, jax.tree.map(np.asarray, simulated.server)),
                            simulated.server)
  for k in range(direct.NUM_HOLDERS):
    row = jax.tree.map(lambda x, k=k: np.asarray(x[k]), simulated.clients)
    kept = wire.load(os.path.join(fed.workdir, 'state', str(k), f'private_{ROUNDS:06d}.npz'), row)
    direct.assert_trees_equal(kept, row)


@pytest.mark.parametrize('mode', ['dp', 'secure'])
def test_a_privacy_mode_over_real_processes_ends_at_the_simulators_state(federation,
                                                                         holders_root, tmp_path,
                                                                         mode):
  secret = tmp_path / 'mask_secret'
  secret.write_text('the holders alone')
  if mode == 'dp':
    fed = federation('dp.enabled=True dp.noise_multiplier=0.5 dp.clip_norm=0.05')
  else:
    fed = federation('secure_aggregation.enabled=True', f'mask-secret-path="{secret}"')
  run = fed.run('flwr_run')
  assert run.wait(timeout=900) == 0, fed.log('flwr_run')[-3000:]
  config = folder_config(holders_root, dp=mode == 'dp', secure=mode == 'secure')
  config.dp.noise_multiplier, config.dp.clip_norm = 0.5, 0.05
  assert_ends_at_the_simulators_state(fed, config)
  if mode == 'dp':   # ε as the simulator's results.json would say it
    with open(os.path.join(fed.workdir, 'server', 'privacy.json')) as f:
      ledger = json.load(f)
    assert ledger['epsilon'] > 0 and ledger['rounds'] == ROUNDS
    assert f"dp: epsilon={ledger['epsilon']:.4f} at delta=1e-05 after {ROUNDS} rounds" in (
        fed.log('flwr_run'))


@pytest.mark.parametrize('dp', [False, True], ids=['plain', 'dp'])
def test_a_supernode_killed_in_round_1_goes_on_with_min_replies_or_stops_under_dp(
    federation, holders_root, dp):
  fed = federation('dp.enabled=True' if dp else '')
  run = fed.run('flwr_run', '' if dp else 'min-replies=2')   # waits: no round timeout
  fed.wait_for('flwr_run', ROUND_DONE.format(1), run, 900)   # round 0 done, round 1 under way
  fed.kill(fed.nodes[2])
  if dp:
    fed.wait_for('flwr_run', r'round 1: clients \[2\] did not reply; under dp\.enabled \(the mean '
                 r'divides by the fixed cohort size m, and the accountant composes the sampling '
                 r'of exactly m clients\) the cohort of 3 is fixed, so the run stops \(expected '
                 r'every reply\)\.', run, 600)
    run.wait(timeout=120)
    assert not os.path.exists(os.path.join(fed.workdir, 'server', f'server_{ROUNDS:06d}.npz'))
    return
  assert run.wait(timeout=900) == 0, fed.log('flwr_run')[-3000:]
  log = fed.log('flwr_run')
  assert 'round 1: clients [2] did not reply; going on with the 2 others (min-replies=2).' in log
  assert 'round 2: clients [2] did not reply; going on with the 2 others (min-replies=2).' in log
  # Holders 0 and 1 trained every round; holder 2 kept what it had after round 0.
  held = lambda k: sorted(os.listdir(os.path.join(fed.workdir, 'state', str(k))))
  assert f'private_{ROUNDS:06d}.npz' in held(0) and f'private_{ROUNDS:06d}.npz' in held(1)
  assert not any(name.startswith('private_00000' + str(r)) for r in (2, 3) for name in held(2))


def test_the_superlink_restarted_on_its_database_resumes_the_federation(federation,
                                                                        holders_root):
  fed = federation('')
  run = fed.run('flwr_run_1')
  fed.wait_for('flwr_run_1', ROUND_DONE.format(2), run, 900)   # rounds 0, 1 done, checkpointed
  fed.kill(fed.link)   # the SuperLink, its SuperExec and the ServerApp
  fed.kill(run)
  fed.start_link()   # the same --database and port: the SuperNodes reconnect on their own
  again = fed.run('flwr_run_2')
  assert again.wait(timeout=900) == 0, fed.log('flwr_run_2')[-3000:]
  # It resumed at a checkpoint (round 2's, or round 1's if round 2's save was cut short by the
  # kill: only verified checkpoints are restored), not at the start.
  done = [int(r) for r in re.findall(ROUND_DONE.format(r'(\d+)'), fed.log('flwr_run_2'))]
  assert done and done[0] in (2, 3) and done[-1] == ROUNDS
  assert_ends_at_the_simulators_state(fed, folder_config(holders_root))
