"""arcface_torch's published IResNet weights as this project's Flax variables.

insightface's arcface_torch publishes backbones as PyTorch state dicts (`backbone.pth`, the
IResNet of `models/iresnet.py`, whose layout is theirs). `variables_from_state_dict` maps one onto
the variables of an `IResNet`:

  Flax (params / batch_stats)                 arcface_torch state dict
  conv1/kernel  [3, 3, I, O]                  conv1.weight [O, I, 3, 3]   (transposed)
  <bn>/scale, <bn>/bias                       <bn>.weight, <bn>.bias
  <bn>/mean, <bn>/var (batch_stats)           <bn>.running_mean, <bn>.running_var
  prelu/negative_slope                        prelu.weight
  layer{s}_{b}/...                            layer{s}.{b}....
  layer{s}_{b}/downsample_conv, _bn           layer{s}.{b}.downsample.0, .1
  fc/kernel [25088, d], fc/bias               fc.weight [d, 25088] (transposed), fc.bias
  features/bias, features/mean, features/var  features.bias, .running_mean, .running_var

Each BatchNorm's `num_batches_tracked` has no counterpart (it only matters to PyTorch's momentum
of None), and `features.weight` must be all ones: arcface_torch fixes it at 1, and the Flax layer
has no scale. A key missing, a key left over or a shape that differs is an error naming the first
one. A state dict saved from a DataParallel wrapper (every key under `module.`) is read as well.

`read_backbone(path)` reads a `.pth` without PyTorch (`io/torch_state_dict.py`), or an ONNX
export with the `onnx` package (`state_dict_from_onnx`: any of PyTorch's exporters, folded or
not, and insightface's model-zoo graphs), and says which IResNet it holds;
`load_variables(path, model_config, image_size)` checks the run's model against it and converts
it (`config.init_from=backbone.pth` or `.onnx`).

`state_dict_from_variables` is the inverse, through the same table (`torch_key`, `_TORCH_AXES`):
an IResNet's variables as arcface_torch's state dict, in its order, which
`python -m fedjax_face.export` writes as a `.pth` or (models/onnx_export.py) an ONNX graph.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.core import checks
from fedjax_face import models
from fedjax_face.io import torch_state_dict
from fedjax_face.models import onnx_graph
from fedjax_face.models.small_cnn import BN_EPSILON

SUFFIXES = ('.pth', '.pt', '.onnx')   # what `config.init_from` reads as a backbone file

# Stage sizes -> the model name of `models.BACKBONES`.
DEPTHS = {(2, 2, 2, 2): 'iresnet18', (3, 4, 6, 3): 'iresnet34', (3, 4, 14, 3): 'iresnet50',
          (3, 13, 30, 3): 'iresnet100'}

_LEAVES = {'kernel': 'weight', 'scale': 'weight', 'bias': 'bias', 'negative_slope': 'weight',
           'mean': 'running_mean', 'var': 'running_var'}


class BackboneMismatchError(checks.UsageError):
  """A state dict that does not fit the model; the message names the first key that differs."""


def torch_key(path: tuple[str, ...]) -> str:
  """The state-dict key of a Flax variable path (collection first), e.g. ('params',
  'layer2_0', 'downsample_conv', 'kernel') -> 'layer2.0.downsample.0.weight'."""
  *modules, leaf = path[1:]
  names = []
  for module in modules:
    match = re.fullmatch(r'layer(\d+)_(\d+)', module)
    names.append(f'layer{match[1]}.{match[2]}' if match else
                 {'downsample_conv': 'downsample.0', 'downsample_bn': 'downsample.1'}.get(
                     module, module))
  return '.'.join(names + [_LEAVES[leaf]])


# A kernel's axes in torch's order, by rank: Flax's conv [H, W, I, O] is torch's [O, I, H, W],
# its dense [I, O] torch's Linear [O, I]. Read one way on import, the inverse way on export.
_TORCH_AXES = {4: (3, 2, 0, 1), 2: (1, 0)}


def _converted(path: tuple[str, ...], value: np.ndarray) -> np.ndarray:
  """A state-dict tensor in the Flax variable's layout (kernels transposed)."""
  if path[-1] == 'kernel':
    return value.transpose(np.argsort(_TORCH_AXES[value.ndim]))
  return value


