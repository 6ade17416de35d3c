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

XLA CPU's convolution library is a choice of its own (`engine.cpu_convolutions`, resolved by
`core.policy.cpu_convolutions_for`): jaxlib 0.10.2 runs convolutions as YNNPACK fusions, or, with
`EIGEN_CONVOLUTIONS`, on XLA's Eigen kernels while every other op stays a YNNPACK fusion. Neither
is faster everywhere (BUILD_NOTES.md, "A backbone's training step against PyTorch": IResNet-50
trains faster on Eigen, the small CNN's federated rounds run faster on YNNPACK). It is
process-wide, so `main` sets it from the config before JAX starts (`apply_cpu_convolutions`).
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

CPU_CONVOLUTIONS = ('ynnpack', 'eigen')
# Removes convolutions from the op kinds XLA CPU hands to YNNPACK: they run on Eigen.
YNN_FUSION_TYPE = '--xla_cpu_experimental_ynn_fusion_type'
EIGEN_CONVOLUTIONS = f'{YNN_FUSION_TYPE}=-individual_convolution'


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


def convolution_flags(library: str, jaxlib_version: str | None = None) -> tuple[str, ...]:
  """The XLA flags that run convolutions on `library` ('ynnpack', XLA's own default, or
  'eigen'); none outside the measured jaxlib series, where the flag may not exist."""
  if library not in CPU_CONVOLUTIONS:
    raise ValueError(f'CPU convolution library {library!r} is not one of {CPU_CONVOLUTIONS}')
  return (EIGEN_CONVOLUTIONS,) if library == 'eigen' and cpu_defaults(jaxlib_version) else ()


def cpu_convolutions_in_effect(xla_flags: str | None = None) -> str:
  """The library XLA CPU runs convolutions on under `xla_flags` (the environment's `XLA_FLAGS`)."""
  flags = os.environ.get('XLA_FLAGS', '') if xla_flags is None else xla_flags
  return 'eigen' if EIGEN_CONVOLUTIONS in flags.split() else 'ynnpack'


def apply_cpu_convolutions(library: str, environ=None, backend_started: bool | None = None) -> bool:
  """Runs XLA CPU's convolutions on `library` (`convolution_flags`) by `XLA_FLAGS` in `environ`
  (os.environ), unless opted out or the user named the flag. Process-wide and read when JAX
  starts its backend: returns False (and changes nothing) when the backend already exists and
  runs convolutions on another library (`backend_started`: whether it exists, asked of JAX
  unless given)."""
  environ = os.environ if environ is None else environ
  flags = convolution_flags(library)
  if environ.get(OPT_OUT_ENV, '1') == '0' or not flags:
    return True
  current = environ.get('XLA_FLAGS', '')
  if YNN_FUSION_TYPE in {item.split('=', 1)[0] for item in current.split()}:
    return True   # the user's own setting
  if backend_started is None:
    from jax._src import xla_bridge   # pylint: disable=g-import-not-at-top (JAX only when needed)
    backend_started = xla_bridge.backends_are_initialized()
  if backend_started:
    return cpu_convolutions_in_effect(current) == library
  environ['XLA_FLAGS'] = xla_flags_with_defaults(current, flags)
  return True
