"""The layers FedMA matches in the Table II network without ES and Dec (`models/pad.PadNet`,
`disentangle=False`: EI, C and Dep), and the fixed-shape arrays that stand for a growing width.

The network is built at the cap width (`model.width`); a data center's own network uses the first
`client_width`-derived channels of every layer. A layer's active output channels are a 0/1 mask:
inactive channels have zero weights in and out, zero BatchNorm scale and bias, running mean 0 and
variance 1, so they output exactly 0 and stay so through training (`apply_masks` after every
step). The matched layers, in the order they are matched (each after every layer feeding it):

  0-12   EI's conv1-13 (conv3x3 -> BatchNorm -> ReLU)
  13     C's hidden dense (8w) on EI's pooled output
  14     Dep's first conv, on the three block outputs (layers 3, 6, 9) concatenated
  15     Dep's second conv

and the two output layers, averaged, not matched: C's live logit (dense 1) and Dep's conv to the
depth map. Neither FedMA's paper nor FedGPAD's says how FedMA treats two heads on one trunk; our
reading: each head's first layer takes the matched permutation of what feeds it, like any
other layer, and the heads' output layers are averaged, as FedMA averages its output layer.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# EI's channels as multiples of the width (models/pad.Extractor: w, then 2w 3w 2w three times,
# 2w, 4w, 8w).
_INVARIANT = (1, 2, 3, 2, 2, 3, 2, 2, 3, 2, 2, 4, 8)


class Layer(NamedTuple):
  name: str
  kernel: tuple[str, ...]        # path of the kernel under 'params'
  norm: tuple[str, ...] | None   # path of its BatchNorm (under 'params' and 'batch_stats')
  bias: bool                     # a bias beside the kernel (dense and output layers)
  producers: tuple[int, ...]     # the layers whose outputs, concatenated, are its input
  multiple: int                  # output channels = multiple x width (0: one, an output layer)

  def channels(self, width: int) -> int:
    return self.multiple * width if self.multiple else 1


def _conv_bn(part: str, index: int, producers, multiple) -> Layer:
  block = f'_ConvBN_{index}'
  return Layer(f'{part}/{block}', (part, block, 'Conv_0'), (part, block, 'BatchNorm_0'), False,
               tuple(producers), multiple)


MATCHED = tuple(
    [_conv_bn('invariant', i, () if i == 0 else (i - 1,), m) for i, m in enumerate(_INVARIANT)]
    + [Layer('classifier/Dense_1', ('classifier', 'Dense_1'), None, True, (12,), 8),
       _conv_bn('depth', 0, (3, 6, 9), 2),
       _conv_bn('depth', 1, (14,), 1)])
OUTPUTS = (Layer('classifier/Dense_0', ('classifier', 'Dense_0'), None, True, (13,), 0),
           Layer('depth/Conv_0', ('depth', 'Conv_0'), None, True, (15,), 0))
LAYERS = MATCHED + OUTPUTS
NUM_MATCHED = len(MATCHED)
INPUT_CHANNELS = 6   # RGB + HSV


def get(tree: dict, path: tuple[str, ...]):
  for key in path:
    tree = tree[key]
  return tree


def replace(tree: dict, path: tuple[str, ...], value) -> dict:
  """A copy of the nested dict `tree` with `value` at `path`."""
  if not path:
    return value
  return {**tree, path[0]: replace(tree[path[0]], path[1:], value)}


def client_masks(client_width: int, cap_width: int) -> tuple[np.ndarray, ...]:
  """float32 [cap channels] per matched layer: a data center's own channels (the first ones)."""
  return tuple(np.arange(layer.channels(cap_width)) < layer.channels(client_width)
               for layer in MATCHED)


def input_mask(layer: Layer, out_masks) -> jax.Array:
  """The layer's active input channels: its producers' active outputs, concatenated."""
  if not layer.producers:
    return jnp.ones(INPUT_CHANNELS, jnp.float32)
  return jnp.concatenate([jnp.asarray(out_masks[p], jnp.float32) for p in layer.producers])