def _to_torch(path: tuple[str, ...], value: np.ndarray) -> np.ndarray:
  """A Flax variable in the state-dict tensor's layout: `_converted`'s inverse."""
  if path[-1] == 'kernel':
    return np.ascontiguousarray(value.transpose(_TORCH_AXES[value.ndim]))
  return value


def strip_wrapper(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
  """The state dict without DataParallel's `module.` prefix, when every key has it."""
  if state_dict and all(k.startswith('module.') for k in state_dict):
    return {k[len('module.'):]: v for k, v in state_dict.items()}
  return state_dict


def stage_sizes(state_dict: dict[str, np.ndarray]) -> tuple[int, ...]:
  """Blocks per stage of an IResNet state dict (from its `layer{s}.{b}.` keys)."""
  blocks = {}
  for key in state_dict:
    match = re.match(r'layer(\d+)\.(\d+)\.', key)
    if match:
      stage, block = int(match[1]), int(match[2])
      blocks[stage] = max(blocks.get(stage, 0), block + 1)
  return tuple(blocks[s] for s in sorted(blocks))


def variables_from_state_dict(state_dict: dict[str, np.ndarray], template, *,
                              source: str = 'the state dict') -> dict:
  """The Flax variables of an IResNet (`template`: its variables or their ShapeDtypeStructs) from
  an arcface_torch state dict, as float32 numpy arrays.

  Raises:
    BackboneMismatchError: a key missing from or left over in the state dict, a shape that
      differs, or a `features.weight` other than ones; the message names `source` and the key.
  """
  state_dict = strip_wrapper(state_dict)
  leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
  used, converted = set(), []
  for key_path, leaf in leaves:
    path = tuple(str(k.key) for k in key_path)
    key = torch_key(path)
    if key not in state_dict:
      raise BackboneMismatchError(f'{source} has no {key!r} (for the Flax variable '
                                  f"{'/'.join(path)}, shape {tuple(leaf.shape)})")
    value = _converted(path, np.asarray(state_dict[key]))
    if value.shape != tuple(leaf.shape):
      raise BackboneMismatchError(
          f'{source}: {key!r} has shape {tuple(np.shape(state_dict[key]))}, which does not fit '
          f"the model's {'/'.join(path)} of shape {tuple(leaf.shape)}")
    used.add(key)
    converted.append(value.astype(np.float32))
  features = state_dict.get('features.weight')
  if features is None:
    raise BackboneMismatchError(f"{source} has no 'features.weight' (arcface_torch's features "
                                'BatchNorm, its weight fixed at 1)')
  if not np.all(np.asarray(features) == 1):
    raise BackboneMismatchError(f"{source}: 'features.weight' is not all ones; arcface_torch fixes "
                                'it at 1 and the model has no scale there')
  used.add('features.weight')
  extra = [k for k in state_dict if k not in used and not k.endswith('.num_batches_tracked')]
  if extra:
    raise BackboneMismatchError(f'{source}: {extra[0]!r} has no place in the model'
                                + (f' (and {len(extra) - 1} more keys)' if len(extra) > 1 else ''))
  return jax.tree_util.tree_unflatten(treedef, converted)


# arcface_torch's modules in the order its IResNet registers them, which is its state dict's
# order (iresnet.py: conv1, bn1, prelu, layer1-4, bn2, dropout, fc, features; an IBasicBlock's
# bn1, conv1, bn2, prelu, conv2, bn3, then its downsample), and a module's tensors in theirs
# (a BatchNorm's weight, bias, running_mean, running_var, num_batches_tracked).
_STEM, _HEAD = ('conv1', 'bn1', 'prelu'), ('bn2', 'fc', 'features')
_BLOCK = ('bn1', 'conv1', 'bn2', 'prelu', 'conv2', 'bn3', 'downsample_conv', 'downsample_bn')
_TENSORS = ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')


def _module_rank(modules: tuple[str, ...]) -> tuple[int, ...]:
  """Where a Flax module path falls in arcface_torch's registration order."""
  top = modules[0]
  if top in _STEM:
    return (0, _STEM.index(top))
  if top in _HEAD:
    return (2, _HEAD.index(top))
  match = re.fullmatch(r'layer(\d+)_(\d+)', top)
  if match is None or len(modules) != 2 or modules[1] not in _BLOCK:
    raise BackboneMismatchError(f"variables: module {'/'.join(modules)} has no place in "
                                "arcface_torch's IResNet")
  return (1, int(match[1]), int(match[2]), _BLOCK.index(modules[1]))


def state_dict_from_variables(variables) -> dict[str, np.ndarray]:
  """The arcface_torch state dict of an IResNet's Flax variables (`variables_from_state_dict`
  inverted, through the same `torch_key` and kernel axes): float32 tensors in arcface_torch's
  order, with what its modules hold and the Flax model does not: `features.weight`, all ones
  (fixed there), and each BatchNorm's `num_batches_tracked`, an int64 0 (PyTorch reads it only
  under momentum=None, which arcface_torch does not use; this model counts no batches).

  Raises:
    BackboneMismatchError: a variable outside an IResNet's modules.
  """
  entries = []   # (module rank, tensor rank, key, value)
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(variables)[0]:
    path = tuple(str(k.key) for k in key_path)
    key = torch_key(path)
    rank = _module_rank(path[1:-1])
    entries.append((rank, _TENSORS.index(key.rsplit('.', 1)[1]), key,
                    _to_torch(path, np.asarray(leaf, np.float32))))
    if path[-1] == 'var':   # a BatchNorm, whose running_var is never absent
      prefix = key[:-len('.running_var')]
      entries.append((rank, 4, f'{prefix}.num_batches_tracked', np.array(0, np.int64)))
      if prefix == 'features':
        entries.append((rank, 0, 'features.weight', np.ones(leaf.shape, np.float32)))
  return {key: value for _, _, key, value in sorted(entries, key=lambda e: e[:2])}


def read_backbone(path: str, model_config=None) -> tuple[dict[str, np.ndarray], str, int]:
  """(state dict, model name, embedding dim) of an arcface_torch `.pth`, or of an ONNX export
  (`.onnx`, `state_dict_from_onnx`). Either file says its stage sizes, so `model_config` is not
  needed; the run's model is checked against the file by `check_model`.

  Raises:
    torch_state_dict.TorchFormatError, onnx_graph.OnnxFormatError: an unreadable file.
    BackboneMismatchError: not an IResNet of `DEPTHS`.
  """
  del model_config   # the file names its network; callers check theirs with check_model
  if path.endswith('.onnx'):
    state_dict = state_dict_from_onnx(path)
  else:
    state_dict = strip_wrapper(torch_state_dict.read_state_dict(path))
  sizes = stage_sizes(state_dict)
  if sizes not in DEPTHS or 'fc.weight' not in state_dict:
    raise BackboneMismatchError(
        f'{path}: blocks per stage {sizes}{"" if "fc.weight" in state_dict else ", no fc"}; '
        f'expected an arcface_torch IResNet, one of {sorted(DEPTHS.values())} '
        f'({", ".join(f"{n} {s}" for s, n in DEPTHS.items())})')
  return state_dict, DEPTHS[sizes], int(np.shape(state_dict['fc.weight'])[0])


def is_backbone_file(path: str) -> bool:
  """Whether `config.init_from` names a backbone file (by its suffix) rather than a run."""
  return path.endswith(SUFFIXES)


def check_model(path: str, name: str, embedding_dim: int, model_config) -> None:
  """Raises ValueError when the run's model (`config.model`) is not the IResNet in `path`."""
  if (model_config.name, model_config.embedding_dim) != (name, embedding_dim):
    raise ValueError(f'config.init_from={path!r} holds arcface_torch\'s {name} with '
                     f'{embedding_dim}-d embeddings; config.model is {model_config.name!r} with '
                     f'embedding_dim={model_config.embedding_dim}: expected '
                     f'--config.model.name={name} --config.model.embedding_dim={embedding_dim}.')


def load_variables(path: str, model_config, image_size: int) -> dict:
  """The Flax variables of the run's IResNet (`model_config`, on `image_size` px images) from the
  arcface_torch `.pth` or ONNX export at `path`.

  Raises:
    ValueError: the file's network is not the run's (`check_model`), or (BackboneMismatchError)
      its tensors do not fit the model at this image size (arcface_torch's fc expects 112 px).
    torch_state_dict.TorchFormatError, onnx_graph.OnnxFormatError: an unreadable file.
  """
  state_dict, name, dim = read_backbone(path, model_config)
  check_model(path, name, dim, model_config)
  model = models.build_backbone(model_config)
  images = jnp.zeros((1, image_size, image_size, 3), jnp.float32)
  template = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), images, train=False))
  return variables_from_state_dict(state_dict, template,
                                   source=f'config.init_from={path!r} (at {image_size} px)')


