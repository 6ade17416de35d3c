"""FedGC's server-side regularizers on the class-embedding matrix (Niu & Deng, AAAI 2022).

Softmax regularizer, Eq. 5:

    Reg(W) = sum_k sum_i -log( e^{W_ki^T W'_ki} / (e^{W_ki^T W'_ki} + sum_{z!=k} sum_j e^{W_zj^T W'_ki}) )

where (.)' means "no gradient". Row (k, i) is a softmax over its own embedding and every embedding
of every *other* client; the primed factor is the anchor W'_ki (stop-gradient), so the gradient
flows only into the un-primed embeddings:

    dReg/dW_zj = sum_{(k,i), k != z} p_{ki,zj} W_ki  +  (p_{zj,zj} - 1) W_zj           (Eq. 11 + self term)

with p_{ki,.} the row's softmax probabilities. That is what `jax.grad` of this function gives
(tests check it against the closed form).

General case (the paper's "Extend FedGC to More General Case"). Identities may be shared: an
identity l held by the client group K_l is averaged by the server and then regularised "only
against exclusive clients". Our reading: entry (r, c) of Eq. 5 is allowed iff r == c, or no client
holds both r and c -- i.e. c is a class that r never meets in any local softmax (Eq. 4), which is
exactly the cross-client term that local training lacks. The flat functions (`flat_*`) take the
rows `w [R, d]`, `valid [R]` and `holders`, either `[R, K]` bool (which clients hold each row) or
`[R]` int (the one owner of each row: the identity-exclusive shorthand, no R x K matrix). With one
holder per row the rule reduces to Eq. 5's "z != k". The `[K, C_max, d]` functions are wrappers
whose holders are the owner client of each slot.

Our reading of the paper's "minor modification" for CosFace / ArcFace (form='cosface'/'arcface'):
every logit becomes s·cos between the L2-normalised un-primed embedding and the normalised anchor,
and the margin is applied to the self term only, like the target logit of the loss: s(cos - m)
for CosFace, s·cos(theta + m) for ArcFace. Since cos(W_ki, W'_ki) = 1 at the current point, the
self term carries no gradient in those forms; the margin still lowers its probability and so
strengthens the push between cross-client embeddings.

Cosine regularizer, FedCos (kind='cosine'; the Remark after Eq. 13 and Table 4):

    Reg_cos(W) = sum_{(k,i)} sum_{(z,j) allowed, (z,j) != (k,i)} W_zj^T W'_ki,
    dReg_cos/dW_zj = sum of the anchors W'_ki that (z, j) is allowed against,

the paper's stated gradient ("sum_{z != k} W_ki"): an unweighted Eq. 11. With form='softmax' the
products are raw dot products as written; with 'cosface'/'arcface' they are cosines of the
L2-normalised embeddings (our reading, like the softmax regularizer's; scale and margin unused).
The self pair is excluded by definition, so `self_gradient` does not apply.

Reduction: Eq. 5 is a sum over every class, which we follow by default (`reduction='sum'`), so
lambda·eta is the step of each class embedding. A mean over classes (what a mean-reduced
cross-entropy would compute) divides that step by the number of classes C; the paper does not
say which its code used and its lambda = 20 depends on it, so `reduction='mean'` is offered as
the alternative reading (`config.fedgc.reg_reduction`). Both apply to both kinds.

Self term (softmax form): with W_ki un-primed in e^{W_ki^T W'_ki}, Eq. 5 gives W_ki the gradient
(p_ki,ki - 1) W'_ki, which grows ||W_ki|| by a factor up to (1 + lambda·eta) per round until the
row's softmax saturates. The paper's own gradient of its objective (Eq. 12) has no such term: there
W_{k,y_i} is moved by the local softmax only. Both readings are offered: `self_gradient=False`
(Eq. 12: the self logit is a constant, only the cross-client Eq. 11 gradients remain; the
default) and `True` (Eq. 5 with the prime semantics); `config.fedgc.reg_self_gradient`.

Why False is the default. Two textual facts: Eq. 12, the paper's gradient of its objective, has
no self term; and Table 2's text says a too large lambda "makes within-client class embeddings
collapse to one point", with an interior optimum at lambda = 20. Measured (docs/fedgc.md,
"The two readings of Eq. 5's self term, and the default"; `python -m fedjax_face.reproduce --table=fedgc10` and `fedgc11`, look-alike identities, seed
0), lambda = 1, 10, 20, 30, 50: without the self-gradient the mean cosine between a client's own
class embeddings goes -0.11, -0.07, 0.44, then the step turns unstable (lambda·eta > 2: norms
96 and 66,000 at 30 and 50), and LFW-like accuracy is 83.4, 83.8, 84.1, 54.5, 50.0: an optimum at
20 and a collapse beyond it, as in Table 2. With the self-gradient the within-client cosine
stays at -0.04 to -0.09 at every lambda while the norm grows (3.3, 3.8, 4.4, 5.1, 6.0; inf at 200)
and accuracy falls from lambda = 1 on (74.3 ... 65.6): it never collapses, it blows up, and it
has no interior optimum. So the reading whose behaviour the paper describes is Eq. 12's.

Size: this module builds the dense R x R logits (R = number of rows), so it is for small R. The
streamed version with the same value and gradient is `streamed.py`; `correction.py` applies the
server step with either.

Storage: W is `[K, C_max, d]` (client, local class, dim), the transpose of the paper's d x C.
"""

