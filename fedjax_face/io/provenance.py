"""Where a result came from: the code's commit, the library versions and the machine.

`collect()` is recorded in every run's `results.json` and `config.json` (`io/checkpoint.py`
keeps the first start's and appends each resume's), so a table made of several runs can say
which code made them, and refuse to mix commits (`tools/tables.py`). Seeds trained at different
commits once sat side by side in one table with nothing to tell them apart.

The commit is that of the checkout the imported `fedjax_face` package lives in (not of the
current directory: `python -m fedjax_face.main` may run from anywhere). A package installed from
a wheel has no checkout: its commit is None and its distribution version says what it is.
"""

import importlib.metadata
import os
import platform
import subprocess

import jax

DISTRIBUTION = 'fedjax_face'
# The libraries whose versions change results (numerics, optimizers, checkpoint format).
LIBRARIES = ('jax', 'jaxlib', 'flax', 'optax', 'orbax-checkpoint', 'numpy')
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIT_TIMEOUT_S = 5   # a hung git (a network file system) must not hang a run's start


def version(distribution: str) -> str | None:
  """The installed version of `distribution`, None when it is not installed."""
  try:
    return importlib.metadata.version(distribution)
  except importlib.metadata.PackageNotFoundError:
    return None


def _git(directory: str, *args: str) -> str | None:
  """`git -C directory args...`'s stdout, or None when git is missing or fails (no checkout, a
  checkout git refuses to read as another user's): provenance never stops a run."""
  try:
    proc = subprocess.run(['git', '-C', directory, *args], capture_output=True, text=True,
                          timeout=GIT_TIMEOUT_S, check=False)
  except (OSError, subprocess.SubprocessError):
    return None
  return proc.stdout if proc.returncode == 0 else None


def git_state(directory: str = PACKAGE_DIR) -> dict:
  """{'commit': full sha, 'dirty': tracked files modified, 'version': the distribution's}.

  The package's own `__init__.py` must be tracked there: a wheel installed into a virtual
  environment that sits inside some other repository would otherwise report that repository's
  commit. Untracked files are not 'dirty' (scratch workdirs and notes do not change the code).
  """
  state = {'commit': None, 'dirty': None, 'version': version(DISTRIBUTION)}
  if _git(directory, 'ls-files', '--error-unmatch', '__init__.py') is None:
    return state
  commit = _git(directory, 'rev-parse', 'HEAD')
  status = _git(directory, 'status', '--porcelain', '--untracked-files=no')
  if commit is None or status is None:
    return state
  return state | {'commit': commit.strip(), 'dirty': bool(status.strip())}


def versions() -> dict[str, str | None]:
  return {'python': platform.python_version()} | {name: version(name) for name in LIBRARIES}


def machine() -> dict:
  devices = jax.devices()
  return {'backend': jax.default_backend(), 'device_kind': devices[0].device_kind,
          'device_count': len(devices), 'process_count': jax.process_count(),
          'os': platform.platform()}


def collect() -> dict:
  """The provenance of the process calling it, JSON-serialisable (called once per run: a few git
  calls, well under 100 ms once JAX's backend is up)."""
  return {'git': git_state(), 'versions': versions(), 'platform': machine()}


def commit_label(prov: dict | None) -> str:
  """A run's code in a few characters: '0123456789ab' (the 12-character short sha),
  '0123456789ab+dirty', 'fedjax_face==0.1.0' (installed without a checkout), or 'unrecorded'
  (a run made before provenance was recorded, or one whose git state could not be read)."""
  git = (prov or {}).get('git') or {}
  if git.get('commit'):
    return git['commit'][:12] + ('+dirty' if git.get('dirty') else '')
  if git.get('version'):
    return f'{DISTRIBUTION}=={git["version"]}'
  return 'unrecorded'
