"""Each data center's in-domain error with its own personal model (`personal_in_domain`): center
k's held-out frames (by `sources.pad.CenterFrames.center`, whether or not subjects are known) are
scored by client k's model alone, the mean and the worst 10 % over the centers (`worst_of`, by
hand); training-only centers named; {} without personal models or with one pooled client; one
line for frames that carry no center; on the embedded benchmark the centers equal the subject
ids' (the former split) and so do the figures, bit for bit. The personal models reach
`EvalInputs.personal_live_logits` from the run (`run/hooks/evaluation.evaluate`,
`eval.personal_inputs`)."""

import types

import numpy as np
import pytest

from fedjax_face import eval as eval_lib
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval.pad import evaluators
from fedjax_face.run.hooks import evaluation
from tests.config_files import load_config


def clients(num: int):
  """The evaluator's setup as the function reads it: the run's number of clients."""
  return types.SimpleNamespace(fed_view=types.SimpleNamespace(num_clients=num))


def one_center(k: int, subjects) -> pad_benchmark.PadSet:
  """Center k's held-out frames: 2 live and 2 attack videos of 2 frames. A frame's image is
  flat: red = 40 + 40 * k, blue = 200 (live) or 20 (attack)."""
  live = np.repeat([True, True, False, False], 2)
  images = np.zeros((8, 2, 2, 3), np.uint8)
  images[..., 0] = 40 + 40 * k
  images[..., 2] = np.where(live, 200, 20)[:, None, None]
  return pad_benchmark.PadSet(
      domain=str(k), images=images, depth=np.zeros((8, 2, 2), np.float32), live=live,
      attack=np.where(live, -1, 0).astype(np.int8), video=np.repeat(np.arange(4), 2),
      subject=np.asarray(subjects, np.int32), split=np.ones(8, np.int8))


def held_out_frames(subjects, centers=(0, 1)) -> pad_source.CenterFrames:
  """The centers' held-out frames as the sources join them (`pad_source.concat`); `subjects`:
  each center's own subject ids (-1: unknown, as `pad_lists` gives)."""
  return pad_source.concat([one_center(k, subjects) for k in centers], 'sources', centers)


def center_model(k: int, seen: list):
  """Client k's live logits: +5 / -5 for a live / attack frame (center 1's model: inverted), and
  it records the center of each frame it scores (the red channel of rgb_hsv, in [-1, 1])."""
  def live_logits(inputs):
    inputs = np.asarray(inputs)
    seen.extend((k, int(round((r + 1) * 127.5 - 40) / 40)) for r in inputs[:, 0, 0, 0])
    logit = np.where(inputs[:, 0, 0, 2] > 0, 5.0, -5.0)
    return logit if k == 0 else -logit
  return live_logits


@pytest.mark.parametrize('subjects', [np.repeat([0, 1], 4), np.full(8, -1)],
                         ids=['subjects known', 'no subject (pad_lists)'])
def test_each_center_is_scored_by_its_own_model(subjects):
  seen = []
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=held_out_frames(subjects))
  out = evaluators.personal_in_domain(lambda k: center_model(k, seen), sets, clients(2), 3, 'video',
                                      'test')
  assert sorted(set(seen)) == [(0, 0), (1, 1)]          # model k saw center k's frames alone
  assert len(seen) == 16
  by_center = out['in_domain_personal']['centers']
  assert by_center['O'] == {'hter': 0.0, 'eer': 0.0, 'auc': 1.0}   # separated
  assert by_center['C']['auc'] == 0.0                   # every live video below every attack
  expected_c = evaluators.metrics.pad_metrics([0.5 - 0.5 * np.tanh(2.5)] * 2
                                              + [0.5 + 0.5 * np.tanh(2.5)] * 2, [1, 1, 0, 0])
  assert by_center['C'] == {k: expected_c[k] for k in ('hter', 'eer', 'auc')}
  assert out['in_domain_personal']['mean'] == {k: (by_center['O'][k] + by_center['C'][k]) / 2
                                               for k in ('hter', 'eer', 'auc')}
  assert out['in_domain_personal']['worst'] == {'hter': by_center['C']['hter'],
                                                'eer': by_center['C']['eer'], 'auc': 0.0}
  assert out['in_domain_personal']['worst_centers'] == 1
  assert 'without_held_out' not in out['in_domain_personal']