def apply_masks(variables: dict, out_masks) -> dict:
  """`variables` with every inactive channel zeroed (module docstring); `out_masks[l]` of each
  matched layer l (the output layers' one output is always active)."""
  params, stats = variables['params'], variables.get('batch_stats', {})
  for index, layer in enumerate(LAYERS):
    out = (jnp.asarray(out_masks[index], jnp.float32) if index < NUM_MATCHED
           else jnp.ones(1, jnp.float32))
    kernel = get(params, layer.kernel)
    in_mask = input_mask(layer, out_masks)
    scaled = {'kernel': kernel['kernel'] * in_mask[:, None] * out}
    if layer.bias:
      scaled['bias'] = kernel['bias'] * out
    params = replace(params, layer.kernel, scaled)
    if layer.norm:
      norm = get(params, layer.norm)
      params = replace(params, layer.norm, {'scale': norm['scale'] * out,
                                            'bias': norm['bias'] * out})
      running = get(stats, layer.norm)
      stats = replace(stats, layer.norm, {'mean': running['mean'] * out,
                                          'var': running['var'] * out + (1 - out)})
  return {'params': params, 'batch_stats': stats}


def layer_variables(variables: dict, index: int) -> dict:
  """Layer `index`'s own variables: {'kernel': {...}, 'norm': {...}, 'stats': {...}}."""
  layer = LAYERS[index]
  out = {'kernel': get(variables['params'], layer.kernel)}
  if layer.norm:
    out['norm'] = get(variables['params'], layer.norm)
    out['stats'] = get(variables['batch_stats'], layer.norm)
  return out


def with_layer(variables: dict, index: int, values: dict) -> dict:
  """`variables` with layer `index`'s own variables replaced (`layer_variables`' form)."""
  layer = LAYERS[index]
  params = replace(variables['params'], layer.kernel, values['kernel'])
  stats = variables['batch_stats']
  if layer.norm:
    params = replace(params, layer.norm, values['norm'])
    stats = replace(stats, layer.norm, values['stats'])
  return {'params': params, 'batch_stats': stats}


def select_layers(chosen, first: dict, second: dict) -> dict:
  """Layer by layer, `first`'s variables where `chosen[l]` (a bool scalar) else `second`'s."""
  out = second
  for index in range(len(LAYERS)):
    pick = lambda a, b, c=chosen[index]: jnp.where(c, a, b)
    out = with_layer(out, index, jax.tree.map(pick, layer_variables(first, index),
                                              layer_variables(second, index)))
  return out


def permute_inputs(variables: dict, producer, assignment: jax.Array, cap_width: int) -> dict:
  """Every layer fed by layer `producer` (a traced index) with that input segment moved to the
  global channels `assignment` [cap] gives its channels (-1: inactive, dropped)."""
  params = variables['params']
  for layer in LAYERS:
    offset = 0
    for p in layer.producers:
      size = MATCHED[p].channels(cap_width)
      moved = jax.nn.one_hot(assignment[:size], size, dtype=jnp.float32)   # [local, global]
      kernel = get(params, layer.kernel)
      w = kernel['kernel']
      segment = jax.lax.slice_in_dim(w, offset, offset + size, axis=w.ndim - 2)
      permuted = jnp.einsum('...io,ig->...go', segment, moved)
      new = jax.lax.dynamic_update_slice_in_dim(w, permuted, offset, axis=w.ndim - 2)
      params = replace(params, layer.kernel, {**kernel, 'kernel': jnp.where(producer == p, new, w)})
      offset += size
  return {**variables, 'params': params}


def neuron_rows(values: dict, layer: Layer) -> np.ndarray:
  """[out, D] one data center's neurons of a layer (`layer_variables`' form, NumPy): each
  output channel's incoming weights, then its BatchNorm scale and bias, or its bias."""
  kernel = np.asarray(values['kernel']['kernel'], np.float64)
  rows = np.moveaxis(kernel, -1, 0).reshape(kernel.shape[-1], -1)
  extra = ([values['norm']['scale'], values['norm']['bias']] if layer.norm
           else [values['kernel']['bias']])
  return np.hstack([rows] + [np.asarray(e, np.float64)[:, None] for e in extra])


def from_neuron_rows(rows: np.ndarray, layer: Layer, template: dict) -> dict:
  """The inverse of `neuron_rows` for a layer shaped like `template` (its output width)."""
  kernel_shape = template['kernel']['kernel'].shape
  inputs = int(np.prod(kernel_shape[:-1]))
  kernel = np.moveaxis(rows[:, :inputs].reshape((len(rows),) + kernel_shape[:-1]), 0, -1)
  out = {'kernel': {'kernel': kernel.astype(np.float32)}}
  if layer.norm:
    out['norm'] = {'scale': rows[:, inputs].astype(np.float32),
                   'bias': rows[:, inputs + 1].astype(np.float32)}
  else:
    out['kernel']['bias'] = rows[:, inputs].astype(np.float32)
  return out
