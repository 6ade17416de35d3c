r"""FedGC's claim where its mechanism should matter: FedGC − FedPE as clients hold more identities
and as there are more clients (issue 63 part 4; the tables are proj/fedgc/reproduce.py's
`SCALE_TABLES['_scale']` and `['_scale_5seeds']`, the picture its `scale_figure`, drawn by
`figure`).

FedGC corrects the gradient of the class embeddings a client never sees. docs/fedgc.md reads the
effect as growing with (C_k − 1)/d, the share of the d embedding dimensions a client's softmax
spans with its own C_k classes: 9/128 in our default tables, 293/512 in the paper (CASIA-WebFace's
10,575 identities over 36 clients, d = 512). The cells (clients K, identities per client C_k):

- 36 clients with 10, 30 and 74 identities each ((C_k − 1)/d = 9/128, 29/128, 73/128; 73/128 is
  the paper's fraction to within 0.002), and
- 10 identities per client with 36, 72 and 144 clients ((C_k − 1)/d stays 9/128; the classes a
  client never sees, N − C_k, grow from 350 to 1430).

Fixed in every cell: images per identity (40, the default), the local epochs per round, rounds (60),
d = 128, the test identities and pair sets, Softmax, FedGC's default reading (λ = 20, no gradient
through Eq. 5's self term). The local epochs are the default config's effective E: 2 steps of 32
samples out of a client's 10 x 40 = 400 images, E = 64 / 400 = 0.16. The other cells set
`federated.local_steps` to the static cap ceil(ceil(E n_k) / B) (`local_steps_cap`), and
`federated.local_epochs = 0.16` where the cap holds more than ceil(E n_k) samples: data/federated.py
`sample_round` keeps the first ceil(E n_k) of the `steps x B` samples drawn and masks the rest, so
the cap cuts none of them. At 10 identities per client ceil(0.16 x 400) = 64 = 2 x 32: the default
2 steps train on exactly those samples (`participation.round_work` is 64 per client either way),
so those cells set no local epochs, and the (36, 10) cell is the default config itself, the FedGC /
FedPE Softmax runs of Tables 3, 5 and 12, read instead of trained again.
"""

import math

import numpy as np

from fedjax_face.io import files
from fedjax_face.tools.tables import markdown
from fedjax_face.tools.tables import spec

IMAGES_PER_IDENTITY = 40   # data.synthetic.images_per_identity, the default
BATCH_SIZE = 32            # federated.batch_size, the default
EMBEDDING_DIM = 128        # model.embedding_dim, the default
LOCAL_EPOCHS = 0.16        # the default's 2 steps x 32 over 10 x 40 images
DEFAULT_CELL = (36, 10)    # (clients, identities per client) of the default config
IDENTITY_SWEEP = ((36, 10), (36, 30), (36, 74))   # 36 clients, more identities each
CLIENT_SWEEP = ((36, 10), (72, 10), (144, 10))    # 10 identities each, more clients
LARGEST = (36, 74)         # the paper's (C_k − 1)/d; 5 seeds, with the default cell
PAPER_FRACTION = 293 / 512   # (C_k − 1)/d of the paper: 10,575 / 36 = ~294 IDs a client, d = 512
CELLS = tuple(dict.fromkeys(IDENTITY_SWEEP + CLIENT_SWEEP))
# The default config's values of the fields a cell sets (tests/proj/fedgc/test_scale.py reads them
# from configs/fedgc/fedgc.py).
DEFAULT_FIELDS = {'data.synthetic.num_identities': '360', 'federated.num_clients': '36',
                  'federated.local_epochs': '0.0', 'federated.local_steps': '2'}
METHODS = ('FedPE', 'FedGC')
GAP_COLUMN = 'verification/lfw/accuracy'   # the page's headline set
COSINE_COLUMNS = ('diagnostics/class_embedding_similarity/cross_mean',
                  'diagnostics/class_embedding_similarity/cross_p99')


