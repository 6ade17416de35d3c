"""Image conventions shared by training, evaluation and every data source.

Images travel as uint8 arrays `[..., H, W, 3]` (RGB, HWC) from data sources to the device; they
become float32 only inside jitted code, with the arcface_torch transform `(x / 255 - 0.5) / 0.5`.
"""

import jax
import jax.numpy as jnp


def normalize(images: jax.Array) -> jax.Array:
  """uint8 `[..., H, W, C]` in [0, 255] -> float32 in [-1, 1]."""
  return (images.astype(jnp.float32) / 255.0 - 0.5) / 0.5


def horizontal_flip(images: jax.Array) -> jax.Array:
  """Mirror `[..., H, W, C]` images left-right."""
  return jnp.flip(images, axis=-2)


def random_flip(rng: jax.Array, images: jax.Array) -> jax.Array:
  """Flip each image of a `[B, H, W, C]` batch with probability 1/2 (training augmentation)."""
  flip = jax.random.bernoulli(rng, 0.5, (images.shape[0],) + (1,) * (images.ndim - 1))
  return jnp.where(flip, horizontal_flip(images), images)
