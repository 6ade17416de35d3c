"""The 'pad' evaluator: the target's HTER / EER / AUC, the in-domain error on the data centers'
held-out subjects, and every other scored domain, each from its own per-video (or, with
`scoring_unit='frame'`, per-frame) scores, under the threshold rule the section names; and the
ISO/IEC 30107-3 error rates ('iso') of every scored set at both levels, each level at the
threshold the rule picks on its own scores, with the report's table."""

import types

import ml_collections
import numpy as np
import pytest

from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval.pad import evaluators, iso, metrics
from tests.config_files import load_config


def _setup(bench):
  """The run's setup as the evaluator reads it: the data and one client (Single's one center)."""
  return types.SimpleNamespace(benchmark=bench, fed_view=types.SimpleNamespace(num_clients=1))


def _live_logits(images):
  # A fixed detector: the logit is the mean of the first HSV channel minus a constant.
  return np.asarray(images, np.float64)[..., 3].mean(axis=(1, 2)) - 0.5


def test_target_in_domain_and_extra_domains_are_each_measured_on_their_own_videos():
  config = load_config('pad/single', 'center=I,runlocal')
  bench = pad_source.load(config)
  evaluator = evaluators.make_pad(config, config.evals.pad,
                                  _setup(bench))
  out = evaluator.evaluate(types.SimpleNamespace(live_logits=_live_logits))
  batch = config.eval.batch_size

  def by_hand(frames):
    scores, labels = evaluators.video_level(_live_logits, frames, batch)
    return metrics.pad_metrics(scores, labels), scores, labels

  res = out.results
  assert (res['sources'], res['target']) == (['I'], 'O')
  assert res['protocol'] == 'I -> O'             # sources/pad.py:protocol
  assert out.markdown[0].startswith('Presentation-attack detection, I -> O (scoring unit')
  assert sorted(res['domains']) == ['C', 'M', 'O', 'S']
  for domain in res['domains']:
    frames = bench.eval_sets['test' if domain == 'O' else f'test:{domain}']
    expected, scores, labels = by_hand(frames)
    assert res['domains'][domain] == {k: expected[k] for k in ('hter', 'eer', 'auc')}
    saved = out.arrays[evaluators.video_scores_file(domain)]
    np.testing.assert_array_equal(saved['scores'], scores)
    np.testing.assert_array_equal(saved['labels'], labels)
  assert res['hter'] == res['domains']['O']['hter']
  np.testing.assert_array_equal(out.arrays[evaluators.VIDEO_SCORES]['scores'],
                                out.arrays[evaluators.video_scores_file('O')]['scores'])
  # In-domain: I's own held-out subjects, threshold on their scores.
  expected, _, _ = by_hand(bench.eval_sets['validation'])
  assert res['in_domain'] == {k: expected[k] for k in ('hter', 'eer', 'auc')}
  assert set(np.unique(bench.eval_sets['validation'].subject)) == set(
      range(config.data.pad.subjects - config.data.pad.test_subjects, config.data.pad.subjects))
  assert out.scalars['in_domain/hter'] == res['in_domain']['hter']


def _by_level(frames, batch):
  """(scores, labels, species) of a set at each level, computed here: a video's species is its
  first frame's, in sorted video-id order."""
  scores = evaluators.frame_level(_live_logits, frames, batch)
  labels = frames.live.astype(np.int64)
  video, video_labels = metrics.video_scores(scores, frames.video, labels)
  _, first = np.unique(frames.video, return_index=True)
  return {'frame': (scores, labels, frames.attack),
          'video': (video, video_labels, frames.attack[first])}


