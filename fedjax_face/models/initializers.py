"""The backbones' weight initializers: Flax's variance-scaling ones, value for value, drawn flat.

`variance_scaling` computes what `jax.nn.initializers.variance_scaling` computes (the same fans,
the same variance in the same float operations, the same draw), so every parameter is the same
to the last bit (tests/models/test_initializers.py), but draws through `arrays.drawn_flat`: XLA's
CPU compiler spends ~1-2 s on the draw of one 3x3 conv kernel's shape and ~0.1 s on a vector's,
and an eager `init` compiles one draw per kernel shape.

Each draw passes an optimization barrier before it is scaled, so that a jitted `init`
(`algorithms/common.py:init_backbone`) gives the eager one's parameters bit for bit: without it,
XLA folds the scale into the draw's own last multiplications and moves the last bits.

`batched_init(init)` compiles such an `init` in a fraction of the time, to the same bits. Behind
one barrier per draw, XLA compiles one set of threefry and normal fusions per parameter (FedGPAD's
network: 35 draws, 318 fusions, 7-10 s; ~4 s batched). `batched_init` traces `init` twice: the
first pass records each draw and is discarded; the draws of one sampler and its arguments then
run as one vmapped draw over their keys, at the group's longest length, and the second pass
takes each parameter as the leading part of its row. With partitionable threefry (JAX's default),
element i of a draw depends on its key and on i only (its counter is i: jax-ml/jax
jax/_src/prng.py, `_threefry_random_bits_partitionable`, and the normal and truncated normal are
element-wise over those bits), so that part is the parameter's own draw, bit for bit
(tests/models/test_initializers.py). The older threefry (`_threefry_random_bits_original`) pairs
the counters of the draw's two halves, so its bits depend on the draw's length too.
"""

import contextvars
import dataclasses
import math
from typing import Any, Callable, Hashable, Sequence

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays

# The standard deviation of a standard normal truncated to (-2, 2), as JAX divides by it.
_TRUNCATED_NORMAL_STD = .87962566103423978


# A parameter grouped with longer draws is padded to the group's longest; a group is split so
# that its padded draw is at most this many times its parameters' elements (the measured choice:
# BUILD_NOTES, "Known XLA quirks").
MAX_PADDING = 2.0
# And at most this many elements in all: a group's draw holds a few buffers of its padded size at
# once. IResNet-50's temporaries: 27 MiB drawn one by one, 0.9 GB at MAX_PADDING alone, 0.5 GB
# with this cap (0.18 GB at 2**22, which compiled twice as long).
MAX_GROUP_ELEMENTS = 2**24


@dataclasses.dataclass(frozen=True)
class _Draw:
  """One parameter's draw: `draw(key, shape=shape, **kwargs)`."""
  draw: Callable
  key: jax.Array
  shape: tuple[int, ...]
  kwargs: tuple[tuple[str, Any], ...]   # sorted, so that equal arguments group together

  @property
  def kind(self) -> tuple:
    """What draws must share to be one vmapped draw: the sampler and its arguments."""
    return self.draw, self.kwargs

  @property
  def size(self) -> int:
    return math.prod(self.shape)


@dataclasses.dataclass
class _Batching:
  """The state of one `batched_init` call: the draws the first pass recorded, then the values the
  second pass takes in the same order."""
  recorded: list[_Draw] = dataclasses.field(default_factory=list)
  values: list[jax.Array] | None = None   # None while recording
  taken: int = 0


# Per thread and per call (the engine traces in threads): a context variable, never a global.
_BATCHING: contextvars.ContextVar[_Batching | None] = contextvars.ContextVar(
    'fedjax_face_batched_init', default=None)


