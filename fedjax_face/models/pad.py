"""The FedGPAD network (its Table II), at a width that trains on CPU by default.

Five parts, each its own parameter subtree, so that an algorithm can aggregate some and keep the
others on the data center (FedGPAD's Eq. 10 averages `invariant`, `classifier` and `depth`;
`specific` and `decoder` never leave it):

  invariant / specific  the feature extractors EI / ES: three blocks of conv3x3 x3 (channels
                        2w, 3w, 2w as Table II's 128, 196, 128 at w = 64) then a 2x2 max-pool,
                        a conv3x3 2w + pool, a conv3x3 4w + pool, a conv3x3 8w (conv1-13). Each
                        conv is conv -> BatchNorm -> ReLU; the first conv has w channels.
  classifier            C: global average pool of conv1-13, fc 8w, ReLU, fc 1 (the live logit).
  depth                 Dep: the three block outputs (pool1-1..1-3) resized to pool1-3's size and
                        concatenated, conv3x3 2w, conv3x3 w, conv3x3 1 (the depth map).
  decoder               Dec: average pool of Z_I + Z_S, fc to 8w x 4 x 4, transposed convs x2
                        up to the input size (channels 8w, 4w, 2w, w, w/2, ..., the input's 6).

Readings: Table II's depth map is 32x32 at 256x256 input, pool1-3's size; here the depth head
works at the input size / 8 whatever the input, and the target maps are resized to it. Z_I and
Z_S of Eq. 6-7 are conv1-13's average-pooled features (the authors' code decodes and
differences pooled vectors). `disentangle=False` builds EI, C and Dep only: FedPAD's classifier
with the same depth head, so that the two methods differ in the disentanglement alone.
"""

import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_face.models import conv as conv_lib
from fedjax_face.models import pooling
from fedjax_face.models import initializers
from fedjax_face.models.small_cnn import BN_EPSILON, BN_MOMENTUM

PAD_CHANNELS = 6   # RGB + HSV (the authors' input)


class GroupedBatchNorm(nn.Module):
  """BatchNorm whose training statistics come from each of `groups` equal, contiguous slices of
  the batch (a pooled batch's data centers, as each federated data center computes them over
  its own frames); the running statistics move by the mean of the slices' statistics, as
  FedAvg of the data centers' running statistics would. Variables and inference as
  `nn.BatchNorm` (its names, so a checkpoint reads either way)."""
  groups: int
  momentum: float = BN_MOMENTUM
  epsilon: float = BN_EPSILON

  @nn.compact
  def __call__(self, x, use_running_average: bool):
    features = x.shape[-1]
    ra_mean = self.variable('batch_stats', 'mean', jnp.zeros, (features,), jnp.float32)
    ra_var = self.variable('batch_stats', 'var', jnp.ones, (features,), jnp.float32)
    scale = self.param('scale', nn.initializers.ones, (features,), jnp.float32)
    bias = self.param('bias', nn.initializers.zeros, (features,), jnp.float32)
    # Training: one slice per group; inference (and init, shapes only): the batch as one slice
    # normalized by the running statistics.
    training = not (use_running_average or self.is_initializing())
    if training and x.shape[0] % self.groups:
      raise ValueError(f'GroupedBatchNorm: a batch of {x.shape[0]} cannot be split into '
                       f'{self.groups} equal data-center slices.')
    sliced = x.reshape((self.groups if training else 1, -1) + x.shape[1:]).astype(jnp.float32)
    axes = tuple(range(1, sliced.ndim - 1))
    if training:
      mean = jnp.mean(sliced, axis=axes, keepdims=True)
      var = jnp.maximum(jnp.mean(jnp.square(sliced), axis=axes, keepdims=True)
                        - jnp.square(mean), 0.0)
      m = self.momentum
      ra_mean.value = m * ra_mean.value + (1 - m) * jnp.mean(mean, axis=(0,) + axes)
      ra_var.value = m * ra_var.value + (1 - m) * jnp.mean(var, axis=(0,) + axes)
    else:
      mean, var = ra_mean.value, ra_var.value
    y = (sliced - mean) * jax.lax.rsqrt(var + self.epsilon)
    return (y.reshape(x.shape) * scale + bias).astype(x.dtype)


class _ConvBN(nn.Module):
  features: int
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(self.features, (3, 3), padding='SAME', use_bias=False,
                kernel_init=initializers.he_normal_fan_out, dtype=self.dtype,
                conv_general_dilated=conv_lib.conv_function(self.conv_gradient))(x)
    return nn.relu(_batch_norm(x, train, self.batch_norm_groups, dtype=self.dtype))


