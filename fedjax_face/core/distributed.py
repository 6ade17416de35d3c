"""Several processes (one per host or GPU) on `jax.distributed`: settings, start-up, broadcast.

`launch/tpu_pod.sh` and `launch/slurm_gpu.sh` start every process with the same command; `main.py`
calls `initialize_distributed` first, before anything touches a device.
"""

import json
import os
import re

import jax
import numpy as np
from jax.experimental import multihost_utils

MODES = ('off', 'auto', 'on')    # config.engine.distributed
DISTRIBUTED_ENV = 'FEDJAX_FACE_DISTRIBUTED'   # off | auto | on; read when engine.distributed='auto'
_PROCESS_ENV = {'coordinator_address': 'JAX_COORDINATOR_ADDRESS',
                'num_processes': 'JAX_NUM_PROCESSES', 'process_id': 'JAX_PROCESS_ID'}


def distributed_settings(mode: str, *, coordinator_address: str | None = None,
                         num_processes: int | None = None, process_id: int | None = None,
                         environ=None) -> dict | None:
  """The arguments of `jax.distributed.initialize`, or None for a one-process run. Starts nothing.

  Modes (`config.engine.distributed`): 'off' one process; 'on' always initialise; 'auto' (the
  default) initialise only when something names a multi-process run — the environment variable
  FEDJAX_FACE_DISTRIBUTED=on, a coordinator address, or more than one process — so a plain run on
  one host never waits for peers. Explicit arguments (main.py's flags) win over the environment
  (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID); what both leave out (None) JAX
  finds itself under SLURM, Open MPI and on Cloud TPU VMs.
  """
  environ = os.environ if environ is None else environ
  source = 'config.engine.distributed'
  if mode == 'auto' and environ.get(DISTRIBUTED_ENV, '').strip():
    mode, source = environ[DISTRIBUTED_ENV].strip().lower(), DISTRIBUTED_ENV
  if mode not in MODES:
    raise ValueError(f'{source}={mode!r}; expected one of {MODES}.')
  address = coordinator_address or environ.get(_PROCESS_ENV['coordinator_address']) or None
  if address is not None and not re.fullmatch(r'\S+:\d+', address):
    raise ValueError(f'coordinator address {address!r} (--coordinator_address or '
                     'JAX_COORDINATOR_ADDRESS); expected HOST:PORT, e.g. 10.0.0.1:1234.')
  num = _process_setting('num_processes', num_processes, environ, minimum=1)
  pid = _process_setting('process_id', process_id, environ, minimum=0)
  if num is not None and pid is not None and pid >= num:
    raise ValueError(f'process id {pid} (--process_id or JAX_PROCESS_ID) with {num} processes; '
                     f'expected 0..{num - 1}.')
  if mode == 'off' or (mode == 'auto' and address is None and (num or 1) == 1):
    return None
  return {'coordinator_address': address, 'num_processes': num, 'process_id': pid}


def _process_setting(name: str, value, environ, *, minimum: int) -> int | None:
  """An integer setting from its flag or else its environment variable, checked."""
  where = f'--{name}'
  if value is None and environ.get(_PROCESS_ENV[name], '').strip():
    value, where = environ[_PROCESS_ENV[name]].strip(), _PROCESS_ENV[name]
  if value is None:
    return None
  try:
    number = int(value)
  except (TypeError, ValueError):
    number = None
  if number is None or number < minimum or isinstance(value, float):
    raise ValueError(f'{where}={value!r}; expected an integer >= {minimum}.')
  return number


def initialize_distributed(mode: str, *, coordinator_address: str | None = None,
                           num_processes: int | None = None, process_id: int | None = None) -> bool:
  """Starts JAX's distributed runtime when `distributed_settings` asks for it (once per process).

  Must run before anything touches a JAX device: main.py calls it first with its flags, and
  `train_and_evaluate` calls it again (then a no-op) for runs started from Python.

  Returns:
    Whether the distributed runtime is running.
  """
  settings = distributed_settings(mode, coordinator_address=coordinator_address,
                                  num_processes=num_processes, process_id=process_id)
  if jax.distributed.is_initialized():
    return True
  if settings is None:
    return False
  if getattr(jax.config, 'jax_cpu_collectives_implementation', 'gloo') in (None, 'none'):
    # XLA CPU needs a collectives library across processes (CPU runs: tests, laptops).
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  try:
    jax.distributed.initialize(**settings)
  except ValueError as e:   # JAX found no cluster to fill in what was left out
    missing = ', '.join(k for k, v in settings.items() if v is None)
    raise ValueError(
        f'engine.distributed asks for several processes but {missing or "a setting"} is unknown '
        f'({e}). Pass --coordinator_address=HOST:PORT --num_processes=N --process_id=I (or set '
        'JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID), or launch with srun, '
        'mpirun or on a Cloud TPU VM, where JAX finds them itself.') from e
  except RuntimeError as e:
    raise RuntimeError(f'{e} (initialize_distributed must run before anything touches a JAX '
                       'device; main.py calls it first).') from e
  return True



def process_zero_value(value, chief: bool):
  """Process 0's value of a small host tree, on every process (identity with one process)."""
  if jax.process_count() == 1:
    return value
  return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(value, is_source=chief))


def shared_json(value, chief: bool):
  """Process 0's JSON-able `value` on every process (e.g. the run record only process 0 reads):
  its length, then its bytes (identity with one process)."""
  if jax.process_count() == 1:
    return value
  data = np.frombuffer(json.dumps(value).encode(), np.uint8) if chief else None
  size = int(process_zero_value(np.int32(len(data) if chief else 0), chief))
  data = process_zero_value(data if chief else np.zeros(size, np.uint8), chief)
  return json.loads(bytes(np.asarray(data, np.uint8)).decode())
