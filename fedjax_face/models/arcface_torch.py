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
export with the `onnx` package (`state_dict_from_onnx`), and says which IResNet it holds; `load_variables(path, model_config, image_size)` checks the run's model against
it and converts it (`config.init_from=backbone.pth`).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.core import checks
from fedjax_face import models
from fedjax_face.io import torch_state_dict
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


def _converted(path: tuple[str, ...], value: np.ndarray) -> np.ndarray:
  """A state-dict tensor in the Flax variable's layout (kernels transposed)."""
  if path[-1] == 'kernel':
    return value.transpose(2, 3, 1, 0) if value.ndim == 4 else value.T
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


def read_backbone(path: str, model_config=None) -> tuple[dict[str, np.ndarray], str, int]:
  """(state dict, model name, embedding dim) of an arcface_torch `.pth`, or of an ONNX export
  (`.onnx`: read as the IResNet `model_config.name` names, `state_dict_from_onnx`).

  Raises:
    torch_state_dict.TorchFormatError: an unreadable .pth.
    BackboneMismatchError: not an IResNet of `DEPTHS` (or not the named one).
  """
  if path.endswith('.onnx'):
    names = {name: sizes for sizes, name in DEPTHS.items()}
    name = getattr(model_config, 'name', None)
    if name not in names:
      raise BackboneMismatchError(f'{path}: an ONNX export is read as the IResNet config.model '
                                  f'names; config.model.name={name!r}, expected one of '
                                  f'{sorted(names)}')
    state_dict = state_dict_from_onnx(path, names[name])
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
  arcface_torch `.pth` at `path`.

  Raises:
    ValueError: the file's network is not the run's (`check_model`), or (BackboneMismatchError)
      its tensors do not fit the model at this image size (arcface_torch's fc expects 112 px).
    torch_state_dict.TorchFormatError: an unreadable file.
  """
  state_dict, name, dim = read_backbone(path, model_config)
  check_model(path, name, dim, model_config)
  model = models.build_backbone(model_config)
  images = jnp.zeros((1, image_size, image_size, 3), jnp.float32)
  template = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), images, train=False))
  return variables_from_state_dict(state_dict, template,
                                   source=f'config.init_from={path!r} (at {image_size} px)')


# -- ONNX (arcface_torch's torch2onnx exports) ------------------------------------------------

def module_order(stage_sizes) -> list[tuple[str, str]]:
  """(state-dict prefix, kind) of an IResNet's layers in forward order, kind one of 'conv',
  'bn', 'prelu', 'fc'."""
  order = [('conv1', 'conv'), ('bn1', 'bn'), ('prelu', 'prelu')]
  for s, blocks in enumerate(stage_sizes, start=1):
    for b in range(blocks):
      p = f'layer{s}.{b}'
      order += [(f'{p}.bn1', 'bn'), (f'{p}.conv1', 'conv'), (f'{p}.bn2', 'bn'),
                (f'{p}.prelu', 'prelu'), (f'{p}.conv2', 'conv'), (f'{p}.bn3', 'bn')]
      if b == 0:
        order += [(f'{p}.downsample.0', 'conv'), (f'{p}.downsample.1', 'bn')]
  return order + [('bn2', 'bn'), ('fc', 'fc'), ('features', 'bn')]


def state_dict_from_onnx(path: str, stage_sizes) -> dict[str, np.ndarray]:
  """The arcface_torch state dict an ONNX export of an IResNet holds, read with the `onnx`
  package (`pip install onnx`).

  The graph is walked in node order against the network's layers in forward order
  (`module_order`); names are not relied on. PyTorch's exporter folds a BatchNorm that follows a
  convolution into the convolution's weights and a bias (every IResNet BatchNorm but the one that
  opens each block, `bn2` and `features`): such a BatchNorm is restored as scale 1, mean 0,
  variance 1 - eps and the folded bias as its bias, which computes the same function. The fc is a
  Gemm (or MatMul + Add); a PRelu's slope is `[C, 1, 1]` there.

  Raises:
    BackboneMismatchError: the graph's layers do not follow the network's (naming the layer and
      the node found instead); ImportError: `onnx` is not installed.
  """
  try:
    import onnx   # pylint: disable=g-import-not-at-top  (optional: only this reader needs it)
    from onnx import numpy_helper   # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f'{path}: reading ONNX needs the onnx package: pip install onnx') from e
  graph = onnx.load(path).graph
  weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
  ops = [n for n in graph.node if n.op_type in ('Conv', 'BatchNormalization', 'PRelu', 'Gemm',
                                                 'MatMul')]
  consumers = {}
  for node in graph.node:
    for name in node.input:
      consumers.setdefault(name, []).append(node)
  state, i = {}, 0
  want = {'conv': ('Conv',), 'bn': ('BatchNormalization',), 'prelu': ('PRelu',),
          'fc': ('Gemm', 'MatMul')}
  folded_bias = None   # the bias of a convolution a BatchNorm was folded into
  for prefix, kind in module_order(stage_sizes):
    if kind == 'bn' and folded_bias is not None:
      channels = len(folded_bias)
      state.update({f'{prefix}.weight': np.ones(channels, np.float32),
                    f'{prefix}.bias': folded_bias,
                    f'{prefix}.running_mean': np.zeros(channels, np.float32),
                    # sqrt(var + eps) = 1 under the model's BatchNorm epsilon
                    f'{prefix}.running_var': np.full(channels, 1.0 - BN_EPSILON, np.float32)})
      folded_bias = None
      continue
    if i >= len(ops) or ops[i].op_type not in want[kind]:
      found = (f'{ops[i].op_type} (node {ops[i].name!r})' if i < len(ops)
               else 'the end of the graph')
      raise BackboneMismatchError(f'{path}: layer {prefix} ({kind}) meets {found}; expected '
                                  f'{" or ".join(want[kind])}')
    node, i = ops[i], i + 1
    arg = lambda k: weights[node.input[k]]
    if kind == 'conv':
      state[f'{prefix}.weight'] = arg(1)
      follows = [c.op_type for c in consumers.get(node.output[0], [])]
      if len(node.input) > 2 and 'BatchNormalization' in follows:
        raise BackboneMismatchError(f'{path}: layer {prefix} is a convolution with a bias '
                                    f'(node {node.name!r}); an IResNet convolution has none')
      if len(node.input) > 2:
        folded_bias = arg(2)
    elif kind == 'bn':
      epsilon = {a.name: a.f for a in node.attribute}.get('epsilon', 1e-5)
      if not np.isclose(epsilon, BN_EPSILON, rtol=1e-6):
        raise BackboneMismatchError(f'{path}: layer {prefix} has BatchNorm epsilon {epsilon:g}; '
                                    f"the model's is {BN_EPSILON:g}")
      state.update({f'{prefix}.weight': arg(1), f'{prefix}.bias': arg(2),
                    f'{prefix}.running_mean': arg(3), f'{prefix}.running_var': arg(4)})
    elif kind == 'prelu':
      state[f'{prefix}.weight'] = arg(1).reshape(-1)
    else:
      if node.op_type == 'Gemm':
        trans_b = {a.name: a.i for a in node.attribute}.get('transB', 0)
        state['fc.weight'] = arg(1) if trans_b else arg(1).T
        state['fc.bias'] = arg(2)
      else:   # MatMul by [in, out], then an Add of the bias
        state['fc.weight'] = arg(1).T
        add = next(c for c in consumers[node.output[0]] if c.op_type == 'Add')
        state['fc.bias'] = weights[next(n for n in add.input if n in weights)]
  return state
