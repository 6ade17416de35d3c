"""Backbones (face embedding networks), their registry, and the classification heads.

Every backbone follows one contract: `module.apply(variables, x, train=..., mutable=...)` maps
float32 images `[B, H, W, C]` in [-1, 1] to float32 embeddings `[B, embedding_dim]` (not
normalised). Under a compute dtype other than float32 (`core/precision.py`) convolutions and
matmuls run in it, while parameters, BatchNorm statistics and the embedding layer with its
features BatchNorm stay float32 (arcface_torch runs its fc and features outside autocast:
`recognition/arcface_torch/backbones/iresnet.py`, deepinsight/insightface). Variables are `{'params', 'batch_stats'}`; in train mode pass
`mutable=['batch_stats']`. Backbones are pure, so they can be `jax.vmap`ed over a clients axis.

`build_backbone(config)` turns a model ConfigDict into a module; `BACKBONES` lists the names.
"""

from typing import Any, Callable, Dict

import flax.linen as nn

from fedjax_face.core import precision
from fedjax_face.models import conv as conv_lib
from fedjax_face.models import heads
from fedjax_face.models.gn_cnn import GroupNormCNN
from fedjax_face.models.iresnet import IResNet
from fedjax_face.models.iresnet import iresnet100
from fedjax_face.models.iresnet import iresnet18
from fedjax_face.models.iresnet import iresnet34
from fedjax_face.models.iresnet import iresnet50
from fedjax_face.models.iresnet import PReLU
from fedjax_face.models.pad import PadNet
from fedjax_face.models.pad import PadResNet18
from fedjax_face.models.small_cnn import SmallCNN

# name -> constructor accepting `embedding_dim=`, `dtype=` and model-specific keyword arguments.
BACKBONES: Dict[str, Callable[..., nn.Module]] = {
    'small_cnn': SmallCNN,
    'gn_cnn': GroupNormCNN,       # the FedUV / FedFV backbone (GroupNorm: one identity per client)
    'iresnet18': iresnet18,
    'iresnet34': iresnet34,
    'iresnet50': iresnet50,      # arcface_torch's r50 and r100: their weights import
    'iresnet100': iresnet100,    # (models/arcface_torch.py)
}


def _get(config: Any, field: str, default: Any) -> Any:
  """`config.field`, or `default` when the field is absent or None (optional config fields)."""
  value = config.get(field, None) if hasattr(config, 'get') else getattr(config, field, None)
  return default if value is None else value


def build_backbone(config: Any, conv_gradient: str = 'xla') -> nn.Module:
  """Builds the backbone described by a model config.

  Args:
    config: an `ml_collections.ConfigDict` (or anything with the same fields) with
      `name` (a key of `BACKBONES`), `embedding_dim`, `dtype` (the compute dtype, one of
      `core.precision.CHOICES`, 'auto' resolved on this process's device; default float32) and, for 'small_cnn' and 'gn_cnn', `width` (and optionally `num_stages`; 'gn_cnn'
      also `scaling` and `scaling_init`). IResNets ignore `width` and accept an optional
      `dropout`.
    conv_gradient: how convolutions are differentiated, 'xla' or 'canonical' (`models/conv.py`;
      `core.policy.resolve_engine` picks it from `engine.conv_gradient`).

  Returns:
    An unbound Flax module.

  Raises:
    ValueError: unknown backbone name, dtype or conv gradient.
  """
  name = config.name
  dtype_name = _get(config, 'dtype', 'float32')
  if dtype_name not in precision.CHOICES:
    raise ValueError(f'Unknown dtype {dtype_name!r}; valid dtypes: {precision.CHOICES}')
  dtype = precision.compute_dtype(dtype_name)
  if name == 'pad_resnet18':   # FedPAD's detector as the paper has it (models/pad.py)
    return PadResNet18(width=config.width, image_size=config.image_size,
                       dtype=dtype, conv_gradient=conv_gradient,
                       batch_norm_groups=_get(config, 'batch_norm_groups', 1))
  if name == 'pad_net':   # PAD: a detector, not an embedding backbone (models/pad.py)
    return PadNet(width=config.width, image_size=config.image_size,
                  disentangle=config.disentangle, dtype=dtype,
                  conv_gradient=conv_gradient,
                  batch_norm_groups=_get(config, 'batch_norm_groups', 1))
  if name not in BACKBONES:
    raise ValueError(f'Unknown backbone {name!r}; valid names: {sorted(BACKBONES)}')
  if conv_gradient not in conv_lib.CONV_GRADIENTS:
    raise ValueError(f'Unknown conv gradient {conv_gradient!r}; valid: {conv_lib.CONV_GRADIENTS}')
  kwargs = {'embedding_dim': config.embedding_dim, 'dtype': dtype,
            'conv_gradient': conv_gradient}
  if name in ('small_cnn', 'gn_cnn'):
    module = BACKBONES[name]
    kwargs['width'] = _get(config, 'width', module.width)
    kwargs['num_stages'] = _get(config, 'num_stages', module.num_stages)
  if name == 'gn_cnn':
    kwargs['scaling'] = _get(config, 'scaling', False)
    kwargs['scaling_init'] = _get(config, 'scaling_init', GroupNormCNN.scaling_init)
  elif name != 'small_cnn':
    kwargs['dropout'] = _get(config, 'dropout', 0.0)
  return BACKBONES[name](**kwargs)


__all__ = [
    'BACKBONES', 'GroupNormCNN', 'IResNet', 'PReLU', 'SmallCNN', 'build_backbone', 'heads', 'iresnet18',
    'iresnet34',
]