def _check_iso(config, bench, out):
  """'iso' of every scored set at both levels, each at its own threshold under the section's
  rule; the scoring unit's threshold, BPCER and pooled APCER are 'threshold', 'frr', 'far'."""
  rule, unit = config.evals.pad.threshold_rule, config.evals.pad.scoring_unit
  res = out.results
  in_domain_rule = 'authors' if rule == 'authors' else 'test'
  sets = [(res['iso']['in_domain'], bench.eval_sets['validation'], in_domain_rule)] + [
      (res['iso']['domains'][d], bench.eval_sets['test' if d == 'O' else f'test:{d}'], rule)
      for d in res['domains']]
  for got, frames, set_rule in sets:
    assert list(got) == ['frame', 'video']
    for level, (scores, labels, species) in _by_level(frames, config.eval.batch_size).items():
      threshold = metrics.choose_threshold(set_rule, scores, labels)
      assert got[level] == dict(threshold=threshold, threshold_rule=set_rule,
                                **iso.iso_metrics(scores, labels, species,
                                                  pad_benchmark.ATTACKS, threshold))
      # The embedded benchmark labels every attack's species.
      assert set(got[level]['apcer_species']) == {
          pad_benchmark.ATTACKS[c] for c in np.unique(frames.attack) if c >= 0}
      assert got[level]['attacks_unknown_species'] == 0 and got[level]['acer'] is not None
  target = res['iso']['domains']['O'][unit]
  assert (target['threshold'], target['bpcer'], target['apcer_pooled']) == (
      res['threshold'], res['frr'], res['far'])
  # The report: the earlier tables unchanged (archived results without 'iso' render as before),
  # then the ISO table, a row per set and level.
  text = out.markdown
  start = next(i for i, line in enumerate(text) if line.startswith('ISO/IEC 30107-3'))
  assert evaluators.markdown({k: v for k, v in res.items() if k != 'iso'}) == text[:start]
  assert f"| O | {unit} | {target['threshold']:.4f} | " in '\n'.join(text[start:])
  # Header and separator, then the in-domain set and each domain at two levels.
  assert len([line for line in text[start:] if line.startswith('| ')]) == 2 + 2 * (
      1 + len(res['domains']))


def test_attack_metrics_validation_rule_takes_each_levels_threshold_from_validation():
  # Both levels: test live 0.6, 0.7; attacks print 0.2, replay 0.4.
  test = ([0.6, 0.7, 0.2, 0.4], [1, 1, 0, 0], [-1, -1, 0, 3])
  # Frame-level validation: live 0.65, 0.9; attacks 0.5, 0.3: |TPR + FPR - 1| is 0 first at 0.65.
  # On test, live 0.6 < 0.65 is rejected: BPCER 1/2; no attack accepted.
  # Video-level validation: live 0.35, 0.9; attacks 0.3, 0.1: 0 at 0.35. On test, replay
  # 0.4 >= 0.35 is accepted: APCER replay 1, print 0, pooled 1/2; BPCER 0; ACER (1 + 0) / 2.
  validation = {'frame': ([0.65, 0.9, 0.5, 0.3], [1, 1, 0, 0], [-1, -1, 0, 0]),
                'video': ([0.35, 0.9, 0.3, 0.1], [1, 1, 0, 0], [-1, -1, 0, 0])}
  got = evaluators.attack_metrics({'frame': test, 'video': test}, 'validation', validation)
  frame, video = got['frame'], got['video']
  assert (frame['threshold'], frame['threshold_rule']) == (0.65, 'validation')
  assert frame['apcer_species'] == {'print': 0.0, 'replay': 0.0}
  assert (frame['apcer_worst'], frame['apcer_pooled'], frame['bpcer'], frame['acer']) == (
      0.0, 0.0, 0.5, 0.25)
  assert video['threshold'] == 0.35
  assert video['apcer_species'] == {'print': 0.0, 'replay': 1.0}
  assert (video['worst_species'], video['apcer_pooled'], video['bpcer'], video['acer']) == (
      'replay', 0.5, 0.0, 0.5)


def _evaluate(threshold_rule='test', scoring_unit='video'):
  config = load_config('pad/single', 'center=I,runlocal')
  config.evals.pad.threshold_rule = threshold_rule
  config.evals.pad.scoring_unit = scoring_unit
  bench = pad_source.load(config)
  evaluator = evaluators.make_pad(config, config.evals.pad,
                                  _setup(bench))
  return config, bench, evaluator.evaluate(types.SimpleNamespace(live_logits=_live_logits))


def test_default_unit_is_the_video_and_the_report_says_so():
  config, bench, out = _evaluate()
  assert config.evals.pad.scoring_unit == 'video'
  res = out.results
  frames = bench.eval_sets['test']
  num_videos = len(np.unique(frames.video))
  assert (res['scoring_unit'], res['num_videos'], res['num_frames']) == (
      'video', num_videos, len(frames.images))
  assert res['num_live'] + res['num_spoof'] == num_videos < len(frames.images)
  assert evaluators.FRAME_SCORES not in out.arrays
  text = '\n'.join(out.markdown)
  assert (f"(scoring unit: video, {num_videos} videos of {len(frames.images)} frames: "
          f"{res['num_live']} live, {res['num_spoof']} attack; frame scores averaged per video; "
          f"threshold rule 'test': {res['threshold']:.4f} chosen on the target's own scores)"
          in text)
  assert 'By domain, per video' in text
  _check_iso(config, bench, out)


