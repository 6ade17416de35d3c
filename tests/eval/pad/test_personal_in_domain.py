"""Each data center's in-domain error with its own personal model (`personal_in_domain`): center
k's held-out frames are scored by client k's model alone, the mean and the worst over the
centers; {} without personal models or with one pooled client; one line when the source names no
subject. The personal models reach `EvalInputs.personal_live_logits` from the run
(`run/hooks/evaluation.evaluate`, `eval.personal_inputs`)."""

import types

import numpy as np

from fedjax_face import eval as eval_lib
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval.pad import evaluators
from fedjax_face.run.hooks import evaluation


def clients(num: int):
  """The evaluator's setup as the function reads it: the run's number of clients."""
  return types.SimpleNamespace(fed_view=types.SimpleNamespace(num_clients=num))


def held_out_frames(subjects) -> pad_benchmark.PadSet:
  """Two centers' held-out frames, each: 2 live and 2 attack videos of 2 frames. A frame's image
  is flat: red = 40 + 40 * center, blue = 200 (live) or 20 (attack)."""
  center = np.repeat([0, 1], 8)
  live = np.tile(np.repeat([True, True, False, False], 2), 2)
  images = np.zeros((16, 2, 2, 3), np.uint8)
  images[..., 0] = (40 + 40 * center)[:, None, None]
  images[..., 2] = np.where(live, 200, 20)[:, None, None]
  return pad_benchmark.PadSet(
      domain='sources', images=images, depth=np.zeros((16, 2, 2), np.float32), live=live,
      attack=np.where(live, -1, 0).astype(np.int8), video=np.repeat(np.arange(8), 2),
      subject=np.asarray(subjects, np.int32), split=np.ones(16, np.int8))


def center_model(k: int, seen: list):
  """Client k's live logits: +5 / -5 for a live / attack frame (center 1's model: inverted), and
  it records the center of each frame it scores (the red channel of rgb_hsv, in [-1, 1])."""
  def live_logits(inputs):
    inputs = np.asarray(inputs)
    seen.extend((k, int(round((r + 1) * 127.5 - 40) / 40)) for r in inputs[:, 0, 0, 0])
    logit = np.where(inputs[:, 0, 0, 2] > 0, 5.0, -5.0)
    return logit if k == 0 else -logit
  return live_logits


def test_each_center_is_scored_by_its_own_model():
  seen = []
  subjects = np.repeat([0, 1, pad_source.SUBJECT_STRIDE, pad_source.SUBJECT_STRIDE + 1], 4)
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


def test_nothing_without_personal_models_or_with_one_pooled_client():
  subjects = np.repeat([0, 1, pad_source.SUBJECT_STRIDE, pad_source.SUBJECT_STRIDE + 1], 4)
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=held_out_frames(subjects))
  assert evaluators.personal_in_domain(None, sets, clients(2), 3, 'video', 'test') == {}
  assert evaluators.personal_in_domain(lambda k: None, sets, clients(1), 3, 'video', 'test') == {}


def test_a_source_without_subjects_says_so_in_one_line():
  sets = types.SimpleNamespace(sources=('O', 'C'), validation=held_out_frames(np.full(16, -1)))
  assert evaluators.personal_in_domain(lambda k: None, sets, clients(2), 3, 'video', 'test') == {
      'in_domain_personal': {'centers': None,
                             'unavailable': "the data source's lists name no subject, so a "
                                            "held-out frame's data center is unknown"}}


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