def local_steps_cap(ids_per_client: int) -> int:
  """The static cap on local steps that cuts none of the ceil(E n_k) samples a client trains on
  a round (data/federated.py `sample_round` masks the rest of `steps x B`)."""
  samples = math.ceil(LOCAL_EPOCHS * ids_per_client * IMAGES_PER_IDENTITY)
  return math.ceil(samples / BATCH_SIZE)


def overrides(clients: int, ids_per_client: int) -> dict[str, str]:
  """The config fields where one cell differs from the default config (`DEFAULT_FIELDS`), so
  that the default cell is the default run, shared with Tables 3, 5 and 12. `local_epochs` is set
  only where the capped steps hold more than ceil(E n_k) samples; where they hold exactly that
  many (10 IDs per client: 2 x 32 = 64), the steps alone train on the same samples."""
  cap = local_steps_cap(ids_per_client)
  samples = math.ceil(LOCAL_EPOCHS * ids_per_client * IMAGES_PER_IDENTITY)
  fields = {'data.synthetic.num_identities': str(clients * ids_per_client),
            'federated.num_clients': str(clients),
            'federated.local_epochs': str(LOCAL_EPOCHS if samples < cap * BATCH_SIZE else 0.0),
            'federated.local_steps': str(cap)}
  return {key: value for key, value in fields.items() if DEFAULT_FIELDS[key] != value}


def visible_fraction(ids_per_client: int) -> float:
  """(C_k − 1)/d: the share of the embedding a client's own class differences span."""
  return (ids_per_client - 1) / EMBEDDING_DIM


def label(method: str, cell: tuple[int, int]) -> str:
  """A row's label: 'FedGC, 36 clients x 30 IDs'."""
  clients, ids = cell
  return f'{method}, {clients} clients x {ids} IDs'


def cell_values(root: str, runs: dict[str, spec.Run], extra: tuple, seeds: tuple[int, ...],
                column: str) -> dict[str, dict[int, float]]:
  """method -> seed -> the value of `column` ('results' paths, accuracies in %) of each seed's
  finished run under `root`."""
  table = spec.Table('', 'results', (column,), (), '')
  out = {}
  for method, run in runs.items():
    out[method] = {}
    for seed in seeds:
      path = files.join(spec.workdir(root, run, extra, seed), 'results.json')
      value = spec.column_value(files.read_json(path), table, column) if files.exists(path) else None
      if value is not None:
        out[method][seed] = value
  return out


def gaps(values: dict[str, dict[int, float]]) -> dict[int, float]:
  """seed -> FedGC − FedPE, for every seed where both have a value (paired by seed: the same
  benchmark draw)."""
  return {seed: values['FedGC'][seed] - values['FedPE'][seed]
          for seed in sorted(values['FedGC']) if seed in values['FedPE']}


def figure_data(root: str, runs: dict[tuple[int, int], dict[str, spec.Run]], extra: tuple,
                seeds: tuple[int, ...]) -> dict[tuple[int, int], dict]:
  """Per cell: 'gap' (seed -> FedGC − FedPE on LFW, points of %), and per cosine column
  method -> seed -> value; every seed of `seeds` whose runs have finished."""
  out = {}
  for cell, cell_runs in runs.items():
    out[cell] = {'gap': gaps(cell_values(root, cell_runs, extra, seeds, GAP_COLUMN))}
    for column in COSINE_COLUMNS:
      out[cell][column] = cell_values(root, cell_runs, extra, seeds, column)
  return out


def _mean(values) -> float | None:
  values = list(values)
  return float(np.mean(values)) if values else None


