"""Engine policy: the backend, local-step mode, loop threads and conv gradient of a run.

`config.engine` fields left at 'auto' (or 0 threads) are resolved here by platform. The rules
come from `python -m fedjax_face.tools.bench`; the measurements behind each one are in
BUILD_NOTES.md ("Round engine throughput", "Known XLA quirks").
"""

import os

import jax

from fedjax_face.core import xla_flags
from fedjax_face.core.checks import check_choice


# On XLA CPU unrolled local steps beat scanned ones only for a few steps, and their compile time
# grows with the step count (BUILD_NOTES "Known XLA quirks").
UNROLL_MAX_STEPS = 4


def resolve_engine(config, platform: str | None = None) -> tuple[str, str, int, str]:
  """(backend, step_mode, loop_threads, conv_gradient), 'auto' (0 threads) resolved by platform.

  XLA CPU: a loop over clients ('loop'), one client per usable CPU at once, because XLA CPU runs
    a small client's program on about one core and vmapped per-client convolutions are slow.
    Local steps are unrolled up to `UNROLL_MAX_STEPS` and scanned beyond.
  GPU / TPU: all clients at once with scanned steps ('vmap', 'scan'), chunked by memory
    (`engine.map_width=0`, `core.engine.plan_width`).
  """
  platform = platform or jax.default_backend()
  on_cpu = platform == 'cpu'
  backend = config.engine.backend
  if backend == 'auto':
    backend = 'loop' if on_cpu else 'vmap'
  step_mode = config.engine.step_mode
  if step_mode == 'auto':
    step_mode = 'unroll' if on_cpu and config.federated.local_steps <= UNROLL_MAX_STEPS else 'scan'
  # One accelerator runs one program at a time: more threads would only queue on it.
  loop_threads = config.engine.loop_threads or (usable_cpus() if on_cpu else 1)
  return backend, step_mode, loop_threads, conv_gradient_for(config, backend, step_mode, platform)


def conv_gradient_for(config, backend: str, step_mode: str, platform: str | None = None) -> str:
  """`engine.conv_gradient`, 'auto' resolved: 'canonical' where XLA CPU runs convs in while loops
  (scanned steps, `map`'s lax.map), where XLA's own kernel gradient is slow; elsewhere on CPU
  'chunked' for the IResNets (faster than XLA's own on either convolution library:
  BUILD_NOTES.md, "A backbone's training step against PyTorch") and XLA's own ('xla') for the
  small CNNs, which was faster unrolled (`models/conv.py`) and keeps their archived runs' digits;
  XLA's own off CPU."""
  if config.engine.conv_gradient != 'auto':
    return config.engine.conv_gradient
  if (platform or jax.default_backend()) != 'cpu':
    return 'xla'
  if step_mode == 'scan' or backend == 'map':
    return 'canonical'
  return 'chunked' if _is_iresnet(config) else 'xla'


def cpu_convolutions_for(config) -> str:
  """`engine.cpu_convolutions`, 'auto' resolved: XLA CPU's convolutions on 'eigen' for the
  IResNet backbones, which train faster there, and on 'ynnpack' (XLA's default) for the small
  CNNs, whose federated rounds ran faster on it (BUILD_NOTES.md, "A backbone's training step
  against PyTorch"). Process-wide: `main` applies it before JAX starts (`core/xla_flags.py`); it
  changes nothing off CPU."""
  check_choice('engine.cpu_convolutions', config.engine.cpu_convolutions,
               ('auto',) + xla_flags.CPU_CONVOLUTIONS)
  if config.engine.cpu_convolutions != 'auto':
    return config.engine.cpu_convolutions
  return 'eigen' if _is_iresnet(config) else 'ynnpack'


def _is_iresnet(config) -> bool:
  """Whether the run's backbone is one of the IResNets (`models.BACKBONES`: iresnet18 ... 100),
  which two CPU rules above treat apart from the small CNNs."""
  return config.model.name.startswith('iresnet')


def usable_cpus() -> int:
  """CPUs this process may run on (the affinity mask, not the machine's count)."""
  try:
    return max(1, len(os.sched_getaffinity(0)))
  except AttributeError:  # not Linux
    return max(1, os.cpu_count() or 1)
