"""Image conventions shared by training, evaluation and every data source.

Images travel as uint8 arrays `[..., H, W, 3]` (RGB, HWC) from data sources to the device; they
become float32 only inside jitted code, with the arcface_torch transform `(x / 255 - 0.5) / 0.5`.
"""

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays


def normalize(images: jax.Array) -> jax.Array:
  """uint8 `[..., H, W, C]` in [0, 255] -> float32 in [-1, 1]."""
  return (images.astype(jnp.float32) / 255.0 - 0.5) / 0.5


def horizontal_flip(images: jax.Array) -> jax.Array:
  """Mirror `[..., H, W, C]` images left-right."""
  return jnp.flip(images, axis=-2)


def random_flip(rng: jax.Array, images: jax.Array) -> jax.Array:
  """Flip each image of a `[B, H, W, C]` batch with probability 1/2 (training augmentation)."""
  flip = arrays.drawn_flat(jax.random.bernoulli, rng,
                          (images.shape[0],) + (1,) * (images.ndim - 1), p=0.5)
  return jnp.where(flip, horizontal_flip(images), images)


def rgb_hsv(images: jax.Array) -> jax.Array:
  """uint8 RGB `[..., 3]` -> float32 `[..., 6]`: RGB and HSV, each in [-1, 1] (the authors' six
  input channels). Hue of a grey pixel is 0."""
  rgb = images.astype(jnp.float32) / 255.0
  r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
  value = jnp.max(rgb, axis=-1)
  low = jnp.min(rgb, axis=-1)
  chroma = value - low
  saturation = jnp.where(value > 0, chroma / jnp.where(value > 0, value, 1.0), 0.0)
  safe = jnp.where(chroma > 0, chroma, 1.0)
  hue = jnp.where(value == r, ((g - b) / safe) % 6.0,
                  jnp.where(value == g, (b - r) / safe + 2.0, (r - g) / safe + 4.0))
  hue = jnp.where(chroma > 0, hue / 6.0, 0.0)
  hsv = jnp.stack([hue, saturation, value], axis=-1)
  return jnp.concatenate([rgb, hsv], axis=-1) * 2.0 - 1.0