def test_a_training_only_center_has_no_held_out_frames_and_is_named():
  # Centers O, celeb (training only: FLIP's CelebA-Spoof lists), C: the held-out frames are
  # centers 0 and 2's, and center 2's are scored by client 2's model, not by position 1's.
  seen = []
  sets = types.SimpleNamespace(sources=('O', 'celeb', 'C'),
                               validation=held_out_frames(np.full(8, -1), centers=(0, 2)))
  np.testing.assert_array_equal(sets.validation.center, np.repeat([0, 2], 8))
  models = lambda k: center_model(min(k, 1), seen)      # client 2 gets center 1's inverted model
  out = evaluators.personal_in_domain(models, sets, clients(3), 3, 'video', 'test')
  assert sorted(set(seen)) == [(0, 0), (1, 2)]
  got = out['in_domain_personal']
  assert list(got['centers']) == ['O', 'C'] and got['without_held_out'] == ['celeb']
  assert got['centers']['C']['auc'] == 0.0 and got['worst']['auc'] == 0.0


def test_worst_of_is_the_mean_of_the_worst_tenth_of_the_centers_by_hand():
  assert evaluators.worst_of([0.25, 0.5, 0.125], higher_is_worse=True) == 0.5
  assert evaluators.worst_of([0.75, 0.5, 0.875], higher_is_worse=False) == 0.5   # AUC
  # 11 centers: ceil(11 / 10) = 2, the mean of the two worst.
  values = [0.0625 * i for i in range(11)]
  assert evaluators.worst_of(values, higher_is_worse=True) == (0.625 + 0.5625) / 2
  assert evaluators.worst_of(values, higher_is_worse=False) == 0.0625 / 2


def test_nothing_without_any_model_or_with_one_pooled_client():
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=held_out_frames(np.zeros(8)))
  assert evaluators.personal_in_domain(None, sets, clients(2), 3, 'video', 'test') == {}
  assert evaluators.personal_in_domain(lambda k: None, sets, clients(1), 3, 'video', 'test') == {}
  assert evaluators.personal_in_domain(None, sets, clients(1), 3, 'video', 'test',
                                       center_model(0, [])) == {}


def test_without_personal_models_every_center_is_scored_by_the_shared_model():
  # FedPAD's case: center 1's own model would be inverted (AUC 0); the shared model is center
  # 0's, right on both centers, and it scores every frame of both.
  seen = []
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=held_out_frames(np.zeros(8)))
  shared = center_model(0, seen)
  out = evaluators.personal_in_domain(None, sets, clients(2), 3, 'video', 'test', shared)
  got = out['in_domain_personal']
  assert got['model'] == 'shared' and sorted(set(seen)) == [(0, 0), (0, 1)] and len(seen) == 16
  assert {name: m['auc'] for name, m in got['centers'].items()} == {'O': 1.0, 'C': 1.0}
  assert {name: m['hter'] for name, m in got['centers'].items()} == {'O': 0.0, 'C': 0.0}
  # Personal models given: they are used, whatever the shared model is.
  personal = evaluators.personal_in_domain(lambda k: center_model(k, []), sets, clients(2), 3,
                                           'video', 'test', shared)['in_domain_personal']
  assert personal['model'] == 'personal' and personal['centers']['C']['auc'] == 0.0


def test_the_report_shows_each_center_its_mean_and_worst():
  personal = {'model': 'shared', 'worst_centers': 1,
              'centers': {'O': {'hter': 0.125, 'eer': 0.25, 'auc': 0.9375},
                          'C': {'hter': 0.375, 'eer': 0.5, 'auc': 0.5}},
              'mean': {'hter': 0.25, 'eer': 0.375, 'auc': 0.71875},
              'worst': {'hter': 0.375, 'eer': 0.5, 'auc': 0.5}}
  assert evaluators.personal_markdown(personal, 'threshold on their scores') == [
      "Each data center's held-out subjects, scored by the shared model (the method keeps no "
      'personal model), threshold on their scores:', '',
      '| data center | HTER (%) | EER (%) | AUC (%) |', '| --- | --- | --- | --- |',
      '| O | 12.50 | 25.00 | 93.75 |', '| C | 37.50 | 50.00 | 50.00 |',
      '| mean | 25.00 | 37.50 | 71.88 |', '| worst 10 % (1 of 2) | 37.50 | 50.00 | 50.00 |', '']
  assert evaluators.personal_markdown({'centers': None, 'unavailable': 'x'}, '') == []
  assert evaluators.personal_markdown({}, '') == []


