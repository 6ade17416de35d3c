"""The 'membership' evaluator: its scores by hand, its known answers (AUC exactly 0.5 for a model
that never saw the members, by construction: the non-members are the members' own images, so
the two score multisets are equal; within 3 of the stated null standard deviation on independent
draws; exactly 1 for a model that memorized its members), at the frame level and over PAD
subjects (a subject's mean score, by hand), the members and non-members it draws from a
recognition and an anti-spoofing config (PAD subjects: every training subject against the same
centers' held-out ones, no id shared), and the one-line refusals of its check."""

import types

import numpy as np
import pytest

from fedjax_face import eval as eval_lib
from fedjax_face.data import sources
from fedjax_face.eval.privacy import membership
from tests.config_files import load_config

SIZE = 8


def _faces(rng, identities: int, per: int, offset: int = 0):
  """uint8 images of `identities` people (a prototype each, plus per-image noise), identities
  offset.. of each."""
  proto = rng.integers(40, 216, (identities, SIZE, SIZE, 3))
  labels = np.repeat(np.arange(identities), per)
  noise = rng.integers(-40, 41, (len(labels), SIZE, SIZE, 3))
  return np.clip(proto[labels] + noise, 0, 255).astype(np.uint8), labels + offset


def _random_embed(seed=0, dim=8):
  """A fixed random network that never trained: a projection of the pixels."""
  proj = np.random.default_rng(seed).normal(size=(SIZE * SIZE * 3, dim)).astype(np.float32)
  return lambda x: np.asarray(x).reshape(x.shape[0], -1) @ proj


def test_identity_scores_match_a_loop_by_hand():
  emb = np.array([[1, 0], [0.6, 0.8], [0, 1], [1, 1], [3, 0]], np.float64)
  ids = np.array([0, 0, 1, 1, 1])
  got = membership.identity_scores(emb, ids)
  unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
  for i in range(len(ids)):
    others = unit[(ids == ids[i]) & (np.arange(len(ids)) != i)]
    assert got['identity_cosine'][i] == pytest.approx(np.mean(others @ unit[i]), abs=1e-12)
    centroid = others.sum(0) / np.linalg.norm(others.sum(0))
    assert got['centroid_cosine'][i] == pytest.approx(centroid @ unit[i], abs=1e-12)
  # Image 0 and 1: cos 0.6 with each other; image 2 with [1,1] and [3,0]: (0.7071 + 0) / 2.
  assert got['identity_cosine'][:3] == pytest.approx([0.6, 0.6, np.sqrt(0.5) / 2])
  rows = np.array([[0, 2.0], [1, 0]])
  assert membership.class_scores(emb, rows) == pytest.approx([1, 0.8, 1, np.sqrt(0.5), 1])


def test_label_loss_is_minus_the_cross_entropy_of_the_true_label_at_any_logit():
  z = np.array([-800.0, -2.0, 0.0, 3.0, 800.0])
  live = np.array([True, False, True, True, False])
  p = 1 / (1 + np.exp(-z[1:4]))
  naive = np.where(live[1:4], np.log(p), np.log(1 - p))
  got = membership.label_loss_scores(z, live)
  np.testing.assert_allclose(got[1:4], naive, rtol=1e-12)
  assert got[0] == -800.0 and got[4] == -800.0   # exact where a float sigmoid would give -inf


def test_a_model_that_never_saw_the_members_gives_exactly_half():
  # By construction: the non-members are the members' own images under new identity names, so
  # any model that did not see who trained it scores the two sides as equal multisets.
  images, ids = _faces(np.random.default_rng(1), 6, 3)
  rows = np.random.default_rng(2).normal(size=(10, 8))
  res = membership.recognition_membership(_random_embed(), (images, ids), (images, ids + 100),
                                          rows, batch_size=5)
  assert sorted(res['attacks']) == ['centroid_cosine', 'class_cosine', 'identity_cosine']
  for attack in res['attacks'].values():
    assert attack['auc'] == 0.5 and attack['identity_auc'] == 0.5
  frames = images
  live = np.arange(len(frames)) % 3 == 0
  logits = lambda x: x[..., 3].mean(axis=(1, 2)) * 4 - 1   # a fixed detector on HSV's hue
  pad = membership.pad_membership(logits, (frames, live), (frames, live), batch_size=7)
  assert pad['attacks']['label_loss']['auc'] == 0.5


