"""The 'pad' evaluator (`config.evals.pad`): the detector on the unseen target domain.

Frames are scored by the global model (the probability of live, sigmoid of the logit), averaged
per video, and reported as HTER, EER and AUC (`metrics.pad_metrics`) with the threshold rule the
section names: 'test' (chosen on the target's own scores, the authors' code) or 'validation'
(chosen on the data centers' held-out subjects, the paper's text). The ROC goes to pad_roc.png.
"""

import numpy as np

from fedjax_face import config_lib
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.pad import metrics
from fedjax_face.models import pad as pad_model

RULES = ('test', 'validation')
VIDEO_SCORES = 'pad_video_scores.npz'   # the target's per-video scores, in every run's workdir


def check_pad(config, section) -> None:
  config_lib.check_choice('evals.pad.threshold_rule', section.threshold_rule, RULES)
  if config.data.source != 'pad':
    raise ValueError(f"config.evals.pad with data.source={config.data.source!r}; the PAD "
                     "evaluator scores the PAD benchmark's target domain: expected 'pad'.")


def video_level(embed, frames, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(per-video mean live probability, per-video label) of a `PadSet` under `embed`."""
  scores = []
  for start in range(0, len(frames.images), batch_size):
    out = embed(pad_model.rgb_hsv(frames.images[start:start + batch_size]))
    # The sigmoid in float64: in float32 every logit above ~17 is exactly 1.0, and a detector
    # that has fit its data centers would score whole sets of videos as ties.
    scores.append(1.0 / (1.0 + np.exp(-np.asarray(out['logit'], np.float64))))
  return metrics.video_scores(np.concatenate(scores), frames.video, frames.live.astype(np.int64))


def make_pad(config, section, setup) -> Evaluator:
  test = setup.benchmark.eval_sets['test']
  validation = setup.benchmark.eval_sets['validation']
  batch = config.eval.batch_size

  def evaluate(inputs) -> EvalOutput:
    scores, labels = video_level(inputs.embed, test, batch)
    kwargs = {}
    if section.threshold_rule == 'validation':
      kwargs['val_scores'], kwargs['val_labels'] = video_level(inputs.embed, validation, batch)
    res = metrics.pad_metrics(scores, labels, rule=section.threshold_rule, **kwargs)
    res['target'] = config.data.pad.target
    res['sources'] = list(config.data.pad.sources)
    res['num_videos'] = len(scores)
    fpr, tpr, _ = metrics.roc(scores, labels)
    title = f"{'&'.join(config.data.pad.sources)} -> {config.data.pad.target}"
    # The per-video scores, for baselines that combine runs (the paper's Fused: the mean of the
    # Single models' scores, `fused_metrics`).
    return EvalOutput(results=res,
                      scalars={k: res[k] for k in ('hter', 'eer', 'auc')},
                      figures={'pad_roc.png': plots.roc_figure({title: (fpr, tpr)},
                                                               title=config.algorithm)},
                      arrays={VIDEO_SCORES: {'scores': scores, 'labels': labels}})

  return Evaluator('pad', evaluate)
