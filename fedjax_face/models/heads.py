"""Classification heads and losses over class embeddings: Softmax, CosFace and ArcFace, and the
positive-only losses of clients that hold one class (FedAwS / FedFace, FedUV).

Class embeddings are stored as a matrix `W` of shape `[C, d]` whose row `c` is the embedding
(proxy) of class `c`. The FedGC paper writes `W in R^{d x C}` (one column per class); we store its
transpose so that a client's classes are a contiguous slice of rows and `logits = x @ W.T`.

Heads (`kind`):
  'softmax': `W x`, raw dot products: no normalisation, bias, scale or margin (FedGC's "Softmax").
  'cosface': `s * (cos theta_j - m [j == y])` with L2-normalised features and class embeddings.
  'arcface': `s * cos(theta_y + m)` for the target class and `s * cos theta_j` otherwise, with a
    fallback for targets where `theta_y + m` would pass pi (see `ARCFACE_FALLBACKS`).
  'positive_cosine': `(max(0, m - cos theta_y))^2`, the target class only (FedAwS's cosine
    contrastive loss without its negative term; FedFace's client loss, m = 0.9).
  'positive_dot': `max(0, m - x . w_y)`, the target class only, raw dot product (FedUV's Eq. 4 with
    m = 1 and w_y = W'^T v_y / ||v_y||^2, see algorithms/feduv.py).
The positive kinds have no logits over classes: a client with one class has no negatives.

Classes may be padded to a fixed size (so that clients with different class counts can be stacked
and vmapped): `class_mask[c] == False` marks a padded class whose logit becomes `PAD_LOGIT`, a large
negative *finite* number. It contributes exactly 0 to the softmax normaliser in float32, yet avoids
the `0 * inf = NaN` traps of `-inf`. Labels must always index valid classes.
"""

import math
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import ml_collections

from fedjax_face.core import arrays
from fedjax_face.core.checks import UsageError, check_choice, check_fraction, check_number

CLASSIFIER_HEADS = ('softmax', 'cosface', 'arcface')     # logits over classes
POSITIVE_HEADS = ('positive_cosine', 'positive_dot')     # one class per client, no negatives
HEADS = CLASSIFIER_HEADS + POSITIVE_HEADS

# How ArcFace treats targets with theta_y + m > pi, where cos(theta_y + m) stops decreasing in
# theta_y (so the margin would *reward* moving away from the class). A string rather than
# insightface's `easy_margin` bool because there are three variants:
#   'classic': insightface's rule: if cos theta_y <= cos(pi - m) use the CosFace-like
#              `cos theta_y - m sin(pi - m)` instead (continuous at theta_y = pi - m).
#   'easy':    `easy_margin=True`: apply the margin only where cos theta_y > 0, else plain cos.
#   'none':    no fallback, always cos(theta_y + m) (modern arcface_torch behaviour;
#              docs/references.md, arcface-fallback).
ARCFACE_FALLBACKS = ('classic', 'easy', 'none')

# Per-kind defaults (FedGC paper settings): CosFace s=64 m=0.35, ArcFace s=64 m=0.5.
# Positive kinds: FedAwS's / FedFace's m = 0.9 on cosines; FedUV's hinge at 1 (no scale).
DEFAULT_SCALE = {'softmax': 1.0, 'cosface': 64.0, 'arcface': 64.0, 'positive_cosine': 1.0,
                 'positive_dot': 1.0}
DEFAULT_MARGIN = {'softmax': 0.0, 'cosface': 0.35, 'arcface': 0.5, 'positive_cosine': 0.9,
                  'positive_dot': 1.0}

# Logit of padded classes: exp(PAD_LOGIT - max) underflows to exactly 0 in float32.
PAD_LOGIT = -1e9

# Cosines are clipped to [-1 + eps, 1 - eps] before sqrt(1 - cos^2) so that the ArcFace gradient
# stays finite at cos = +-1. 1e-6 is a few float32 ulps below 1 (ulp(1) ~ 6e-8), where
# d/dc sqrt(1 - c^2) is ~ 700: large but finite.
_COS_EPS = 1e-6


