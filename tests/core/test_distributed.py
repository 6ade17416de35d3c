"""Two processes on JAX's distributed runtime give the one-process result.

Two CPU processes on localhost, 2 forced devices each (a 4-device mesh over both), talk through
`jax.distributed` (gloo collectives on XLA CPU). They run 2 rounds of FedGC on the loop and the map
backends on the tiny engine problem, then `train_and_evaluate` of FedGC with the vmap backend
(the accelerator default, its width planned from memory) in which each process samples only its
own cohort rows. This process computes the same with one process and one device (on the loop
backend), and compares.
"""

import json
import os
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.core import distributed
from tests import config_files, engine_cases, forced_devices, saved_checkpoints
from tests.core import test_engine

# (algorithm, backend, map_width) on the engine problem; train_and_evaluate adds vmap. One
# method: the backends' multi-process paths are the subject, and one reference serves both.
CASES = (('fedgc', 'loop', 0), ('fedgc', 'map', 4))
# Both rounds' cohorts (5 and 3 clients) padded to 8 rows: one program per backend rather than one
# per cohort size (each takes seconds to compile on 2 cores), and in the second round process 1
# holds padding rows only. The one-process reference runs them unpadded.
PAD_TO = 8
TIMEOUT_S = 480

_WORKER = """
import os, sys
import numpy as np
from fedjax_face import experiment
from fedjax_face.core import distributed
distributed.initialize_distributed('auto')   # the JAX_* variables set by the test
import jax
from fedjax_face.core import engine as engine_lib
from tests import engine_cases
from tests.core import test_distributed

test_distributed.share_compiled_programs()
out = sys.argv[1]
me = jax.process_index()
assert (jax.process_count(), jax.device_count(), jax.local_device_count()) == (2, 4, 2)
mesh = engine_lib.make_mesh()
for name, backend, width in test_distributed.CASES:
  state, eng = engine_cases.run_rounds(name, backend, map_width=width, mesh=mesh,
                                       pad_to=test_distributed.PAD_TO)
  assert eng.process_rows(8) == slice(4 * me, 4 * me + 4), eng.process_rows(8)
  np.savez(os.path.join(out, f'{name}_{backend}_p{me}.npz'), **test_distributed.flat(state))
workdir = os.path.join(out, f'run_p{me}')
results = experiment.train_and_evaluate(test_distributed.run_config(), workdir)
np.save(os.path.join(out, f'accuracy_p{me}.npy'), results['verification']['lfw']['accuracy'])
print('OK process', me, flush=True)
"""


def share_compiled_programs() -> None:
  """Each program that spans both processes is compiled once, by process 0, and handed to process
  1 (JAX's `jax_share_binary_between_hosts`), instead of compiled by both at the same moment
  (~38 s of CPU per worker on 2 cores).

  JAX shares a program under its persistent-cache key, but on XLA CPU that key hashes each
  process's own topology (`cache_key._hash_accelerator_config`: the topology fingerprint differs
  between the two processes of one run), so process 0 publishes under one key and process 1 waits
  for another until it times out: the hang seen when the flag alone was tried. Hashing the
  devices instead (JAX's own fallback, `_hash_devices`) gives both processes one key. Process 1
  then runs process 0's compilation of the same program and options; the tests below compare
  every result with the one-process run. A JAX without these private names compiles in both
  processes, as before (the flag without one key would hang)."""
  from jax._src import cache_key   # pylint: disable=g-import-not-at-top
  if not all(hasattr(cache_key, name) for name in ('_hash_accelerator_config', '_hash_devices')):
    return
  cache_key._hash_accelerator_config = cache_key._hash_devices   # pylint: disable=protected-access
  jax.config.update('jax_share_binary_between_hosts', True)


def flat(tree) -> dict[str, np.ndarray]:
  """A pytree as {path: array}, for np.savez."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


def run_config():
  """A runlocal FedGC on vmap whose cohort (3 of 4 clients) is padded to the 4 devices: the
  second process holds a padding row. One local step: what is checked is how the rows are split
  over processes, not the steps, and each unrolled step adds to programs every process compiles
  (`plan_width`'s one-client program in both workers, the round, this process's reference); the
  second step cost about 7 s of this file's CPU."""
  c = config_files.load_config('fedgc')
  c.engine.backend = 'vmap'
  c.federated.participation = 0.75
  c.federated.local_steps = 1
  c.checkpoint_every = 0
  del c.evals.identification
  c.evals.verification.pair_sets = ('lfw',)
  return c


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def start_processes(out: str, num_processes: int = 2, devices_per_process: int = 2):
  """Starts the worker processes; their output goes to files (a full pipe would block them)."""
  port = free_port()
  procs = []
  for i in range(num_processes):
    env = dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=forced_devices.python_path(),
               XLA_FLAGS=forced_devices.device_count_flags(devices_per_process),
               JAX_COORDINATOR_ADDRESS=f'127.0.0.1:{port}', JAX_NUM_PROCESSES=str(num_processes),
               JAX_PROCESS_ID=str(i))
    with open(os.path.join(out, f'stdout_p{i}'), 'w') as stdout, \
         open(os.path.join(out, f'stderr_p{i}'), 'w') as stderr:
      procs.append(subprocess.Popen([sys.executable, '-c', _WORKER, out], env=env,
                                    cwd=forced_devices.ROOT, stdout=stdout, stderr=stderr))
  return procs


