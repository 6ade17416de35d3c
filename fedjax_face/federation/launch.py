r"""One machine, real processes: a SuperLink and one SuperNode per holder folder on loopback, then
`flwr run`; every process is stopped at the end, on success or failure.

    python -m fedjax_face.federation.export --config=configs/fedgc/fedpe.py:runlocal \
        --config.federated.num_clients=3 --out=/tmp/fl/data
    python -m fedjax_face.federation.launch --config=configs/fedgc/fedpe.py:runlocal \
        --overrides='federated.num_clients=3 num_rounds=2' --holders=/tmp/fl/data \
        --workdir=/tmp/fl/run [--tls] [--auth] [--resident]

`<workdir>` receives: `app/` (the Flower app's pyproject.toml, naming federation/apps.py's
ServerApp and ClientApp and the config), `flwr_home/` (the SuperLink connection), `state/<k>/`
(holder k's private state, one file per round), `logs/` (every process's; `flwr_run.log` with
each line's seconds since `flwr run` started), `server/server_<R>.npz` (the final server state)
and, with `--tls` / `--auth`, `certs/` (a CA and the SuperLink's certificate for
127.0.0.1, made here) and `keys/` (each SuperNode's P-384 key, registered with the SuperLink
before the node starts).

`--resident`: each SuperNode runs under `--isolation process` beside one ClientApp process of its
own for the whole run (federation/resident.py: JAX imported, the holder's data listed and its
program compiled once), instead of Flower's default, one `flwr-clientapp` process per message.
The private state goes through the holder's folder every round either way.
"""

import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import NamedTuple

from absl import app, flags

from fedjax_face.core import checks
from fedjax_face.federation import apps, export

LOOPBACK = '127.0.0.1'
SUPEREXEC_POLL_SECONDS = 0.2


def free_port(host: str = LOOPBACK) -> int:
  """A TCP port nothing listens on now at `host` (the OS picks it)."""
  with socket.socket() as s:
    s.bind((host, 0))
    return s.getsockname()[1]


def executable(name: str) -> str:
  """Flower's command `name`, beside this Python first (a venv), else on PATH."""
  beside = os.path.join(os.path.dirname(sys.executable), name)
  found = beside if os.path.exists(beside) else shutil.which(name)
  if not found:
    raise checks.UsageError(f'{name} not found beside {sys.executable} or on PATH; expected '
                            "flwr installed (pip install -e '.[flower]').")
  return found


class Certificates(NamedTuple):
  ca: str
  cert: str
  key: str


def write_certificates(folder: str, host: str = LOOPBACK) -> Certificates:
  """A CA and the SuperLink's certificate for `host` (and localhost), signed by it, as PEM."""
  from cryptography import x509   # pylint: disable=import-outside-toplevel
  from cryptography.hazmat.primitives import hashes, serialization   # pylint: disable=import-outside-toplevel
  from cryptography.hazmat.primitives.asymmetric import ec   # pylint: disable=import-outside-toplevel
  from cryptography.x509.oid import NameOID   # pylint: disable=import-outside-toplevel
  import ipaddress   # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  now = datetime.datetime.now(datetime.timezone.utc)
  def name(common):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])
  def sign(subject, key, issuer, issuer_key, ca: bool, san=None):
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if san:
      builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())
  ca_key = ec.generate_private_key(ec.SECP384R1())
  ca_cert = sign(name('fedjax_face federation CA'), ca_key, name('fedjax_face federation CA'),
                 ca_key, True)
  key = ec.generate_private_key(ec.SECP384R1())
  cert = sign(name(host), key, ca_cert.subject, ca_key, False,
              [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName('localhost')])
  paths = Certificates(*(os.path.join(folder, n) for n in ('ca.pem', 'server.pem', 'server.key')))
  pem = serialization.Encoding.PEM
  with open(paths.ca, 'wb') as f:
    f.write(ca_cert.public_bytes(pem))
  with open(paths.cert, 'wb') as f:
    f.write(cert.public_bytes(pem))
  with open(paths.key, 'wb') as f:
    f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
  return paths


def write_node_key(folder: str, k: int) -> tuple[str, str]:
  """(private, public) paths of SuperNode k's P-384 key (SuperNode authentication), OpenSSH."""
  from cryptography.hazmat.primitives import serialization   # pylint: disable=import-outside-toplevel
  from cryptography.hazmat.primitives.asymmetric import ec   # pylint: disable=import-outside-toplevel
  os.makedirs(folder, exist_ok=True)
  key = ec.generate_private_key(ec.SECP384R1())
  private, public = (os.path.join(folder, f'node_{k}{e}') for e in ('.key', '.pub'))
  # flwr 1.42 reads both in the OpenSSH formats (load_ssh_private_key, load_ssh_public_key).
  with open(private, 'wb') as f:
    f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                              serialization.NoEncryption()))
  with open(public, 'wb') as f:
    f.write(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                          serialization.PublicFormat.OpenSSH))
  return private, public