import jax
import jax.numpy as jnp

from fedjax_face.algorithms import pairwise
from fedjax_face.core import arrays
from fedjax_face.models import heads

FORMS = heads.CLASSIFIER_HEADS   # each form is a head's logits applied to the class embeddings
KINDS = ('softmax', 'cosine')
REDUCTIONS = ('sum', 'mean')


def check_options(*, kind: str = 'softmax', form: str = 'softmax', reduction: str = 'sum'):
  """Raises ValueError for an unknown regularizer kind, form or reduction."""
  if kind not in KINDS:
    raise ValueError(f'regularizer kind {kind!r}; expected one of {KINDS}.')
  if form not in FORMS:
    raise ValueError(f'regularizer form {form!r}; expected one of {FORMS}.')
  if reduction not in REDUCTIONS:
    raise ValueError(f'regularizer reduction {reduction!r}; expected one of {REDUCTIONS}.')


def self_cos(w):
  """cos(W_r, W'_r): exactly 1 (0 for an all-zero padding row), with no gradient.

  Not |W_r/||W_r|| |^2: its float32 rounding (1 - 1e-7) would go through ArcFace's
  sin = sqrt(1 - cos^2) ~ 5e-4 and move the self logit by s·sin·sin(m) ~ 0.015, differently
  under each compilation.
  """
  return jax.lax.stop_gradient((jnp.sum(w * w, axis=-1) > 0).astype(w.dtype))


def self_logit(cos, *, form: str, scale: float, margin: float):
  """The margined self term. Its gradient is exactly zero (cos(W, W') = 1 with W' = W), so it
  is computed without one; cos(theta + m) is expanded so theta = 0 needs no arccos."""
  cos = jax.lax.stop_gradient(cos)
  if form == 'cosface':
    return scale * (cos - margin)
  sin = jnp.sqrt(jnp.clip(1.0 - cos * cos, 0.0, 1.0))
  return scale * (cos * jnp.cos(margin) - sin * jnp.sin(margin))


def flat_regularizer_logits(w, valid, holders, *, form: str = 'softmax', scale: float = 64.0,
                            margin: float = 0.0, self_gradient: bool = True):
  """Dense `[R, R]` logits of Eq. 5 over rows `w [R, d]` and the mask each row sums over.

  Row r is an anchor (primed, stop-gradient), column c an un-primed embedding; the mask is
  `pairwise.allowed_mask(valid, holders)`.
  """
  check_options(form=form)
  eye = jnp.eye(w.shape[0], dtype=bool)
  if form == 'softmax':
    anchors = jax.lax.stop_gradient(w)
    logits = anchors @ w.T                      # [r, c] = W_c^T W'_r
    if not self_gradient:                       # Eq. 12's reading: the self term is a constant
      logits = jnp.where(eye, jax.lax.stop_gradient(logits), logits)
  else:
    self_term = self_logit(self_cos(w), form=form, scale=scale, margin=margin)
    w = arrays.l2_normalize(w)
    cos = jax.lax.stop_gradient(w) @ w.T
    logits = jnp.where(eye, self_term[:, None], scale * cos)
  return logits, pairwise.allowed_mask(valid, holders)


