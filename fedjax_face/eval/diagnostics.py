"""Class-embedding diagnostics (FedGC paper, Fig. 3(c)(d)).

In federated face recognition every client trains the classifier rows ("class embeddings") of its
own identities only. Without a cross-client term (FedPE-style training) nothing pushes a client's
class embeddings away from other clients', so cross-client cosine similarities stay high while
within-client ones are driven apart by the softmax; FedGC's correction closes that gap. The two
similarity distributions computed here are what the paper's histograms compare.

With look-alike families in the training set (`FaceBenchmark.train_families`) it also measures
what the FedGC paper's Fig. 3 says breaks in FedPE: for every pair of family members held by
different clients, the cosine of their class embeddings and the mean cosine of their images'
features, beside the same for as many random cross-client strangers and, for features, for two
images of one identity.
"""

from typing import Any

import ml_collections
import numpy as np

from fedjax_face.core import arrays, class_tables
from fedjax_face.data import stores
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.recognition import verification

# At most this many look-alike pairs (and strangers) are measured, with this many images per
# identity for the feature cosines: a fixed, small cost per evaluation.
MAX_LOOKALIKE_PAIRS = 256
IMAGES_PER_IDENTITY = 4


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
  FedGC's server step changes it (docs/fedgc.md, "How the non-reproduction was traced").
  """
  norms = np.linalg.norm(np.asarray(class_embeddings), axis=-1)
  return {'norm_mean': float(np.mean(norms)), 'norm_max': float(np.max(norms))}


def config_diagnostics() -> ml_collections.ConfigDict:
  """No settings: class-embedding cosines within / across clients (FedGC Fig. 3(c)(d)), for
  methods that keep class embeddings."""
  return ml_collections.ConfigDict()


def check_diagnostics(config, section) -> None:
  del config
  if section:
    raise ValueError(f'config.evals.diagnostics has fields {sorted(section)}; expected none.')


def holders_matrix(identity_table: np.ndarray, num_identities: int) -> np.ndarray:
  """bool `[num_identities, K]`: which clients hold each identity."""
  holders = np.zeros((num_identities, identity_table.shape[0]), bool)
  for k, ids in enumerate(identity_table):
    holders[ids[ids >= 0], k] = True
  return holders


def lookalike_pairs(families: np.ndarray, holders: np.ndarray, max_pairs: int,
                    rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
  """(`[P, 2]` look-alike pairs, `[P, 2]` stranger pairs), both held by disjoint clients.

  Look-alikes: two members of one family with no common holder (at most `max_pairs`, drawn
  without replacement). Strangers: as many random pairs of different families, same rule.
  """
  same = families[:, None] == families[None, :]
  held = holders.astype(np.float32)   # float: BLAS (an int matmul at 1,000 x 1,000 is slow)
  apart = (held @ held.T) == 0
  rows, cols = np.triu_indices(len(families), k=1)
  look = np.flatnonzero(same[rows, cols] & apart[rows, cols])
  if len(look) > max_pairs:
    look = np.sort(rng.choice(look, max_pairs, replace=False))
  strangers = np.flatnonzero(~same[rows, cols] & apart[rows, cols])
  strangers = np.sort(rng.choice(strangers, min(len(look), len(strangers)), replace=False))
  pair = lambda idx: np.stack([rows[idx], cols[idx]], axis=1)
  return pair(look), pair(strangers)


def pair_cosines(vectors: np.ndarray, pairs: np.ndarray) -> np.ndarray:
  unit = arrays.l2_normalize(np.asarray(vectors, np.float64))
  return np.sum(unit[pairs[:, 0]] * unit[pairs[:, 1]], axis=-1)


def mean_feature_cosines(features: dict[int, np.ndarray], pairs: np.ndarray) -> np.ndarray:
  """Per pair (a, b): the mean cosine between every image feature of a and every one of b."""
  unit = {i: arrays.l2_normalize(np.asarray(f, np.float64)) for i, f in features.items()}
  return np.array([np.mean(unit[a] @ unit[b].T) for a, b in pairs])


def same_identity_feature_cosines(features: dict[int, np.ndarray]) -> np.ndarray:
  """Per identity: the mean cosine between two different images of it."""
  out = []
  for f in features.values():
    unit = arrays.l2_normalize(np.asarray(f, np.float64))
    if len(unit) > 1:
      rows, cols = np.triu_indices(len(unit), k=1)
      out.append(np.mean((unit @ unit.T)[rows, cols]))
  return np.asarray(out)


def _mean(values: np.ndarray) -> float | None:
  return float(np.mean(values)) if len(values) else None


def make_diagnostics(config, section, setup) -> Evaluator:
  """Within- vs cross-client class-embedding cosines (Fig. 3(c)(d)) for methods that keep class
  embeddings; the histograms in class_embedding_similarity.png, the values in its .npz. With
  look-alike families, their class-embedding and feature cosines (module docstring)."""
  del section
  identity_table = np.asarray(setup.fed_view.identity_table)
  class_mask = np.asarray(setup.fed_view.class_mask)
  families = getattr(setup.benchmark, 'train_families', None)
  look = strangers = None
  if families is not None and np.bincount(families).max() > 1:
    holders = holders_matrix(identity_table, len(families))
    look, strangers = lookalike_pairs(families, holders, MAX_LOOKALIKE_PAIRS,
                                      np.random.default_rng([config.seed, 0x100c]))
    labels = np.asarray(setup.benchmark.train_labels)
    measured = np.unique(np.concatenate([look.ravel(), strangers.ravel()]))
    image_index = {int(i): np.flatnonzero(labels == i)[:IMAGES_PER_IDENTITY] for i in measured}
    images, ok = stores.take(setup.benchmark.train_images,
                             np.concatenate(list(image_index.values())))
    owner = np.repeat(list(image_index), [len(v) for v in image_index.values()])[ok]
    images = images[ok]

  def lookalike_results(inputs) -> dict:
    # The protocol's own embedding (normalised input, no flip), in eval-sized batches.
    embedded = verification.compute_embeddings(inputs.embed, images,
                                               batch_size=config.eval.batch_size, flip=False)
    features = {i: embedded[owner == i] for i in image_index}
    out = {'pairs': int(len(look)),
           'feature_cos_lookalike': _mean(mean_feature_cosines(features, look)),
           'feature_cos_stranger': _mean(mean_feature_cosines(features, strangers)),
           'feature_cos_same_identity': _mean(same_identity_feature_cosines(features))}
    if inputs.class_embeddings is not None:
      embeddings = np.asarray(inputs.class_embeddings)
      out['class_cos_lookalike'] = _mean(pair_cosines(embeddings, look))
      out['class_cos_stranger'] = _mean(pair_cosines(embeddings, strangers))
    return out

  def evaluate(inputs) -> EvalOutput | None:
    results, scalars, figures, saved = {}, {}, {}, {}
    if look is not None and len(look):
      results['lookalikes'] = lookalike_results(inputs)
      scalars = {f'lookalikes/{k}': v for k, v in results['lookalikes'].items()
                 if k != 'pairs' and v is not None}
    if inputs.class_embeddings is not None:
      embeddings = np.asarray(inputs.class_embeddings)
      if embeddings.shape[0] <= identity_table.max():
        raise ValueError(f'the method\'s class embeddings cover {embeddings.shape[0]} identities '
                         f'but the clients hold identities up to {identity_table.max()}: a run '
                         'that trains on some identities only (data.centralized_on=\'public\') '
                         'has no per-client class embeddings; drop evals.diagnostics.')
      by_client = np.asarray(class_tables.to_client_slots(embeddings, identity_table))
      within, cross = class_embedding_similarity(by_client, class_mask)
      norms = class_embedding_norms(embeddings)
      results['class_embedding_similarity'] = similarity_summary(within, cross)
      results['class_embedding_norm'] = {f'class_embeddings/{k}': v for k, v in norms.items()}
      figures['class_embedding_similarity.png'] = plots.similarity_figure(
          {config.algorithm: (within, cross)})
      saved['class_embedding_similarity.npz'] = {'within': within, 'cross': cross}
    if not results:
      return None
    return EvalOutput(results=results, scalars=scalars, figures=figures, arrays=saved,
                      markdown=markdown(results))

  return Evaluator('diagnostics', evaluate)


def markdown(results: dict) -> list[str]:
  """The report's sections: class-embedding cosines within / across clients, and the
  look-alike pairs' cosines against strangers'."""
  lines = []
  sim = results.get('class_embedding_similarity')
  if sim:
    lines += ['Class-embedding cosine similarity (FedGC Fig. 3 diagnostic):', '',
              '| pairs | mean | std | 99th pct | max |', '| --- | --- | --- | --- | --- |']
    for kind in ('within', 'cross'):
      if sim.get(f'{kind}_mean') is None:
        continue
      lines.append(f"| {kind}-client | {sim[f'{kind}_mean']:.3f} | {sim[f'{kind}_std']:.3f} | "
                   f"{sim[f'{kind}_p99']:.3f} | {sim[f'{kind}_max']:.3f} |")
    lines.append('')
  look = results.get('lookalikes')
  if look:
    fmt = lambda v: '—' if v is None else f'{v:.3f}'
    lines += [f"Cross-client look-alike pairs ({look['pairs']}) vs as many strangers, mean "
              'cosine:', '', '| of | look-alikes | strangers | same identity |',
              '| --- | --- | --- | --- |',
              f"| class embeddings | {fmt(look.get('class_cos_lookalike'))} | "
              f"{fmt(look.get('class_cos_stranger'))} | |",
              f"| features | {fmt(look['feature_cos_lookalike'])} | "
              f"{fmt(look['feature_cos_stranger'])} | {fmt(look['feature_cos_same_identity'])} |",
              '']
  return lines