# -- ONNX exports of an arcface_torch IResNet -------------------------------------------------

def _where(graph, tensor: str) -> str:
  """What reads `tensor`, for messages: its nodes, the graph output, or nothing."""
  users = graph.users(tensor)
  if users:
    return ' and '.join(onnx_graph.describe(n) for n in users)
  return 'the graph output' if tensor in graph.outputs else 'nothing'


def _only_user(graph, tensor: str, layer: str, ops: tuple[str, ...]):
  """The one node that reads `tensor`, which must be one of `ops` (the layer `layer` is)."""
  users = graph.users(tensor)
  if len(users) != 1 or users[0].op_type not in ops or users[0].input[0] != tensor:
    raise BackboneMismatchError(f'{graph.path}: layer {layer} meets {_where(graph, tensor)}; '
                                f'expected one {" or ".join(ops)} node reading {tensor!r}')
  return users[0]


def _constant(graph, node, k: int, layer: str) -> np.ndarray:
  """Input `k` of `node` (layer `layer`'s weights), which must be constant, as float32."""
  name = node.input[k] if k < len(node.input) else ''
  if name not in graph.constants:
    raise BackboneMismatchError(
        f'{graph.path}: layer {layer}: input {k} of {onnx_graph.describe(node)} is '
        f'{"absent" if not name else "computed from the images"}; expected its weights')
  return np.asarray(graph.constants[name], np.float32)


