"""Baselines of the FedGPAD paper that combine finished runs.

Fused (Table III): the Single models' scores on the target's videos averaged, then measured as
one detector (`fused_metrics`). Each run's 'pad' evaluator leaves its per-video scores of every
domain it scored in `pad_video_scores_<X>.npz`; the runs must share that domain's test videos
(the same seed and `data.pad` sizes), which the labels check.
"""

import numpy as np

from fedjax_face.eval.pad import evaluators, metrics
from fedjax_face.io import files


def fused_scores(workdirs: list[str], domain: str) -> tuple[np.ndarray, np.ndarray]:
  """(the mean per-video score on `domain` of the runs in `workdirs`, the videos' labels)."""
  if len(workdirs) < 2:
    raise ValueError(f'Fused needs the scores of at least two Single runs, got {workdirs}.')
  loaded = []
  for workdir in workdirs:
    path = files.join(workdir, evaluators.video_scores_file(domain))
    if not files.exists(path):
      raise FileNotFoundError(f'{path} is missing; expected the workdir of a finished PAD run '
                              f'that scored domain {domain}.')
    loaded.append(files.read_npz(path))
  labels = loaded[0]['labels']
  for workdir, arrays in zip(workdirs[1:], loaded[1:]):
    if not np.array_equal(arrays['labels'], labels):
      raise ValueError(f'{workdir} scored other target videos than {workdirs[0]}; expected runs '
                       'with the same seed, target and data.pad sizes.')
  return np.mean([arrays['scores'] for arrays in loaded], axis=0), labels


def fused_metrics(workdirs: list[str], domain: str, rule: str = 'test') -> dict:
  """`metrics.pad_metrics` of `fused_scores`."""
  return metrics.pad_metrics(*fused_scores(workdirs, domain), rule=rule)
