"""The 'pad' evaluator (`config.evals.pad`): the detector on the unseen target domain.

Frames are scored by the global model (the probability of live, sigmoid of the logit), averaged
per video, and reported as HTER, EER and AUC (`metrics.pad_metrics`) with the threshold rule the
section names: 'test' (chosen on the target's own scores, the authors' code) or 'validation'
(chosen on the data centers' held-out subjects, the paper's text). The ROC goes to pad_roc.png.

Two more measurements calibrate the benchmark (how far apart its domains are): 'in_domain', the
same detector on the data centers' own held-out subjects (threshold on those scores), and
'domains', one entry per unseen domain scored (the target and `data.pad.extra_targets`), each with
its per-video scores in `pad_video_scores_<X>.npz` beside the target's `VIDEO_SCORES`.
"""

import numpy as np

from fedjax_face import config_lib
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.pad import metrics
from fedjax_face.models import pad as pad_model

RULES = ('test', 'validation')
VIDEO_SCORES = 'pad_video_scores.npz'   # the target's per-video scores, in every run's workdir
METRIC_KEYS = ('hter', 'eer', 'auc')


def video_scores_file(domain: str | None = None) -> str:
  """The per-video scores of the target (None) or of one scored domain."""
  return VIDEO_SCORES if domain is None else f'pad_video_scores_{domain}.npz'


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
  p = config.data.pad
  sets = setup.benchmark.eval_sets
  targets = {p.target: sets['test'], **{d: sets[f'test:{d}'] for d in p.extra_targets}}
  batch = config.eval.batch_size
  sources = '&'.join(p.sources)

  def evaluate(inputs) -> EvalOutput:
    val_scores, val_labels = video_level(inputs.embed, sets['validation'], batch)
    kwargs = ({'val_scores': val_scores, 'val_labels': val_labels}
              if section.threshold_rule == 'validation' else {})
    domains, arrays, curves = {}, {}, {}
    for domain, frames in targets.items():
      scores, labels = video_level(inputs.embed, frames, batch)
      domains[domain] = metrics.pad_metrics(scores, labels, rule=section.threshold_rule, **kwargs)
      domains[domain]['num_videos'] = len(scores)
      # The per-video scores, for baselines that combine runs (the paper's Fused: the mean of
      # the Single models' scores, `baselines.fused_metrics`).
      scored = {'scores': scores, 'labels': labels}
      arrays[video_scores_file(domain)] = scored
      if domain == p.target:
        arrays[VIDEO_SCORES] = scored
      fpr, tpr, _ = metrics.roc(scores, labels)
      curves[f'{sources} -> {domain}'] = (fpr, tpr)
    res = dict(domains[p.target], target=p.target, sources=list(p.sources))
    res['in_domain'] = {k: v for k, v in metrics.pad_metrics(val_scores, val_labels).items()
                        if k in METRIC_KEYS}
    res['domains'] = {d: {k: m[k] for k in METRIC_KEYS} for d, m in domains.items()}
    scalars = {k: res[k] for k in METRIC_KEYS}
    scalars.update({f'in_domain/{k}': res['in_domain'][k] for k in METRIC_KEYS})
    return EvalOutput(results=res, scalars=scalars,
                      figures={'pad_roc.png': plots.roc_figure(curves, title=config.algorithm)},
                      arrays=arrays)

  return Evaluator('pad', evaluate)