def test_frame_unit_scores_every_frame_on_its_own():
  config, bench, out = _evaluate(scoring_unit='frame')
  _, _, by_video = _evaluate(scoring_unit='video')
  batch = config.eval.batch_size
  res = out.results
  assert res['scoring_unit'] == 'frame'
  for domain in res['domains']:
    frames = bench.eval_sets['test' if domain == 'O' else f'test:{domain}']
    scores = evaluators.frame_level(_live_logits, frames, batch)
    labels = frames.live.astype(np.int64)
    expected = metrics.pad_metrics(scores, labels)
    assert res['domains'][domain] == {k: expected[k] for k in ('hter', 'eer', 'auc')}
    saved = out.arrays[evaluators.frame_scores_file(domain)]
    np.testing.assert_array_equal(saved['scores'], scores)
    np.testing.assert_array_equal(saved['labels'], labels)
    np.testing.assert_array_equal(saved['video'], frames.video)
    # The per-video files (Fused reads them) are the same whatever the unit.
    for name in ('scores', 'labels'):
      np.testing.assert_array_equal(out.arrays[evaluators.video_scores_file(domain)][name],
                                    by_video.arrays[evaluators.video_scores_file(domain)][name])
  frames = bench.eval_sets['test']
  assert res['num_live'] + res['num_spoof'] == res['num_frames'] == len(frames.images)
  assert res['num_live'] == int(frames.live.sum())
  assert res['num_videos'] == len(np.unique(frames.video))
  np.testing.assert_array_equal(out.arrays[evaluators.FRAME_SCORES]['scores'],
                                out.arrays[evaluators.frame_scores_file('O')]['scores'])
  # In-domain in frames too, threshold on their own scores.
  val = bench.eval_sets['validation']
  expected = metrics.pad_metrics(evaluators.frame_level(_live_logits, val, batch),
                                 val.live.astype(np.int64))
  assert res['in_domain'] == {k: expected[k] for k in ('hter', 'eer', 'auc')}
  text = '\n'.join(out.markdown)
  assert (f"(scoring unit: frame, {len(frames.images)} frames of {res['num_videos']} videos: "
          f"{res['num_live']} live, {res['num_spoof']} attack; every frame scored on its own;"
          in text)
  assert 'By domain, per frame' in text
  _check_iso(config, bench, out)


@pytest.mark.parametrize('unit', ['video', 'frame'])
def test_authors_rule_takes_the_threshold_on_sklearns_default_roc(unit):
  config, bench, out = _evaluate(threshold_rule='authors', scoring_unit=unit)
  batch = config.eval.batch_size
  res = out.results

  def unit_scores(frames):
    if unit == 'video':
      return evaluators.video_level(_live_logits, frames, batch)
    return evaluators.frame_level(_live_logits, frames, batch), frames.live.astype(np.int64)

  scores, labels = unit_scores(bench.eval_sets['test'])
  assert res['threshold'] == metrics.authors_threshold(scores, labels)
  expected = metrics.pad_metrics(scores, labels, rule='authors')
  assert {k: res[k] for k in expected} == expected
  assert res['threshold_rule'] == 'authors'
  # In-domain by the same rule, on the held-out subjects' own scores.
  expected = metrics.pad_metrics(*unit_scores(bench.eval_sets['validation']), rule='authors')
  assert res['in_domain'] == {k: expected[k] for k in ('hter', 'eer', 'auc')}
  text = '\n'.join(out.markdown)
  assert (f"threshold rule 'authors': {res['threshold']:.4f} minimising |TPR + FPR - 1| on "
          "sklearn's default ROC of the target's own scores, the FedGPAD code's rule)" in text)
  assert f'By domain, per {unit} (in-domain: ' in text and 'by the same rule' in text
  _check_iso(config, bench, out)


@pytest.mark.parametrize('field, value, match', [
    ('threshold_rule', 'dev', r"config.evals.pad.threshold_rule='dev'; expected one of \('test', "
                              r"'validation', 'authors'\)"),
    ('scoring_unit', 'clip', r"config.evals.pad.scoring_unit='clip'; expected one of \('video', "
                             r"'frame'\)"),
    ('scoring_unit', None, r'config.evals.pad.scoring_unit=None; expected one of'),
])
def test_check_pad_names_the_field(field, value, match):
  config = load_config('pad/fedgpad', 'runlocal')
  evaluators.check_pad(config, config.evals.pad)   # the defaults pass
  section = ml_collections.ConfigDict(config.evals.pad.to_dict())
  if value is None:
    del section[field]
  else:
    section[field] = value
  with pytest.raises(ValueError, match=match):
    evaluators.check_pad(config, section)
