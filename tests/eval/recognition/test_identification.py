"""Tests of 1:N identification: `fedjax_face.eval.recognition.identification` and the synthetic set maker."""

import json

import numpy as np
import pytest

from fedjax_face.data.synthetic import identification_set
from fedjax_face.data.synthetic import benchmark
from fedjax_face.eval.recognition import identification
from fedjax_face.eval.recognition import verification

# ----------------------------------------------------------------------------------------------
# Constructed embeddings with known answers.
# ----------------------------------------------------------------------------------------------


def _unit(*rows):
  rows = np.asarray(rows, np.float64)
  return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# Gallery: identities 10..13 on the axes e0..e3, plus two distractors (20, 21) on e4, e5.
GALLERY = np.eye(6)
GALLERY_LABELS = np.array([10, 11, 12, 13, 20, 21])


def test_rank_n_known_answer():
  probes = _unit(
      [1, 0, 0, 0, 0, 0],  # 10: exact match, rank 1.
      [0, 0.9, 0.1, 0, 0, 0],  # 11: rank 1.
      [0.8, 0, 0.6, 0, 0, 0],  # 12: identity 10 scores higher (0.8 > 0.6), rank 2.
      [0, 0, 0, 1, 0, 0.5],  # 13: rank 1 (distractor 21 scores lower).
  )
  labels = np.array([10, 11, 12, 13])
  got = identification.rank_n(probes, labels, GALLERY, GALLERY_LABELS, ranks=(1, 2, 5, 10))
  assert got == {1: 0.75, 2: 1.0, 5: 1.0, 10: 1.0}  # Ranks beyond the 6 templates are 1.0.


