"""Run outputs on a local disk or an object store (gs://, s3://) through `etils.epath`.

Every file a run writes or reads in its workdir goes through here (checkpoints go through orbax,
which takes the same paths), so `--workdir` may be a local path or a URI such as
`gs://bucket/runs/fedgc`: a TPU VM's disk does not outlive the VM, a bucket does. With
TensorFlow installed (requirements.txt on Linux x86-64) epath reaches gs:// through
`tf.io.gfile`; without it, through fsspec (`gcsfs`).

Writes go to `<path>.tmp` and are then renamed, so a crash never leaves half a file under the
final name (on an object store the rename is a copy and a delete: the same guarantee, not an
atomic one).
"""

import contextlib
import errno
import fcntl
import io
import json
import os
import posixpath
import socket

import numpy as np
from etils import epath

from fedjax_face.core import checks


def is_uri(path: str) -> bool:
  """True for 'gs://bucket/x' and the like; False for local paths."""
  return '://' in str(path)


def join(base: str, *parts: str) -> str:
  """os.path.join that keeps a URI's '//' (posix joining for URIs on every OS)."""
  return posixpath.join(str(base), *parts) if is_uri(base) else os.path.join(base, *parts)


def absolute(path: str) -> str:
  """A local path made absolute (orbax wants one); a URI unchanged (abspath would mangle it)."""
  return str(path) if is_uri(path) else os.path.abspath(path)


def makedirs(path: str) -> None:
  epath.Path(path).mkdir(parents=True, exist_ok=True)


def remove(path: str) -> None:
  """Deletes the file `path` when it is there."""
  epath.Path(path).unlink(missing_ok=True)


def exists(path: str) -> bool:
  return epath.Path(path).exists()


class WorkdirError(checks.UsageError):
  """A `--workdir` that cannot hold a run (main.py prints it as one line, exit status 2)."""


def check_workdir(path: str) -> None:
  """WorkdirError, naming `path` and why, unless it is a directory or could be made one. Reads
  only: the run checks every input before it writes its first file (`make_workdir` makes it)."""
  if not str(path or '').strip():
    raise WorkdirError(f'--workdir={path!r} is empty; expected the run\'s directory, e.g. '
                       '--workdir=/tmp/fedgc (the current directory is not taken for one).')
  if exists(path) and not epath.Path(path).is_dir():
    raise WorkdirError(f'--workdir={path} exists and is not a directory; expected a directory '
                       '(it is created when missing).')
  if is_uri(path) or exists(path):
    return
  parent = _nearest_existing(path)
  if not os.path.isdir(parent):
    raise WorkdirError(f'--workdir={path} cannot be created: {parent} is not a directory; '
                       'expected a directory that exists or can be made.')


def make_workdir(path: str) -> None:
  """Makes `path` (parents included) unless it is a directory already; WorkdirError, naming the
  path and why, when it cannot be made."""
  check_workdir(path)
  try:
    makedirs(path)
  except OSError as error:
    raise WorkdirError(f'--workdir={path} cannot be created: {_refusal(path, error)}; expected '
                       'a directory that exists or can be made.') from error


def _nearest_existing(path: str) -> str:
  parent = os.path.dirname(os.path.abspath(path))
  while not os.path.lexists(parent):
    parent = os.path.dirname(parent)
  return parent


def _refusal(path: str, error: OSError) -> str:
  """Why a directory could not be made, said of its nearest existing ancestor: mkdir in /proc
  fails with 'No such file or directory' although /proc exists, which misleads."""
  reason = error.strerror or str(error)
  if is_uri(path):
    return reason
  parent = _nearest_existing(path)
  if not os.path.isdir(parent):
    return f'{parent} is not a directory'
  # ENOENT here is the misleading message; any other reason (permissions, read-only) is kept.
  return f'{parent} takes no new directory' + (
      '' if error.errno == errno.ENOENT else f' ({reason})')


# The refusal of `workdir_lock`, as `tools/tables/run.py` recognizes it.
IN_USE = 'is in use by'


