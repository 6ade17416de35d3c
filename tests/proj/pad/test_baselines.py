"""Fused: the mean of the Single runs' per-video scores, measured as one detector."""

import numpy as np
import pytest

from fedjax_face.eval.pad import evaluators, metrics
from fedjax_face.proj.pad import baselines


def _run(tmp_path, name, scores, labels):
  workdir = tmp_path / name
  workdir.mkdir()
  np.savez(workdir / evaluators.video_scores_file('M'), scores=np.asarray(scores),
           labels=np.asarray(labels))
  return str(workdir)


def test_fused_scores_are_the_mean_of_the_single_runs(tmp_path):
  labels = [1, 1, 0, 0]
  a = _run(tmp_path, 'a', [0.9, 0.2, 0.6, 0.1], labels)
  b = _run(tmp_path, 'b', [0.5, 0.8, 0.2, 0.3], labels)
  # Means 0.7, 0.5, 0.4, 0.2: separable, where neither run alone is.
  fused = baselines.fused_metrics([a, b], 'M')
  assert fused == metrics.pad_metrics([0.7, 0.5, 0.4, 0.2], labels)
  assert fused['auc'] == 1.0 and metrics.auc([0.9, 0.2, 0.6, 0.1], labels) < 1.0


def test_fused_refuses_runs_of_other_videos_and_missing_scores(tmp_path):
  a = _run(tmp_path, 'a', [0.9, 0.1], [1, 0])
  b = _run(tmp_path, 'b', [0.9, 0.1], [0, 1])
  with pytest.raises(ValueError, match=r'scored other target videos than'):
    baselines.fused_metrics([a, b], 'M')
  with pytest.raises(FileNotFoundError, match=r'pad_video_scores_M.npz is missing; expected the '
                                              r'workdir of a finished PAD run that scored domain M'):
    baselines.fused_metrics([a, str(tmp_path / 'nothing')], 'M')
  with pytest.raises(FileNotFoundError, match=r'pad_video_scores_C.npz is missing'):
    baselines.fused_metrics([a, a], 'C')
  with pytest.raises(ValueError, match=r'at least two Single runs'):
    baselines.fused_metrics([a], 'M')
