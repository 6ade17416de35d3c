"""Insightface's improved ResNets (IResNet-18/34/50/100) for 112x112 face crops, in arcface_torch's
exact layout, so that its published weights (`models/arcface_torch.py` imports them) compute the
same function here:

  stem: conv3x3(64, stride 1) -> BN -> PReLU(64)
  4 stages of IBasicBlocks, channels 64/128/256/512, first block of every stage has stride 2
    (112 -> 56 -> 28 -> 14 -> 7); blocks per stage: r18 (2, 2, 2, 2), r34 (3, 4, 6, 3),
    r50 (3, 4, 14, 3), r100 (3, 13, 30, 3)
  head: BN -> dropout -> flatten in PyTorch's NCHW order -> Linear(512 x 7 x 7, embedding_dim)
    with bias -> BatchNorm1d ("features", scale fixed at 1)

  IBasicBlock(x) = BN(conv3x3_s(PReLU(BN(conv3x3_1(BN(x)))))) + shortcut(x),
  shortcut = conv1x1_s + BN when stride or width changes, identity otherwise.

Every BatchNorm has epsilon 1e-5, PyTorch's. Same backbone contract as `SmallCNN`:
`module.apply(variables, x, train=..., mutable=...)`, images float32 `[B, H, W, C]` RGB in
[-1, 1] (arcface_torch's `(x / 255 - 0.5) / 0.5`) -> float32 `[B, embedding_dim]` (not
normalised), variables `{'params', 'batch_stats'}`, safe under `jax.vmap` over a clients axis.
With `dropout > 0` and `train=True` the caller must also pass `rngs={'dropout': key}`.

Trained from scratch, convs start from He fan-out normal rather than arcface_torch's N(0, 0.1):
an initialisation, not a layout, so imported weights are unaffected.
"""

import functools
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_face.models import conv as conv_lib
from fedjax_face.models import initializers
from fedjax_face.models.small_cnn import BN_EPSILON
from fedjax_face.models.small_cnn import BN_MOMENTUM


class PReLU(nn.Module):
  """Parametric ReLU with one learnable slope per channel (last axis), initialised to 0.25.

  `flax.linen.PReLU` learns a single scalar slope; insightface uses PyTorch's per-channel
  `nn.PReLU(C)`, hence this module.
  """
  init_slope: float = 0.25

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    slope = self.param(
        'negative_slope', nn.initializers.constant(self.init_slope), (x.shape[-1],), jnp.float32)
    return jnp.where(x >= 0, x, slope.astype(x.dtype) * x)


class IBasicBlock(nn.Module):
  """Improved basic residual block: BN-conv-BN-PReLU-conv-BN plus a (projected) shortcut."""
  features: int
  stride: int
  norm: Callable[..., nn.Module]
  conv: Callable[..., nn.Module]

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    residual = self.norm(name='bn1')(x)
    residual = self.conv(self.features, (3, 3), name='conv1')(residual)
    residual = self.norm(name='bn2')(residual)
    residual = PReLU(name='prelu')(residual)
    residual = self.conv(self.features, (3, 3), strides=self.stride, name='conv2')(residual)
    residual = self.norm(name='bn3')(residual)
    if self.stride != 1 or x.shape[-1] != self.features:
      # The projection reads the raw block input, not BN(x), as in insightface's `downsample`.
      x = self.conv(
          self.features, (1, 1), strides=self.stride, padding=0, name='downsample_conv')(x)
      x = self.norm(name='downsample_bn')(x)
    return residual + x


class IResNet(nn.Module):
  """Insightface IResNet backbone.

  Attributes:
    stage_sizes: number of IBasicBlocks per stage, e.g. (2, 2, 2, 2) for IResNet-18.
    embedding_dim: size of the output embedding (512 in insightface).
    stage_widths: channels of each stage.
    stem_width: channels of the stem conv.
    dropout: dropout rate before the embedding layer (insightface default 0).
    dtype: compute dtype (e.g. `jnp.bfloat16` on accelerators); parameters and BN statistics stay
      float32, and the embedding layer plus the features BN always run in float32 (arcface_torch
      likewise leaves its fc in float32 under fp16) so the returned embeddings are float32.
    conv_gradient: 'xla' or 'canonical' (`models/conv.py`: the same gradients, fast inside
      `lax.scan` on XLA CPU).
  """
  stage_sizes: Sequence[int]
  embedding_dim: int = 512
  stage_widths: Sequence[int] = (64, 128, 256, 512)
  stem_width: int = 64
  dropout: float = 0.0
  dtype: Any = jnp.float32
  conv_gradient: str = 'xla'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    """Embeds images `x` `[B, H, W, C]` -> float32 `[B, embedding_dim]`."""
    if len(self.stage_sizes) != len(self.stage_widths):
      raise ValueError(
          f'stage_sizes {self.stage_sizes} and stage_widths {self.stage_widths} differ in length')
    # PyTorch-style symmetric padding 1 for every 3x3 conv (Flax 'SAME' would pad asymmetrically
    # for stride 2 on even sizes).
    conv = functools.partial(
        nn.Conv, padding=1, use_bias=False, kernel_init=initializers.he_normal_fan_out,
        dtype=self.dtype,
        conv_general_dilated=conv_lib.conv_function(self.conv_gradient))
    norm = functools.partial(
        nn.BatchNorm, use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
        dtype=self.dtype)

    x = x.astype(self.dtype)
    x = conv(self.stem_width, (3, 3), name='conv1')(x)
    x = norm(name='bn1')(x)
    x = PReLU(name='prelu')(x)
    for stage, (num_blocks, width) in enumerate(zip(self.stage_sizes, self.stage_widths)):
      for block in range(num_blocks):
        x = IBasicBlock(
            width, stride=2 if block == 0 else 1, norm=norm, conv=conv,
            name=f'layer{stage + 1}_{block}')(x)
    x = norm(name='bn2')(x)
    x = nn.Dropout(self.dropout, deterministic=not train)(x)
    # Flattened as PyTorch flattens its NCHW map, so fc's kernel is arcface_torch's weight^T.
    x = jnp.transpose(x, (0, 3, 1, 2)).reshape((x.shape[0], -1)).astype(jnp.float32)
    x = nn.Dense(self.embedding_dim, kernel_init=initializers.lecun_normal, dtype=jnp.float32,
                 name='fc')(x)
    # Scale frozen at 1 as in insightface (`features.weight` = 1, requires_grad=False).
    x = nn.BatchNorm(
        use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, use_scale=False,
        dtype=jnp.float32, name='features')(x)
    return x


def iresnet18(embedding_dim: int = 512, **kwargs: Any) -> IResNet:
  """IResNet-18: blocks (2, 2, 2, 2)."""
  return IResNet(stage_sizes=(2, 2, 2, 2), embedding_dim=embedding_dim, **kwargs)


def iresnet34(embedding_dim: int = 512, **kwargs: Any) -> IResNet:
  """IResNet-34: blocks (3, 4, 6, 3)."""
  return IResNet(stage_sizes=(3, 4, 6, 3), embedding_dim=embedding_dim, **kwargs)


def iresnet50(embedding_dim: int = 512, **kwargs: Any) -> IResNet:
  """IResNet-50: blocks (3, 4, 14, 3)."""
  return IResNet(stage_sizes=(3, 4, 14, 3), embedding_dim=embedding_dim, **kwargs)


def iresnet100(embedding_dim: int = 512, **kwargs: Any) -> IResNet:
  """IResNet-100: blocks (3, 13, 30, 3)."""
  return IResNet(stage_sizes=(3, 13, 30, 3), embedding_dim=embedding_dim, **kwargs)
