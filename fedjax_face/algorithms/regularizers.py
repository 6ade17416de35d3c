"""FedGC's server-side regularizers on the class-embedding matrix (Niu & Deng, AAAI 2022).

Softmax regularizer, Eq. 5:

    Reg(W) = sum_k sum_i -log( e^{W_ki^T W'_ki} / (e^{W_ki^T W'_ki} + sum_{z!=k} sum_j e^{W_zj^T W'_ki}) )

where (.)' means "no gradient". Row (k, i) is a softmax over its own embedding and every embedding
of every *other* client; the primed factor is the anchor W'_ki (stop-gradient), so the gradient
flows only into the un-primed embeddings:

    dReg/dW_zj = sum_{(k,i), k != z} p_{ki,zj} W_ki  +  (p_{zj,zj} - 1) W_zj           (Eq. 11 + self term)

with p_{ki,.} the row's softmax probabilities. That is what `jax.grad` of this function gives
(tests check it against the closed form).

Our reading of the paper's "minor modification" for CosFace / ArcFace (form='cosface'/'arcface'):
every logit becomes s·cos between the L2-normalised un-primed embedding and the normalised anchor,
and the margin is applied to the self term only, like the target logit of the loss: s(cos - m)
for CosFace, s·cos(theta + m) for ArcFace. Since cos(W_ki, W'_ki) = 1 at the current point, the
self term carries no gradient in those forms; the margin still lowers its probability and so
strengthens the push between cross-client embeddings.

Reduction: Eq. 5 is a sum over every class, which we follow by default (`reduction='sum'`), so
lambda·eta is the step of each class embedding. A mean over classes (what a mean-reduced
cross-entropy would compute) divides that step by the number of classes C; the paper does not
say which its code used and its lambda = 20 depends on it, so `reduction='mean'` is offered as
the alternative reading (`config.fedgc.reg_reduction`).

Storage: W is `[K, C_max, d]` (client, local class, dim), the transpose of the paper's d x C.
"""

import jax
import jax.numpy as jnp

FORMS = ('softmax', 'cosface', 'arcface')
REDUCTIONS = ('sum', 'mean')
_NEG = -1e9  # finite "minus infinity" so masked entries never produce 0 * inf


def _l2_normalize(x, eps: float = 1e-12):
  return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), eps))


def _self_logit(cos, *, form: str, scale: float, margin: float):
  """The margined self term. Its gradient is exactly zero (cos(W, W') = 1 with W' = W), so it
  is computed without one; cos(theta + m) is expanded so theta = 0 needs no arccos."""
  cos = jax.lax.stop_gradient(cos)
  if form == 'cosface':
    return scale * (cos - margin)
  sin = jnp.sqrt(jnp.clip(1.0 - cos * cos, 0.0, 1.0))
  return scale * (cos * jnp.cos(margin) - sin * jnp.sin(margin))


def regularizer_logits(class_embeddings, class_mask, *, form: str = 'softmax',
                       scale: float = 64.0, margin: float = 0.0):
  """Dense `[R, R]` logits of Eq. 5 (R = K·C_max) and the mask of the entries each row sums over.

  Row r is an anchor (primed, stop-gradient), column c an un-primed embedding; entry (r, c) is
  allowed when both are real classes and c == r or c belongs to another client.
  """
  if form not in FORMS:
    raise ValueError(f'regularizer form {form!r}; expected one of {FORMS}.')
  num_clients, max_classes, dim = class_embeddings.shape
  w = class_embeddings.reshape(num_clients * max_classes, dim)
  valid = class_mask.reshape(-1)
  owner = jnp.repeat(jnp.arange(num_clients), max_classes)
  if form == 'softmax':
    anchors = jax.lax.stop_gradient(w)
    logits = anchors @ w.T                      # [r, c] = W_c^T W'_r
  else:
    w = _l2_normalize(w)
    anchors = jax.lax.stop_gradient(w)
    cos = anchors @ w.T
    diag = jnp.eye(len(w), dtype=bool)
    self_logit = _self_logit(jnp.sum(anchors * w, -1), form=form, scale=scale, margin=margin)
    logits = jnp.where(diag, self_logit[:, None], scale * cos)
  eye = jnp.eye(len(w), dtype=bool)
  allowed = valid[:, None] & valid[None, :] & ((owner[:, None] != owner[None, :]) | eye)
  return logits, allowed


def softmax_regularizer(class_embeddings, class_mask, *, form: str = 'softmax',
                        scale: float = 64.0, margin: float = 0.0, reduction: str = 'sum'):
  """Reg(W) of Eq. 5 over every real class of every client (dense; small C only).

  `reduction='sum'` is Eq. 5 as written; 'mean' divides by the number of real classes.
  """
  if reduction not in REDUCTIONS:
    raise ValueError(f'regularizer reduction {reduction!r}; expected one of {REDUCTIONS}.')
  logits, allowed = regularizer_logits(class_embeddings, class_mask, form=form, scale=scale,
                                       margin=margin)
  masked = jnp.where(allowed, logits, _NEG)
  per_row = jax.nn.logsumexp(masked, axis=-1) - jnp.diagonal(logits)   # Eq. 5, one row
  total = jnp.sum(jnp.where(class_mask.reshape(-1), per_row, 0.0))
  if reduction == 'mean':
    total = total / jnp.maximum(jnp.sum(class_mask), 1)
  return total


def gradient_correction(class_embeddings, class_mask, *, step_size: float, **form_kwargs):
  """FedGC Alg. 1 line 14: W <- W~ - lambda·eta·grad Reg(W~); padded rows stay zero."""
  grad = jax.grad(softmax_regularizer)(class_embeddings, class_mask, **form_kwargs)
  return class_embeddings - step_size * grad * class_mask[..., None]
