"""FedFR's loss terms (Liu et al., AAAI 2022), as pure functions of features and parameters.

  contrastive_loss   L_con, the model-contrastive term (Eq. 5)
  dfc_loss           L_BCE, the DFC branch's one-vs-all margin loss (Eq. 6) on f' = Pi(f)
  dfc_cosface_loss   Table 2's variant of the branch: CosFace over the local classes
  distillation_loss  Table 2's 'KD' local adaptation: T^2 KL to the global model's logits

L_cos (Eq. 1, 3) is `heads.loss` over [W_l ; Phi]; Eq. 7 weighs the terms (`algorithm.py`).
"""

import jax
import jax.numpy as jnp

from fedjax_face.core import arrays
from fedjax_face.models import heads


def contrastive_loss(features: jax.Array, global_features: jax.Array, prev_features: jax.Array,
                     temperature: float, sample_mask: jax.Array) -> jax.Array:
  """Eq. 5, averaged over the valid samples:
  -log(e^{sim(f, f_glob)/tau} / (e^{sim(f, f_glob)/tau} + e^{sim(f, f_prev)/tau}))."""
  f = arrays.l2_normalize(features.astype(jnp.float32))
  positive = jnp.sum(f * arrays.l2_normalize(global_features), axis=-1) / temperature
  negative = jnp.sum(f * arrays.l2_normalize(prev_features), axis=-1) / temperature
  per_sample = jnp.logaddexp(positive, negative) - positive
  return heads.masked_mean(per_sample, sample_mask)


def distillation_loss(student_logits: jax.Array, teacher_logits: jax.Array, temperature: float,
                      sample_mask: jax.Array) -> jax.Array:
  """T^2 KL(softmax(teacher / T) || softmax(student / T)), averaged over the valid samples (the
  'KD' local adaptation of Table 2; the teacher is the global model)."""
  teacher = jax.nn.log_softmax(teacher_logits / temperature)
  student = jax.nn.log_softmax(student_logits / temperature)
  per_sample = jnp.sum(jnp.exp(teacher) * (teacher - student), axis=-1) * temperature**2
  return heads.masked_mean(per_sample, sample_mask)


def dynamic_range(z: jax.Array, power: float) -> jax.Array:
  """g(z) = 2((z + 1)/2)^t - 1 (Eq. 6's g; maps [-1, 1] onto itself)."""
  return 2.0 * ((z + 1.0) / 2.0) ** power - 1.0


def dfc_transform(features: jax.Array, projection: dict) -> jax.Array:
  """f' = Pi(f) = f Pi + bias: the DFC branch's client-specific feature."""
  return features.astype(jnp.float32) @ projection['kernel'] + projection['bias']


def dfc_cosines(features: jax.Array, projection: dict, omega: jax.Array) -> jax.Array:
  """`[B, C]` cos theta_j between f' = Pi(f) and the rows of Omega."""
  return arrays.l2_normalize(dfc_transform(features, projection)) @ arrays.l2_normalize(omega).T


def dfc_loss(cos: jax.Array, bias: jax.Array, labels: jax.Array, is_local: jax.Array,
             class_mask: jax.Array, sample_mask: jax.Array, *, scale: float, margin: float,
             balance: float, power: float) -> jax.Array:
  """Eq. 6 summed over the client's classes, averaged over the valid samples:

      lambda/s' log(1 + exp(-(s'(g(cos_k) - m') + b_k)))                 (the sample's class k)
    + (1 - lambda)/s' sum_{j != k} log(1 + exp(s'(g(cos_j) + m') + b_j))   (every other class)

  A public image (`is_local` False) is a negative of every local class.
  """
  g = dynamic_range(cos, power)
  target = jax.nn.one_hot(labels, cos.shape[1], dtype=jnp.bool_) & is_local[:, None]
  positive = balance / scale * jax.nn.softplus(-(scale * (g - margin) + bias))
  negative = (1.0 - balance) / scale * jax.nn.softplus(scale * (g + margin) + bias)
  per_class = jnp.where(target, positive, negative) * class_mask[None, :]
  return heads.masked_mean(per_class.sum(axis=1), sample_mask)


def dfc_cosface_loss(cos: jax.Array, labels: jax.Array, is_local: jax.Array,
                     class_mask: jax.Array, sample_mask: jax.Array, *, scale: float,
                     margin: float) -> jax.Array:
  """Table 2's multi-class variant of the branch: CosFace s'(cos_k - m') over the client's
  classes, averaged over the valid local images (a public image belongs to none of them)."""
  target = jax.nn.one_hot(labels, cos.shape[1], dtype=jnp.bool_)
  logits = scale * jnp.where(target, cos - margin, cos)
  logits = jnp.where(class_mask[None, :], logits, heads.PAD_LOGIT)
  return heads.cross_entropy(logits, labels, sample_mask & is_local)
