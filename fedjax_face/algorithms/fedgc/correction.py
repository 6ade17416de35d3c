"""FedGC's server step (Alg. 1 line 14): W <- W~ - lambda·eta·grad Reg(W~), dense or streamed.

The regularizer is `regularizer.flat_regularizer` (dense R x R logits, small R) or
`streamed.streamed_regularizer` (the same value and gradient in [block, block] tiles, optionally
sharded over a mesh axis). `implementation='auto'` streams above `pairwise.AUTO_STREAMED_ROWS`
rows.
"""

import jax

from fedjax_face.algorithms import pairwise
from fedjax_face.algorithms.fedgc import regularizer, streamed

def flat_gradient_correction(w, valid, holders, *, step_size: float,
                             implementation: str = 'dense', block_size: int | None = None,
                             mesh=None, axis_name: str = 'clients', **form_kwargs):
  """Alg. 1 line 14 on rows `w [R, d]`: w <- w - lambda·eta·grad Reg(w); padding rows unchanged.

  `form_kwargs` are the regularizer's (kind, form, scale, margin, reduction, self_gradient);
  `block_size`, `mesh` and `axis_name` are the streamed implementation's.
  """
  if pairwise.uses_streamed(implementation, w.shape[0]):
    grad = jax.grad(streamed.streamed_regularizer)(w, valid, holders, block_size=block_size,
                                                   mesh=mesh, axis_name=axis_name, **form_kwargs)
  else:
    if mesh is not None:
      raise ValueError('a mesh needs the blockwise implementation.')
    grad = jax.grad(regularizer.flat_regularizer)(w, valid, holders, **form_kwargs)
  return w - step_size * grad * valid[:, None]


def gradient_correction(class_embeddings, class_mask, *, step_size: float, **kwargs):
  """`flat_gradient_correction` on the per-client layout `[K, C_max, d]` (each slot owned by its
  client); padded slots stay zero."""
  num_clients, max_classes, dim = class_embeddings.shape
  out = flat_gradient_correction(
      class_embeddings.reshape(num_clients * max_classes, dim), class_mask.reshape(-1),
      pairwise.owners(class_mask), step_size=step_size, **kwargs)
  return out.reshape(class_embeddings.shape)