def _identity_bn(prefix: str, bias: np.ndarray) -> dict[str, np.ndarray]:
  """A BatchNorm the exporter folded into the layer before it: scale 1, mean 0 and variance
  1 - eps (so sqrt(var + eps) = 1 under the model's epsilon) leave the folded layer's output, and
  the bias adds what the fold moved into the layer's bias. The same function as the file's."""
  channels = len(bias)
  return {f'{prefix}.weight': np.ones(channels, np.float32), f'{prefix}.bias': bias,
          f'{prefix}.running_mean': np.zeros(channels, np.float32),
          f'{prefix}.running_var': np.full(channels, 1.0 - BN_EPSILON, np.float32)}


def _batch_norm(graph, node, prefix: str, state: dict, shift=None) -> str:
  """Reads the BatchNormalization `node` as `prefix`; `shift`: the bias of a convolution just
  before it, moved into the BatchNorm's (BN(y + c) = BN(y) + c * weight / sqrt(var + eps))."""
  attrs = onnx_graph.attributes(node)
  epsilon = attrs.get('epsilon', 1e-5)
  if not np.isclose(epsilon, BN_EPSILON, rtol=1e-6) or attrs.get('training_mode', 0):
    raise BackboneMismatchError(
        f'{graph.path}: layer {prefix} ({onnx_graph.describe(node)}) has epsilon {epsilon:g}, '
        f"training_mode {attrs.get('training_mode', 0)}; expected the model's {BN_EPSILON:g}, "
        'at inference (0)')
  weight, bias, mean, var = (_constant(graph, node, k, prefix) for k in (1, 2, 3, 4))
  if shift is not None:
    bias = bias + shift * weight / np.sqrt(var + epsilon)
  state.update({f'{prefix}.weight': weight, f'{prefix}.bias': bias,
                f'{prefix}.running_mean': mean, f'{prefix}.running_var': var})
  return node.output[0]


