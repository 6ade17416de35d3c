"""Tests run with the XLA CPU defaults the entry points set (core/xla_flags.py), before JAX starts."""

from fedjax_face.core import xla_flags

xla_flags.apply_cpu_defaults()
