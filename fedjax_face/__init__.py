"""fedjax_face: federated face recognition and anti-spoofing methods in JAX (map: WORKSPACE.md).

Importing the package sets two XLA CPU compiler defaults (`XLA_CPU_DEFAULTS`) before JAX creates
its CPU backend. Measured on 2 CPU cores (BUILD_NOTES.md, "Known XLA quirks"): with XLA's
defaults a client's jitted update of 2 unrolled local steps took 3x one step; with these two flags
1.6x, and the README run trains at 2,464 instead of 1,508 images/s. They only touch XLA's CPU
compiler, so GPU / TPU programs are unchanged.

A flag already named in `XLA_FLAGS` is left as the user set it; `FEDJAX_FACE_XLA_DEFAULTS=0`
turns the defaults off. They cannot apply when JAX's CPU backend already exists (a session that
ran JAX computations before importing fedjax_face).
"""

import os

XLA_CPU_DEFAULTS = (
    # One client's jitted update (small CNN, batch 32), ms for 1 / 2 / 4 unrolled local steps:
    # XLA defaults 13.5 / 40.9 / 73.8; without this scheduler 17.5 / 29.6 / 59.0; without both
    # 14.1 / 22.3 / 44.3. The default scheduler also cost ~50 s of system time per README run.
    '--xla_cpu_enable_concurrency_optimized_scheduler=false',
    # Alone 15.0 / 35.4 / 66.1 ms; its gain adds to the scheduler flag's (figures above).
    '--xla_cpu_use_fusion_emitters=false',
)


def xla_flags_with_defaults(xla_flags: str, defaults=XLA_CPU_DEFAULTS) -> str:
  """`xla_flags` plus each default whose flag name it does not already set."""
  named = {item.split('=', 1)[0] for item in xla_flags.split()}
  missing = [flag for flag in defaults if flag.split('=', 1)[0] not in named]
  return ' '.join([xla_flags.strip()] + missing).strip()


if os.environ.get('FEDJAX_FACE_XLA_DEFAULTS', '1') != '0':
  os.environ['XLA_FLAGS'] = xla_flags_with_defaults(os.environ.get('XLA_FLAGS', ''))
