"""The 'pad' evaluator: the target's HTER / EER / AUC, the in-domain error on the data centers'
held-out subjects, and every other scored domain, each from its own per-video scores."""

import types

import numpy as np

from fedjax_face.data.sources import pad as pad_source
from fedjax_face.eval.pad import evaluators, metrics
from tests.config_files import load_config


def _embed(images):
  # A fixed detector: the logit is the mean of the first HSV channel minus a constant.
  return {'logit': np.asarray(images, np.float64)[..., 3].mean(axis=(1, 2)) - 0.5}


def test_target_in_domain_and_extra_domains_are_each_measured_on_their_own_videos():
  config = load_config('pad/single', 'center=I,runlocal')
  bench = pad_source.load(config)
  evaluator = evaluators.make_pad(config, config.evals.pad,
                                  types.SimpleNamespace(benchmark=bench))
  out = evaluator.evaluate(types.SimpleNamespace(embed=_embed))
  batch = config.eval.batch_size

  def by_hand(frames):
    scores, labels = evaluators.video_level(_embed, frames, batch)
    return metrics.pad_metrics(scores, labels), scores, labels

  res = out.results
  assert (res['sources'], res['target']) == (['I'], 'O')
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
