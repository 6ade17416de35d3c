"""Where a result came from: the code's commit, the library versions and the machine.

`collect()` is recorded in every run's `results.json` and `config.json` (`io/checkpoint.py`
keeps the first start's and appends each resume's), so a table made of several runs can say which
code made them, and refuse to mix commits (`tools/tables/archive.py`). Seeds trained at different
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
# The CPU features XLA's code generation and its kernels may choose by (`cpu`): the same commit
# and library versions gave other digits on another machine kind (BUILD_NOTES, "The run
# archive"), so a run records them.
VECTOR_FLAG_PREFIXES = ('sse', 'ssse', 'avx', 'fma', 'f16c', 'amx')


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


def cpu(cpuinfo: str = '/proc/cpuinfo') -> dict:
  """The host CPU's model name and vector extensions as Linux lists them (the first processor's
  entry), and how many CPUs this process may run on (XLA sizes its thread pool by them); only
  the count where there is no /proc/cpuinfo."""
  out = {'usable': len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')
                   else os.cpu_count()}
  try:
    with open(cpuinfo, encoding='utf-8', errors='replace') as f:
      text = f.read()
  except OSError:
    return out
  fields = {}
  for line in text.splitlines():
    key, _, value = line.partition(':')
    fields.setdefault(key.strip(), value.strip())
  flags = fields.get('flags', '').split()
  return {'model': fields.get('model name'),
          'vector_extensions': sorted(f for f in flags if f.startswith(VECTOR_FLAG_PREFIXES)),
          **out}


def machine() -> dict:
  devices = jax.devices()
  return {'backend': jax.default_backend(), 'device_kind': devices[0].device_kind,
          'device_count': len(devices), 'process_count': jax.process_count(),
          'os': platform.platform(), 'cpu': cpu()}


def machine_difference(before: dict | None, after: dict | None) -> str:
  """How the machine of provenance `after` differs from that of `before` (`collect()` records),
  as '; '-joined changes ('os A -> B', 'CPU gained avx512_vp2intersect', ...); '' when it does
  not, and 'machine unrecorded' when one of the two predates the record."""
  a, b = (((p or {}).get('platform') or {}) for p in (before, after))
  if not a or not b:
    return '' if a == b else 'machine unrecorded'
  changes = [f'{key} {a.get(key)} -> {b.get(key)}'
             for key in ('backend', 'device_kind', 'device_count', 'process_count', 'os')
             if a.get(key) != b.get(key)]
  cpu_a, cpu_b = a.get('cpu') or {}, b.get('cpu') or {}
  if not cpu_a or not cpu_b:
    return '; '.join(changes + ([] if cpu_a == cpu_b else ['CPU unrecorded']))
  if cpu_a.get('model') != cpu_b.get('model'):
    changes.append(f"CPU {cpu_a.get('model')} -> {cpu_b.get('model')}")
  ext_a, ext_b = (set(host.get('vector_extensions') or ()) for host in (cpu_a, cpu_b))
  for word, names in (('gained', ext_b - ext_a), ('lost', ext_a - ext_b)):
    if names:
      changes.append(f"CPU {word} {' '.join(sorted(names))}")
  if cpu_a.get('usable') != cpu_b.get('usable'):
    changes.append(f"usable CPUs {cpu_a.get('usable')} -> {cpu_b.get('usable')}")
  return '; '.join(changes)


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