def test_independent_draws_under_a_random_model_stay_within_the_null_sd():
  rng = np.random.default_rng(3)
  members = _faces(rng, 40, 4)
  non_members = _faces(rng, 40, 4, offset=40)
  res = membership.recognition_membership(_random_embed(), members, non_members,
                                          'withheld', batch_size=64)
  assert res['not_run'] == {'class_cosine': 'withheld'}
  sd = membership.null_sd(40, 40)
  assert sd == pytest.approx(np.sqrt(81 / (12 * 1600)))
  for attack in res['attacks'].values():
    assert attack['identity_null_sd'] == sd
    assert abs(attack['identity_auc'] - 0.5) < 3 * sd
    assert abs(attack['auc'] - 0.5) < 3 * sd


def test_a_model_that_memorized_its_members_gives_one():
  rng = np.random.default_rng(4)
  members = _faces(rng, 10, 3)
  non_members = _faces(rng, 10, 3, offset=10)
  images = members[0].copy()
  images[:, 0, 0, 0] = members[1] + 1           # a marker the model recognises: identity + 1
  non_images = non_members[0].copy()
  non_images[:, 0, 0, 0] = 0                    # no marker: never seen
  codes = np.random.default_rng(5).normal(size=(10, 8)).astype(np.float32)
  random = _random_embed()

  def memorized(x):   # each member image -> its identity's code, exactly
    marker = np.round((np.asarray(x)[:, 0, 0, 0] * 0.5 + 0.5) * 255).astype(np.int32)
    return np.where(marker[:, None] > 0, codes[np.clip(marker - 1, 0, 9)], random(x))

  res = membership.recognition_membership(memorized, (images, members[1]),
                                          (non_images, non_members[1]), np.asarray(codes), 64)
  for name, attack in res['attacks'].items():
    assert attack['auc'] == 1.0 and attack['identity_auc'] == 1.0, name
  # The detector that memorized each training frame's label: a large logit of the right sign.
  live = np.arange(30) % 2 == 0
  sign = np.where(live, 1.0, -1.0)

  def detector(x):
    # rgb_hsv puts red in [0, 1] as channel 0 (then scaled to [-1, 1]).
    marker = np.round((np.asarray(x)[:, 0, 0, 0] * 0.5 + 0.5) * 255).astype(np.int32)
    return np.where(marker > 0, 30 * sign[np.clip(marker - 1, 0, 29)], 0.0)

  frames = np.zeros((30, SIZE, SIZE, 3), np.uint8)
  frames[:, 0, 0, 0] = np.arange(30) + 1
  pad = membership.pad_membership(detector, (frames, live), (np.zeros_like(frames), live), 16)
  assert pad['attacks']['label_loss']['auc'] == 1.0


def _setup(config):
  data = sources.load(config)
  fed_view, _ = sources.training_views(config, data, False)
  return eval_lib.EvalSetup(config, data, fed_view)


def test_recognition_draws_trained_images_against_held_out_identities():
  config = load_config('fedgc/fedgc', 'runlocal')
  config.evals.membership = membership.config_membership()
  assert membership.make_membership(config, config.evals.membership, None) is None   # off
  config.evals.membership.samples = 24
  membership.check_membership(config, config.evals.membership)
  setup = _setup(config)
  (images, ids), (non_images, non_ids) = membership.recognition_sets(
      config, config.evals.membership, setup, np.random.default_rng(0))
  assert images.shape == non_images.shape == (24, 16, 16, 3)
  assert np.bincount(ids).max() == 4 and np.unique(non_ids).size == 6
  trained = np.concatenate(setup.fed_view.client_indices)
  train = np.asarray(setup.benchmark.train_images)[trained]
  assert all(any(np.array_equal(im, t) for t in train) for im in images)
  assert not any(any(np.array_equal(im, t) for t in train) for im in non_images)
  evaluator = membership.make_membership(config, config.evals.membership, setup)
  out = evaluator.evaluate(eval_lib.EvalInputs(embed=_random_embed_16(), class_embeddings=None))
  res = out.results
  assert (res['num_members'], res['num_non_members'], res['member_identities']) == (24, 24, 6)
  assert 'keeps no class embeddings' in res['not_run']['class_cosine']
  assert set(out.scalars) == {f'{a}/{k}' for a in ('identity_cosine', 'centroid_cosine')
                              for k in ('auc', 'identity_auc')}
  assert out.markdown[0].startswith('Membership inference (a third party')


def _random_embed_16():
  proj = np.random.default_rng(0).normal(size=(16 * 16 * 3, 8)).astype(np.float32)
  return lambda x: np.asarray(x).reshape(x.shape[0], -1) @ proj