def page_lines(data: dict[tuple[int, int], dict]) -> list[str]:
  """The figure's numbers as a markdown table: per cell the LFW gap per seed and its mean, and
  each method's cross-client class cosines (mean ± std over its seeds of each run's mean and 99th
  percentile)."""
  lines = ['## FedGC − FedPE against (C_k − 1)/d and against clients (picture: fedgc_scale.png)',
           '', '| sweep | clients | IDs per client | (C_k − 1)/d | LFW gap per seed (points) | '
           'mean gap | cross cos mean, FedPE | FedGC | cross cos 99th pct., FedPE | FedGC | '
           'seeds |', '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
  for sweep, cells in (('identities', IDENTITY_SWEEP), ('clients', CLIENT_SWEEP)):
    for cell in cells:
      clients, ids = cell
      gap = data[cell]['gap']
      per_seed = ', '.join(f'{seed}: {value:+.2f}' for seed, value in gap.items()) or '—'
      mean = _mean(gap.values())
      cosines = [markdown.summarize(list(data[cell][column][method].values()),
                                    len(data[cell][column][method]), 3)
                 for column in COSINE_COLUMNS for method in METHODS]
      lines.append(f'| {sweep} | {clients} | {ids} | {ids - 1}/{EMBEDDING_DIM} | {per_seed} | '
                   + ('—' if mean is None else f'{mean:+.2f}') + ' | ' + ' | '.join(cosines)
                   + f' | {len(gap)} |')
  return lines + ['', 'Gap: FedGC − FedPE LFW-like accuracy of the same seed. Cosines: of the '
                  'class embeddings of pairs of classes held by different clients, each run\'s '
                  'mean and 99th percentile (`diagnostics/class_embedding_similarity`); the mean '
                  'of many unit vectors\' pairwise cosines is near 0 whatever the method, the '
                  '99th percentile is how close the nearest cross-client classes come (Fig. 3). '
                  'Each cell over the seeds asked for whose two runs have finished.', '']


def figure(data: dict[tuple[int, int], dict]):
  """Two sweeps side by side (identities per client against (C_k − 1)/d; clients against K), the
  gap above (each seed a dot, the mean a line) and the cross-client class cosine below (mean and
  99th percentile per method)."""
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib.figure import Figure   # pylint: disable=g-import-not-at-top
  fig = Figure(figsize=(10, 7))
  axes = fig.subplots(2, 2, sharey='row')
  sweeps = ((IDENTITY_SWEEP, lambda cell: visible_fraction(cell[1]),
             '(C_k − 1)/d (36 clients; 10, 30, 74 IDs each)'),
            (CLIENT_SWEEP, lambda cell: cell[0], 'clients K (10 IDs each; (C_k − 1)/d = 9/128)'))
  for col, (cells, x_of, x_label) in enumerate(sweeps):
    top, bottom = axes[0][col], axes[1][col]
    xs = [x_of(cell) for cell in cells]
    for x, cell in zip(xs, cells):
      values = list(data[cell]['gap'].values())
      top.plot([x] * len(values), values, 'o', color='C0', alpha=0.5)
    means = [(x, _mean(data[cell]['gap'].values())) for x, cell in zip(xs, cells)]
    top.plot([x for x, m in means if m is not None], [m for _, m in means if m is not None], '-',
             color='C0', label='mean over seeds')
    top.axhline(0.0, color='grey', linewidth=0.8)
    if col == 0:
      for ax in (top, bottom):
        ax.axvline(PAPER_FRACTION, color='grey', linestyle='--', linewidth=0.8,
                   label="the paper's 293/512")
    top.set_ylabel('FedGC − FedPE, LFW-like (points)')
    top.legend(fontsize=7)
    for i, method in enumerate(METHODS):
      for column, style in zip(COSINE_COLUMNS, ('-o', ':s')):
        points = [(x, _mean(data[cell][column][method].values())) for x, cell in zip(xs, cells)]
        points = [(x, m) for x, m in points if m is not None]
        bottom.plot([x for x, _ in points], [m for _, m in points], style, color=f'C{i + 1}',
                    label=f'{method}, {"mean" if column.endswith("mean") else "99th pct."}')
    bottom.set_ylabel('cross-client class-embedding cos')
    bottom.set_xlabel(x_label)
    bottom.legend(fontsize=7)
    if col == 1:
      top.set_xscale('log', base=2)
      bottom.set_xscale('log', base=2)
      for ax in (top, bottom):
        ax.set_xticks(xs, [str(x) for x in xs])
  return fig
