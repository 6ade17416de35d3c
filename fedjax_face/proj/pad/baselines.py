"""Baselines of the FedGPAD paper that combine finished runs.

Fused (Table III): the Single models' scores on the target's videos averaged, then measured as
one detector (`fused_metrics`). Each run's 'pad' evaluator leaves its per-video scores in
`pad_video_scores.npz`; the runs must share the target and its test videos (the same seed and
`data.pad` sizes), which the labels check.
"""

import numpy as np

from fedjax_face.eval.pad import evaluators, metrics
from fedjax_face.io import files


def fused_metrics(workdirs: list[str], rule: str = 'test') -> dict:
  """`metrics.pad_metrics` of the mean per-video score of the runs in `workdirs`."""
  if len(workdirs) < 2:
    raise ValueError(f'Fused needs the scores of at least two Single runs, got {workdirs}.')
  loaded = []
  for workdir in workdirs:
    path = files.join(workdir, evaluators.VIDEO_SCORES)
    if not files.exists(path):
      raise FileNotFoundError(f'{path} is missing; expected the workdir of a finished PAD run.')
    loaded.append(files.read_npz(path))
  labels = loaded[0]['labels']
  for workdir, arrays in zip(workdirs[1:], loaded[1:]):
    if not np.array_equal(arrays['labels'], labels):
      raise ValueError(f'{workdir} scored other target videos than {workdirs[0]}; expected runs '
                       'with the same seed, target and data.pad sizes.')
  scores = np.mean([arrays['scores'] for arrays in loaded], axis=0)
  return metrics.pad_metrics(scores, labels, rule=rule)
