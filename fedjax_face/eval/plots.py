"""Figures for reports: ROC curves and class-embedding similarity histograms.

Figures are built with the object-oriented API (`matplotlib.figure.Figure`) instead of pyplot, so
that no global figure state is created or leaked across calls in long training runs; the backend is
nevertheless forced to the non-interactive 'Agg' so that nothing here ever needs a display. They
are returned, not written: `io/artifacts.py` writes them. matplotlib is imported when the first
figure is made (`_figure`), not with this module: a run that stops at a usage error, and every
process that never plots, starts ~0.6 s sooner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, NamedTuple

import numpy as np

if TYPE_CHECKING:
  from matplotlib.figure import Figure


def _figure(**kwargs) -> Figure:
  """A new `matplotlib.figure.Figure` on the Agg backend."""
  import matplotlib   # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  from matplotlib.figure import Figure   # pylint: disable=g-import-not-at-top,redefined-outer-name
  return Figure(**kwargs)


def _draw_roc(ax, curves: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
  min_fpr = 1.0
  for name, (fpr, tpr) in curves.items():
    fpr = np.asarray(fpr, dtype=np.float64)
    tpr = np.asarray(tpr, dtype=np.float64)
    # FPR = 0 has no place on a log axis; those points are the curve's vertical start.
    visible = fpr > 0
    if np.any(visible):
      min_fpr = min(min_fpr, float(fpr[visible].min()))
    ax.plot(fpr[visible], tpr[visible], label=name, linewidth=1.5)
  ax.set_xscale('log')
  if min_fpr < 1.0:   # an empty panel (no finished run) keeps matplotlib's default range
    ax.set_xlim(min_fpr, 1.0)
  ax.set_ylim(0.0, 1.01)
  ax.set_xlabel('False positive rate (FAR)')
  ax.set_ylabel('True positive rate (TAR)')
  ax.grid(True, which='both', alpha=0.3)
  if curves:
    ax.legend(loc='lower right')


def roc_figure(curves: Mapping[str, tuple[np.ndarray, np.ndarray]], title: str = '') -> Figure:
  """ROC curves on a log-scale FPR axis.

  Args:
    curves: name -> `(fpr, tpr)`, e.g. the 'roc_fpr' / 'roc_tpr' lists of `evaluate_pairs`.
    title: optional figure title.
  """
  fig = _figure(figsize=(6, 4.5))
  ax = fig.add_subplot()
  _draw_roc(ax, curves)
  if title:
    ax.set_title(title)
  return fig


def roc_panels_figure(panels: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
                      columns: int = 2) -> Figure:
  """One ROC panel per title (`roc_figure`'s curves each), `columns` to a row."""
  rows = max(1, -(-len(panels) // columns))
  fig = _figure(figsize=(6 * columns, 4.5 * rows))
  for i, (title, curves) in enumerate(panels.items()):
    ax = fig.add_subplot(rows, columns, i + 1)
    _draw_roc(ax, curves)
    ax.set_title(title)
  fig.tight_layout()
  return fig


SIMILARITY_BINS = np.linspace(-1.0, 1.0, 81)   # every cosine histogram's: 80 bins over [-1, 1]


class Histogram(NamedTuple):
  """Cosine similarities as a panel draws them: their counts on `SIMILARITY_BINS` (clipped to
  [-1, 1]), their number and their mean. A table that draws a run's histogram again keeps this
  much of the run, not every pair's cosine (FedFV Fig. 5)."""
  counts: np.ndarray   # int, one per bin
  n: int
  mean: float          # of the values before clipping, in float64


def similarity_histogram(values: np.ndarray) -> Histogram:
  values = np.asarray(values, dtype=np.float64).ravel()
  counts, _ = np.histogram(np.clip(values, -1.0, 1.0), bins=SIMILARITY_BINS)
  return Histogram(counts, int(values.size), float(values.mean()) if values.size else 0.0)


def similarity_figure(results: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> Figure:
  """One panel per method with overlaid within- and cross-client cosine-similarity histograms.

  Mirrors FedGC Fig. 3(c)(d). All panels share the bins over [-1, 1] and the axes, so methods can
  be compared by eye; histograms are densities because within- and cross-client pair counts differ
  by orders of magnitude.

  Args:
    results: method name (e.g. 'FedPE', 'FedGC') -> `(within, cross)` from
      `diagnostics.class_embedding_similarity`.
  """
  return similarity_histogram_figure({
      name: (similarity_histogram(within), similarity_histogram(cross))
      for name, (within, cross) in results.items()})


def similarity_histogram_figure(results: Mapping[str, tuple[Histogram, Histogram]]) -> Figure:
  """`similarity_figure` drawn from the histograms (`similarity_histogram`) instead of the values:
  method name -> `(within, cross)`; a histogram of no values draws nothing."""
  num_panels = max(len(results), 1)
  fig = _figure(figsize=(4.5 * num_panels, 3.5))
  axes = fig.subplots(1, num_panels, sharex=True, sharey=True, squeeze=False)[0]
  centres = (SIMILARITY_BINS[:-1] + SIMILARITY_BINS[1:]) / 2   # one weighted value per bin
  for ax, (name, (within, cross)) in zip(axes, results.items()):
    for label, histogram, color in (('within-client', within, 'tab:blue'),
                                    ('cross-client', cross, 'tab:orange')):
      if histogram.n:
        ax.hist(centres, bins=SIMILARITY_BINS, weights=histogram.counts, density=True,
                alpha=0.55, color=color,
                label=f'{label} (n={histogram.n}, mean={histogram.mean:.3f})')
    ax.set_title(name)
    ax.set_xlabel('cosine similarity')
    if ax.get_legend_handles_labels()[0]:
      ax.legend(loc='upper left', fontsize='small')
  axes[0].set_ylabel('density')
  return fig


def accuracy_epsilon_figure(curves: Mapping[str, tuple[list[tuple[float, float]], float | None]],
                            infinite_at: float = 100.0) -> Figure:
  """Accuracy against epsilon per method on a log axis.

  Args:
    curves: name -> (sorted (epsilon, accuracy %) points, accuracy without DP or None). An
      infinite epsilon (clipping alone) is drawn at `infinite_at`, marked on the axis.
    infinite_at: where on the axis epsilon = inf goes.
  """
  fig = _figure(figsize=(7, 5))
  ax = fig.add_subplot()
  for i, (name, (points, without)) in enumerate(curves.items()):
    color = f'C{i}'
    xs = [infinite_at if e == float('inf') else e for e, _ in points]
    if points:
      ax.plot(xs, [a for _, a in points], 'o-', color=color, label=f'{name} with DP')
    if without is not None:
      ax.axhline(without, color=color, linestyle=':', linewidth=1, label=f'{name} without DP')
  ax.set_xscale('log')
  ticks = [t for t in (1, 4, 16) if t < infinite_at] + [infinite_at]
  ax.set_xticks(ticks, [f'{t:g}' for t in ticks[:-1]] + ['inf\n(clip only)'])
  ax.set_xlabel('epsilon at delta = 1e-5')
  ax.set_ylabel('LFW-like accuracy (%)')
  ax.grid(True, which='both', alpha=0.3)
  ax.legend(fontsize=7, ncol=2)
  return fig