def test_rank_n_ties_count_against_the_probe_and_ignore_gallery_order():
  # Probe of 10 equidistant from 10 and 11 (a tie for the top score): rank 2. An all-zero probe of
  # 12 scores 0 against every template, tied with all five others: rank 6.
  probes = np.array([[1.0, 1.0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
  gallery = GALLERY
  labels = np.array([10, 12])
  expected = {1: 0.0, 2: 0.5, 5: 0.5, 6: 1.0}
  assert identification.rank_n(probes, labels, gallery, GALLERY_LABELS,
                               ranks=(1, 2, 5, 6)) == expected
  perm = np.array([5, 3, 1, 0, 4, 2])
  assert identification.rank_n(probes, labels, gallery[perm], GALLERY_LABELS[perm],
                               ranks=(1, 2, 5, 6)) == expected


def test_rank_n_is_cosine():
  # Scaling probes or templates must not change anything.
  probes = _unit([0.8, 0, 0.6, 0, 0, 0], [0, 1, 0, 0, 0, 0])
  labels = np.array([12, 11])
  scaled = identification.rank_n(3.0 * probes, labels, GALLERY * np.arange(1, 7)[:, None],
                                 GALLERY_LABELS, ranks=(1, 2))
  # On dot products the scaled template of 12 (row 2, x3: 1.8 > 0.8) would win; cosine ranks it 2nd.
  assert scaled == {1: 0.5, 2: 1.0}


def test_templates_average_then_normalise():
  emb = np.array([[2.0, 0.0], [0.0, 1.0], [0.0, 3.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
  labels = np.array([5, 5, 9, 7, 3, 3], np.int32)
  tmpl, ids = identification.templates(emb, labels)
  np.testing.assert_array_equal(ids, [3, 5, 7, 9])
  assert ids.dtype == np.int32
  assert tmpl.dtype == np.float32
  # Identity 5: mean [1, 0.5] -> [2, 1] / sqrt(5) (normalising first would give [1, 1] / sqrt(2)).
  np.testing.assert_allclose(tmpl, [[0, 0], [2 / 5**0.5, 1 / 5**0.5], [1, 0], [0, 1]], atol=1e-7)


def test_tpir_fpir_definitions():
  mated = np.array([0.95, 0.85, 0.8, 0.75, 0.3])
  hit = np.array([True, True, True, False, True])
  non_mated = np.array([0.9, 0.8, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
  tpir, fpir = identification.tpir_fpir(mated, hit, non_mated, [0.8, 0.0, 1.0, -np.inf])
  np.testing.assert_array_equal(tpir, [3 / 5, 4 / 5, 0.0, 4 / 5])
  np.testing.assert_array_equal(fpir, [3 / 10, 1.0, 0.0, 1.0])


def test_tpir_at_fpir_from_scores_known_answer():
  mated = np.array([0.95, 0.85, 0.8, 0.75, 0.3])
  hit = np.array([True, True, True, False, True])
  non_mated = np.array([0.3, 0.8, 0.9, 0.7, 0.8, 0.5, 0.4, 0.6, 0.2, 0.1])  # Order is irrelevant.
  tpir, threshold = identification.tpir_at_fpir_from_scores(
      mated, hit, non_mated, fpirs=(0.1, 0.2, 0.3, 1.0, 0.05))
  # FPIR 0.1: k = 1, accept > 0.8 (2nd highest): hits 0.95, 0.85; the hit at exactly 0.8 is out.
  # FPIR 0.2: k = 2, 3rd highest is 0.8 again (tie): same threshold.
  # FPIR 0.3: k = 3, accept > 0.7: hits 0.95, 0.85, 0.8 (0.75 is not a rank-1 hit).
  # FPIR 1: accept everything: 4 hits of 5. FPIR 0.05 < 1/10: unresolvable.
  assert tpir == {'0.1': 0.4, '0.2': 0.4, '0.3': 0.6, '1.0': 0.8, '0.05': None}
  assert threshold == {'0.1': np.nextafter(0.8, 1.0), '0.2': np.nextafter(0.8, 1.0),
                       '0.3': np.nextafter(0.7, 1.0), '1.0': None, '0.05': None}


def test_tpir_at_fpir_from_embeddings():
  # A 7th dimension, orthogonal to every template, completes the probes to unit length.
  gallery = np.eye(7)[:6]
  # Mated probes of 10, 11, 12 with true scores 0.9, 0.7 and a miss (12's probe is closer to 13).
  mated = _unit([0.9, 0, 0, 0, 0, 0, 0.19**0.5], [0, 0.7, 0, 0, 0, 0, 0.51**0.5],
                [0, 0, 0.5, 0.8, 0, 0, 0.11**0.5])
  # Ten non-mated probes whose top score is s = 0.05, 0.15, ..., 0.95 (against identity 10).
  s = np.arange(10) * 0.1 + 0.05
  non_mated = np.zeros((10, 7))
  non_mated[:, 0], non_mated[:, 6] = s, np.sqrt(1 - s**2)
  probes = np.concatenate([mated, non_mated])
  labels = np.r_[10, 11, 12, np.arange(100, 110)]
  is_mated = np.r_[np.ones(3, bool), np.zeros(10, bool)]
  tpir, threshold = identification.tpir_at_fpir(probes, labels, is_mated, gallery,
                                                 GALLERY_LABELS, fpirs=(0.1, 0.2, 0.3, 0.01))
  # Thresholds just above the 2nd / 3rd / 4th highest non-mated score: 0.85, 0.75, 0.65.
  assert tpir == {'0.1': 1 / 3, '0.2': 1 / 3, '0.3': 2 / 3, '0.01': None}
  np.testing.assert_allclose([threshold['0.1'], threshold['0.2'], threshold['0.3']],
                             [0.85, 0.75, 0.65], atol=1e-12)
  assert threshold['0.01'] is None


def test_evaluate_identification_counts_and_metrics():
  # Two gallery images per identity: templates are their normalised means.
  gallery = np.repeat(GALLERY, 2, axis=0)
  gallery_labels = np.repeat(GALLERY_LABELS, 2)
  probes = np.concatenate([
      _unit([1, 0, 0, 0, 0, 0], [0.8, 0, 0.6, 0, 0, 0]),  # 10 rank 1 (score 1); 12 rank 2.
      _unit([0.5, 0, 0, 0, 0, 1], [0.2, 0, 0, 0, 0, 1])])  # Non-mated.
  labels = np.array([10, 12, 30, 31])
  is_mated = np.array([True, True, False, False])
  res = identification.evaluate_identification(gallery, gallery_labels, probes, labels, is_mated,
                                               ranks=(1, 2), fpirs=(0.5, 0.1))
  json.dumps(res)  # Strict JSON (no NaN / inf).
  assert res['num_gallery_images'] == 12
  assert res['num_gallery_identities'] == 6
  assert res['num_enrolled'] == 2  # 10 and 12; 11, 13, 20, 21 are never searched for.
  assert res['num_distractors'] == 4
  assert (res['num_probes'], res['num_mated'], res['num_non_mated']) == (4, 2, 2)
  assert (res['rank_1'], res['rank_2']) == (0.5, 1.0)
  # Non-mated top scores (against distractor 21): 1/sqrt(1.04) and 1/sqrt(1.25). FPIR 0.5: k = 1,
  # threshold just above the 2nd highest, 1/sqrt(1.25); only the probe of 10 is a hit (score 1).
  assert res['tpir_at_fpir'] == {'0.5': 0.5, '0.1': None}
  assert res['fpir_at_threshold'] == {'0.5': 0.5, '0.1': None}
  assert res['tpir_at_fpir_threshold']['0.5'] == pytest.approx(1 / 1.25**0.5)
  assert res['min_resolvable_fpir'] == 0.5
  assert res['protocol'] == identification.PROTOCOL.format(flip='flip-sum')


# ----------------------------------------------------------------------------------------------
# Errors.
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize('probe_emb,probe_labels,gallery_emb,gallery_labels,message', [
    (np.eye(6)[:2], np.array([10, 99]), GALLERY, GALLERY_LABELS, 'not in the gallery'),
    (np.eye(6)[:2], np.array([10]), GALLERY, GALLERY_LABELS, 'probe_labels must have shape'),
    (np.eye(6)[:2], np.array([10, 11]), GALLERY, GALLERY_LABELS[:5], 'gallery_labels must'),
    (np.eye(6)[:2, :5], np.array([10, 11]), GALLERY, GALLERY_LABELS, 'embedding sizes differ'),
    (np.zeros((0, 6)), np.array([], int), GALLERY, GALLERY_LABELS, 'probe_emb is empty'),
    (np.eye(6)[:2], np.array([10, 11]), np.zeros((0, 6)), np.array([], int), 'gallery_emb is'),
    (np.eye(6)[0], np.array([10]), GALLERY, GALLERY_LABELS, r'must be \[N, d\]'),
    (np.eye(6)[:2], np.array([10, 11]), GALLERY, np.array([10, 11, 12, 13, 20, 10]), 'unique'),
    (np.eye(6)[:2], np.array([10.0, 11.0]), GALLERY, GALLERY_LABELS, 'must be integers'),
    (np.full((2, 6), np.nan), np.array([10, 11]), GALLERY, GALLERY_LABELS, 'NaN or inf'),
])
def test_rank_n_errors(probe_emb, probe_labels, gallery_emb, gallery_labels, message):
  with pytest.raises(ValueError, match=message):
    identification.rank_n(probe_emb, probe_labels, gallery_emb, gallery_labels)


@pytest.mark.parametrize('labels,is_mated,fpirs,message', [
    ([10, 11, 12], [True, True, False], (0.1,), 'non-mated probes have an identity that is in'),
    ([10, 99, 98], [True, True, False], (0.1,), 'mated probes have an identity that is not in'),
    ([10, 11, 12], [True, True, True], (0.1,), 'no non-mated probes'),
    ([97, 98, 99], [False, False, False], (0.1,), 'no mated probes'),
    ([10, 11, 99], [1, 1, 0], (0.1,), 'probe_is_mated must be bool'),
    ([10, 11, 99], [True, True, False], (0.0,), 'fpirs must be in'),
    ([10, 11, 99], [True, True, False], (), 'fpirs is empty'),
])
def test_tpir_at_fpir_errors(labels, is_mated, fpirs, message):
  with pytest.raises(ValueError, match=message):
    identification.tpir_at_fpir(np.eye(6)[:3], np.array(labels), np.array(is_mated), GALLERY,
                                GALLERY_LABELS, fpirs=fpirs)


def test_other_argument_errors():
  with pytest.raises(ValueError, match='ranks must be positive'):
    identification.rank_n(np.eye(6)[:1], np.array([10]), GALLERY, GALLERY_LABELS, ranks=(1, 0))
  with pytest.raises(ValueError, match='labels must have shape'):
    identification.templates(np.eye(3), np.array([1, 2]))
  with pytest.raises(ValueError, match='mated_hit must be bool'):
    identification.tpir_at_fpir_from_scores([0.5], [1], [0.1])
  with pytest.raises(ValueError, match='non_mated_scores must be a non-empty'):
    identification.tpir_at_fpir_from_scores([0.5], [True], [])


# ----------------------------------------------------------------------------------------------
# identify(): embedding + evaluation.
# ----------------------------------------------------------------------------------------------


def _row_embed(x):
  """Per-row mean intensity `[B, H]`: invariant to the horizontal flip."""
  return x.mean(axis=(2, 3))


def _striped_set():
  """Images whose identity is the one bright row; probes of 0..3, non-mated 10..13."""

  def images(labels):
    img = np.zeros((len(labels), 16, 16, 3), np.uint8)
    img[np.arange(len(labels)), labels] = 255
    return img

  gallery_labels = np.r_[np.arange(8), np.arange(4)]  # Identities 0..3 twice, 4..7 distractors.
  probe_labels = np.r_[np.arange(4), np.arange(10, 14)]
  return identification_set.IdentificationSet(
      gallery_images=images(gallery_labels), gallery_labels=gallery_labels,
      probe_images=images(probe_labels), probe_labels=probe_labels,
      probe_is_mated=probe_labels < 10, name='striped')


def test_identify_exact_on_separable_images():
  res = identification.identify(_row_embed, _striped_set(), batch_size=3, fpirs=(0.25, 0.1))
  json.dumps(res)
  assert res['name'] == 'striped'
  assert (res['num_gallery_images'], res['num_gallery_identities']) == (12, 8)
  assert (res['num_enrolled'], res['num_distractors']) == (4, 4)
  assert (res['num_mated'], res['num_non_mated']) == (4, 4)
  assert (res['rank_1'], res['rank_5'], res['rank_10']) == (1.0, 1.0, 1.0)
  # Every non-mated probe has the same top score (one bright row off): the threshold sits just
  # above it, no false alarm, every mated probe (score 1) accepted.
  assert res['tpir_at_fpir'] == {'0.25': 1.0, '0.1': None}
  assert res['fpir_at_threshold'] == {'0.25': 0.0, '0.1': None}
  assert res['protocol'] == identification.PROTOCOL.format(flip='flip-sum')


def test_identify_matches_compute_embeddings_plus_evaluate():
  id_set = identification_set.make_identification_set(
      1, num_enrolled=6, num_distractors=10, num_non_mated=10, gallery_per_identity=2)
  embed_fn = lambda x: x.reshape(x.shape[0], -1)  # Raw pixels.
  res = identification.identify(embed_fn, id_set, batch_size=16, flip=False)
  gallery = verification.compute_embeddings(embed_fn, id_set.gallery_images, batch_size=16,
                                            flip=False)
  probes = verification.compute_embeddings(embed_fn, id_set.probe_images, batch_size=16,
                                           flip=False)
  expected = identification.evaluate_identification(gallery, id_set.gallery_labels, probes,
                                                    id_set.probe_labels, id_set.probe_is_mated)
  expected['protocol'] = identification.PROTOCOL.format(flip='no flip')
  assert res == {'name': 'synthetic_1n', **expected}
  assert 0.0 <= res['rank_1'] <= res['rank_5'] <= res['rank_10'] <= 1.0
  assert (res['num_enrolled'], res['num_distractors'], res['num_mated']) == (6, 10, 12)


def test_identify_validates_before_embedding():
  good = _striped_set()

  def never(x):
    raise AssertionError('embed_fn must not be called on a malformed set')

  bad = identification_set.IdentificationSet(
      gallery_images=good.gallery_images, gallery_labels=good.gallery_labels,
      probe_images=good.probe_images, probe_labels=np.r_[np.arange(3), 99, np.arange(10, 14)],
      probe_is_mated=good.probe_is_mated)
  with pytest.raises(ValueError, match='not in the gallery'):
    identification.identify(never, bad)
  with pytest.raises(ValueError, match='probe_labels must have shape'):
    identification_set.IdentificationSet(
        gallery_images=good.gallery_images, gallery_labels=good.gallery_labels,
        probe_images=good.probe_images, probe_labels=good.probe_labels[:3],
        probe_is_mated=good.probe_is_mated[:3])


# ----------------------------------------------------------------------------------------------
# The synthetic identification set.
# ----------------------------------------------------------------------------------------------

SMALL = dict(image_size=32, num_enrolled=12, num_distractors=30, num_non_mated=16,
             gallery_per_identity=2, probes_per_identity=3)


@pytest.fixture(scope='module')
def small_set():
  return identification_set.make_identification_set(7, **SMALL)


def test_set_shapes_and_dtypes(small_set):
  s = small_set
  num_gallery = (12 + 30) * 2
  num_probes = 12 * 3 + 16
  assert s.gallery_images.shape == (num_gallery, 32, 32, 3)
  assert s.probe_images.shape == (num_probes, 32, 32, 3)
  assert s.gallery_images.dtype == s.probe_images.dtype == np.uint8
  assert s.gallery_labels.shape == (num_gallery,) and s.gallery_labels.dtype == np.int32
  assert s.probe_labels.shape == (num_probes,) and s.probe_labels.dtype == np.int32
  assert s.probe_is_mated.dtype == np.bool_
  assert (s.num_enrolled, s.num_distractors, s.num_mated, s.num_non_mated) == (12, 30, 36, 16)
  assert s.num_gallery_identities == 42
  # Layout: enrolled 0..11 then distractors 12..41 in the gallery; mated then non-mated probes.
  np.testing.assert_array_equal(s.gallery_labels, np.repeat(np.arange(42), 2))
  np.testing.assert_array_equal(s.probe_labels, np.r_[np.repeat(np.arange(12), 3),
                                                      np.arange(42, 58)])
  np.testing.assert_array_equal(s.probe_is_mated, np.arange(num_probes) < 36)
  assert s.identity_params['head_w'].shape == (58,)
  assert s.gallery_images.std() > 20 and s.probe_images.std() > 20


def test_set_label_disjointness(small_set):
  s = small_set
  enrolled = set(s.probe_labels[s.probe_is_mated])
  non_mated = set(s.probe_labels[~s.probe_is_mated])
  gallery = set(s.gallery_labels)
  distractors = gallery - enrolled
  assert enrolled <= gallery
  assert len(distractors) == 30
  assert not non_mated & gallery
  assert len(non_mated) == 16  # One probe per non-mated identity.
  # Every identity is a distinct parameter vector.
  params = np.concatenate([v.reshape(58, -1) for _, v in sorted(s.identity_params.items())], 1)
  assert np.unique(params, axis=0).shape[0] == 58


def test_set_identities_differ_from_make_benchmark(small_set):
  bench = benchmark.make_benchmark(seed=7, num_identities=20, images_per_identity=2,
                                   num_test_identities=20, num_pairs=20, num_folds=1)
  for other in (bench.train_identity_params, bench.test_identity_params):
    for key in ('head_w', 'eye_dx', 'nose_len', 'base_age'):
      assert not np.isin(small_set.identity_params[key], other[key]).any(), key


def test_set_deterministic_and_nested(small_set):
  again = identification_set.make_identification_set(7, **SMALL)
  for field in ('gallery_images', 'gallery_labels', 'probe_images', 'probe_labels',
                'probe_is_mated'):
    np.testing.assert_array_equal(getattr(again, field), getattr(small_set, field))
  other = identification_set.make_identification_set(8, **SMALL)
  assert not np.array_equal(other.gallery_images, small_set.gallery_images)
  # The enrolled gallery and the mated probes do not depend on the distractor / non-mated counts.
  fewer = identification_set.make_identification_set(
      7, **{**SMALL, 'num_distractors': 3, 'num_non_mated': 2})
  np.testing.assert_array_equal(fewer.gallery_images[:24], small_set.gallery_images[:24])
  np.testing.assert_array_equal(fewer.probe_images[:36], small_set.probe_images[:36])


def test_probes_are_harder_than_gallery(small_set):
  gallery_yaw = np.abs(small_set.gallery_nuisance['yaw']).mean()
  probe_yaw = np.abs(small_set.probe_nuisance['yaw']).mean()
  assert probe_yaw > 3 * gallery_yaw
  assert (np.abs(small_set.probe_nuisance['age']).mean() >
          2 * np.abs(small_set.gallery_nuisance['age']).mean())


def test_set_defaults():
  s = identification_set.make_identification_set(0)
  assert s.gallery_images.shape == (1100, 32, 32, 3)
  assert (s.num_enrolled, s.num_distractors, s.num_mated, s.num_non_mated) == (100, 1000, 200, 200)


@pytest.mark.parametrize('kwargs,message', [
    (dict(seed=-1), 'seed must be >= 0'),
    (dict(seed=0, num_enrolled=0), 'num_enrolled must be >= 1'),
    (dict(seed=0, num_non_mated=0), 'num_non_mated must be >= 1'),
    (dict(seed=0, num_distractors=-1), 'num_distractors must be >= 0'),
    (dict(seed=0, gallery_per_identity=1.5), 'gallery_per_identity must be an integer'),
    (dict(seed=0, image_size=8), 'image_size must be >= 16'),
    (dict(seed=0, difficulty=-1.0), 'difficulty must be'),
])
def test_set_argument_errors(kwargs, message):
  with pytest.raises(ValueError, match=message):
    identification_set.make_identification_set(**kwargs)
