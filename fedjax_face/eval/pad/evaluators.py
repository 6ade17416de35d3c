"""The 'pad' evaluator (`config.evals.pad`): the detector on the unseen target domain.

Frames are scored by the global model (the probability of live, sigmoid of the logit) and
reported as HTER, EER and AUC (`metrics.pad_metrics`) in the section's scoring unit and under its
threshold rule:

  scoring_unit    'video': frame scores averaged per video, one score a video (SSDG, FLIP);
                  'frame': every frame scored on its own (the FedGPAD code's .h5 scores).
  threshold_rule  'test': chosen on the target's own scores, exactly, over every distinct score;
                  'authors': the FedGPAD code's rule exactly, on the target's own scores over
                  sklearn's default ROC (`metrics.authors_threshold`); 'validation': chosen on the
                  data centers' held-out subjects (the paper's text).

The ROC goes to pad_roc.png. results.json names the unit ('scoring_unit') and counts what was
scored ('num_live' and 'num_spoof' in that unit; 'num_videos' and 'num_frames' both).

Two more measurements calibrate the benchmark (how far apart its domains are): 'in_domain', the
same detector on the data centers' own held-out subjects (threshold on those scores, by 'test',
or by 'authors' under that rule), and 'domains', one entry per unseen domain scored (the target
and `data.pad.extra_targets`). Whatever the unit, the per-video scores of each go to
`pad_video_scores_<X>.npz` beside the target's `VIDEO_SCORES` (for Fused); with unit 'frame' the
per-frame scores, labels and video ids also go to `pad_frame_scores_<X>.npz` / `FRAME_SCORES`.

'iso' holds the ISO/IEC 30107-3 error rates of every scored set (`iso.iso_metrics`: APCER per
attack species and the worst, FLIP's pooled APCER, BPCER, OULU-NPU's ACER, FLIP's TPR@FPR = 1 %),
at both levels whatever the unit: 'iso' -> 'domains' -> <domain> -> 'frame' | 'video', and
'iso' -> 'in_domain' -> 'frame' | 'video'. Each level's threshold is the section's rule applied
to that level's scores (the in-domain rule on the held-out subjects'; 'validation': the held-out
subjects' scores at the same level), so the scoring unit's equals 'threshold' and its BPCER and
pooled APCER equal 'frr' and 'far'. A frame's species is its `PadSet.attack` (an index into
`pad_benchmark.ATTACKS`; a negative code other than LIVE: unknown); a video's, its frames'.
"""

import ml_collections
import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import preprocess, sources
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.pad import iso, metrics

RULES = ('test', 'validation', 'authors')
UNITS = ('video', 'frame')
VIDEO_SCORES = 'pad_video_scores.npz'   # the target's per-video scores, in every run's workdir
FRAME_SCORES = 'pad_frame_scores.npz'   # the target's per-frame scores, with scoring_unit 'frame'
METRIC_KEYS = ('hter', 'eer', 'auc')
SPECIES = pad_benchmark.ATTACKS         # the names `PadSet.attack` indexes


def video_scores_file(domain: str | None = None) -> str:
  """The per-video scores of the target (None) or of one scored domain."""
  return VIDEO_SCORES if domain is None else f'pad_video_scores_{domain}.npz'


def frame_scores_file(domain: str | None = None) -> str:
  """The per-frame scores of the target (None) or of one scored domain (unit 'frame' only)."""
  return FRAME_SCORES if domain is None else f'pad_frame_scores_{domain}.npz'


def config_pad() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.threshold_rule = 'test'    # on the target's scores; 'authors': the authors' code exactly;
                               # 'validation': the paper's text
  c.scoring_unit = 'video'     # frame scores averaged per video (SSDG, FLIP); 'frame': each
                               # frame alone (the FedGPAD code)
  return c


def check_pad(config, section) -> None:
  checks.check_choice('evals.pad.threshold_rule', section.get('threshold_rule'), RULES)
  checks.check_choice('evals.pad.scoring_unit', section.get('scoring_unit'), UNITS)
  sources.require(config, 'pad_sets', 'config.evals.pad')


def frame_level(live_logits, frames, batch_size: int) -> np.ndarray:
  """`[F]` float64 live probabilities, one per frame of a `PadSet` under `live_logits`
  (`EvalInputs.live_logits`)."""
  scores = []
  for start in range(0, len(frames.images), batch_size):
    logits = live_logits(preprocess.rgb_hsv(frames.images[start:start + batch_size]))
    # The sigmoid in float64: in float32 every logit above ~17 is exactly 1.0, and a detector
    # that has fit its data centers would score whole sets of videos as ties.
    scores.append(1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64))))
  return np.concatenate(scores)


