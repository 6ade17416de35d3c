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
from fedjax_face.data import preprocess, sources
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.pad import metrics

RULES = ('test', 'validation')
VIDEO_SCORES = 'pad_video_scores.npz'   # the target's per-video scores, in every run's workdir
METRIC_KEYS = ('hter', 'eer', 'auc')


def video_scores_file(domain: str | None = None) -> str:
  """The per-video scores of the target (None) or of one scored domain."""
  return VIDEO_SCORES if domain is None else f'pad_video_scores_{domain}.npz'


def check_pad(config, section) -> None:
  config_lib.check_choice('evals.pad.threshold_rule', section.threshold_rule, RULES)
  sources.require(config, 'pad_sets', 'config.evals.pad')


def video_level(embed, frames, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(per-video mean live probability, per-video label) of a `PadSet` under `embed`."""
  scores = []
  for start in range(0, len(frames.images), batch_size):
    out = embed(preprocess.rgb_hsv(frames.images[start:start + batch_size]))
    # The sigmoid in float64: in float32 every logit above ~17 is exactly 1.0, and a detector
    # that has fit its data centers would score whole sets of videos as ties.
    scores.append(1.0 / (1.0 + np.exp(-np.asarray(out['logit'], np.float64))))
  return metrics.video_scores(np.concatenate(scores), frames.video, frames.live.astype(np.int64))


def make_pad(config, section, setup) -> Evaluator:
  sets = sources.get(config.data.source).pad_sets(config, setup.benchmark)
  targets = sets.test
  batch = config.eval.batch_size
  centers = '&'.join(sets.sources)

  def evaluate(inputs) -> EvalOutput:
    val_scores, val_labels = video_level(inputs.embed, sets.validation, batch)
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
      if domain == sets.target:
        arrays[VIDEO_SCORES] = scored
      fpr, tpr, _ = metrics.roc(scores, labels)
      curves[f'{centers} -> {domain}'] = (fpr, tpr)
    res = dict(domains[sets.target], target=sets.target, sources=list(sets.sources))
    res['in_domain'] = {k: v for k, v in metrics.pad_metrics(val_scores, val_labels).items()
                        if k in METRIC_KEYS}
    res['domains'] = {d: {k: m[k] for k in METRIC_KEYS} for d, m in domains.items()}
    scalars = {k: res[k] for k in METRIC_KEYS}
    scalars.update({f'in_domain/{k}': res['in_domain'][k] for k in METRIC_KEYS})
    return EvalOutput(results=res, scalars=scalars,
                      figures={'pad_roc.png': plots.roc_figure(curves, title=config.algorithm)},
                      arrays=arrays, markdown=markdown(res))

  return Evaluator('pad', evaluate)


def _percent(value) -> str:
  return '—' if value is None else f'{value * 100:.2f}'


def markdown(pad: dict) -> list[str]:
  """The report's presentation-attack table: HTER at the named threshold rule, EER, AUC, and the
  same per scored domain."""
  rule = {'test': "chosen on the target's own scores", 'fixed': 'fixed',
          'validation': "chosen on the data centers' held-out subjects"}[pad['threshold_rule']]
  return [f"Presentation-attack detection, {' & '.join(pad['sources'])} -> {pad['target']} "
          f"({pad['num_videos']} videos: {pad['num_live']} live, {pad['num_spoof']} attack; "
          f"scores averaged per video; threshold {pad['threshold']:.4f} {rule}):", '',
          '| HTER (%) | EER (%) | AUC (%) | FAR (%) | FRR (%) |', '| --- | --- | --- | --- | --- |',
          '| ' + ' | '.join(_percent(pad[k]) for k in ('hter', 'eer', 'auc', 'far', 'frr'))
          + ' |', '',
          'By domain (in-domain: the data centers\' held-out subjects, threshold on their scores):',
          '', '| domain | HTER (%) | EER (%) | AUC (%) |', '| --- | --- | --- | --- |',
          *(f'| {name} | ' + ' | '.join(_percent(m[k]) for k in ('hter', 'eer', 'auc')) + ' |'
            for name, m in [(f"in-domain ({' & '.join(pad['sources'])})", pad['in_domain']),
                            *pad['domains'].items()]), '']
