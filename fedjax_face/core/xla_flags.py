"""XLA CPU compiler defaults, set by the entry points (main, the benches) before JAX starts.

Two flags of XLA's CPU compiler made CPU training faster here (BUILD_NOTES.md, "Known XLA
quirks", has the measurements); they only touch the CPU compiler, so GPU / TPU programs are
unchanged. Library code never sets them: `import fedjax_face` leaves the environment alone.

A flag already named in `XLA_FLAGS` is left as the user set it; `FEDJAX_FACE_XLA_DEFAULTS=0`
turns the defaults off. They apply only under the jaxlib series they were measured on: XLA aborts
at start on a flag it does not know, and releases drop flags (jaxlib 0.11.2 has no
`--xla_cpu_use_fusion_emitters`), so under any other jaxlib the environment is left alone.
They cannot apply once JAX's CPU backend exists, so entry points call `apply_cpu_defaults()`
before anything touches a device.
"""

import importlib.metadata
import os

OPT_OUT_ENV = 'FEDJAX_FACE_XLA_DEFAULTS'
XLA_CPU_DEFAULTS = (
    # XLA's default scheduler made a client's unrolled local steps much slower than their sum.
    '--xla_cpu_enable_concurrency_optimized_scheduler=false',
    # Its gain adds to the scheduler flag's.
    '--xla_cpu_use_fusion_emitters=false',
)

MEASURED_JAXLIB_SERIES = '0.10.'


def installed_jaxlib() -> str | None:
  """The installed jaxlib's version, read from its metadata (JAX is not imported), or None."""
  try:
    return importlib.metadata.version('jaxlib')
  except importlib.metadata.PackageNotFoundError:
    return None


def cpu_defaults(jaxlib_version: str | None = None) -> tuple[str, ...]:
  """The defaults for `jaxlib_version` (the installed one): none outside the measured series."""
  version = installed_jaxlib() if jaxlib_version is None else jaxlib_version
  return XLA_CPU_DEFAULTS if (version or '').startswith(MEASURED_JAXLIB_SERIES) else ()


def xla_flags_with_defaults(xla_flags: str, defaults: tuple[str, ...] | None = None) -> str:
  """`xla_flags` plus each default (`cpu_defaults()` unless given) whose flag name it does not
  already set."""
  defaults = cpu_defaults() if defaults is None else defaults
  named = {item.split('=', 1)[0] for item in xla_flags.split()}
  missing = [flag for flag in defaults if flag.split('=', 1)[0] not in named]
  return ' '.join([xla_flags.strip()] + missing).strip()


def apply_cpu_defaults(environ=None) -> None:
  """Adds the defaults to `XLA_FLAGS` in `environ` (os.environ) unless opted out."""
  environ = os.environ if environ is None else environ
  if environ.get(OPT_OUT_ENV, '1') != '0':
    environ['XLA_FLAGS'] = xla_flags_with_defaults(environ.get('XLA_FLAGS', ''))