def config_section() -> ml_collections.ConfigDict:
  """`config.head`: the loss over class embeddings, in the face recognition task's configs (an
  anti-spoofing detector has its own losses: algorithms/pad_losses.py)."""
  c = ml_collections.ConfigDict()
  c.loss = 'softmax'              # 'softmax' (W^T x) | 'cosface' | 'arcface' | positive-only:
                                  # 'positive_cosine' (FedAwS, FedFace) | 'positive_dot' (FedUV)
  c.scale = 64.0                  # s for cosface / arcface
  c.margin = -1.0                 # < 0: the paper's margin (CosFace 0.35, ArcFace 0.5)
  c.arcface_fallback = 'classic'  # 'classic' | 'easy' | 'none' (ARCFACE_FALLBACKS)
  c.init_std = 0.01               # class embeddings ~ N(0, std^2) (arcface_torch's init)
  # Partial FC (models/partial_fc.py): the share of class centers each step trains, positives
  # always in (arcface_torch's `sample_rate`); 1.0 = the full head, every center every step.
  c.sample_rate = 1.0
  return c


def check_config(config) -> None:
  """`config.head`'s fields (ValueError naming the first wrong one)."""
  check_choice('head.loss', config.head.loss, HEADS)
  check_choice('head.arcface_fallback', config.head.arcface_fallback, ARCFACE_FALLBACKS)
  check_number('head.init_std', config.head.init_std)
  _check_sample_rate(config)


# The methods whose head is one softmax over every class in one place, where Partial FC applies.
# A federated client's head holds its own classes only (tens to hundreds of rows: nothing to save),
# and a server step over the class matrix (FedGC's regularizer, FedAwS's spreadout, FedFV's
# equivalents) reads every row.
SAMPLED_HEAD_ALGORITHMS = ('centralized',)


def _check_sample_rate(config) -> None:
  """`head.sample_rate` in (0, 1]; below 1 only for a classifier head of a method in
  `SAMPLED_HEAD_ALGORITHMS` (one line naming the fields otherwise)."""
  rate = config.head.get('sample_rate', 1.0)
  check_fraction('head.sample_rate', rate)
  if rate == 1.0:
    return
  if config.head.loss not in CLASSIFIER_HEADS:
    raise UsageError(f'config.head.sample_rate={rate!r} with head.loss={config.head.loss!r}: a '
                     'positive-only loss has no negative centers to sample; expected '
                     'head.sample_rate=1.0.')
  algorithm = config.get('algorithm')
  if algorithm == 'fedgc':
    raise UsageError(f"config.head.sample_rate={rate!r} with algorithm='fedgc': FedGC's server "
                     'regularizer needs every class center each round; expected '
                     'head.sample_rate=1.0.')
  if algorithm not in SAMPLED_HEAD_ALGORITHMS:
    raise UsageError(f'config.head.sample_rate={rate!r} with algorithm={algorithm!r}: Partial FC '
                     'samples the centers of one head over every class, which only '
                     f"{' / '.join(map(repr, SAMPLED_HEAD_ALGORITHMS))} trains (a client head "
                     'holds its own classes); '
                     'expected head.sample_rate=1.0.')


def _check_kind(kind: str) -> None:
  if kind not in HEADS:
    raise ValueError(f'Unknown head kind {kind!r}; valid kinds: {list(HEADS)}')


def _arcface_target(cos: jax.Array, margin: float, fallback: str) -> jax.Array:
  """ArcFace target cosine `cos(theta + m)` with the chosen fallback, for cosines `cos`."""
  if fallback not in ARCFACE_FALLBACKS:
    raise ValueError(
        f'Unknown arcface_fallback {fallback!r}; valid values: {list(ARCFACE_FALLBACKS)}')
  cos = jnp.clip(cos, -1.0 + _COS_EPS, 1.0 - _COS_EPS)
  sin = jnp.sqrt(1.0 - cos * cos)  # theta in [0, pi], so sin theta >= 0.
  cos_theta_m = cos * math.cos(margin) - sin * math.sin(margin)
  if fallback == 'classic':
    th = math.cos(math.pi - margin)
    mm = math.sin(math.pi - margin) * margin
    return jnp.where(cos > th, cos_theta_m, cos - mm)
  if fallback == 'easy':
    return jnp.where(cos > 0, cos_theta_m, cos)
  return cos_theta_m