def _batch_norm(x, train: bool, groups: int, name: str | None = None, dtype: Any = jnp.float32):
  """BatchNorm over the batch (`groups` 1) or per data-center slice (`GroupedBatchNorm`). Both
  keep their statistics in float32 and reduce in float32 (flax's `force_float32_reductions`);
  the output is in `dtype`."""
  if groups == 1:
    return nn.BatchNorm(use_running_average=not train, momentum=BN_MOMENTUM, epsilon=BN_EPSILON,
                        dtype=dtype, name=name)(x)
  return GroupedBatchNorm(groups, name=name or 'BatchNorm_0')(x, not train)


def _pool(x):
  return pooling.max_pool(x, 2)   # nn.max_pool's values and gradients, faster on CPU


class Extractor(nn.Module):
  """EI or ES: returns (conv1-13 features `[B, h, w, 8w]`, the three block outputs)."""
  width: int
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool):
    w = self.width
    conv_bn = functools.partial(_ConvBN, conv_gradient=self.conv_gradient,
                                batch_norm_groups=self.batch_norm_groups, dtype=self.dtype)
    x = conv_bn(w)(x, train)
    blocks = []
    for _ in range(3):
      for channels in (2 * w, 3 * w, 2 * w):
        x = conv_bn(channels)(x, train)
      x = _pool(x)
      blocks.append(x)
    x = _pool(conv_bn(2 * w)(x, train))
    x = _pool(conv_bn(4 * w)(x, train))
    return conv_bn(8 * w)(x, train), blocks


class Classifier(nn.Module):
  """C, in float32 whatever the compute dtype: the live logit the losses and the PAD metrics
  read, as a backbone's embedding layer (`models/__init__.py`)."""
  width: int

  @nn.compact
  def __call__(self, z):
    dense = functools.partial(nn.Dense, kernel_init=initializers.lecun_normal, dtype=jnp.float32)
    return dense(1)(nn.relu(dense(8 * self.width)(z.astype(jnp.float32))))[:, 0]


class DepthEstimator(nn.Module):
  width: int
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, blocks, train: bool):
    size = blocks[-1].shape[1:3]
    x = jnp.concatenate([jax.image.resize(b, b.shape[:1] + size + b.shape[3:], 'linear')
                         for b in blocks], axis=-1)
    x = _ConvBN(2 * self.width, self.conv_gradient, self.batch_norm_groups, self.dtype)(x, train)
    x = _ConvBN(self.width, self.conv_gradient, self.batch_norm_groups, self.dtype)(x, train)
    return nn.Conv(1, (3, 3), padding='SAME', kernel_init=initializers.lecun_normal,
                   dtype=self.dtype, conv_general_dilated=conv_lib.conv_function(self.conv_gradient))(x)[..., 0]


class Decoder(nn.Module):
  width: int
  image_size: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, z):
    w = self.width
    x = nn.Dense(8 * w * 16, kernel_init=initializers.lecun_normal, dtype=self.dtype)(z)
    x = x.reshape(z.shape[0], 4, 4, 8 * w)
    size, channels = 4, 8 * w
    while size < self.image_size:
      size *= 2
      channels = PAD_CHANNELS if size >= self.image_size else max(channels // 2, w // 2, 1)
      x = nn.ConvTranspose(channels, (4, 4), strides=(2, 2), padding='SAME',
                           kernel_init=initializers.lecun_normal, dtype=self.dtype)(x)
      if size < self.image_size:
        x = nn.relu(x)
    return x


class _BasicBlock(nn.Module):
  """torchvision's ResNet basic block: conv3x3 (stride) BN ReLU conv3x3 BN, plus the input
  (through conv1x1 (stride) BN when the shape changes), ReLU."""
  features: int
  strides: int = 1
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool):
    conv = functools.partial(nn.Conv, use_bias=False, kernel_init=initializers.he_normal_fan_out,
                             dtype=self.dtype,
                             conv_general_dilated=conv_lib.conv_function(self.conv_gradient))
    norm = lambda y, name: _batch_norm(y, train, self.batch_norm_groups, name, self.dtype)
    s = (self.strides, self.strides)
    y = nn.relu(norm(conv(self.features, (3, 3), s, padding=1, name='conv1')(x), 'bn1'))
    y = norm(conv(self.features, (3, 3), padding=1, name='conv2')(y), 'bn2')
    if self.strides != 1 or x.shape[-1] != self.features:
      x = norm(conv(self.features, (1, 1), s, padding=0, name='downsample_conv')(x),
               'downsample_bn')
    return nn.relu(x + y)


class ResNet18Trunk(nn.Module):
  """ResNet-18 up to its pooled features `[B, 8w]`: conv7x7/2 (w) BN ReLU, max-pool 3x3/2, then
  four stages of two basic blocks (w, 2w, 4w, 8w channels; the first block of stages 2-4 has
  stride 2), global average pool. torchvision's padding (3 for the stem, 1 for the pool)."""
  width: int = 64
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x, train: bool):
    x = nn.Conv(self.width, (7, 7), (2, 2), padding=3, use_bias=False,
                kernel_init=initializers.he_normal_fan_out, dtype=self.dtype,
                conv_general_dilated=conv_lib.conv_function(self.conv_gradient), name='conv1')(x)
    x = nn.relu(_batch_norm(x, train, self.batch_norm_groups, 'bn1', self.dtype))
    x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
    for stage in range(4):
      for block in range(2):
        x = _BasicBlock(self.width * 2**stage, 2 if (stage and not block) else 1,
                        self.conv_gradient, self.batch_norm_groups, self.dtype,
                        name=f'layer{stage + 1}_{block}')(x, train)
    return jnp.mean(x, axis=(1, 2))


