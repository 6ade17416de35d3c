r"""FedGC Fig. 3(a)(b): features of the most-confused cross-client class pairs under two runs.

    python -m fedjax_face.proj.fedgc.visualize --runs=/tmp/fedpe,/tmp/fedgc --out=/tmp/fig3ab.png

The paper picks pairs of classes from different clients whose FedPE class embeddings are most
similar and shows (t-SNE) that under FedPE each pair's features gather into one cluster while
under FedGC the two classes separate. Here: the `--pairs` most similar cross-client pairs of the
FIRST run's class embeddings (disjoint identities), then for every run the L2-normalised features
of those identities' training images projected on their top two principal components (PCA is
deterministic and needs no tuning, unlike t-SNE), one panel per run, one colour per pair, one
marker per member. A JSON beside the PNG gives, per pair and run, the mean cosine between the two
classes' features (the quantity of Fig. 3(c)(d)).

The runs must be federated runs (FedPE / FedGC / FedCos / FedPE+Fixed) on the same data and
partition; their final checkpoints are restored from the workdirs.
"""

import json
import os

import jax
import numpy as np
from absl import app, flags

from fedjax_face import algorithms, config_lib, eval as eval_lib, models
from fedjax_face.core import arrays, xla_flags
from fedjax_face.data import federated, sources, stores, views
from fedjax_face.eval.recognition import verification
from fedjax_face.io import artifacts, checkpoint, files
from fedjax_face.run import resume


# Fields that must agree between runs for their classes and images to be the same.
SAME_DATA_FIELDS = ('seed', 'data.', 'federated.num_clients', 'federated.partition',
                    'federated.shared_')


def load_run(workdir: str):
  """(config, model, algorithm, state, benchmark, fed_view) of a finished run's last checkpoint."""
  path = files.join(workdir, 'config.json')
  if not files.exists(path):
    raise ValueError(f'{workdir}: no config.json; expected the workdir of a finished run.')
  saved = files.read_json(path)
  # Fields added since the run was made keep their defaults (which reproduce the old behaviour).
  config = config_lib.base_config()
  method = algorithms.get(saved.get('algorithm', ''))
  if method.config_section() is not None:
    config[saved['algorithm']] = method.config_section()
  config.update_from_flattened_dict(
      {k: tuple(v) if isinstance(v, list) else v for k, v in resume.flatten(saved).items()})
  if method.ONE_CLIENT:
    raise ValueError(f'{workdir}: a {config.algorithm} run has no clients; expected a federated run.')
  benchmark = sources.load(config)
  fed = federated.build(benchmark.train_images, benchmark.train_labels,
                        views.client_partition(config, benchmark.num_identities,
                                               benchmark.train_families))
  model = models.build_backbone(config.model)
  algorithm = algorithms.get(config.algorithm).build(config, model, fed, step_mode='unroll')
  ckpt = checkpoint.Checkpointer(workdir)  # reads: config.json stays as it is
  if ckpt.latest_round() is None:
    raise ValueError(f'{workdir}: no checkpoint to restore.')
  state = ckpt.restore(algorithm.init(jax.random.PRNGKey(config.seed)))
  ckpt.close()
  return config, model, algorithm, state, benchmark, fed


def check_same_data(configs: list[dict], runs: list[str]) -> None:
  flat = [resume.flatten(c) for c in configs]
  for key in flat[0]:
    if key.startswith(SAME_DATA_FIELDS):
      for other, run in zip(flat[1:], runs[1:]):
        if other.get(key) != flat[0][key]:
          raise ValueError(f'{run}: {key}={other.get(key)!r} but {runs[0]} has '
                           f'{flat[0][key]!r}; the runs must share data and partition.')


def most_similar_cross_client_pairs(class_embeddings: np.ndarray, owner: np.ndarray,
                                    num_pairs: int) -> list[tuple[int, int]]:
  """The `num_pairs` identity pairs of different owners with the highest embedding cosine,
  greedily, each identity used once."""
  unit = arrays.l2_normalize(np.asarray(class_embeddings))
  cos = unit @ unit.T
  cos[owner[:, None] == owner[None, :]] = -np.inf          # same client (and the diagonal)
  rows, cols = np.triu_indices(len(cos), k=1)
  order = np.argsort(-cos[rows, cols], kind='stable')
  pairs, used = [], set()
  for i in order:
    a, b = int(rows[i]), int(cols[i])
    if np.isinf(cos[a, b]):
      break
    if a in used or b in used:
      continue
    pairs.append((a, b))
    used.update((a, b))
    if len(pairs) == num_pairs:
      break
  return pairs


