"""The 'membership' evaluator: its scores by hand, its known answers (AUC exactly 0.5 for a model
that never saw the members, by construction: the non-members are the members' own images, so
the two score multisets are equal; within 3 of the stated null standard deviation on independent
draws; exactly 1 for a model that memorized its members), the members and non-members it draws
from a recognition and an anti-spoofing config, and the one-line refusals of its check."""

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


def test_pad_members_are_training_frames_and_non_members_the_same_centers_held_out_subjects():
  config = load_config('pad/fedgpad', 'runlocal')
  config.evals.membership = membership.config_membership()
  config.evals.membership.samples = 1000
  membership.check_membership(config, config.evals.membership)
  setup = _setup(config)
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