def wait_all(procs, out: str) -> None:
  """Waits for every process; the first failure or the timeout kills the rest (which would
  otherwise wait for their peer in a collective) and fails the test with its stderr."""
  deadline = time.monotonic() + TIMEOUT_S
  while any(p.poll() is None for p in procs):
    failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
    if failed or time.monotonic() > deadline:
      for p in procs:
        if p.poll() is None:
          p.kill()
          p.wait()
      break
    time.sleep(0.2)
  failures = []
  for i, p in enumerate(procs):
    with open(os.path.join(out, f'stdout_p{i}')) as f:
      ok = f'OK process {i}' in f.read()
    if p.returncode != 0 or not ok:
      with open(os.path.join(out, f'stderr_p{i}')) as f:
        reason = 'killed (timeout or a peer failed)' if p.returncode < 0 else f'exit {p.returncode}'
        failures.append(f'process {i}: {reason}; stderr:\n{f.read()[-2500:]}')
  if failures:
    pytest.fail('\n\n'.join(failures))


@pytest.fixture(scope='module')
def two_processes(tmp_path_factory):
  if not hasattr(jax.config, 'jax_cpu_collectives_implementation'):
    pytest.skip(f'jax {jax.__version__} has no CPU cross-process collectives '
                '(jax_cpu_collectives_implementation).')
  out = tmp_path_factory.mktemp('two_processes')
  # The one-process references first: on 2 cores, three compiling processes at once take longer
  # than one after the other. Both on the loop backend (test_engine checks that the backends
  # agree): the one-process run compiles in half the time it takes on vmap.
  reference = {'fedgc': flat(engine_cases.run_rounds('fedgc', 'loop')[0])}
  single_config = run_config()
  single_config.engine.backend = 'loop'
  single = experiment.train_and_evaluate(single_config, str(out / 'single'))
  wait_all(start_processes(str(out)), str(out))
  return out, reference, single


@pytest.mark.parametrize('name,backend,width', CASES)
def test_two_rounds_on_two_processes_equal_one_process(two_processes, name, backend, width):
  out, reference, _ = two_processes
  for process in (0, 1):
    got = dict(np.load(out / f'{name}_{backend}_p{process}.npz'))
    assert got.keys() == reference[name].keys()
    # Sharded reductions sum in another order: float32 rounding over two rounds of SGD.
    test_engine.assert_trees_close(got, reference[name], rtol=1e-3, atol=1e-4)


def test_train_and_evaluate_on_two_processes_equals_one_process(two_processes):
  out, _, single = two_processes
  test_engine.assert_trees_close(saved_checkpoints.restore(out / 'run_p0', 2),
                                 saved_checkpoints.restore(out / 'single', 2),
                                 rtol=1e-3, atol=1e-4)
  saved = json.loads((out / 'run_p0' / 'results.json').read_text())
  assert saved['engine']['processes'] == 2 and saved['engine']['clients_devices'] == 4
  assert saved['engine']['backend'] == 'vmap' and single['engine']['processes'] == 1
  assert abs(saved['verification']['lfw']['accuracy']
             - single['verification']['lfw']['accuracy']) <= 0.02
  # Both processes evaluated the same replicated state.
  assert np.load(out / 'accuracy_p1.npy') == saved['verification']['lfw']['accuracy']


def test_only_process_zero_writes(two_processes):
  out, _, _ = two_processes
  assert not (out / 'run_p1').exists()
  assert {'config.json', 'results.json', 'report.md', 'roc.png', 'samples.png',
          'checkpoints', 'tensorboard'} <= set(os.listdir(out / 'run_p0'))


@pytest.mark.parametrize('mode,kwargs,environ,match', [
    ('on', {'num_processes': 2, 'process_id': 2}, {}, r'process id 2 .* with 2 processes'),
    ('on', {'coordinator_address': 'localhost'}, {}, r"'localhost'.*expected HOST:PORT"),
    ('auto', {}, {'JAX_NUM_PROCESSES': 'two'}, r"JAX_NUM_PROCESSES='two'; expected an integer"),
    ('auto', {}, {'FEDJAX_FACE_DISTRIBUTED': 'yes'},
     r"FEDJAX_FACE_DISTRIBUTED='yes'; expected one of \('off', 'auto', 'on'\)"),
])
def test_bad_distributed_settings_are_named(mode, kwargs, environ, match):
  with pytest.raises(ValueError, match=match):
    distributed.distributed_settings(mode, environ=environ, **kwargs)


def test_distributed_modes():
  settings = lambda mode, environ, **kw: distributed.distributed_settings(mode, environ=environ,
                                                                         **kw)
  assert settings('auto', {}) is None                                 # a plain run: one process
  assert settings('off', {'JAX_COORDINATOR_ADDRESS': 'h:1'}) is None
  assert settings('auto', {'FEDJAX_FACE_DISTRIBUTED': 'on'}) == {
      'coordinator_address': None, 'num_processes': None, 'process_id': None}   # JAX detects
  assert settings('auto', {'JAX_COORDINATOR_ADDRESS': 'h:1', 'JAX_NUM_PROCESSES': '2',
                           'JAX_PROCESS_ID': '1'}, process_id=0) == {
      'coordinator_address': 'h:1', 'num_processes': 2, 'process_id': 0}   # flags win
  assert settings('auto', {'FEDJAX_FACE_DISTRIBUTED': 'off'}, num_processes=2) is None


def test_on_without_a_coordinator_is_a_clear_error():
  code = ('from fedjax_face.core import distributed\n'
          "distributed.initialize_distributed('on')\n")
  env = {k: v for k, v in os.environ.items() if not k.startswith(('JAX_COORD', 'SLURM_', 'OMPI_'))}
  out = subprocess.run([sys.executable, '-c', code], env=dict(env, JAX_PLATFORMS='cpu'),
                       cwd=forced_devices.ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode != 0
  assert 'coordinator_address' in out.stderr and '--coordinator_address=HOST:PORT' in out.stderr