def identity_images(fed, identity: int) -> np.ndarray:
  """Every training image of a global identity (all holders' shares)."""
  out = []
  for k, ids in enumerate(fed.identity_table):
    for c in np.flatnonzero(ids == identity):
      idx = fed.client_indices[k][fed.client_local_labels[k] == c]
      images, ok = stores.take(fed.images, idx)
      out.append(images[ok])
  return np.concatenate(out)


def pca_2d(x: np.ndarray) -> np.ndarray:
  centred = x - x.mean(axis=0)
  _, _, vt = np.linalg.svd(centred, full_matrices=False)
  basis = vt[:2] * np.sign(vt[:2, :1] + 1e-12)   # fixed sign: deterministic orientation
  return centred @ basis.T


def main(argv):
  del argv
  if not flags.FLAGS.runs or len(flags.FLAGS.runs) < 2 or not flags.FLAGS.out:
    raise app.UsageError('--runs=DIR1,DIR2[,...] (at least two) and --out=PNG are required.')
  loaded = [load_run(r) for r in flags.FLAGS.runs]
  check_same_data([c.to_dict() for c, *_ in loaded], flags.FLAGS.runs)   # after defaults are filled
  _, _, first_alg, first_state, _, fed = loaded[0]
  table = np.asarray(fed.identity_table)
  owner = np.full(fed.num_identities, -1)
  for k, ids in enumerate(table):
    owner[ids[ids >= 0]] = k
  pairs = most_similar_cross_client_pairs(np.asarray(first_alg.class_embeddings(first_state)),
                                          owner, flags.FLAGS.pairs)
  images = {i: identity_images(fed, i) for pair in pairs for i in pair}

  from matplotlib.figure import Figure   # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(5 * len(loaded), 5))
  summary = {'pairs': [list(p) for p in pairs], 'runs': {}}
  runs = flags.FLAGS.runs
  for panel, (run, (config, model, algorithm, state, _, _)) in enumerate(zip(runs, loaded)):
    embed = eval_lib.make_embed(model)(algorithm.eval_variables(state.server))
    feats = {i: arrays.l2_normalize(verification.compute_embeddings(embed, im, flip=False))
             for i, im in images.items()}
    points = pca_2d(np.concatenate([feats[i] for pair in pairs for i in pair]))
    ax = fig.add_subplot(1, len(loaded), panel + 1)
    start = 0
    cross = []
    for p, (a, b) in enumerate(pairs):
      for member, (i, marker) in enumerate(((a, 'o'), (b, 'x'))):
        n = len(feats[i])
        ax.scatter(points[start:start + n, 0], points[start:start + n, 1], s=12, marker=marker,
                   color=f'C{p}', label=f'pair {p}' if member == 0 else None)
        start += n
      cross.append(float(np.mean(feats[a] @ feats[b].T)))
    name = algorithms.get(config.algorithm).variant_name(config)
    ax.set_title(f'{name} ({os.path.basename(run.rstrip("/"))})')
    ax.legend(fontsize=7)
    summary['runs'][run] = {'method': name,
                            'mean_cross_class_feature_cos': cross}
  fig.suptitle('Most similar cross-client class pairs (PCA of normalised features; o / x = the '
               'two classes)', fontsize=9)
  artifacts.write_figure(flags.FLAGS.out, fig)
  files.write_text_atomic(os.path.splitext(flags.FLAGS.out)[0] + '.json',
                          json.dumps(summary, indent=1))
  for run, s in summary['runs'].items():
    print(f"{s['method']:12s} {run}: mean feature cosine of each pair "
          + ' '.join(f'{c:.3f}' for c in s['mean_cross_class_feature_cos']))
  print(f'wrote {flags.FLAGS.out}')


def define_flags():
  """The flags, defined only when run as a program (other tools define an `out` flag too)."""
  flags.DEFINE_list('runs', None, 'Workdirs of finished runs; the first picks the pairs.')
  flags.DEFINE_string('out', None, 'PNG path (a .json with the numbers is written beside it).')
  flags.DEFINE_integer('pairs', 4, 'Number of cross-client class pairs (the paper: 4).')


if __name__ == '__main__':
  define_flags()
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main)