def logits(features: jax.Array,
           class_embeddings: jax.Array,
           labels: Optional[jax.Array],
           class_mask: Optional[jax.Array],
           *,
           kind: str,
           scale: float = 64.0,
           margin: float = 0.0,
           arcface_fallback: str = 'classic') -> jax.Array:
  """Class logits of a batch of embeddings.

  Args:
    features: `[B, d]` embeddings (unnormalised; normalised here for cosface / arcface).
    class_embeddings: `[C, d]` class embeddings, row c = class c (transpose of FedGC's W).
    labels: `[B]` int target classes in [0, C) (padding samples too: give them any valid class),
      which receive the margin; None applies no margin (inference / retrieval).
    class_mask: `[C]` bool, False for padded classes; None means all classes are valid.
    kind: one of `HEADS`.
    scale: s, for cosface / arcface (ignored by softmax). A Python float (static under jit).
    margin: m, for cosface / arcface (ignored by softmax). A Python float (static under jit).
    arcface_fallback: one of `ARCFACE_FALLBACKS` (arcface only).

  Returns:
    float32 `[B, C]` logits; padded classes get `PAD_LOGIT`.
  """
  _check_kind(kind)
  if kind in POSITIVE_HEADS:
    raise ValueError(f'head {kind!r} is positive-only: it has no logits over classes '
                     '(`positive_loss`).')
  features = features.astype(jnp.float32)
  class_embeddings = class_embeddings.astype(jnp.float32)
  num_classes = class_embeddings.shape[0]

  if kind == 'softmax':
    out = features @ class_embeddings.T
  else:
    cos = arrays.l2_normalize(features) @ arrays.l2_normalize(class_embeddings).T
    if labels is not None and margin != 0.0:
      is_target = jax.nn.one_hot(labels, num_classes, dtype=jnp.bool_)
      if kind == 'cosface':
        cos = jnp.where(is_target, cos - margin, cos)
      else:
        # Only the target column gets the (costlier, clipped) arccos treatment.
        target_cos = jnp.take_along_axis(cos, labels[:, None], axis=1)
        cos = jnp.where(is_target, _arcface_target(target_cos, margin, arcface_fallback), cos)
    out = scale * cos

  if class_mask is not None:
    out = jnp.where(class_mask[None, :], out, PAD_LOGIT)
  return out


def cross_entropy(logits: jax.Array,
                  labels: jax.Array,
                  sample_mask: Optional[jax.Array] = None) -> jax.Array:
  """Mean softmax cross-entropy over valid samples.

  Args:
    logits: `[B, C]`.
    labels: `[B]` int.
    sample_mask: `[B]` bool, False for padding samples; None means all are valid.

  Returns:
    Scalar: sum of the per-sample CE over valid samples / max(1, number of valid samples), so an
    all-padding batch gives 0 rather than NaN.
  """
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  per_sample = -jnp.take_along_axis(log_probs, labels[:, None], axis=1)[:, 0]
  return masked_mean(per_sample, sample_mask)


def loss(features: jax.Array,
         class_embeddings: jax.Array,
         labels: jax.Array,
         class_mask: Optional[jax.Array],
         sample_mask: Optional[jax.Array],
         **head_kwargs: Any) -> jax.Array:
  """`cross_entropy(logits(features, class_embeddings, labels, class_mask, **head_kwargs), ...)`.

  `head_kwargs` are the keyword arguments of `logits` (`kind`, `scale`, `margin`,
  `arcface_fallback`), typically from `head_kwargs_from_config`.
  """
  if head_kwargs['kind'] in POSITIVE_HEADS:
    return positive_loss(features, class_embeddings, labels, sample_mask, **head_kwargs)
  out = logits(features, class_embeddings, labels, class_mask, **head_kwargs)
  return cross_entropy(out, labels, sample_mask)