def _conv(graph, node, conv: str, bn: str, state: dict, stride: int, pad: int) -> str:
  """Reads the Conv `node` as `conv` and the BatchNorm after it as `bn`: its own node, or folded
  into the convolution's weights and a bias (the TorchScript exporter folds it with
  do_constant_folding, the dynamo one with its optimizer); a bias before a BatchNorm node moves
  into the BatchNorm's. Returns the BatchNorm's output."""
  attrs = onnx_graph.attributes(node)
  got = (list(attrs.get('strides', [1, 1])), list(attrs.get('pads', [0] * 4)),
         list(attrs.get('dilations', [1, 1])), attrs.get('group', 1),
         attrs.get('auto_pad', b'NOTSET'))
  if got != ([stride] * 2, [pad] * 4, [1, 1], 1, b'NOTSET'):
    raise BackboneMismatchError(
        f'{graph.path}: layer {conv} ({onnx_graph.describe(node)}) has strides, pads, '
        f'dilations, group, auto_pad {got}; expected stride {stride}, padding {pad}, no dilation, '
        'one group')
  state[f'{conv}.weight'] = _constant(graph, node, 1, conv)
  bias = _constant(graph, node, 2, conv) if len(node.input) > 2 and node.input[2] else None
  users = graph.users(node.output[0])
  if len(users) == 1 and users[0].op_type == 'BatchNormalization':
    return _batch_norm(graph, users[0], bn, state, shift=bias)
  channels = state[f'{conv}.weight'].shape[0]
  state.update(_identity_bn(bn, bias if bias is not None else np.zeros(channels, np.float32)))
  return node.output[0]


def _prelu(graph, x: str, prefix: str, state: dict) -> str:
  node = _only_user(graph, x, prefix, ('PRelu',))
  state[f'{prefix}.weight'] = _constant(graph, node, 1, prefix).reshape(-1)   # [C, 1, 1] there
  return node.output[0]


def _block(graph, x: str, users: list, prefix: str, downsample: bool, state: dict) -> str:
  """Reads one IBasicBlock reading `x` (its BatchNormalization and its shortcut, a Conv or the
  Add, are `users`); returns the block's output."""
  stride = 2 if downsample else 1
  out = _batch_norm(graph, next(n for n in users if n.op_type == 'BatchNormalization'),
                    f'{prefix}.bn1', state)
  out = _conv(graph, _only_user(graph, out, f'{prefix}.conv1', ('Conv',)), f'{prefix}.conv1',
              f'{prefix}.bn2', state, 1, 1)
  out = _prelu(graph, out, f'{prefix}.prelu', state)
  out = _conv(graph, _only_user(graph, out, f'{prefix}.conv2', ('Conv',)), f'{prefix}.conv2',
              f'{prefix}.bn3', state, stride, 1)
  shortcut = x
  if downsample:
    shortcut = _conv(graph, next(n for n in users if n.op_type == 'Conv'),
                     f'{prefix}.downsample.0', f'{prefix}.downsample.1', state, stride, 0)
  add = next((n for n in graph.users(out) if n.op_type == 'Add'), None)
  if len(graph.users(out)) != 1 or add is None or sorted(add.input) != sorted([out, shortcut]):
    raise BackboneMismatchError(f'{graph.path}: block {prefix}: its residual {out!r} meets '
                                f'{_where(graph, out)}; expected one Add of it and the shortcut '
                                f'{shortcut!r}')
  return add.output[0]


def _fc(graph, x: str, state: dict) -> str:
  """Reads the fc, a Gemm or a MatMul (and an Add of its bias) reading `x`; returns its output."""
  node = _only_user(graph, x, 'fc', ('Gemm', 'MatMul'))
  if node.op_type == 'Gemm':
    attrs = onnx_graph.attributes(node)
    if attrs.get('transA', 0):
      raise BackboneMismatchError(f'{graph.path}: layer fc ({onnx_graph.describe(node)}) has '
                                  'transA=1; expected the flattened features as its A')
    weight = _constant(graph, node, 1, 'fc')
    weight = (weight if attrs.get('transB', 0) else weight.T) * attrs.get('alpha', 1.0)
    bias = (_constant(graph, node, 2, 'fc') * attrs.get('beta', 1.0)
            if len(node.input) > 2 and node.input[2] else np.zeros(1, np.float32))
    out = node.output[0]
  else:   # MatMul by [in, out], then (optionally) an Add of the bias
    weight, out = _constant(graph, node, 1, 'fc').T, node.output[0]
    bias, users = np.zeros(1, np.float32), graph.users(out)
    if len(users) == 1 and users[0].op_type == 'Add':
      other = [n for n in users[0].input if n != out]
      if len(other) == 1 and other[0] in graph.constants:
        bias, out = np.asarray(graph.constants[other[0]], np.float32), users[0].output[0]
  state['fc.weight'] = weight
  state['fc.bias'] = np.broadcast_to(bias.reshape(-1), weight.shape[:1]).astype(np.float32)
  return out


