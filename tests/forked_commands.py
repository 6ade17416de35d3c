"""`python -m <module> <args>` and `python -c <code>` run in a child forked from one server
process that has imported their dependencies already. Each command still gets its own process:
its own exit status, stdout, stderr, current directory and environment; a SystemExit or an
uncaught exception ends it as it ends `python`. What it does not pay is a new interpreter
importing jax, flax and orbax and tearing them down at exit (about 1.5 s of CPU a command; a
forked child pays for what the command itself does). Where the interpreter's start is itself the
point, tests run the real command (tests/test_main.py keeps such cases).

The server imports PRELOAD and never starts a JAX backend (JAX warns at a fork only after one
started), so each child starts its own, which reads XLA_FLAGS only then: a child's XLA flags are
its own (tests/core/test_xla_flags.py checks that an unknown one aborts the child). What the
imports read from the environment (JAX_* variables) is the server's: a command's environment may
differ from the server's only in what is read later, such as XLA_FLAGS and the project's switches.
No preloaded module may define absl flags when imported (fedjax_face.main does: it stays out), or
running it again as __main__ would define them twice."""

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading

from fedjax_face.data import sources
from tests import config_files

# The dependencies of the entry points the tests run, not the entry points themselves (runpy warns
# when the module it runs as __main__ is imported already), and the data sources every config
# imports (data/sources.of_task). numpy's and scipy's OpenBLAS pools are the only threads then.
PRELOAD = ('absl.app', 'ml_collections.config_flags', 'PIL.Image', 'scipy.optimize',
           'fedjax_face.experiment', 'fedjax_face.proj.fedgc.setting',
           'fedjax_face.run.hooks.preemption', 'fedjax_face.tools.bench', *sources.SOURCES.values())
_server: dict = {}   # 'process' (Popen), 'errors' (its stderr file), 'env': once started


def run_module(module: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
               timeout: int = 120) -> subprocess.CompletedProcess:
  """What `python -m module *args` would return, run from `cwd` with the environment `env`
  (default: this process's)."""
  code = f'import runpy\nrunpy.run_module({module!r}, run_name="__main__", alter_sys=True)\n'
  return _run([module, *args], code, cwd, env, timeout)


def run_code(code: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
             timeout: int = 120) -> subprocess.CompletedProcess:
  """What `python -c code *args` would return, run from `cwd` with the environment `env`."""
  return _run(['-c', *args], code, cwd, env, timeout)


def _run(argv, code, cwd, env, timeout) -> subprocess.CompletedProcess:
  env = dict(os.environ if env is None else env)
  server, errors, server_env = _started(env)
  imported_with = {k: v for k, v in server_env.items() if k.startswith('JAX_')}
  asked = {k: v for k, v in env.items() if k.startswith('JAX_')}
  if asked != imported_with:
    raise ValueError(f'JAX_* variables {asked} differ from the server\'s {imported_with}: JAX read '
                     'them when the server imported it; run this command in a new interpreter.')
  request = {'argv': argv, 'code': code, 'cwd': str(cwd), 'env': env, 'timeout': timeout}
  server.stdin.write(json.dumps(request) + '\n')
  server.stdin.flush()
  # The child's own alarm ends it after `timeout`; this is for a server that hangs or dies.
  ready, _, _ = select.select([server.stdout], [], [], timeout + 60)
  line = server.stdout.readline() if ready else ''
  if not line:
    server.kill()
    server.wait()
    _server.clear()
    errors.seek(0)
    raise RuntimeError(f'the fork server gave no answer for {argv}: {errors.read()[-4000:]}')
  reply = json.loads(line)
  return subprocess.CompletedProcess(argv, reply['returncode'], reply['stdout'], reply['stderr'])


def _started(env: dict):
  """(the server, its stderr file, its environment): started on first use with `env` less
  XLA_FLAGS (which each command sets)."""
  if not _server or _server['process'].poll() is not None:
    _server.update(_start({k: v for k, v in env.items() if k != 'XLA_FLAGS'}))
  return _server['process'], _server['errors'], _server['env']


def _start(server_env: dict) -> dict:
  errors = tempfile.TemporaryFile('w+')
  server = subprocess.Popen([sys.executable, '-m', 'tests.forked_commands'],
                            cwd=config_files.ROOT, env=server_env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=errors, text=True)
  atexit.register(_stop, server)
  return {'process': server, 'errors': errors, 'env': server_env}


def _stop(server) -> None:
  if server.poll() is None:
    server.stdin.close()   # the server ends at the end of its input
    server.wait(timeout=30)


def serve() -> None:
  """Reads one JSON request a line from stdin and answers each, on stdout, with the exit status
  and output of a child forked to run it."""
  for name in PRELOAD:
    __import__(name)
  for line in sys.stdin:
    request = json.loads(line)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
      _child(request, out, err)   # never returns
    _, status = os.waitpid(pid, 0)
    out.seek(0)
    err.seek(0)
    reply = {'returncode': os.waitstatus_to_exitcode(status),
             'stdout': out.read().decode(errors='replace'),
             'stderr': err.read().decode(errors='replace')}
    out.close()
    err.close()
    sys.stdout.write(json.dumps(reply) + '\n')
    sys.stdout.flush()
  os._exit(0)   # pylint: disable=protected-access  (its input ended; nothing to tear down)


def _child(request: dict, out, err) -> None:
  """Becomes the command: its stdin empty, stdout and stderr to `out` and `err`, its directory,
  environment and argv; runs its code as __main__ and exits with its status."""
  stdin = os.open(os.devnull, os.O_RDONLY)
  os.dup2(stdin, 0)
  os.dup2(out.fileno(), 1)
  os.dup2(err.fileno(), 2)
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  sys.argv = request['argv']
  signal.alarm(request['timeout'])   # ends a command that hangs (SIGALRM: status -14)
  code = compile(request['code'], '<string>', 'exec')
  try:
    exec(code, {'__name__': '__main__'})   # pylint: disable=exec-used
    status = 0
  except SystemExit as stop:
    status = _exit_status(stop.code)
  except BaseException:   # pylint: disable=broad-except  (as the interpreter reports it)
    sys.excepthook(*sys.exc_info())
    status = 1
  _exit(status)


def _exit_status(code) -> int:
  """The status `python` exits with on SystemExit(code), printing a code that is no number."""
  if code is None:
    return 0
  if isinstance(code, int):
    return code
  print(code, file=sys.stderr)
  return 1


def _exit(status: int) -> None:
  """Ends the child as the interpreter ends `python` (it waits for the threads that are not
  daemons, runs the atexit functions, flushes stdout and stderr), less its teardown of every
  module: about 0.5 s of CPU with jax loaded, and nothing a command prints."""
  for thread in threading.enumerate():
    if thread is not threading.main_thread() and not thread.daemon:
      thread.join()
  atexit._run_exitfuncs()   # pylint: disable=protected-access
  for stream in (sys.stdout, sys.stderr):
    stream.flush()
  os._exit(status)   # pylint: disable=protected-access


if __name__ == '__main__':
  serve()
