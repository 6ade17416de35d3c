"""A small conv net backbone, the fast default for CPU-scale federated runs.

Simulating hundreds of clients on two CPU cores rules out an IResNet at 112x112, so the default
backbone is a plain VGG-like stack sized for 32x32 crops:

  `num_stages` x [conv3x3 (no bias) -> BatchNorm -> ReLU -> 2x2 max-pool], widths w, 2w, 4w, ...
  -> flatten -> Dense(embedding_dim) -> BatchNorm (the "features" BN of insightface).

It follows the backbone contract shared by every model in `fedjax_face.models`:
`module.apply(variables, x, train=..., mutable=...)` maps float32 images `[B, H, W, C]` in [-1, 1]
to float32 embeddings `[B, embedding_dim]` (not L2-normalised; the heads normalise when the loss
needs it). Variables are `{'params', 'batch_stats'}`; in train mode pass
`mutable=['batch_stats']`. Nothing here has Python side effects, so the module can be `jax.vmap`ed
over a leading clients axis of variables and inputs.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_face.models import conv as conv_lib
from fedjax_face.models import initializers
from fedjax_face.models import pooling

# PyTorch-style BatchNorm hyper-parameters (momentum 0.1 there == 0.9 here, eps 1e-5), as in the
# insightface models. Flax's default momentum 0.99 would make the running statistics lag far behind
# the weights over the few local steps a federated client takes per round.
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5

class SmallCNN(nn.Module):
  """VGG-like conv net: `num_stages` conv/BN/ReLU/max-pool stages, then a BN'd linear embedding.

  Attributes:
    width: channels of the first stage; stage i has `width * 2**i` channels.
    embedding_dim: size of the output embedding.
    num_stages: number of conv/pool stages; each halves the spatial size (floor), so the input must
      be at least `2**num_stages` pixels on each side. Any such size works (32, 64, 112, ...): the
      dense layer's input size is inferred at init.
    dtype: compute dtype of the convs and their BNs (e.g. `jnp.bfloat16`, `core/precision.py`);
      parameters and BN statistics stay float32, and the embedding layer with its features BN
      runs in float32, so the returned embeddings are float32.
    conv_gradient: 'xla' or 'canonical' (`models/conv.py`: the same gradients, fast inside
      `lax.scan` on XLA CPU).
  """
  width: int = 16
  embedding_dim: int = 128
  num_stages: int = 3
  dtype: Any = jnp.float32
  conv_gradient: str = 'xla'

  @nn.compact
  def __call__(self, x: jax.Array, train: bool) -> jax.Array:
    """Embeds images `x` `[B, H, W, C]` -> float32 `[B, embedding_dim]`."""
    x = x.astype(self.dtype)
    for stage in range(self.num_stages):
      x = nn.Conv(
          self.width * 2**stage, (3, 3), padding=1, use_bias=False,
          kernel_init=initializers.he_normal_fan_out, dtype=self.dtype, name=f'conv{stage}',
          conv_general_dilated=conv_lib.conv_function(self.conv_gradient))(x)
      x = nn.BatchNorm(
          use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
          dtype=self.dtype, name=f'bn{stage}')(x)
      x = nn.relu(x)
      x = pooling.max_pool(x, 2)   # nn.max_pool's values and gradients, faster on CPU
    # The embedding layer and its BN run in float32 whatever the compute dtype, as arcface_torch
    # runs its fc and features outside autocast (backbones/iresnet.py): the heads' cosines and
    # margins read the embedding at float32 precision. Identical when dtype is float32.
    x = x.reshape((x.shape[0], -1)).astype(jnp.float32)
    # No dense bias: the BN right after subtracts the batch mean, which cancels any bias exactly.
    x = nn.Dense(self.embedding_dim, use_bias=False, kernel_init=initializers.lecun_normal,
                 dtype=jnp.float32, name='fc')(x)
    # insightface's "features" BN: learnable shift but the scale is frozen at 1 (use_scale=False),
    # so the embedding norm is not driven by a free per-dimension gain.
    x = nn.BatchNorm(
        use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, use_scale=False,
        dtype=jnp.float32, name='features')(x)
    return x
