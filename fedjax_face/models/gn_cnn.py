"""The GroupNorm conv net of the one-identity-per-client papers (FedUV; FedFV Sec. 4.2).

  `num_stages` x [conv3x3 -> ReLU -> 2x2 max-pool -> GroupNorm], then flatten -> Dense(d)
  [-> Scaling, FedUV only].

The FedFV paper's backbone is five such blocks with 64, 128, 256, 512 and 512 channels and a 512-d
embedding at 64x64 input (`width=64, num_stages=5, embedding_dim=512`). Stage i has
`width * 2**min(i, 3)` channels, so the channels double up to 8 x width and then stay, which is the
paper's pattern at any width. GroupNorm rather than BatchNorm is what makes this backbone fit for a
client with one identity: its statistics are per sample, so nothing depends on a batch that holds
one person only, and there are no running statistics to average.

The optional `Scaling` layer (FedUV's): one learnable scalar that multiplies the embedding, so the
embedding's scale can follow the code length of Eq. 4's targets instead of being fixed by the
weights' initialisation. Its initial value is `scaling_init`.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_face.models import conv as conv_lib
from fedjax_face.models import initializers
from fedjax_face.models import pooling

MAX_GROUPS = 32   # Wu & He's default; fewer when a stage has fewer channels


def stage_channels(width: int, num_stages: int) -> list[int]:
  """Channels per stage: width, 2w, 4w, 8w, 8w, ... (64 -> 64, 128, 256, 512, 512)."""
  return [width * 2**min(stage, 3) for stage in range(num_stages)]


def num_groups(channels: int) -> int:
  """The largest divisor of `channels` up to MAX_GROUPS (32 for every paper stage)."""
  return max(g for g in range(1, min(MAX_GROUPS, channels) + 1) if channels % g == 0)


class Scaling(nn.Module):
  """`x -> s * x` with one learnable scalar s (FedUV's scaling layer)."""
  init_value: float = 1.0

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    s = self.param('scale', nn.initializers.constant(self.init_value), (), jnp.float32)
    return x * s.astype(x.dtype)


class GroupNormCNN(nn.Module):
  """Conv/ReLU/max-pool/GroupNorm stages, then a linear embedding (and FedUV's Scaling).

  Attributes:
    width: channels of the first stage (the paper: 64).
    embedding_dim: size of the embedding (the paper: 512).
    num_stages: blocks; each halves the spatial size, so inputs need at least 2**num_stages pixels.
    scaling: end with a `Scaling` layer (FedUV).
    scaling_init: its initial scale.
    dtype: compute dtype of the convs and GroupNorms (`core/precision.py`); parameters, the
      GroupNorm statistics (flax reduces in float32), the embedding layer and the returned
      embeddings are float32.
    conv_gradient: 'xla' or 'canonical' (`models/conv.py`).
  """
  width: int = 16
  embedding_dim: int = 128
  num_stages: int = 5
  scaling: bool = False
  scaling_init: float = 1.0
  dtype: Any = jnp.float32
  conv_gradient: str = 'xla'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    """Embeds images `x` `[B, H, W, C]` -> float32 `[B, embedding_dim]`."""
    del train   # GroupNorm behaves the same in training and evaluation
    if min(x.shape[1:3]) < 2**self.num_stages:
      raise ValueError(f'gn_cnn with {self.num_stages} stages needs images of at least '
                       f'{2**self.num_stages}x{2**self.num_stages} pixels; got {x.shape[1:3]} '
                       '(lower model.num_stages or raise data.image_size).')
    x = x.astype(self.dtype)
    for stage, channels in enumerate(stage_channels(self.width, self.num_stages)):
      x = nn.Conv(channels, (3, 3), padding=1, kernel_init=initializers.he_normal_fan_out,
                  dtype=self.dtype, name=f'conv{stage}',
                  conv_general_dilated=conv_lib.conv_function(self.conv_gradient))(x)
      x = nn.relu(x)
      x = pooling.max_pool(x, 2)   # nn.max_pool's values and gradients, faster on CPU
      x = nn.GroupNorm(num_groups=num_groups(channels), dtype=self.dtype, name=f'gn{stage}')(x)
    # The embedding layer in float32 whatever the compute dtype (as `SmallCNN`'s, arcface_torch's
    # fc outside autocast). Identical when dtype is float32.
    x = x.reshape((x.shape[0], -1)).astype(jnp.float32)
    x = nn.Dense(self.embedding_dim, kernel_init=initializers.lecun_normal, dtype=jnp.float32,
                 name='fc')(x)
    if self.scaling:
      x = Scaling(self.scaling_init, name='scaling')(x)
    return x
