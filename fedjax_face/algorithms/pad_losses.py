"""The FedGPAD paper's losses (Shao, Perera, Yuen, Patel, TNNLS), as pure functions of arrays.

Sums over a data center's samples in the paper; means here (the authors' code averages, and a
mean keeps the loss weights independent of the batch), over the valid samples of a padded batch
(`mask`). Labels: 1 = live, 0 = attack.

  Eq. 4  cls_loss    binary cross-entropy of the live logit (the paper prints the log-likelihood
                     without its minus sign; the loss minimised is its negative)
  Eq. 5  depth_loss  squared error of the estimated depth map against M (pseudo-depth for live,
                     zeros for attacks), mean over pixels
  Eq. 6  rec_loss    squared error of the reconstruction Dec(Z_I + Z_S) against the input
  Eq. 7  diff_loss   ||Z_I^T Z_S||_F^2 over the batch; each feature L2-normalised first and the
                     squares averaged over the d x d entries, as the authors' code does (the
                     paper's sum of raw features would grow with the feature scale)
  Eq. 8  total       weights `LOSS_WEIGHTS` (the authors' code: cls 1, depth 10, diff 1, rec 0.1)
"""

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays
from fedjax_face.models import heads

LOSS_WEIGHTS = {'cls': 1.0, 'depth': 10.0, 'diff': 1.0, 'rec': 0.1}


def cls_loss(logits: jax.Array, live: jax.Array, mask: jax.Array) -> jax.Array:
  """Eq. 4: -[y log C(Z_I) + (1 - y) log(1 - C(Z_I))], C = sigmoid of the logit."""
  y = live.astype(jnp.float32)
  per_sample = y * jax.nn.softplus(-logits) + (1.0 - y) * jax.nn.softplus(logits)
  return heads.masked_mean(per_sample, mask)


def depth_loss(depth: jax.Array, target: jax.Array, mask: jax.Array) -> jax.Array:
  """Eq. 5: mean over pixels of (Dep(Z_I) - M)^2, `target` resized to the estimate's size."""
  if target.shape[1:] != depth.shape[1:]:
    target = jax.image.resize(target, depth.shape, 'linear')
  return heads.masked_mean(jnp.mean(jnp.square(depth - target), axis=(1, 2)), mask)


def rec_loss(reconstruction: jax.Array, inputs: jax.Array, mask: jax.Array) -> jax.Array:
  """Eq. 6: mean over pixels and channels of (Dec(Z_I + Z_S) - x)^2."""
  return heads.masked_mean(jnp.mean(jnp.square(reconstruction - inputs), axis=(1, 2, 3)), mask)


def diff_loss(z_invariant: jax.Array, z_specific: jax.Array, mask: jax.Array) -> jax.Array:
  """Eq. 7: mean of the squared entries of Z_I^T Z_S `[d, d]` over the valid samples' L2-normalised
  features (zero when the two feature sets are orthogonal)."""
  keep = mask.astype(jnp.float32)[:, None]
  zi = arrays.l2_normalize(z_invariant) * keep
  zs = arrays.l2_normalize(z_specific) * keep
  return jnp.mean(jnp.square(zi.T @ zs))


def total_loss(outputs: dict, batch: dict, weights: dict = LOSS_WEIGHTS) -> tuple[jax.Array, dict]:
  """Eq. 8 (weighted): (total, the terms) for `PadNet` outputs and a batch of 'inputs' `[B, S, S,
  6]`, 'depth' maps, 'live' labels and 'mask'. Without the disentangled outputs (FedPAD on the
  Table II network) the terms are cls and depth; with the logit alone (FedPAD's ResNet-18), cls
  (the paper's Eq. 1)."""
  mask = batch['mask']
  terms = {'cls': cls_loss(outputs['logit'], batch['live'], mask)}
  if 'depth' in outputs:
    terms['depth'] = depth_loss(outputs['depth'], batch['depth'], mask)
  if 'reconstruction' in outputs:
    terms['rec'] = rec_loss(outputs['reconstruction'], batch['inputs'], mask)
    terms['diff'] = diff_loss(outputs['z_invariant'], outputs['z_specific'], mask)
  return sum(weights[k] * v for k, v in terms.items()), terms
