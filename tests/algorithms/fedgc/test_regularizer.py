"""FedGC's softmax regularizer (Eq. 5): value and gradients against the paper's closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.algorithms import pairwise
from fedjax_face.algorithms.fedgc import correction, regularizer


def _random_case(seed=0, num_clients=3, max_classes=3, dim=4):
  rng = np.random.default_rng(seed)
  w = rng.normal(size=(num_clients, max_classes, dim)).astype(np.float64)
  mask = np.ones((num_clients, max_classes), bool)
  mask[1, 2] = False            # client 1 has two classes; its third slot is padding
  w[1, 2] = 0.0
  return w, mask


def _rows(w, mask):
  """Flattened real classes: (embedding, owner client) in order."""
  return [(w[k, i], k) for k in range(w.shape[0]) for i in range(w.shape[1]) if mask[k, i]]


def test_value_equals_eq5_written_out():
  w, mask = _random_case()
  rows = _rows(w, mask)
  expected = 0.0
  for a, (w_ki, k) in enumerate(rows):
    self_term = np.exp(w_ki @ w_ki)
    cross = sum(np.exp(w_zj @ w_ki) for w_zj, z in rows if z != k)
    expected += -np.log(self_term / (self_term + cross))
  with jax.enable_x64(True):
    got = regularizer.softmax_regularizer(jnp.asarray(w), jnp.asarray(mask))
  np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_gradient_equals_closed_form_eq11_plus_self_term():
  """dReg/dW_zj = sum_{(k,i): k != z} p_{ki,zj} W_ki (Eq. 11) + (p_{zj,zj} - 1) W_zj (self term)."""
  w, mask = _random_case(seed=1)
  rows = _rows(w, mask)
  n = len(rows)   # p[r, c]: row r's softmax over its own and every other client's embedding
  p = np.zeros((n, n))
  for r, (w_r, k) in enumerate(rows):
    logits = np.full(n, -np.inf)
    for c, (w_c, z) in enumerate(rows):
      if z != k or c == r:
        logits[c] = w_c @ w_r
    e = np.exp(logits - logits.max())
    p[r] = e / e.sum()
  expected = []
  for c, (w_c, z) in enumerate(rows):
    eq11 = sum(p[r, c] * rows[r][0] for r in range(n) if rows[r][1] != z)
    self_term = (p[c, c] - 1.0) * w_c
    expected.append(eq11 + self_term)
  with jax.enable_x64(True):
    grad = jax.grad(regularizer.softmax_regularizer)(jnp.asarray(w), jnp.asarray(mask))
  got = [np.asarray(grad[k, i]) for k in range(w.shape[0]) for i in range(w.shape[1]) if mask[k, i]]
  np.testing.assert_allclose(np.stack(got), np.stack(expected), rtol=1e-9, atol=1e-12)
  np.testing.assert_array_equal(grad[1, 2], 0.0)   # padding slot gets no gradient


def test_within_client_pairs_are_not_pushed_apart():
  """Eq. 5 sums only over other clients: two classes of one client feel no mutual gradient."""
  w = np.zeros((2, 2, 3))
  w[0, 0] = [1.0, 0.0, 0.0]
  w[0, 1] = [0.9, 0.1, 0.0]    # almost the same direction, same client
  w[1, 0] = [0.0, 0.0, 1.0]
  mask = np.array([[True, True], [True, False]])
  grad = jax.grad(regularizer.softmax_regularizer)(jnp.asarray(w, jnp.float32), jnp.asarray(mask))
  # With only one other-client embedding orthogonal to both, each row's softmax is over
  # {self, w_10}; the gradient of w_00 involves only w_00 itself (self term) and w_10.
  p_self = np.exp(1.0) / (np.exp(1.0) + np.exp(0.0))
  p_cross_from_10 = 1.0 / (np.exp(1.0) + 2.0)   # row (1,0): self 1, w_00.w_10 = w_01.w_10 = 0
  expected_00 = (p_self - 1.0) * w[0, 0] + p_cross_from_10 * w[1, 0]
  np.testing.assert_allclose(grad[0, 0], expected_00, rtol=1e-5)


@pytest.mark.parametrize('form', ['cosface', 'arcface'])
def test_normalised_forms_self_term_has_no_gradient(form):
  """In the CosFace / ArcFace forms cos(W_ki, W'_ki) = 1: only cross-client terms move W."""
  w = np.zeros((2, 1, 2), np.float32)
  w[0, 0] = [1.0, 0.0]
  w[1, 0] = [0.0, 2.0]      # orthogonal: the cross-client gradient is along the tangent
  mask = np.ones((2, 1), bool)
  s, m = 4.0, 0.3
  grad = jax.grad(regularizer.softmax_regularizer)(jnp.asarray(w), jnp.asarray(mask), form=form,
                                                   scale=s, margin=m)
  self_logit = s * (1.0 - m) if form == 'cosface' else s * np.cos(m)
  p_cross = np.exp(0.0) / (np.exp(self_logit) + np.exp(0.0))   # cos = 0 across clients
  # d/dw_00 of s·cos(w_00, anchor_10) = s (I - u u^T) a / |w_00| with u = w_00/|w_00|, a = (0, 1).
  np.testing.assert_allclose(grad[0, 0], [0.0, p_cross * s], rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(grad[1, 0], [p_cross * s / 2.0, 0.0], rtol=1e-4, atol=1e-6)


def test_gradient_correction_is_one_sgd_step_and_keeps_padding_zero():
  w, mask = _random_case(seed=2)
  w = jnp.asarray(w, jnp.float32)
  grad = jax.grad(regularizer.softmax_regularizer)(w, jnp.asarray(mask))
  out = correction.gradient_correction(w, jnp.asarray(mask), step_size=2.0)
  np.testing.assert_allclose(out, w - 2.0 * grad, rtol=1e-6)
  np.testing.assert_array_equal(out[1, 2], 0.0)


def test_unknown_form_is_rejected():
  with pytest.raises(ValueError, match='expected one of'):
    regularizer.softmax_regularizer(jnp.zeros((2, 1, 2)), jnp.ones((2, 1), bool), form='cosine')


def test_mean_reduction_divides_by_the_number_of_real_classes():
  w, mask = _random_case(seed=3)
  w = jnp.asarray(w, jnp.float32)
  total = regularizer.softmax_regularizer(w, jnp.asarray(mask))
  mean = regularizer.softmax_regularizer(w, jnp.asarray(mask), reduction='mean')
  np.testing.assert_allclose(mean, total / mask.sum(), rtol=1e-6)   # 8 real classes
  with pytest.raises(ValueError, match=r"reduction 'max'; expected one of \('sum', 'mean'\)"):
    regularizer.softmax_regularizer(w, jnp.asarray(mask), reduction='max')


# --- General case (shared identities) and FedCos ---------------------------------------------

# Hand-made 3-client example: identity -> holders. b is shared by clients 0 and 1, e by 1 and 2;
# row 5 is padding.
_HOLDERS_3 = np.array([[1, 0, 0],    # a
                       [1, 1, 0],    # b
                       [0, 1, 0],    # c
                       [0, 0, 1],    # d
                       [0, 1, 1],    # e
                       [0, 0, 0]],   # padding
                      bool)
_VALID_3 = np.array([True, True, True, True, True, False])


def test_general_case_mask_on_three_clients():
  """(r, c) allowed iff r == c or no client holds both (r never meets c in a local softmax)."""
  expected = np.array([
      # a  b  c  d  e  pad
      [1, 0, 1, 1, 1, 0],   # a {0}: b shares client 0
      [0, 1, 0, 1, 0, 0],   # b {0,1}: a (0), c (1), e (1) share a client; only d is exclusive
      [1, 0, 1, 1, 0, 0],   # c {1}
      [1, 1, 1, 1, 0, 0],   # d {2}: e shares client 2
      [1, 0, 0, 0, 1, 0],   # e {1,2}: only a is exclusive
      [0, 0, 0, 0, 0, 0],   # padding: nothing, not even itself
  ], bool)
  got = pairwise.allowed_mask(jnp.asarray(_VALID_3), jnp.asarray(_HOLDERS_3))
  np.testing.assert_array_equal(got, expected)


def test_owner_shorthand_and_wrapper_equal_the_one_hot_holders():
  w, mask = _random_case(seed=4)
  owner = np.repeat(np.arange(3), 3)
  flat = (jnp.asarray(w.reshape(9, 4), jnp.float32), jnp.asarray(mask.reshape(-1)))
  one_hot = jnp.asarray(np.eye(3, dtype=bool)[owner])
  np.testing.assert_array_equal(pairwise.allowed_mask(flat[1], jnp.asarray(owner)),
                                pairwise.allowed_mask(flat[1], one_hot))
  _, allowed = regularizer.regularizer_logits(jnp.asarray(w), jnp.asarray(mask))
  np.testing.assert_array_equal(allowed, pairwise.allowed_mask(flat[1], one_hot))
  for kind in regularizer.KINDS:
    wrapped = regularizer.softmax_regularizer(jnp.asarray(w, jnp.float32), jnp.asarray(mask),
                                               kind=kind)
    np.testing.assert_allclose(regularizer.flat_regularizer(*flat, one_hot, kind=kind), wrapped,
                               rtol=1e-6)
    np.testing.assert_allclose(regularizer.flat_regularizer(*flat, jnp.asarray(owner),
                                                             kind=kind), wrapped, rtol=1e-6)


def test_general_case_value_written_out():
  """Eq. 5 row by row with the general mask: b's softmax is over {b, d} only."""
  w = np.random.default_rng(5).normal(size=(6, 3))
  valid = _VALID_3
  allowed = [[0, 2, 3, 4], [1, 3], [0, 2, 3], [0, 1, 2, 3], [0, 4]]   # from the mask above
  expected = sum(-np.log(np.exp(w[r] @ w[r]) / sum(np.exp(w[c] @ w[r]) for c in cols))
                 for r, cols in enumerate(allowed))
  with jax.enable_x64(True):
    got = regularizer.flat_regularizer(jnp.asarray(w), jnp.asarray(valid),
                                        jnp.asarray(_HOLDERS_3))
  np.testing.assert_allclose(got, expected, rtol=1e-10)


def cosine_closed_form(w, valid, holders, reduction='sum'):
  """FedCos by hand: dReg/dW_c = sum of the anchors W_r with (r, c) allowed, r != c."""
  n = len(w)
  weight = valid / max(valid.sum(), 1) if reduction == 'mean' else valid.astype(float)
  value, grad = 0.0, np.zeros_like(w)
  for r in range(n):
    for c in range(n):
      if r != c and valid[r] and valid[c] and not np.any(holders[r] & holders[c]):
        value += weight[r] * (w[c] @ w[r])
        grad[c] += weight[r] * w[r]
  return value, grad


def _shared_case(seed=6, n=11, num_clients=4):
  """Rows held by 1-3 clients (pairs sharing two clients), one held by nobody, two padding."""
  rng = np.random.default_rng(seed)
  holders = rng.random((n, num_clients)) < 0.35
  holders[np.arange(n), rng.integers(0, num_clients, n)] = True
  holders[0] = [True, True, False, False]
  holders[1] = [True, True, True, False]    # shares clients 0 and 1 with row 0
  holders[2] = False                        # a valid row that no client holds
  valid = np.ones(n, bool)
  valid[[4, 9]] = False
  return rng.normal(size=(n, 3)), valid, holders


@pytest.mark.parametrize('reduction', regularizer.REDUCTIONS)
def test_cosine_regularizer_gradient_is_the_sum_of_allowed_anchors(reduction):
  w, valid, holders = _shared_case()
  value, grad = cosine_closed_form(w, valid, holders, reduction)
  with jax.enable_x64(True):
    got_value, got_grad = jax.value_and_grad(regularizer.flat_regularizer)(
        jnp.asarray(w), jnp.asarray(valid), jnp.asarray(holders), kind='cosine',
        reduction=reduction)
  np.testing.assert_allclose(got_value, value, rtol=1e-10)
  np.testing.assert_allclose(got_grad, grad, rtol=1e-10, atol=1e-12)
  np.testing.assert_array_equal(got_grad[~valid], 0.0)


def test_cosine_kind_in_gradient_correction_and_bad_kind_rejected():
  w, mask = _random_case(seed=7)
  rows = _rows(w, mask)
  out = correction.gradient_correction(jnp.asarray(w, jnp.float32), jnp.asarray(mask),
                                         step_size=0.5, kind='cosine')
  # Identity-exclusive: each class moves against the sum of every other client's embeddings.
  expected = [w_ki - 0.5 * sum(w_zj for w_zj, z in rows if z != k) for w_ki, k in rows]
  got = [out[k, i] for k in range(3) for i in range(3) if mask[k, i]]
  np.testing.assert_allclose(np.stack(got), np.stack(expected), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(out[1, 2], 0.0)
  with pytest.raises(ValueError, match=r"kind 'cos'; expected one of \('softmax', 'cosine'\)"):
    regularizer.softmax_regularizer(jnp.asarray(w), jnp.asarray(mask), kind='cos')


def test_arcface_self_term_uses_the_exact_cosine_one():
  """The self cosine is 1, not |u|^2 = 0.9999999 in float32 (which, through ArcFace's
  sqrt(1 - cos^2), moved the self logit by ~1e-3 here)."""
  rng = np.random.default_rng(0)
  w = rng.normal(size=(2, 1, 8)).astype(np.float32)
  w[1] = w[0] + 0.5 * rng.normal(size=(1, 8))
  u = w.reshape(2, 8).astype(np.float64)
  u /= np.linalg.norm(u, axis=1, keepdims=True)
  s, m = 16.0, 0.5
  self_logit, cross = s * np.cos(m), s * (u[0] @ u[1])
  expected = 2 * (np.log(np.exp(self_logit) + np.exp(cross)) - self_logit)
  got = regularizer.softmax_regularizer(jnp.asarray(w), jnp.ones((2, 1), bool), form='arcface',
                                         scale=s, margin=m)
  np.testing.assert_allclose(got, expected, rtol=1e-5)