def write_app(folder: str, config_spec: str, overrides: str, server_dir: str, *,
              round_timeout: float = 0.0, min_replies: int = 0) -> str:
  """The Flower app: a pyproject.toml naming the ServerApp, the ClientApp and the run config,
  every key of which is declared (flwr 1.42 refuses a `flwr run --run-config` key the app does not
  declare): `round-timeout-s` and `min-replies` as apps.py reads them (0: wait for every reply)."""
  os.makedirs(folder, exist_ok=True)
  path, _, arg = config_spec.partition(':')
  spec = os.path.abspath(path) + (f':{arg}' if arg else '')
  with open(os.path.join(folder, 'pyproject.toml'), 'w') as f:
    f.write(f'''[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "fedjaxfacefederation"
version = "1.0.0"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "fedjaxface"

[tool.flwr.app.components]
serverapp = "fedjax_face.federation.apps:server_app"
clientapp = "fedjax_face.federation.apps:client_app"

[tool.flwr.app.config]
config = "{spec}"
overrides = "{overrides}"
workdir = "{os.path.abspath(server_dir)}"
round-timeout-s = {float(round_timeout):g}
min-replies = {int(min_replies)}
''')
  return folder


def write_mask_secret(folder: str) -> str:
  """The data holders' shared secret of secure aggregation's masks (32 random bytes, readable by
  its owner only), which the server is not given. On one machine the launcher writes one file for
  every holder; across hosts each holder keeps its own copy, agreed out of band."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, 'mask_secret')
  with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), 'wb') as f:
    f.write(os.urandom(32))
  return path


def write_connection(flwr_home: str, address: str, ca: str | None) -> str:
  """`$FLWR_HOME/config.toml` with the SuperLink connection 'federation'."""
  os.makedirs(flwr_home, exist_ok=True)
  security = f'root-certificates = "{ca}"' if ca else 'insecure = true'
  with open(os.path.join(flwr_home, 'config.toml'), 'w') as f:
    f.write(f'[superlink]\ndefault = "federation"\n\n[superlink.federation]\n'
            f'address = "{address}"\n{security}\n')
  return flwr_home


class Processes:
  """The processes this launch started, each in its own session, stopped in reverse order."""

  def __init__(self, logs: str, env: dict):
    self.logs, self.env, self.started = logs, env, []
    os.makedirs(logs, exist_ok=True)

  def start(self, name: str, argv: list[str]) -> subprocess.Popen:
    log = open(os.path.join(self.logs, f'{name}.log'), 'w')   # pylint: disable=consider-using-with
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                               start_new_session=True)
    self.started.append((name, process, log))
    return process

  def run(self, name: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    with open(os.path.join(self.logs, f'{name}.log'), 'w') as log:
      return subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                            timeout=timeout, check=False)

  def run_stamped(self, name: str, argv: list[str], timeout: float) -> int:
    """Runs `argv` to its end and returns its status; each line of its output goes to its log
    after the seconds since it started (`round_seconds` reads the rounds' ends there). Past
    `timeout` seconds it is killed, and the status says so (RuntimeError)."""
    start = time.perf_counter()
    with open(os.path.join(self.logs, f'{name}.log'), 'w') as log, subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, text=True,
        errors='replace') as process:
      timer = threading.Timer(timeout, process.kill)
      timer.start()
      try:
        for line in process.stdout:
          log.write(f'{time.perf_counter() - start:10.3f} {line}')
          log.flush()
      finally:
        timer.cancel()
    if process.returncode and time.perf_counter() - start >= timeout:
      raise RuntimeError(f'{name} ran past {timeout:.0f} s and was stopped; see its log.')
    return process.returncode

  def stop(self) -> None:
    """Asks every process and what it started (its session: a SuperNode's ClientApps, the
    SuperLink's ServerApp) to stop, the last started first, then waits for each (20 s) and kills
    what is left of its session: a ClientApp whose SuperNode is gone may ignore SIGTERM and would
    outlive the launch."""
    for _, process, _ in reversed(self.started):
      signal_session(process, signal.SIGTERM)
    for _, process, log in reversed(self.started):
      try:
        process.wait(timeout=20)
      except subprocess.TimeoutExpired:
        pass
      signal_session(process, signal.SIGKILL)
      process.wait()
      log.close()


def signal_session(process: subprocess.Popen, sig: int) -> None:
  """`sig` to the process group `process` leads (each started in its own session), if any of it
  is left."""
  try:
    os.killpg(process.pid, sig)
  except (ProcessLookupError, PermissionError):
    pass


def wait_listening(host: str, port: int, process: subprocess.Popen, name: str,
                   timeout: float) -> None:
  end = time.time() + timeout
  while time.time() < end:
    if process.poll() is not None:
      raise RuntimeError(f'{name} exited with status {process.returncode}; see its log.')
    with socket.socket() as s:
      if s.connect_ex((host, port)) == 0:
        return
    time.sleep(0.2)
  raise RuntimeError(f'{name} is not listening on {host}:{port} after {timeout:.0f} s.')


# apps.say_round's 'round r: name=value, ...' (not 'round r: waiting for nodes ...').
ROUND_LINE = re.compile(r'^\s*([0-9.]+) round (\d+): [\w./]+=')


def round_seconds(workdir: str) -> dict[int, float]:
  """{r: the seconds after `flwr run` started at which the ServerApp said round r ended} (its
  `round r: <metrics>` lines, as `Processes.run_stamped` stamped them in `logs/flwr_run.log`)."""
  with open(os.path.join(workdir, 'logs', 'flwr_run.log')) as f:
    return {int(m.group(2)): float(m.group(1)) for m in map(ROUND_LINE.match, f) if m}


def holder_folders(holders) -> list[str]:
  """The holders' folders: `holders` itself when it lists them, in client order (a data center's
  root of the lists, tools/export_pad.py's), else its folders `client_<k>` (export.py's layout),
  k = 0, 1, ..."""
  if not isinstance(holders, str):
    for k, folder in enumerate(holders):
      if not os.path.isdir(folder):
        raise checks.UsageError(f'holder folder {k} {folder} does not exist; expected each data '
                                "holder's own folder.")
    return list(holders)
  folders = []
  while os.path.isdir(export.holder_folder(holders, len(folders))):
    folders.append(export.holder_folder(holders, len(folders)))
  if not folders:
    raise checks.UsageError(f'--holders={holders} holds no client_000 folder; expected the '
                            'folders python -m fedjax_face.federation.export writes.')
  return folders


def launch(config_spec: str, overrides: str, holders, workdir: str, *, tls: bool = False,
           auth: bool = False, host: str = LOOPBACK, timeout: float = 1800.0,
           resident: bool = False, round_timeout: float = 0.0, min_replies: int = 0) -> str:
  """Runs the federation over `holders` (a folder of `client_<k>` folders, or the holders'
  folders in client order); returns the path of the final server state. The SuperLink listens on
  `host` (another address than the SuperNodes' 127.0.0.1 stands for another machine; its
  certificate names it). With `resident`, each SuperNode runs under `--isolation process` beside
  one ClientApp process that stays up for the run (federation/resident.py), instead of one
  `flwr-clientapp` per message. `round_timeout` and `min_replies`: the run config's
  `round-timeout-s` and `min-replies` (apps.py). Every SuperNode's node config names the holders'
  mask secret (`write_mask_secret`), which a holder reads under secure aggregation. Raises
  checks.UsageError with the ServerApp's one-line refusal (a holder's bad data or other code),
  and RuntimeError naming the step that failed otherwise (its log is under `<workdir>/logs/`)."""
  folders = holder_folders(holders)
  port = free_port(host)
  address = f'{host}:{port}'
  certs = write_certificates(os.path.join(workdir, 'certs'), host) if tls else None
  # Flower's processes start others by name (flower-superexec, flwr-clientapp): the folder of
  # its commands goes first on their PATH.
  commands = os.path.dirname(executable('flower-superlink'))
  # A SuperExec (the SuperLink's, which starts the ServerApp, and under the default isolation
  # each SuperNode's) asks for a task every FLWR_SUPEREXEC_TASK_POLL_INTERVAL seconds (1 by
  # default in flwr 1.42); on loopback a shorter wait costs little.
  env = dict(os.environ, PATH=os.pathsep.join([commands, os.environ.get('PATH', '')]),
             FLWR_HOME=write_connection(os.path.join(workdir, 'flwr_home'), address,
                                        certs.ca if certs else None),
             FLWR_SUPEREXEC_TASK_POLL_INTERVAL=str(SUPEREXEC_POLL_SECONDS))
  app_dir = write_app(os.path.join(workdir, 'app'), config_spec, overrides,
                      os.path.join(workdir, 'server'), round_timeout=round_timeout,
                      min_replies=min_replies)
  mask_secret = write_mask_secret(os.path.join(workdir, 'holders'))
  processes = Processes(os.path.join(workdir, 'logs'), env)
  security = (['--ssl-certfile', certs.cert, '--ssl-keyfile', certs.key, '--ssl-ca-certfile',
               certs.ca] if tls else ['--insecure'])
  try:
    link = processes.start('superlink', [
        executable('flower-superlink'), *security, '--disable-runtime-dependency-installation',
        '--database', os.path.join(workdir, 'superlink.db'), '--host', host,
        '--port', str(port)] + (['--enable-supernode-auth'] if auth else []))
    if auth:   # a node's key is registered with the SuperLink before the node starts
      wait_listening(host, port, link, 'flower-superlink', 60)
    # Otherwise the nodes start beside it (Python, flwr and, resident, JAX imported meanwhile)
    # and connect once it listens: a SuperNode, and a resident ClientApp, retry until then.
    for k, folder in enumerate(folders):
      node_security = ['--root-certificates', certs.ca] if tls else ['--insecure']
      if auth:
        private, public = write_node_key(os.path.join(workdir, 'keys'), k)
        registered = processes.run(f'register_{k}', [
            executable('flwr'), 'supernode', 'register', public, 'federation'], timeout=120)
        if registered.returncode:
          raise RuntimeError(f'flwr supernode register of node {k} failed; see its log.')
        node_security += ['--auth-supernode-private-key', private]
      runtime_port = free_port()
      processes.start(f'supernode_{k}', [
          executable('flower-supernode'), *node_security, '--superlink', address,
          '--host', LOOPBACK, '--port', str(runtime_port), '--node-config',
          f'client-index={k} data-path="{os.path.abspath(folder)}" '
          f'state-path="{os.path.abspath(os.path.join(workdir, "state", str(k)))}" '
          f'mask-secret-path="{os.path.abspath(mask_secret)}"']
          + (['--isolation', 'process'] if resident else []))
      if resident:   # its ClientApp process, on the node's Runtime API (loopback, no TLS)
        processes.start(f'clientapp_{k}', [
            sys.executable, '-m', 'fedjax_face.federation.resident',
            f'--runtime-api-address={LOOPBACK}:{runtime_port}'])
    wait_listening(host, port, link, 'flower-superlink', 60)
    status = processes.run_stamped('flwr_run', [executable('flwr'), 'run', app_dir,
                                                'federation', '--stream'], timeout=timeout)
    if status:
      raise RuntimeError(f'flwr run exited with status {status}; see '
                         f'{workdir}/logs/flwr_run.log.')
  finally:
    processes.stop()
  server_dir = os.path.join(workdir, 'server')
  refused = os.path.join(server_dir, apps.REFUSED)
  if os.path.exists(refused):   # the ServerApp's one line (a holder's, or the roster's)
    with open(refused) as f:
      raise checks.UsageError(f.read().strip())
  finals = sorted(n for n in os.listdir(server_dir) if n.startswith('server_') and
                  n.endswith('.npz')) if os.path.isdir(server_dir) else []
  if not finals:
    raise RuntimeError(f'the ServerApp wrote no final state in {server_dir}; see '
                       f'{workdir}/logs/flwr_run.log.')
  return os.path.join(server_dir, finals[-1])


def main(argv):
  del argv
  f = flags.FLAGS
  try:
    final = launch(f.config, f.overrides, f.holders, f.workdir, tls=f.tls, auth=f.auth,
                   host=f.host, resident=f.resident, round_timeout=f.round_timeout_s,
                   min_replies=f.min_replies)
  except checks.UsageError as error:
    print(error, file=sys.stderr)
    sys.exit(2)
  except RuntimeError as error:   # a step that failed: its line names the log to read
    print(error, file=sys.stderr)
    sys.exit(1)
  print(f'final server state: {final}')


if __name__ == '__main__':
  flags.DEFINE_string('config', None, 'The config file every party reads (path.py:arg).')
  flags.DEFINE_string('overrides', '', "Config fields, 'a.b=v c=w'.")
  flags.DEFINE_string('holders', None, 'The folder of client_<k> holder folders (export.py).')
  flags.DEFINE_string('workdir', None, 'A new folder for the federation\'s files.')
  flags.DEFINE_bool('tls', False, 'TLS between the SuperNodes, flwr and the SuperLink.')
  flags.DEFINE_bool('auth', False, 'SuperNode authentication (P-384 keys, registered).')
  flags.DEFINE_string('host', LOOPBACK, "The SuperLink's address (the SuperNodes' runtime APIs "
                      'stay on 127.0.0.1); 0.0.0.0 across hosts.')
  flags.DEFINE_float('round_timeout_s', 0.0, "Seconds a round waits for the holders' replies "
                     "(0: for every one); the run config's round-timeout-s.")
  flags.DEFINE_integer('min_replies', 0, 'The fewest replies a round goes on with when holders '
                       "do not reply in time (0: all must); the run config's min-replies.")
  flags.DEFINE_bool('resident', False, 'One ClientApp process per SuperNode for the whole run '
                    '(federation/resident.py) instead of one per message.')
  flags.mark_flags_as_required(['config', 'holders', 'workdir'])
  app.run(main)
