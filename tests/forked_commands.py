"""`python -m <module> <args>` and `python -c <code>` run in a child forked from one server
process that has imported their dependencies already. Each command still gets its own process:
its own pid, exit status, stdout, stderr, current directory and environment; a SystemExit or an
uncaught exception ends it as it ends `python`, and a signal sent to its pid reaches it alone.
What it does not pay is a new interpreter importing jax, flax and orbax and tearing them down at
exit (about 1.5 s of CPU a command; a forked child pays for what the command itself does). Where
the interpreter's start or teardown is itself the point, tests run the real command
(tests/test_main.py and tests/test_faults.py keep such cases).

`run_module` and `run_code` are `subprocess.run(..., capture_output=True, text=True)`;
`start_module` and `start_code` are `subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)`
for a test that reads the output as it comes and signals the process. Text is the bytes decoded
as UTF-8, line ends as written ('\r' kept). While a started command runs, no other command can
be run or started (the server serves one at a time): wait for it first.

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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types

from fedjax_face.data import sources
from tests import config_files

# The dependencies of the entry points the tests run, not the entry points themselves (runpy warns
# when the module it runs as __main__ is imported already), and the data sources every config
# imports (data/sources.of_task). numpy's and scipy's OpenBLAS pools are the only threads then.
PRELOAD = ('absl.app', 'ml_collections.config_flags', 'PIL.Image', 'scipy.optimize',
           'fedjax_face.experiment', 'fedjax_face.proj.fedgc.setting',
           'fedjax_face.run.hooks.preemption', 'fedjax_face.tools.bench', *sources.SOURCES.values())
# Once started: 'process' (Popen), 'errors' (its stderr file), 'env', 'running' (the Command not
# yet ended), 'answer' (what it wrote past its last answer read).
_server: dict = {}


def run_module(module: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
               timeout: int = 120) -> subprocess.CompletedProcess:
  """What `python -m module *args` would return, run from `cwd` with the environment `env`
  (default: this process's)."""
  return start_module(module, *args, cwd=cwd, env=env, timeout=timeout).completed()


def run_code(code: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
             timeout: int = 120) -> subprocess.CompletedProcess:
  """What `python -c code *args` would return, run from `cwd` with the environment `env`."""
  return start_code(code, *args, cwd=cwd, env=env, timeout=timeout).completed()


def start_module(module: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
                 timeout: int = 120) -> 'Command':
  """`python -m module *args` started; the child ends itself (SIGALRM) after `timeout` s."""
  code = f'import runpy\nrunpy.run_module({module!r}, run_name="__main__", alter_sys=True)\n'
  return Command([module, *args], code, cwd, env, timeout)


def start_code(code: str, *args: str, cwd: str = config_files.ROOT, env: dict | None = None,
               timeout: int = 120) -> 'Command':
  """`python -c code *args` started; the child ends itself (SIGALRM) after `timeout` s."""
  return Command(['-c', *args], code, cwd, env, timeout)


class Command:
  """A forked command as subprocess.Popen has it: `pid`, `stdout` (read as it comes),
  `returncode` and `stderr` once it ended, poll, wait, communicate, send_signal and kill."""

  def __init__(self, argv, code, cwd, env, timeout):
    self.args, self.returncode, self.stderr = argv, None, None
    env = dict(os.environ if env is None else env)
    server_env = _started(env)
    imported_with = {k: v for k, v in server_env.items() if k.startswith('JAX_')}
    asked = {k: v for k, v in env.items() if k.startswith('JAX_')}
    if asked != imported_with:
      raise ValueError(f'JAX_* variables {asked} differ from the server\'s {imported_with}: JAX '
                       'read them when the server imported it; run this command in a new '
                       'interpreter.')
    if _server.get('running') is not None:
      raise RuntimeError(f'{_server["running"].args} still runs: wait for it before {argv}')
    # stdout is a FIFO the server opens for the child: open here first, so that its open for
    # writing does not block, and read only once the child holds the writing end.
    fifo_dir = tempfile.mkdtemp(prefix='forked_stdout_')
    fifo = os.path.join(fifo_dir, 'stdout')
    os.mkfifo(fifo)
    read_end = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    self.stdout = open(read_end, encoding='utf-8', errors='replace', newline='\n')
    self._timeout = timeout
    request = {'argv': argv, 'code': code, 'cwd': str(cwd), 'env': env, 'timeout': timeout,
               'stdout': fifo}
    try:
      _server['process'].stdin.write(json.dumps(request).encode() + b'\n')
      _server['process'].stdin.flush()
      _server['running'] = self
      # Once the server has forked the child holds the writing end (the server's first start
      # imports PRELOAD first).
      self.pid = (_answer_within(timeout + 60) or _server_failed(argv))['pid']
    except BaseException:
      self.stdout.close()
      raise
    finally:
      shutil.rmtree(fifo_dir)
    os.set_blocking(read_end, True)

  def poll(self) -> int | None:
    if self.returncode is None:
      reply = _answer_within(0)
      if reply is not None:
        self._ended(reply)
    return self.returncode

  def wait(self, timeout: float | None = None) -> int:
    if self.returncode is None:
      # The child's own alarm ends it after its timeout; the margin is for a server that hangs.
      reply = _answer_within(self._timeout + 60 if timeout is None else timeout)
      if reply is None and timeout is not None:
        raise subprocess.TimeoutExpired(self.args, timeout)
      self._ended(reply if reply is not None else _server_failed(self.args))
    return self.returncode

  def communicate(self, timeout: float | None = None) -> tuple[str, str]:
    """The rest of stdout, to its end, and stderr, once the command ended."""
    rest = []
    reader = threading.Thread(target=lambda: rest.append(self.stdout.read()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
      raise subprocess.TimeoutExpired(self.args, timeout)
    self.stdout.close()
    self.wait(timeout)
    return rest[0], self.stderr

  def completed(self) -> subprocess.CompletedProcess:
    """What subprocess.run returns once the command ended."""
    out, err = self.communicate()
    return subprocess.CompletedProcess(self.args, self.returncode, out, err)

  def send_signal(self, sig: int) -> None:
    # The server reaps the child only after its answer that the child ended: until this process
    # has that answer, the pid is the child's.
    if self.poll() is None:
      os.kill(self.pid, sig)

  def kill(self) -> None:
    self.send_signal(signal.SIGKILL)

  def _ended(self, reply: dict) -> None:
    self.returncode, self.stderr = reply['returncode'], reply['stderr']
    _server['running'] = None


def _answer_within(timeout: float) -> dict | None:
  """The server's next answer, or None if it has none within `timeout` seconds. Lines are cut
  here, not by a buffered reader, so that select sees what has not been read."""
  answer = _server['answer']
  deadline = time.monotonic() + timeout
  while b'\n' not in answer:
    ready = select.select([_server['process'].stdout], [], [],
                          max(0.0, deadline - time.monotonic()))[0]
    if not ready:
      _server['answer'] = answer
      return None
    chunk = os.read(_server['process'].stdout.fileno(), 1 << 16)
    if not chunk:   # the server died
      return _server_failed('the command')
    answer += chunk
  line, _, _server['answer'] = answer.partition(b'\n')
  return json.loads(line)


def _server_failed(args):
  process, errors = _server['process'], _server['errors']
  process.kill()
  process.wait()
  _server.clear()
  errors.seek(0)
  raise RuntimeError(f'the fork server gave no answer for {args}: {errors.read()[-4000:]}')


def _started(env: dict) -> dict:
  """The server's environment: started on first use with `env` less XLA_FLAGS (which each
  command sets)."""
  if not _server or _server['process'].poll() is not None:
    _server.clear()
    _server.update(_start({k: v for k, v in env.items() if k != 'XLA_FLAGS'}))
  return _server['env']


def _start(server_env: dict) -> dict:
  errors = tempfile.TemporaryFile('w+')
  server = subprocess.Popen([sys.executable, '-m', 'tests.forked_commands'],
                            cwd=config_files.ROOT, env=server_env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=errors)
  atexit.register(_stop, server)
  return {'process': server, 'errors': errors, 'env': server_env, 'running': None,
          'answer': b''}


def _stop(server) -> None:
  if server.poll() is None:
    server.stdin.close()   # the server ends at the end of its input
    server.wait(timeout=30)


def serve() -> None:
  """Reads one JSON request a line from stdin; for each, forks a child to run it and answers, on
  stdout, with the child's pid, then with its exit status and stderr once it ended."""
  for name in PRELOAD:
    __import__(name)
  for line in sys.stdin:
    request = json.loads(line)
    err = tempfile.TemporaryFile()
    out = os.open(request['stdout'], os.O_WRONLY)
    pid = os.fork()
    if pid == 0:
      _child(request, out, err)   # never returns
    os.close(out)   # the child's alone: its end is the reader's end of file
    _answer({'pid': pid})
    returncode = _ended(pid)
    err.seek(0)
    _answer({'returncode': returncode, 'stderr': err.read().decode(errors='replace')})
    err.close()
    os.waitpid(pid, 0)   # reaped after the answer: until the client has it, the pid is this one's
  os._exit(0)   # pylint: disable=protected-access  (its input ended; nothing to tear down)


def _answer(reply: dict) -> None:
  sys.stdout.write(json.dumps(reply) + '\n')
  sys.stdout.flush()


def _ended(pid: int) -> int:
  """The exit status of the child `pid` once it ended, as Popen gives it (-N: killed by signal
  N), leaving it unreaped."""
  info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
  return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _child(request: dict, out: int, err) -> None:
  """Becomes the command: its stdin empty, stdout and stderr to `out` and `err`, its directory,
  environment, argv and sys.path[0]; runs its code as __main__ and exits with its status."""
  stdin = os.open(os.devnull, os.O_RDONLY)
  os.dup2(stdin, 0)
  os.dup2(out, 1)
  os.dup2(err.fileno(), 2)
  os.close(out)
  os.chdir(request['cwd'])
  os.environ.clear()
  os.environ.update(request['env'])
  sys.argv = request['argv']
  # What `python -c` puts first on the path, and `python -m` ('' is the current directory).
  sys.path[0] = '' if sys.argv[0] == '-c' else os.getcwd()
  # `python -c` runs in a __main__ of its own, with no spec or file (this server's __main__ has
  # them: the workers multiprocessing spawns would import it); runpy sets `-m`'s for its run.
  main = types.ModuleType('__main__')
  sys.modules['__main__'] = main
  signal.alarm(request['timeout'])   # ends a command that hangs (SIGALRM: status -14)
  try:
    exec(compile(request['code'], '<string>', 'exec'), main.__dict__)   # pylint: disable=exec-used
    status = 0
  except SystemExit as stop:
    status = _exit_status(stop.code)
  except BaseException as error:   # pylint: disable=broad-except  (as the interpreter reports it)
    # From the command's first frame on, as `python` prints it: not this function's (none for
    # a SyntaxError, which compile raises here).
    traceback = error.__traceback__.tb_next
    sys.excepthook(type(error), error.with_traceback(traceback), traceback)
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