def masked_mean(per_sample: jax.Array, sample_mask: Optional[jax.Array]) -> jax.Array:
  """Mean over valid samples (0 for none); `where`, so a padding sample's NaN cannot leak in."""
  if sample_mask is None:
    return jnp.mean(per_sample)
  total = jnp.sum(jnp.where(sample_mask, per_sample, 0.0))
  return total / jnp.maximum(1.0, jnp.sum(sample_mask.astype(jnp.float32)))


def positive_loss(features: jax.Array, class_embeddings: jax.Array, labels: jax.Array,
                  sample_mask: Optional[jax.Array], *, kind: str, scale: float = 1.0,
                  margin: float = 0.9, **unused) -> jax.Array:
  """The positive-only losses: each sample pulled towards its own class embedding, nothing pushed.

  'positive_cosine': mean of `(max(0, m - cos(x, w_y)))^2`; 'positive_dot': mean of
  `max(0, m - scale · x . w_y)`. Over valid samples (`sample_mask`).
  """
  del unused
  features = features.astype(jnp.float32)
  target = class_embeddings.astype(jnp.float32)[labels]                # [B, d]: w_y
  if kind == 'positive_cosine':
    cos = jnp.sum(arrays.l2_normalize(features) * arrays.l2_normalize(target), axis=-1)
    per_sample = jnp.square(jnp.maximum(0.0, margin - cos))
  elif kind == 'positive_dot':
    per_sample = jnp.maximum(0.0, margin - scale * jnp.sum(features * target, axis=-1))
  else:
    raise ValueError(f'{kind!r} is not a positive-only head; expected one of {POSITIVE_HEADS}.')
  return masked_mean(per_sample, sample_mask)


def head_kwargs_from_config(config: Any) -> Dict[str, Any]:
  """Keyword arguments for `logits` / `loss` from a head config.

  Args:
    config: ConfigDict (or similar) with `loss` (one of `HEADS`) and optional `scale`, `margin`,
      `arcface_fallback`; an absent or None field takes the per-kind default (FedGC paper:
      CosFace s=64 m=0.35, ArcFace s=64 m=0.5; fallback 'classic').

  Returns:
    `{'kind', 'scale', 'margin'}`, plus `'arcface_fallback'` for arcface.
  """
  def get(field):
    return config.get(field, None) if hasattr(config, 'get') else getattr(config, field, None)

  kind = get('loss')
  _check_kind(kind)
  scale, margin = get('scale'), get('margin')
  kwargs = {
      'kind': kind,
      'scale': float(DEFAULT_SCALE[kind] if scale is None else scale),
      'margin': float(DEFAULT_MARGIN[kind] if margin is None else margin),
  }
  if kind == 'arcface':
    fallback = get('arcface_fallback') or 'classic'
    if fallback not in ARCFACE_FALLBACKS:
      raise ValueError(
          f'Unknown arcface_fallback {fallback!r}; valid values: {list(ARCFACE_FALLBACKS)}')
    kwargs['arcface_fallback'] = fallback
  return kwargs


def init_class_embeddings(rng: jax.Array, num_classes: int, dim: int, kind: str,
                          std: float = 0.01) -> jax.Array:
  """Initial class embeddings `[num_classes, dim]`, float32.

  N(0, std^2) for every kind; the default 0.01 is the init of arcface_torch's PartialFC class
  centres (`config.head.init_std`; PyTorch's default nn.Linear init would be ~1/sqrt(3d)). For 'softmax'
  (an unnormalised, bias-free linear layer) the small std keeps initial logits near 0, i.e. a
  near-uniform initial prediction; for cosface / arcface only the directions matter (rows are
  normalised), and i.i.d. Gaussian rows give isotropic random directions whatever the std.
  """
  _check_kind(kind)
  return std * arrays.drawn_flat(jax.random.normal, rng, (num_classes, dim), dtype=jnp.float32)