@contextlib.contextmanager
def workdir_lock(path: str):
  """Holds `<path>/.lock` exclusively for the whole run, so that a second process on the same
  workdir is refused (WorkdirError with the holder's pid and host) instead of overwriting its
  config, checkpoints and results. The lock is the kernel's (flock): it goes with its process, so
  the file a killed run leaves behind is simply locked anew. Local workdirs only: object stores
  have no such lock (a URI workdir is not locked)."""
  if is_uri(path):
    yield
    return
  handle = open(join(path, '.lock'), 'a+')
  try:
    _lock_or_refuse(path, handle)
    handle.seek(0)
    handle.truncate()
    handle.write(f'pid {os.getpid()} on host {socket.gethostname()}')
    handle.flush()
    yield
  finally:
    handle.close()   # releases the lock


def check_unlocked(path: str) -> None:
  """WorkdirError when another process holds `path`'s `workdir_lock` (read only: a run checks
  this before loading its data, and takes the lock itself before writing)."""
  lock_path = join(path, '.lock')
  if is_uri(path) or not os.path.exists(lock_path):
    return
  with open(lock_path) as handle:
    _lock_or_refuse(path, handle)


def _lock_or_refuse(path: str, handle) -> None:
  """Takes the flock of `handle` (the lock file of workdir `path`), or raises WorkdirError naming
  the process that holds it."""
  try:
    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    handle.seek(0)
    holder = handle.read().strip() or 'another process'
    raise WorkdirError(f'--workdir={path} {IN_USE} {holder}; two runs on one workdir would '
                       'overwrite each other. Wait for it, stop it, or use another --workdir.'
                       ) from None


def wait_for_workdir(path: str) -> bool:
  """Blocks while another process holds `path`'s `workdir_lock` (a second sweep lane training
  the same run); True if it had to wait. Local workdirs only: False for a URI."""
  lock_path = join(path, '.lock')
  if is_uri(path) or not os.path.exists(lock_path):
    return False
  with open(lock_path, 'a+') as handle:
    try:
      fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
      return False
    except BlockingIOError:
      fcntl.flock(handle, fcntl.LOCK_EX)   # until the holder ends (the lock goes with it)
      return True


def read_text(path: str) -> str:
  return epath.Path(path).read_text()


def read_json(path: str):
  return json.loads(read_text(path))


def read_npz(path: str) -> dict[str, np.ndarray]:
  """The named arrays of an .npz (`io/artifacts.py:write_arrays`), loaded without pickles."""
  with np.load(io.BytesIO(epath.Path(path).read_bytes()), allow_pickle=False) as data:
    return {name: data[name] for name in data.files}


def write_bytes_atomic(path: str, data: bytes) -> None:
  """Writes `data` to `path` through `<path>.tmp` and a rename (parent directories created)."""
  target = epath.Path(path)
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = epath.Path(f'{path}.tmp')
  tmp.write_bytes(data)
  tmp.replace(target)


def write_text_atomic(path: str, text: str) -> None:
  write_bytes_atomic(path, text.encode('utf-8'))


def write_json_atomic(path: str, obj) -> None:
  """JSON (indented, sorted keys; numpy scalars and arrays as numbers and lists), atomically."""
  write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=jsonable))


def jsonable(x):
  """json.dumps `default=`: numpy scalars and arrays as numbers and lists."""
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  if isinstance(x, np.ndarray):
    return x.tolist()
  raise TypeError(f'not JSON serialisable: {type(x)}')


class _RecordFileFactory:
  """tensorboardX's writer factory for a URI scheme, through epath (see `tensorboard_logdir`)."""

  def open(self, path):
    return epath.Path(path).open('wb')

  def directory_check(self, path):
    makedirs(path)


def register_tensorboard_scheme(logdir: str) -> None:
  """Lets tensorboardX write event files under a URI logdir through epath.

  tensorboardX's own gs:// writer needs `google-cloud-storage` (not in requirements.txt) and has
  no other object stores; epath reaches them with what orbax already uses. Local logdirs keep
  tensorboardX's plain files.
  """
  if not is_uri(logdir):
    return
  from tensorboardX import record_writer  # pylint: disable=g-import-not-at-top
  record_writer.register_writer_factory(str(logdir).split('://', 1)[0], _RecordFileFactory())