class PadResNet18(nn.Module):
  """FedPAD's network as the paper has it (§IV-A4: 'we directly adopt Resnet-18'), on the RGB +
  HSV input: `ResNet18Trunk` ('invariant') and a linear live logit ('classifier'), so FedPAD's
  server averages both as it averages PadNet's EI and C. `__call__(x, train, disentangled=None)`
  -> {'logit' `[B]`}: no depth head, FedPAD's loss is the cross-entropy alone (Eq. 1). w = 64
  is torchvision's ResNet-18; the configs train w = 8 on CPU (`paper`: 64)."""
  width: int = 64
  image_size: int = 256
  dtype: Any = jnp.float32
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1
  disentangle = False                 # no ES or Dec: what FedPAD's algorithm asks of a model

  @nn.compact
  def __call__(self, x, train: bool, disentangled: bool | None = None):
    del disentangled
    if x.shape[1] != self.image_size or x.shape[-1] != PAD_CHANNELS:
      raise ValueError(f'PadResNet18 expects [B, {self.image_size}, {self.image_size}, '
                       f'{PAD_CHANNELS}] (RGB + HSV at model.image_size), got {x.shape}.')
    z = ResNet18Trunk(self.width, self.conv_gradient, self.batch_norm_groups, self.dtype,
                      name='invariant')(x.astype(self.dtype), train)
    # The live logit in float32 whatever the compute dtype (as PadNet's `Classifier`).
    logit = nn.Dense(1, kernel_init=initializers.lecun_normal, dtype=jnp.float32,
                     name='classifier')(z.astype(jnp.float32))
    return {'logit': logit[:, 0].astype(jnp.float32)}


class PadNet(nn.Module):
  """`__call__(x, train, disentangled=None)` -> dict with 'logit' `[B]`, 'depth' `[B, S/8, S/8]`
  and, with `disentangle` and `disentangled` (default: in training), 'z_invariant', 'z_specific'
  `[B, 8w]` and 'reconstruction' `[B, S, S, 6]`. Without them only EI, C and Dep run, so the
  aggregated parts alone (FedGPAD's global model) score images. `conv_gradient`: 'xla' or
  'canonical' (`models/conv.py`: the same gradients, fast inside `lax.scan` on XLA CPU); the
  decoder's transposed convs keep XLA's own. `batch_norm_groups` > 1: training statistics per
  data-center slice of a pooled batch (`GroupedBatchNorm`; the 'All' baseline's switch).
  `dtype`: the compute dtype of every conv, transposed conv and BatchNorm output
  (`core/precision.py`); parameters, BatchNorm statistics and the classifier stay float32, and
  every output is float32."""
  width: int = 8
  image_size: int = 64
  disentangle: bool = True
  dtype: Any = jnp.float32
  conv_gradient: str = 'xla'
  batch_norm_groups: int = 1

  def setup(self):
    groups = self.batch_norm_groups
    self.invariant = Extractor(self.width, self.conv_gradient, groups, self.dtype)
    self.classifier = Classifier(self.width)
    self.depth = DepthEstimator(self.width, self.conv_gradient, groups, self.dtype)
    if self.disentangle:
      self.specific = Extractor(self.width, self.conv_gradient, groups, self.dtype)
      self.decoder = Decoder(self.width, self.image_size, self.dtype)

  def __call__(self, x, train: bool, disentangled: bool | None = None):
    if x.shape[1] != self.image_size or x.shape[-1] != PAD_CHANNELS:
      raise ValueError(f'PadNet expects [B, {self.image_size}, {self.image_size}, {PAD_CHANNELS}] '
                       f'(RGB + HSV at model.image_size), got {x.shape}.')
    x = x.astype(self.dtype)
    features, blocks = self.invariant(x, train)
    z_invariant = jnp.mean(features, axis=(1, 2))
    out = {'logit': self.classifier(z_invariant).astype(jnp.float32),
           'depth': self.depth(blocks, train).astype(jnp.float32)}
    if self.disentangle and (train if disentangled is None else disentangled):
      z_specific = jnp.mean(self.specific(x, train)[0], axis=(1, 2))
      out['z_invariant'] = z_invariant.astype(jnp.float32)
      out['z_specific'] = z_specific.astype(jnp.float32)
      out['reconstruction'] = self.decoder(z_invariant + z_specific).astype(jnp.float32)
    return out
