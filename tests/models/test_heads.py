"""Tests for fedjax_face.models.heads: logits against hand-computed values, masking, gradients."""

import math

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_face.models import heads


def _unit(angle):
  return [math.cos(angle), math.sin(angle)]


# One feature along +x, three unit class embeddings at known angles from it.
ANGLES = (0.3, 2.0, 2.9)
FEATURE = jnp.array([[1.0, 0.0]])
CLASSES = jnp.array([_unit(a) for a in ANGLES])
COS = np.cos(ANGLES)


def test_softmax_is_raw_dot_product():
  features = jnp.array([[2.0, 1.0], [-1.0, 3.0]])
  classes = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
  out = heads.logits(features, classes, jnp.array([0, 2]), None, kind='softmax', scale=64.0,
                     margin=0.5)
  np.testing.assert_allclose(out, [[2.0, 1.0, 3.0], [-1.0, 3.0, 2.0]], rtol=1e-6)


def test_cosface_margin_on_target_only():
  s, m = 64.0, 0.35
  # Unnormalised inputs: the head normalises them.
  out = heads.logits(3.0 * FEATURE, 0.5 * CLASSES, jnp.array([1]), None, kind='cosface', scale=s,
                     margin=m)
  np.testing.assert_allclose(out[0], s * (COS - m * np.array([0, 1, 0])), rtol=1e-5, atol=1e-4)
  # No labels -> no margin (inference).
  out = heads.logits(FEATURE, CLASSES, None, None, kind='cosface', scale=s, margin=m)
  np.testing.assert_allclose(out[0], s * COS, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize('fallback', heads.ARCFACE_FALLBACKS)
def test_arcface_target_within_pi(fallback):
  # theta_y = 0.3, theta_y + m = 0.8 < pi - m: every rule gives s cos(theta_y + m).
  s, m = 64.0, 0.5
  out = heads.logits(FEATURE, CLASSES, jnp.array([0]), None, kind='arcface', scale=s, margin=m,
                     arcface_fallback=fallback)
  expected = s * np.array([math.cos(0.3 + m), COS[1], COS[2]])
  np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize('label,fallback,target', [
    # theta_y = 2.0: cos = -0.416 > cos(pi - m) = -0.878, but cos < 0.
    (1, 'classic', math.cos(2.5)),
    (1, 'easy', math.cos(2.0)),
    (1, 'none', math.cos(2.5)),
    # theta_y = 2.9: theta_y + m = 3.4 > pi, cos = -0.971 < cos(pi - m).
    (2, 'classic', math.cos(2.9) - math.sin(math.pi - 0.5) * 0.5),
    (2, 'easy', math.cos(2.9)),
    (2, 'none', math.cos(3.4)),
])
def test_arcface_fallbacks(label, fallback, target):
  s, m = 64.0, 0.5
  out = heads.logits(FEATURE, CLASSES, jnp.array([label]), None, kind='arcface', scale=s,
                     margin=m, arcface_fallback=fallback)
  expected = s * COS
  expected[label] = s * target
  np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-4)


def test_unknown_kind_and_fallback():
  with pytest.raises(ValueError, match='softmax.*cosface.*arcface'):
    heads.logits(FEATURE, CLASSES, None, None, kind='sphereface')
  with pytest.raises(ValueError, match='classic'):
    heads.logits(FEATURE, CLASSES, jnp.array([0]), None, kind='arcface', margin=0.5,
                 arcface_fallback='bogus')


@pytest.mark.parametrize('kind', heads.CLASSIFIER_HEADS)
def test_padded_classes_never_win_and_do_not_change_loss(kind):
  rng = np.random.default_rng(0)
  features = jnp.asarray(rng.normal(size=(5, 4)), jnp.float32)
  classes = jnp.asarray(rng.normal(size=(3, 4)), jnp.float32)
  labels = jnp.array([0, 1, 2, 1, 0])
  kwargs = dict(kind=kind, scale=16.0, margin=0.3)
  base = heads.loss(features, classes, labels, None, None, **kwargs)

  # Padded class equal to the features themselves (the best possible match) plus a zero row.
  padded = jnp.concatenate([classes, 100.0 * features[:1], jnp.zeros((1, 4))], axis=0)
  mask = jnp.array([True, True, True, False, False])
  out = heads.logits(features, padded, labels, mask, **kwargs)
  assert np.all(np.asarray(jnp.argmax(out, axis=1)) < 3)
  np.testing.assert_array_equal(out[:, 3:], heads.PAD_LOGIT)
  with_pad = heads.loss(features, padded, labels, mask, None, **kwargs)
  np.testing.assert_allclose(with_pad, base, rtol=1e-6, atol=1e-6)

  # Padded rows get exactly zero gradient, and all gradients are finite.
  grad = jax.grad(heads.loss, argnums=1)(features, padded, labels, mask, None, **kwargs)
  assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(grad[3:], 0.0)


