"""Cosine histograms drawn from their counts: what an archive keeps of a run draws the same bars."""

import numpy as np

from fedjax_face.eval import plots


def test_a_histogram_counts_clipped_values_and_keeps_the_unclipped_mean():
  values = np.array([-1.5, -0.99, 0.0, 0.999, 1.2])
  histogram = plots.similarity_histogram(values)
  # 80 bins of 0.025 over [-1, 1]: -1.5 clips into the first, 1.2 into the last (closed at 1).
  expected = np.zeros(80, np.int64)
  expected[[0, 40, 79]] = [2, 1, 2]
  np.testing.assert_array_equal(histogram.counts, expected)
  assert histogram.n == 5 and abs(histogram.mean - (-0.291 / 5)) < 1e-12
  assert plots.similarity_histogram(np.zeros(0)).n == 0


def test_the_bars_drawn_from_counts_are_the_densities_of_the_values():
  rng = np.random.default_rng(0)
  cross = rng.normal(0.2, 0.5, 4000)
  figure = plots.similarity_histogram_figure({
      'A': (plots.similarity_histogram(np.zeros(0)), plots.similarity_histogram(cross))})
  heights = [bar.get_height() for bar in figure.axes[0].patches]
  density, _ = np.histogram(np.clip(cross, -1, 1), bins=plots.SIMILARITY_BINS, density=True)
  np.testing.assert_allclose(heights, density, rtol=0, atol=1e-12)   # the within panel: none
  legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
  assert legend == [f'cross-client (n=4000, mean={cross.mean():.3f})']