def regularizer_logits(class_embeddings, class_mask, *, form: str = 'softmax',
                       scale: float = 64.0, margin: float = 0.0, self_gradient: bool = True):
  """Dense `[R, R]` logits of Eq. 5 (R = K·C_max) and the mask of the entries each row sums over.

  Row r is an anchor (primed, stop-gradient), column c an un-primed embedding; entry (r, c) is
  allowed when both are real classes and c == r or c belongs to another client.
  """
  num_clients, max_classes, dim = class_embeddings.shape
  return flat_regularizer_logits(class_embeddings.reshape(num_clients * max_classes, dim),
                                 class_mask.reshape(-1), pairwise.owners(class_mask), form=form,
                                 scale=scale, margin=margin, self_gradient=self_gradient)


def reduce_rows(per_row, valid, reduction: str):
  """Sum of the real rows' terms (Eq. 5 as written), or their mean ('mean')."""
  total = jnp.sum(jnp.where(valid, per_row, 0.0))
  if reduction == 'mean':
    total = total / jnp.maximum(jnp.sum(valid), 1)
  return total


def flat_regularizer(w, valid, holders, *, kind: str = 'softmax', form: str = 'softmax',
                     scale: float = 64.0, margin: float = 0.0, reduction: str = 'sum',
                     self_gradient: bool = True):
  """Reg(W) of Eq. 5 (kind='softmax') or FedCos (kind='cosine') over rows `w [R, d]`; dense.

  Args:
    w: `[R, d]` class embeddings, one row per identity.
    valid: `[R]` bool, False for padding rows (no contribution, zero gradient).
    holders: `[R, K]` bool clients holding each row, or `[R]` int owner client (see module doc).
    kind, form, scale, margin, reduction, self_gradient: see the module docstring.
  """
  check_options(kind=kind, form=form, reduction=reduction)
  if kind == 'cosine':
    x = w if form == 'softmax' else arrays.l2_normalize(w)
    dots = jax.lax.stop_gradient(x) @ x.T       # [r, c] = W_c^T W'_r
    pairs = pairwise.allowed_mask(valid, holders) & ~jnp.eye(w.shape[0], dtype=bool)
    return reduce_rows(jnp.sum(jnp.where(pairs, dots, 0.0), -1), valid, reduction)
  logits, allowed = flat_regularizer_logits(w, valid, holders, form=form, scale=scale,
                                            margin=margin, self_gradient=self_gradient)
  masked = jnp.where(allowed, logits, pairwise.NEG)
  per_row = jax.nn.logsumexp(masked, axis=-1) - jnp.diagonal(logits)   # Eq. 5, one row
  return reduce_rows(per_row, valid, reduction)


def softmax_regularizer(class_embeddings, class_mask, *, kind: str = 'softmax',
                        form: str = 'softmax', scale: float = 64.0, margin: float = 0.0,
                        reduction: str = 'sum', self_gradient: bool = True):
  """Reg(W) of Eq. 5 over every real class of every client (dense; small C only).

  `reduction='sum'` is Eq. 5 as written; 'mean' divides by the number of real classes.
  `kind='cosine'` gives FedCos instead (module docstring).
  """
  num_clients, max_classes, dim = class_embeddings.shape
  return flat_regularizer(class_embeddings.reshape(num_clients * max_classes, dim),
                          class_mask.reshape(-1), pairwise.owners(class_mask), kind=kind, form=form,
                          scale=scale, margin=margin, reduction=reduction,
                          self_gradient=self_gradient)
