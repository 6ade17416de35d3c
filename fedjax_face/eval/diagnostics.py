"""Class-embedding diagnostics (FedGC paper, Fig. 3(c)(d)).

In federated face recognition every client trains the classifier rows ("class embeddings") of its
own identities only. Without a cross-client term (FedPE-style training) nothing pushes a client's
class embeddings away from other clients', so cross-client cosine similarities stay high while
within-client ones are driven apart by the softmax; FedGC's correction closes that gap. The two
similarity distributions computed here are what the paper's histograms compare.
"""

from typing import Any

import numpy as np

from fedjax_face.algorithms import class_tables
from fedjax_face.core import arrays
from fedjax_face.eval import EvalOutput, Evaluator, plots


def class_embedding_similarity(class_embeddings: np.ndarray,
                               class_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Cosine similarities between class embeddings, within and across clients.

  Args:
    class_embeddings: `[K, Cmax, d]`; row `[k, c]` is client k's embedding of its c-th class, padded
      up to `Cmax` classes.
    class_mask: bool `[K, Cmax]`, True for real (non-padding) classes.

  Returns:
    `(within, cross)`: 1-D arrays (float32, or float64 for float64 inputs) of the cosine similarity
    of every unordered pair of valid classes held by the same client (within) and by two different
    clients (cross). Sizes are `sum_k n_k (n_k - 1) / 2` and `sum_{k<l} n_k n_l`, with `n_k` the
    valid classes of client k; the order is deterministic (client by client, row-major).

  Raises:
    ValueError: on mismatched shapes or non-finite valid embeddings.
  """
  class_embeddings = np.asarray(class_embeddings)
  class_mask = np.asarray(class_mask, dtype=bool)
  if class_embeddings.ndim != 3:
    raise ValueError(f'class_embeddings must be [K, Cmax, d], got shape {class_embeddings.shape}')
  if class_mask.shape != class_embeddings.shape[:2]:
    raise ValueError(f'class_mask shape {class_mask.shape} does not match class_embeddings '
                     f'{class_embeddings.shape[:2]}')
  dtype = np.result_type(class_embeddings.dtype, np.float32)
  # Only valid rows are checked: padding may hold anything.
  clients = [arrays.l2_normalize(class_embeddings[k][class_mask[k]].astype(dtype))
             for k in range(class_embeddings.shape[0])]
  if not all(np.all(np.isfinite(c)) for c in clients):
    raise ValueError('class_embeddings has NaN or inf in valid classes')

  sizes = np.array([len(c) for c in clients], dtype=np.int64)
  within = np.empty(int(np.sum(sizes * (sizes - 1) // 2)), dtype=dtype)
  cross = np.empty(int((np.sum(sizes)**2 - np.sum(sizes**2)) // 2), dtype=dtype)
  w = x = 0
  for k, emb in enumerate(clients):
    n = len(emb)
    rows, cols = np.triu_indices(n, k=1)
    within[w:w + len(rows)] = (emb @ emb.T)[rows, cols]
    w += len(rows)
    # One product against all later clients at once, instead of one per client pair: K matmuls in
    # total, and each client pair is visited once.
    later = np.concatenate(clients[k + 1:], axis=0) if k + 1 < len(clients) else emb[:0]
    block = (emb @ later.T).ravel()
    cross[x:x + block.size] = block
    x += block.size
  return within, cross


def _stats(values: np.ndarray) -> dict[str, Any]:
  """count / mean / std / min / max / 99th percentile as Python numbers (None when empty)."""
  values = np.asarray(values, dtype=np.float64).ravel()
  if values.size == 0:
    return {'count': 0, 'mean': None, 'std': None, 'min': None, 'max': None, 'p99': None}
  return {
      'count': int(values.size),
      'mean': float(np.mean(values)),
      'std': float(np.std(values)),
      'min': float(np.min(values)),
      'max': float(np.max(values)),
      'p99': float(np.percentile(values, 99)),
  }


def similarity_summary(within: np.ndarray, cross: np.ndarray) -> dict[str, Any]:
  """Summary statistics of the within- and cross-client similarities.

  Args:
    within: 1-D within-client cosine similarities.
    cross: 1-D cross-client cosine similarities.

  Returns:
    A flat JSON-serialisable dict (flat so that every entry can be logged as a scalar):
    `{within,cross}_{count,mean,std,min,max,p99}`, with None statistics for an empty array.
  """
  summary = {}
  for name, values in (('within', within), ('cross', cross)):
    for stat, value in _stats(values).items():
      summary[f'{name}_{stat}'] = value
  return summary


def class_embedding_norms(class_embeddings) -> dict[str, float]:
  """Mean / max L2 norm of the class embeddings `[num_identities, d]`.

  With the unnormalised softmax their scale sets the sharpness of every client's local loss, and
  FedGC's server step changes it (BUILD_NOTES, "FedGC on the embedded benchmark").
  """
  norms = np.linalg.norm(np.asarray(class_embeddings), axis=-1)
  return {'norm_mean': float(np.mean(norms)), 'norm_max': float(np.max(norms))}


def check_diagnostics(config, section) -> None:
  del config
  if section:
    raise ValueError(f'config.evals.diagnostics has fields {sorted(section)}; expected none.')


def make_diagnostics(config, section, setup) -> Evaluator:
  """Within- vs cross-client class-embedding cosines (Fig. 3(c)(d)) for methods that keep class
  embeddings; the histograms in class_embedding_similarity.png, the values in its .npz."""
  del section
  identity_table = np.asarray(setup.fed_view.identity_table)
  class_mask = np.asarray(setup.fed_view.class_mask)

  def evaluate(inputs) -> EvalOutput | None:
    if inputs.class_embeddings is None:
      return None
    embeddings = np.asarray(inputs.class_embeddings)
    by_client = np.asarray(class_tables.to_client_slots(embeddings, identity_table))
    within, cross = class_embedding_similarity(by_client, class_mask)
    norms = class_embedding_norms(embeddings)
    return EvalOutput(
        results={'class_embedding_similarity': similarity_summary(within, cross),
                 'class_embedding_norm': {f'class_embeddings/{k}': v for k, v in norms.items()}},
        scalars={}, figures={'class_embedding_similarity.png':
                             plots.similarity_figure({config.algorithm: (within, cross)})},
        arrays={'class_embedding_similarity.npz': {'within': within, 'cross': cross}})

  return Evaluator('diagnostics', evaluate)