def test_frames_without_centers_say_so_in_one_line():
  plain = one_center(0, np.zeros(8))             # a PadSet, not joined by `concat`
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=plain)
  assert evaluators.personal_in_domain(lambda k: None, sets, clients(2), 3, 'video', 'test') == {
      'in_domain_personal': {'model': 'personal', 'centers': None,
                             'unavailable': 'the validation frames carry no data center '
                                            '(sources.pad.CenterFrames)'}}


@pytest.fixture(scope='module')
def embedded():
  """The embedded benchmark's O, C, I data centers, smaller than runlocal (2 held-out subjects
  a center, each with a live and an attack video of 2 frames), and its PadSets."""
  config = load_config('pad/fedpad', 'runlocal')
  config.data.pad.update(dict(subjects=4, test_subjects=2, live_videos=1, attack_videos=1,
                              frames=2))
  data = pad_source.load(config)
  return config, pad_source.pad_sets(config, data)


def subject_split_figures(live_logits, sets, batch: int) -> dict:
  """The figures as they were computed before frames carried their center: center k's frames
  were those whose subject id // SUBJECT_STRIDE is k."""
  by_subject = np.asarray(sets.validation.subject) // pad_source.SUBJECT_STRIDE
  figures = {}
  for k, name in enumerate(sets.sources):
    own = evaluators.scored(live_logits(k), sets.validation.take(by_subject == k), batch, 'video')
    figures[name] = {key: value for key, value in evaluators.metrics.pad_metrics(
        own['scores'], own['labels'], rule='test').items() if key in evaluators.METRIC_KEYS}
  return figures


def test_the_embedded_benchmarks_centers_are_its_subject_ids_and_give_the_same_figures(embedded):
  config, sets = embedded
  validation = sets.validation
  assert (validation.subject >= 0).all()
  np.testing.assert_array_equal(validation.center,
                                validation.subject // pad_source.SUBJECT_STRIDE)
  np.testing.assert_array_equal(np.unique(validation.center), [0, 1, 2])
  # Fixed detectors that differ by center (the HSV channel k's mean), so each center's figures
  # are its own model's.
  models = lambda k: (lambda x: np.asarray(x, np.float64)[..., 3 + k].mean(axis=(1, 2)) - 0.5)
  out = evaluators.personal_in_domain(models, sets, clients(3), config.eval.batch_size, 'video',
                                      'test')['in_domain_personal']
  assert out['centers'] == subject_split_figures(models, sets, config.eval.batch_size)
  worst = {'hter': max, 'eer': max, 'auc': min}       # the former 'worst': of 3 centers, one
  assert out['worst'] == {k: float(worst[k](m[k] for m in out['centers'].values()))
                          for k in evaluators.METRIC_KEYS}


def test_the_run_puts_personal_models_where_the_tasks_prediction_goes():
  personal = object()
  assert eval_lib.personal_inputs({'embed': None, 'live_logits': 'detector'}, personal) == {
      'personal_live_logits': personal}
  assert eval_lib.personal_inputs({'embed': 'model', 'live_logits': None}, personal) == {
      'personal_embed': personal}
  method = types.SimpleNamespace(
      personalized=lambda state: ('personal of', int(state.round)),
      eval_variables=lambda server: server, class_embeddings=lambda state: None)
  seen = []
  detector = eval_lib.Evaluator('fake', lambda inputs: seen.append(inputs))
  state = types.SimpleNamespace(server={'w': 1}, clients={}, round=np.int32(3))
  evaluation.evaluate([detector], lambda v: {'embed': None, 'live_logits': 'detector'}, method,
                      state)
  assert seen[0].personal_live_logits == ('personal of', 3)
  assert seen[0].personal_embed is None and seen[0].live_logits == 'detector'