def _head(graph, x: str, state: dict) -> str:
  """Reads bn2, the flatten, the fc and `features` (its own BatchNormalization, or folded into
  the fc by the dynamo exporter's optimizer); returns the embedding."""
  x = _batch_norm(graph, graph.users(x)[0], 'bn2', state)
  flatten = _only_user(graph, x, 'the flatten before fc', ('Flatten', 'Reshape'))
  if flatten.op_type == 'Flatten' and onnx_graph.attributes(flatten).get('axis', 1) != 1:
    raise BackboneMismatchError(f'{graph.path}: {onnx_graph.describe(flatten)} flattens from '
                                'axis {}; expected axis 1 (torch.flatten(x, 1))'.format(
                                    onnx_graph.attributes(flatten)['axis']))
  x = _fc(graph, flatten.output[0], state)
  if graph.users(x):
    x = _batch_norm(graph, _only_user(graph, x, 'features', ('BatchNormalization',)),
                    'features', state)
  else:   # folded into the fc, whose bias now holds the BatchNorm's shift
    state.update(_identity_bn('features', np.zeros(len(state['fc.bias']), np.float32)))
  if graph.users(x) or x not in graph.outputs:
    raise BackboneMismatchError(f'{graph.path}: the embedding {x!r} meets {_where(graph, x)}; '
                                'expected the graph output')
  return x


def state_dict_from_onnx(path: str, sizes=None) -> dict[str, np.ndarray]:
  """The arcface_torch state dict an ONNX export of an IResNet holds, read with the `onnx`
  package (`pip install onnx`), whichever exporter wrote it (`onnx_graph`: constant subgraphs
  folded first).

  The graph is followed by data flow from its input, not by names or node order: the stem (a
  Conv, its BatchNorm, a PRelu), then blocks while the current tensor feeds a BatchNormalization
  and beside it a Conv (a block with a downsample, which opens a stage) or the block's Add (an
  identity block), then the head once it feeds a BatchNormalization alone. Each BatchNorm after
  a convolution or the fc is its own node or folded into that layer (`_identity_bn`). `sizes`:
  blocks per stage the file must hold, or None to take them from the file.

  Raises:
    BackboneMismatchError: the graph is not an arcface_torch IResNet (naming the layer and the
      node met instead); onnx_graph.OnnxFormatError: an unreadable file; ImportError: no onnx.
  """
  graph = onnx_graph.read(path)
  state = {}
  x = _conv(graph, _only_user(graph, graph.input, 'conv1', ('Conv',)), 'conv1', 'bn1', state, 1, 1)
  x = _prelu(graph, x, 'prelu', state)
  blocks = []
  while True:
    users = graph.users(x)
    kinds = sorted(n.op_type for n in users)
    if kinds == ['BatchNormalization'] and blocks:
      break
    if kinds == ['BatchNormalization', 'Conv']:
      blocks.append(0)
    elif kinds != ['Add', 'BatchNormalization'] or not blocks:
      raise BackboneMismatchError(
          f'{graph.path}: after {len(blocks)} stages, {x!r} meets {_where(graph, x)}; expected '
          'a block (a BatchNormalization and a downsample Conv or the Add) or the head (a '
          'BatchNormalization alone)')
    blocks[-1] += 1
    x = _block(graph, x, users, f'layer{len(blocks)}.{blocks[-1] - 1}',
               kinds[1] == 'Conv', state)
  _head(graph, x, state)
  if sizes is not None and tuple(blocks) != tuple(sizes):
    raise BackboneMismatchError(f'{path}: blocks per stage {tuple(blocks)}; expected '
                                f'{tuple(sizes)}')
  return state
