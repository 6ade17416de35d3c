"""The backbones' weight initializers: Flax's variance-scaling ones, value for value, drawn flat.

`variance_scaling` computes what `jax.nn.initializers.variance_scaling` computes (the same fans,
the same variance in the same float operations, the same draw), so every parameter is the same
to the last bit (tests/models/test_initializers.py), but draws through `arrays.drawn_flat`: XLA's
CPU compiler spends ~1-2 s on the draw of one 3x3 conv kernel's shape and ~0.1 s on a vector's,
and an eager `init` compiles one draw per kernel shape.

Each draw passes an optimization barrier before it is scaled, so that a jitted `init`
(`algorithms/common.py:init_backbone`) gives the eager one's parameters bit for bit: without it,
XLA folds the scale into the draw's own last multiplications and moves the last bits.
"""

import math

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays

# The standard deviation of a standard normal truncated to (-2, 2), as JAX divides by it.
_TRUNCATED_NORMAL_STD = .87962566103423978


def _unfused_draw(draw, key, shape, **kwargs) -> jax.Array:
  """`arrays.drawn_flat` behind an optimization barrier: traced, the draw compiles as it does
  eagerly (an identity when eager)."""
  return jax.lax.optimization_barrier(arrays.drawn_flat(draw, key, shape, **kwargs))


def variance_scaling(scale: float, mode: str, distribution: str):
  """`init(key, shape, dtype)`: N(0, scale / fan) for 'normal', or the normal truncated to two
  standard deviations and rescaled to that variance for 'truncated_normal'; `mode` 'fan_in' or
  'fan_out' (the kernel's last two axes are its input and output, the rest its receptive
  field)."""
  if mode not in ('fan_in', 'fan_out') or distribution not in ('normal', 'truncated_normal'):
    raise ValueError(f'variance_scaling({mode!r}, {distribution!r}): expected mode fan_in or '
                     'fan_out and distribution normal or truncated_normal.')

  def init(key, shape, dtype=jnp.float32):
    shape = tuple(shape)
    receptive_field = math.prod(shape) / shape[-2] / shape[-1]   # JAX's float arithmetic
    fan = (shape[-2] if mode == 'fan_in' else shape[-1]) * receptive_field
    variance = jnp.array(scale / fan, dtype=dtype)
    if distribution == 'normal':
      return _unfused_draw(jax.random.normal, key, shape, dtype=dtype) * jnp.sqrt(variance)
    stddev = jnp.sqrt(variance) / jnp.array(_TRUNCATED_NORMAL_STD, dtype)
    return _unfused_draw(jax.random.truncated_normal, key, shape, lower=-2, upper=2,
                         dtype=dtype) * stddev

  return init


# He (Kaiming) normal over fan-out, the usual init for conv layers followed by BN and a rectifier.
he_normal_fan_out = variance_scaling(2.0, 'fan_out', 'normal')
# Flax's default kernel init (LeCun normal), for the layers that use Flax's default.
lecun_normal = variance_scaling(1.0, 'fan_in', 'truncated_normal')