def video_level(live_logits, frames, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """(per-video mean live probability, per-video label) of a `PadSet` under `live_logits`."""
  return metrics.video_scores(frame_level(live_logits, frames, batch_size), frames.video,
                              frames.live.astype(np.int64))


def scored(live_logits, frames, batch_size: int, unit: str) -> dict[str, np.ndarray]:
  """A `PadSet` scored once: 'video' and 'video_labels' (per-video means, whatever the unit),
  'scores' and 'labels' in `unit`, and with unit 'frame' 'frame_video' (each frame's video);
  'frame_scores' and 'frame_labels' in either unit (`levels`)."""
  frame_scores = frame_level(live_logits, frames, batch_size)
  frame_labels = frames.live.astype(np.int64)
  # Also checks one label per video, in either unit.
  video, video_labels = metrics.video_scores(frame_scores, frames.video, frame_labels)
  out = {'video': video, 'video_labels': video_labels, 'frame_scores': frame_scores,
         'frame_labels': frame_labels}
  if unit == 'video':
    return dict(out, scores=video, labels=video_labels)
  return dict(out, scores=frame_scores, labels=frame_labels, frame_video=np.asarray(frames.video))


def levels(frames, scores: dict) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """(scores, labels, species codes) of a `PadSet` at each level, from its `scored` dict."""
  return {'frame': (scores['frame_scores'], scores['frame_labels'], frames.attack),
          'video': (scores['video'], scores['video_labels'],
                    iso.video_species(frames.attack, frames.video))}


def attack_metrics(scored_levels: dict, rule: str, validation_levels: dict | None = None) -> dict:
  """`iso.iso_metrics` of one set at each level, at the threshold `rule` picks on that level's
  scores ('validation': on `validation_levels` at the same level), with 'threshold' and
  'threshold_rule'."""
  out = {}
  for level, (scores, labels, species) in scored_levels.items():
    kwargs = {}
    if rule == 'validation':
      val_scores, val_labels, _ = validation_levels[level]
      kwargs = {'val_scores': val_scores, 'val_labels': val_labels}
    threshold = metrics.choose_threshold(rule, scores, labels, **kwargs)
    out[level] = dict(threshold=threshold, threshold_rule=rule,
                      **iso.iso_metrics(scores, labels, species, SPECIES, threshold))
  return out


def worst_of(values: list[float], higher_is_worse: bool) -> float:
  """The worst 10 % of the data centers' values, as the personalized recognition evaluator defines
  it across clients (eval/recognition/personalized.py: `worst_count`, `spread_over_clients`):
  the mean of the ceil(K / 10) worst of the K values. Every PAD protocol has K <= 10 data
  centers (2 to 4), so this is the worst center's value (the highest HTER or EER, the lowest
  AUC), exactly."""
  ordered = np.sort(np.asarray(values, np.float64))
  worst = ordered[::-1] if higher_is_worse else ordered
  return float(np.mean(worst[:-(-len(values) // 10)]))


def personal_in_domain(personal_live_logits, sets, setup, batch_size: int, unit: str,
                       rule: str, shared_live_logits=None) -> dict:
  """{'in_domain_personal': ...}: each data center's in-domain error with its own personal model
  (issue 61 part 5), or {} when one client holds every center (pooled), or when the method has
  no personal model and no `shared_live_logits` is given.

  Data center k is client k of `setup.fed_view`: its personal model (`personal_live_logits(k)`, from
  `Algorithm.personalized`) scores center k's held-out frames in `unit`, the threshold on those
  scores by `rule` (the in-domain rule). A method without personal models (FedPAD, FedGPAD) has
  every center scored by its shared model, `shared_live_logits`, as the personalized recognition
  protocol scores such a method's clients with its global model: the same figures, center by
  center, so that a personalization method's row has a row to stand against. 'model' says which:
  'personal' or 'shared'. A held-out frame's center is its
  `sources.pad.CenterFrames.center`, which every PAD source fills (the embedded benchmark and
  `pad_lists`, whose lists name no subject). 'centers': name -> HTER, EER, AUC of each center with
  held-out frames; 'mean' over them; 'worst', the worst 10 % of them (`worst_of`: with K <= 10
  centers, the worst one), 'worst_centers' how many that averages; 'without_held_out' names
  the training-only centers (FLIP's CelebA-Spoof lists), which have none. Validation frames that
  carry no center (a stand-in set) give 'centers' None and 'unavailable' says why.
  """
  model = 'personal' if personal_live_logits is not None else 'shared'
  if personal_live_logits is None and shared_live_logits is not None:
    personal_live_logits = lambda k: shared_live_logits
  if personal_live_logits is None or setup.fed_view.num_clients != len(sets.sources):
    return {}
  centers = getattr(sets.validation, 'center', None)
  if centers is None:
    return {'in_domain_personal': {
        'model': model, 'centers': None, 'unavailable': "the validation frames carry no data center "
                                       "(sources.pad.CenterFrames)"}}
  by_center, without = {}, []
  for k, name in enumerate(sets.sources):
    if not (centers == k).any():
      without.append(name)
      continue
    own = scored(personal_live_logits(k), sets.validation.take(centers == k), batch_size, unit)
    by_center[name] = {key: value for key, value in metrics.pad_metrics(
        own['scores'], own['labels'], rule=rule).items() if key in METRIC_KEYS}
  column = lambda key: [m[key] for m in by_center.values()]
  out = {'model': model, 'centers': by_center, 'mean': {k: float(np.mean(column(k))) for k in METRIC_KEYS},
         'worst': {k: worst_of(column(k), higher_is_worse=k != 'auc') for k in METRIC_KEYS},
         'worst_centers': -(-len(by_center) // 10)}
  if without:
    out['without_held_out'] = without
  return {'in_domain_personal': out}


def make_pad(config, section, setup) -> Evaluator:
  sets = sources.get(config.data.source).pad_sets(config, setup.benchmark)
  targets = sets.test
  batch = config.eval.batch_size
  centers = '&'.join(sets.sources)
  rule, unit = section.threshold_rule, section.scoring_unit
  # In-domain: the threshold on the held-out subjects' own scores, as the rule picks it there.
  in_domain_rule = 'authors' if rule == 'authors' else 'test'

  def evaluate(inputs) -> EvalOutput:
    val = scored(inputs.live_logits, sets.validation, batch, unit)
    kwargs = ({'val_scores': val['scores'], 'val_labels': val['labels']}
              if rule == 'validation' else {})
    val_levels = levels(sets.validation, val)
    domains, arrays, curves, by_species = {}, {}, {}, {}
    for domain, frames in targets.items():
      test = scored(inputs.live_logits, frames, batch, unit)
      by_species[domain] = attack_metrics(levels(frames, test), rule, val_levels)
      domains[domain] = metrics.pad_metrics(test['scores'], test['labels'], rule=rule, **kwargs)
      domains[domain].update(scoring_unit=unit, num_videos=len(test['video']),
                             num_frames=len(frames.images))
      # The per-video scores, for baselines that combine runs (the paper's Fused: the mean of
      # the Single models' scores, `baselines.fused_metrics`).
      videos = {'scores': test['video'], 'labels': test['video_labels']}
      arrays[video_scores_file(domain)] = videos
      if domain == sets.target:
        arrays[VIDEO_SCORES] = videos
      if unit == 'frame':
        framewise = {'scores': test['scores'], 'labels': test['labels'],
                     'video': test['frame_video']}
        arrays[frame_scores_file(domain)] = framewise
        if domain == sets.target:
          arrays[FRAME_SCORES] = framewise
      fpr, tpr, _ = metrics.roc(test['scores'], test['labels'])
      curves[f'{centers} -> {domain}'] = (fpr, tpr)
    res = dict(domains[sets.target], target=sets.target, sources=list(sets.sources))
    if sets.protocol:   # every training source named ('O&C&I+celeb -> M'; sources' `protocol`)
      res['protocol'] = sets.protocol
    res['in_domain'] = {k: v for k, v in metrics.pad_metrics(
        val['scores'], val['labels'], rule=in_domain_rule).items() if k in METRIC_KEYS}
    res['domains'] = {d: {k: m[k] for k in METRIC_KEYS} for d, m in domains.items()}
    # (getattr: inputs made before the field existed, as the tests' stand-ins, have none.)
    res.update(personal_in_domain(getattr(inputs, 'personal_live_logits', None), sets, setup,
                                  batch, unit, in_domain_rule, inputs.live_logits))
    res['iso'] = {'in_domain': attack_metrics(val_levels, in_domain_rule), 'domains': by_species}
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
  same per scored domain, saying the scoring unit, how many units were scored, and the rule."""
  rule = {'test': "chosen on the target's own scores",
          'authors': "minimising |TPR + FPR - 1| on sklearn's default ROC of the target's own "
                     "scores, the FedGPAD code's rule",
          'validation': "chosen on the data centers' held-out subjects",
          'fixed': 'fixed'}[pad['threshold_rule']]
  # Results written before the scoring unit existed were all per video.
  unit = pad.get('scoring_unit', 'video')
  if unit == 'frame':
    scored = (f"scoring unit: frame, {pad['num_live'] + pad['num_spoof']} frames of "
              f"{pad['num_videos']} videos: {pad['num_live']} live, {pad['num_spoof']} attack; "
              'every frame scored on its own')
  else:
    frames = f" of {pad['num_frames']} frames" if 'num_frames' in pad else ''
    scored = (f"scoring unit: video, {pad['num_videos']} videos{frames}: {pad['num_live']} live, "
              f"{pad['num_spoof']} attack; frame scores averaged per video")
  in_domain = ('by the same rule' if pad['threshold_rule'] == 'authors'
               else 'threshold on their scores')
  # Results written before the protocol string existed name the data centers and the target.
  protocol = pad.get('protocol', f"{' & '.join(pad['sources'])} -> {pad['target']}")
  lines = [f"Presentation-attack detection, {protocol} "
           f"({scored}; threshold rule '{pad['threshold_rule']}': {pad['threshold']:.4f} "
           f"{rule}):", '',
           '| HTER (%) | EER (%) | AUC (%) | FAR (%) | FRR (%) |',
           '| --- | --- | --- | --- | --- |',
           '| ' + ' | '.join(_percent(pad[k]) for k in ('hter', 'eer', 'auc', 'far', 'frr'))
           + ' |', '',
           f"By domain, per {unit} (in-domain: the data centers' held-out subjects, {in_domain}):",
           '', '| domain | HTER (%) | EER (%) | AUC (%) |', '| --- | --- | --- | --- |',
           *(f'| {name} | ' + ' | '.join(_percent(m[k]) for k in ('hter', 'eer', 'auc')) + ' |'
             for name, m in [(f"in-domain ({' & '.join(pad['sources'])})", pad['in_domain']),
                             *pad['domains'].items()]), '']
  # Results written before each center was scored on its own have no 'in_domain_personal'.
  lines += personal_markdown(pad.get('in_domain_personal') or {}, in_domain)
  # Results written before the ISO error rates existed have no 'iso'.
  return lines + (iso_markdown(pad) if 'iso' in pad else [])


def personal_markdown(personal: dict, threshold: str) -> list[str]:
  """Each data center's held-out subjects scored by its own model (or, for a method without
  personal models, the shared one): a row per center, their mean and the worst 10 %.
  `threshold`: how the in-domain threshold is picked, in words."""
  if not personal.get('centers'):
    return []
  whose = ("its own personal model" if personal['model'] == 'personal'
           else 'the shared model (the method keeps no personal model)')
  rows = [*personal['centers'].items(), ('mean', personal['mean']),
          (f"worst 10 % ({personal['worst_centers']} of {len(personal['centers'])})",
           personal['worst'])]
  return [f"Each data center's held-out subjects, scored by {whose}, {threshold}:",
          '', '| data center | HTER (%) | EER (%) | AUC (%) |', '| --- | --- | --- | --- |',
          *(f'| {name} | ' + ' | '.join(_percent(m[k]) for k in ('hter', 'eer', 'auc')) + ' |'
            for name, m in rows), '']


def iso_markdown(pad: dict) -> list[str]:
  """The ISO/IEC 30107-3 table: per scored set and level, its threshold, APCER per attack
  species (a column per species any set holds), the worst, FLIP's pooled APCER, BPCER,
  OULU-NPU's ACER and FLIP's TPR@FPR = 1 %."""
  rows = [(f"in-domain ({' & '.join(pad['sources'])})", pad['iso']['in_domain']),
          *pad['iso']['domains'].items()]
  held = {name for _, by_level in rows for m in by_level.values() for name in m['apcer_species']}
  species = [name for name in SPECIES if name in held]
  header = ['set', 'level', 'threshold', *(f'APCER {name} (%)' for name in species),
            'APCER worst (%)', 'APCER pooled (%)', 'BPCER (%)', 'ACER (%)', 'TPR@FPR=1% (%)']
  lines = ["ISO/IEC 30107-3 error rates, frame and video level, each at the threshold the rule "
           f"'{pad['threshold_rule']}' picks on that level's scores (in-domain: on the held-out "
           "subjects' own). APCER per attack species and the worst of them; pooled: every attack "
           "in one proportion, as FLIP's code computes it; ACER = (worst APCER + BPCER) / 2, "
           "OULU-NPU's protocol average; TPR at FPR = 1 % on sklearn's default ROC, live "
           "positive, FLIP's (it reports the video level). — : a species the set does not hold, "
           "or (worst, ACER) attacks of unknown species:", '',
           '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
  for name, by_level in rows:
    for level, m in by_level.items():
      cells = [name, level, f"{m['threshold']:.4f}",
               *(_percent(m['apcer_species'].get(s)) for s in species),
               *(_percent(m[k]) for k in ('apcer_worst', 'apcer_pooled', 'bpcer', 'acer',
                                         'tpr_at_fpr_1pct'))]
      lines.append('| ' + ' | '.join(cells) + ' |')
  return lines + ['']