@pytest.fixture(scope='module')
def pad_setup():
  """The PAD runlocal benchmark (3 data centers of 4 subjects, 2 held out each), loaded once."""
  config = load_config('pad/fedgpad', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.samples = 1000
  return _setup(config)


def test_pad_members_are_training_frames_and_non_members_the_same_centers_held_out_subjects(
    pad_setup):
  setup = pad_setup
  config = setup.config
  membership.check_membership(config, config.evals.membership)
  (frames, live), (non_frames, non_live) = membership.pad_sets(
      config, config.evals.membership, setup, np.random.default_rng(0))
  validation = setup.benchmark.eval_sets['validation']
  # Every held-out frame of the data centers, and as many training frames of each class.
  assert len(non_frames) == len(validation.images)
  assert (np.sum(live), np.sum(~live)) == (np.sum(non_live), np.sum(~non_live))
  train = np.asarray(setup.benchmark.train_images)
  assert all(any(np.array_equal(f, t) for t in train) for f in frames)
  evaluator = membership.make_membership(config, config.evals.membership, setup)
  logits = lambda x: x[..., 3].mean(axis=(1, 2)) - 0.5
  res = evaluator.evaluate(eval_lib.EvalInputs(embed=None, class_embeddings=None,
                                               live_logits=logits)).results
  assert res['num_members'] == res['num_non_members'] == len(validation.images)
  assert 0 <= res['attacks']['label_loss']['auc'] <= 1


def _frames(subjects, per: int):
  """`per` frames of each subject, frame j of a subject live when j is even; pixel (0, 0)'s red
  channel carries the frame's index + 1 (a marker a test detector reads back)."""
  subject = np.repeat(np.asarray(subjects), per)
  frames = np.zeros((len(subject), SIZE, SIZE, 3), np.uint8)
  frames[:, 0, 0, 0] = np.arange(len(subject)) + 1
  return frames, np.arange(len(subject)) % per % 2 == 0, subject


def _marker(x):
  """The marker of `_frames` read back from the detector's input (rgb_hsv: red in [-1, 1])."""
  return np.round((np.asarray(x)[:, 0, 0, 0] * 0.5 + 0.5) * 255).astype(np.int32)


def test_subject_level_scores_a_subject_by_its_frames_mean_loss():
  members, non_members = _frames([3, 7], 2), _frames([50], 2)
  # Logit of frame with marker m: 0 for m = 1..6, so every loss is log 2 but member subject 7's
  # frames (markers 3, 4): live at logit 4 (loss log(1 + e^-4)), spoof at logit -1.
  logit = {3: 4.0, 4: -1.0}
  detector = lambda x: np.array([logit.get(int(m), 0.0) for m in _marker(x)])
  got = membership.pad_subject_membership(detector, members, non_members, batch_size=4)
  subject_7 = -(np.log1p(np.exp(-4.0)) + np.log1p(np.exp(-1.0))) / 2
  assert subject_7 > -np.log(2)              # the mean loss a subject's score is: above log 2
  # Subject 7 outscores the non-member, subject 3 ties it: AUC (1 + 0.5) / 2.
  assert got['auc'] == 0.75
  assert (got['member_subjects'], got['non_member_subjects']) == (2, 1)
  assert (got['member_frames'], got['non_member_frames']) == (4, 2)
  assert got['null_sd'] == membership.null_sd(2, 1)


def test_subject_level_known_answers_half_for_an_unseen_model_one_for_a_memorizing_one():
  frames, live, subject = _frames(np.arange(6), 4)
  sign = np.where(live, 1.0, -1.0)
  # Never saw the members: the non-members are the same frames under other subjects' names.
  fixed = lambda x: (np.asarray(x)[:, 0, 0, 0] > 0) * 2.0 - 1.0
  half = membership.pad_subject_membership(fixed, (frames, live, subject),
                                           (frames, live, subject + 100), batch_size=8)
  assert half['auc'] == 0.5
  # Memorized each training frame's label; the held-out subjects' frames carry no marker.
  memorized = lambda x: np.where(_marker(x) > 0, 30 * sign[np.clip(_marker(x) - 1, 0, 23)], 0.0)
  held_out = (np.zeros_like(frames), live, subject + 100)
  one = membership.pad_subject_membership(memorized, (frames, live, subject), held_out, 8)
  assert one['auc'] == 1.0 and one['member_subjects'] == one['non_member_subjects'] == 6


def test_pad_subject_level_members_are_every_training_subject_against_the_held_out_ones(
    pad_setup):
  config = pad_setup.config.copy_and_resolve_references()
  config.evals.membership.subject_level = True
  membership.check_membership(config, config.evals.membership)
  setup = eval_lib.EvalSetup(config, pad_setup.benchmark, pad_setup.fed_view)
  (frames, live, subject), (non_frames, non_live, non_subject) = membership.pad_subject_sets(
      config, setup)
  p = config.data.pad
  assert len(frames) == len(setup.benchmark.train_images)       # every training frame
  np.testing.assert_array_equal(live, np.asarray(setup.benchmark.train_labels) % 2 == 1)
  # (center, subject) ids: each center's training subjects, then its held-out ones, never shared.
  train_per_center = p.subjects - p.test_subjects
  assert np.unique(subject).size == len(p.sources) * train_per_center
  assert np.unique(non_subject).size == len(p.sources) * p.test_subjects
  assert not set(subject.tolist()) & set(non_subject.tolist())
  assert len(non_frames) == len(setup.benchmark.eval_sets['validation'].images)
  evaluator = membership.make_membership(config, config.evals.membership, setup)
  logits = lambda x: x[..., 3].mean(axis=(1, 2)) - 0.5
  out = evaluator.evaluate(eval_lib.EvalInputs(embed=None, class_embeddings=None,
                                               live_logits=logits))
  got = out.results['subject_level']['label_loss']
  assert (got['member_subjects'], got['non_member_subjects']) == (6, 6)
  assert (got['member_frames'], got['non_member_frames']) == (len(frames), len(non_frames))
  assert set(out.scalars) == {'label_loss/auc', 'label_loss/subject_auc'}
  assert out.markdown[-2].startswith('Over subjects (label_loss')


def test_subject_level_is_refused_where_no_subject_is_known():
  config = load_config('pad/fedgpad', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.update(samples=8, subject_level=True)
  config.data.source = 'pad_lists'
  with pytest.raises(ValueError, match=r"^config.evals.membership.subject_level=True with "
                                       r"data.source='pad_lists': that source has no "
                                       r"pad_subjects; expected a source that has \(pad\).$"):
    membership.check_membership(config, config.evals.membership)
  config = load_config('fedgc/fedgc', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.update(samples=8, subject_level=True)
  with pytest.raises(ValueError, match=r'subject_level=True with a recognition source; '
                                       r'expected False'):
    membership.check_membership(config, config.evals.membership)


@pytest.mark.parametrize('field, value, message', [
    ('samples', 10, r'config.evals.membership.samples=10; expected 0 \(off\) or a multiple of '
                    r'images_per_identity=4 covering at least 2 identities.'),
    ('samples', -1, r'config.evals.membership.samples=-1; expected a non-negative integer.'),
    ('images_per_identity', 1, r'images_per_identity=1; expected at least 2'),
    ('class_embeddings', 'yes', r"config.evals.membership.class_embeddings='yes'; expected one "
                                r"of \('auto', 'released', 'withheld'\)."),
])
def test_check_names_the_field(field, value, message):
  config = load_config('fedgc/fedgc', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.samples = 8
  config.evals.membership[field] = value
  with pytest.raises(ValueError, match=message):
    membership.check_membership(config, config.evals.membership)


def test_check_refuses_sources_without_non_members_public_only_training_and_attack_shift():
  config = load_config('fedgc/fedgc', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.data.source = 'insightface'
  membership.check_membership(config, config.evals.membership)   # off: any source
  config.evals.membership.samples = 8
  with pytest.raises(ValueError, match=r"config.evals.membership with "
                                       r"data.source='insightface': that source has no "
                                       r"held_out_identities; expected a source that has "
                                       r"\(.*synthetic.*\)."):
    membership.check_membership(config, config.evals.membership)
  config.data.source = 'synthetic'
  config.data.public_identities, config.data.centralized_on = 4, 'public'
  with pytest.raises(ValueError, match=r"data.centralized_on='public': a centralized run then "
                                       r"trains on the public identities alone"):
    membership.check_membership(config, config.evals.membership)
  config = load_config('pad/fedgpad', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.samples = 8
  config.data.pad.center_attacks = ('print', 'print', 'print')
  with pytest.raises(ValueError, match=r"data.pad.center_attacks=\('print', 'print', 'print'\): "
                                       r'the held-out subjects carry attacks'):
    membership.check_membership(config, config.evals.membership)