def test_cross_entropy_sample_mask_equals_subset():
  rng = np.random.default_rng(1)
  logits = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
  labels = jnp.array([0, 3, 1, 2, 2, 0])
  mask = jnp.array([True, False, True, True, False, True])
  keep = np.flatnonzero(mask)
  masked = heads.cross_entropy(logits, labels, mask)
  subset = heads.cross_entropy(logits[keep], labels[keep])
  np.testing.assert_allclose(masked, subset, rtol=1e-6)
  # Hand-computed mean CE on the subset.
  log_probs = np.asarray(jax.nn.log_softmax(logits[keep]))
  expected = -np.mean(log_probs[np.arange(len(keep)), np.asarray(labels)[keep]])
  np.testing.assert_allclose(masked, expected, rtol=1e-6)
  # Masked samples may hold NaN logits without leaking into the loss; all-masked -> 0.
  nan_logits = logits.at[1].set(jnp.nan)
  np.testing.assert_allclose(heads.cross_entropy(nan_logits, labels, mask), subset, rtol=1e-6)
  assert heads.cross_entropy(logits, labels, jnp.zeros(6, bool)) == 0.0


@pytest.mark.parametrize('kind,fallback', [
    ('softmax', 'classic'), ('cosface', 'classic'), ('arcface', 'classic'), ('arcface', 'easy'),
    ('arcface', 'none')])
def test_gradients_finite_at_cos_plus_minus_one(kind, fallback):
  classes = jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
  # Sample 0 sits exactly on its class (cos = 1), sample 1 exactly opposite (cos = -1).
  features = jnp.array([[2.0, 0.0], [2.0, 0.0]])
  labels = jnp.array([0, 2])
  kwargs = dict(kind=kind, scale=64.0, margin=0.5)
  if kind == 'arcface':
    kwargs['arcface_fallback'] = fallback
  value, grads = jax.value_and_grad(heads.loss, argnums=(0, 1))(
      features, classes, labels, None, None, **kwargs)
  assert np.isfinite(value)
  for g in grads:
    assert np.all(np.isfinite(g))


def test_head_kwargs_from_config_defaults():
  cfg = ml_collections.ConfigDict({'loss': 'cosface', 'scale': None, 'margin': None,
                                   'arcface_fallback': None})
  assert heads.head_kwargs_from_config(cfg) == {'kind': 'cosface', 'scale': 64.0, 'margin': 0.35}
  cfg.loss = 'arcface'
  assert heads.head_kwargs_from_config(cfg) == {
      'kind': 'arcface', 'scale': 64.0, 'margin': 0.5, 'arcface_fallback': 'classic'}
  cfg.margin, cfg.arcface_fallback = 0.3, 'none'
  assert heads.head_kwargs_from_config(cfg)['margin'] == 0.3
  assert heads.head_kwargs_from_config(cfg)['arcface_fallback'] == 'none'
  with pytest.raises(ValueError, match='softmax'):
    heads.head_kwargs_from_config(ml_collections.ConfigDict({'loss': 'nope'}))


@pytest.mark.parametrize('kind', heads.HEADS)
def test_init_class_embeddings(kind):
  # An 'rbg' key compiles much faster on CPU than the default threefry.
  w = heads.init_class_embeddings(jax.random.key(0, impl='rbg'), 1000, 16, kind)
  assert w.shape == (1000, 16) and w.dtype == jnp.float32
  assert abs(float(jnp.std(w)) - 0.01) < 1e-3