def _unfused_draw(draw, key, shape, **kwargs) -> jax.Array:
  """`arrays.drawn_flat` behind an optimization barrier: traced, the draw compiles as it does
  eagerly (an identity when eager). Inside `batched_init`, the draw is recorded (first pass) or
  taken from the batched draws (second pass)."""
  batching = _BATCHING.get()
  if batching is None:
    return jax.lax.optimization_barrier(arrays.drawn_flat(draw, key, shape, **kwargs))
  request = _Draw(draw, key, tuple(shape), tuple(sorted(kwargs.items())))
  if batching.values is None:
    batching.recorded.append(request)
    return jnp.zeros(request.shape, kwargs.get('dtype', jnp.float32))   # shapes only: discarded
  position = batching.taken
  if position == len(batching.recorded) or (
      (request.kind, request.shape) != (batching.recorded[position].kind,
                                        batching.recorded[position].shape)):
    raise RuntimeError(f'batched_init: draw {position} of shape {request.shape} differs from the '
                       'first pass: the init must draw the same parameters each time it runs.')
  batching.taken += 1
  return batching.values[position]


def padded_groups(draws: Sequence[tuple[Hashable, int]], max_padding: float = MAX_PADDING,
                  max_group_elements: float = MAX_GROUP_ELEMENTS) -> list[list[int]]:
  """The indices of `draws`, `(kind, size)` each, in groups that share one vmapped draw: draws of
  one kind, longest first, each group padded to its first (longest) size and closed before the
  next draw would pad it past `max_padding` times its elements or past `max_group_elements` in
  all (a longer draw is a group of its own). Ties keep their order."""
  by_kind: dict[Hashable, list[int]] = {}
  for index, (kind, _) in enumerate(draws):
    by_kind.setdefault(kind, []).append(index)
  groups = []
  for indices in by_kind.values():
    group, elements = [], 0
    for i in sorted(indices, key=lambda i: -draws[i][1]):
      size = draws[i][1]
      padded = (len(group) + 1) * draws[group[0]][1] if group else size
      if group and (padded > max_padding * (elements + size) or padded > max_group_elements):
        groups.append(group)
        group, elements = [], 0
      group.append(i)
      elements += size
    groups.append(group)
  return groups


def _batched_draws(draws: list[_Draw], max_padding: float,
                   max_group_elements: float) -> list[jax.Array]:
  """Every recorded draw's value, in order, computed group by group: one vmapped flat draw over
  the group's keys at its longest length, behind one barrier; a parameter is the leading part of
  its row, as partitionable threefry numbers elements by their index alone."""
  values: list[jax.Array | None] = [None] * len(draws)
  for group in padded_groups([(d.kind, d.size) for d in draws], max_padding,
                             max_group_elements):
    first = draws[group[0]]
    draw, kwargs, length = first.draw, dict(first.kwargs), first.size
    keys = jnp.stack([draws[i].key for i in group])
    rows = jax.lax.optimization_barrier(
        jax.vmap(lambda key: draw(key, shape=(length,), **kwargs))(keys))
    for row, i in enumerate(group):
      values[i] = rows[row, :draws[i].size].reshape(draws[i].shape)
  return values


def batched_init(init: Callable, max_padding: float = MAX_PADDING,
                 max_group_elements: float = MAX_GROUP_ELEMENTS) -> Callable:
  """`init` (a model's `init`, or a function calling it) with its parameter draws batched, for
  tracing under `jax.jit`: the same values as `init` jitted, in far fewer fusions to compile.

  `init` is traced twice and must draw the same parameters both times (a Flax `init` does). Its
  first pass computes nothing that is kept: XLA drops it. Under the older, non-partitionable
  threefry (`jax_threefry_partitionable` False) a draw's bits depend on its length as well as
  on the element's index, so a prefix of a longer draw is not the shorter draw: `init` then
  runs as it is, one draw at a time."""

  def batched(*args, **kwargs):
    if not jax.config.jax_threefry_partitionable:
      return init(*args, **kwargs)
    batching = _Batching()
    token = _BATCHING.set(batching)
    try:
      init(*args, **kwargs)
      batching.values = _batched_draws(batching.recorded, max_padding,
                                      max_group_elements)
      result = init(*args, **kwargs)
    finally:
      _BATCHING.reset(token)
    if batching.taken != len(batching.recorded):
      raise RuntimeError(f'batched_init: the second pass drew {batching.taken} of the first '
                         f"pass's {len(batching.recorded)} parameters: the init must draw the "
                         'same parameters each time it runs.')
    return result

  return batched


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
