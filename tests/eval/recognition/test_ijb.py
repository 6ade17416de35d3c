"""IJB-B/C: the meta files in both layouts (the tests' writer, tests/ijb_files.py), alignment on a
face warped by a known similarity, the protocol's numbers against NumPy computations written here,
the evaluator end to end, and every bad file named."""

import math
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image

from fedjax_face import config_lib
from fedjax_face.data import align
from fedjax_face.data.formats import ijb as ijb_format
from fedjax_face.data.synthetic import identities, nuisance, render
from fedjax_face.eval.recognition import ijb
from tests import ijb_files


@pytest.fixture(scope='module')
def written(tmp_path_factory):
  root = tmp_path_factory.mktemp('ijbc')
  return root, ijb_files.write_ijb(root)


@pytest.mark.parametrize('layout', ijb_format.LAYOUTS)
def test_the_meta_files_read_back_as_written(tmp_path, layout):
  out = ijb_files.write_ijb(tmp_path, ijb_set='IJBB', layout=layout, num_subjects=2)
  p = ijb_format.read_protocol(tmp_path, 'IJBB', layout)
  assert p.names.tolist() == out.names
  np.testing.assert_array_equal(p.templates, out.templates)
  np.testing.assert_array_equal(p.medias, out.medias)
  np.testing.assert_allclose(p.landmarks, out.landmarks, atol=1e-4)   # written with 4 decimals
  np.testing.assert_allclose(p.faceness, out.faceness, atol=1e-4)
  np.testing.assert_array_equal(p.pairs, out.pairs)
  np.testing.assert_array_equal(p.labels, out.labels)
  for g in ('G1', 'G2'):
    assert list(zip(*map(np.ndarray.tolist, p.galleries[g]))) == out.galleries[g]
  assert list(zip(*map(np.ndarray.tolist, p.probes))) == out.probes


# -- alignment ---------------------------------------------------------------------------------

def test_the_similarity_of_the_template_moved_by_a_known_one_is_that_one():
  angle, scale, shift = 0.3, 1.7, np.array([5.0, -3.0])
  rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
  moved = align.ARCFACE_TEMPLATE @ (scale * rotation).T + shift
  matrix = align.similarity_transform(align.ARCFACE_TEMPLATE, moved)
  np.testing.assert_allclose(matrix[:, :2], scale * rotation, atol=1e-12)
  np.testing.assert_allclose(matrix[:, 2], shift, atol=1e-10)


def test_a_face_warped_by_a_known_similarity_aligns_back_to_the_unwarped_alignment():
  rng = np.random.default_rng(0)
  ip = identities.sample_identities(rng, 1)
  nz = nuisance.sample_nuisance(rng, 1, 'cfp_frontal', 1.0)
  nz['yaw'][:] = nz['pitch'][:] = 0.0
  image = render.render_faces(ip, nz, 112)[0]
  landmarks = render.face_landmarks(ip, nz, 112)[0]
  # The known similarity, applied by PIL (the test's own warp): output pixel p samples the input at
  # A p + b; so input point q lands at A^-1 (q - b). PIL samples at pixel centres offset by 0.5.
  angle, scale = -0.25, 1.2
  a = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]) / scale
  b = np.array([-50.0, -50.0])
  centre = lambda m, v: v + m @ np.full(2, 0.5) - np.full(2, 0.5)   # cv2 <-> PIL pixel centres
  warped = np.asarray(Image.fromarray(image).transform(
      (240, 240), Image.AFFINE, tuple(np.r_[a[0], centre(a, b)[0], a[1], centre(a, b)[1]]),
      resample=Image.BILINEAR))
  moved = (landmarks - b) @ np.linalg.inv(a).T
  assert (moved > 0).all() and (moved < 240).all()
  direct = align.align_face(image, landmarks).astype(np.float64)
  through = align.align_face(warped, moved).astype(np.float64)
  # The face itself (inside the crop, away from where it reaches the source's borders): two
  # bilinear resamplings apart, within a few grey levels; a crop one pixel off is not.
  face = (slice(30, 100), slice(25, 90))
  assert np.mean(np.abs(direct - through)[face]) < 3.0
  shifted = align.align_face(warped, moved + 1.0).astype(np.float64)
  assert np.mean(np.abs(direct - shifted)[face]) > 2 * np.mean(np.abs(direct - through)[face])
  # The aligned eyes sit on the template's: the crop of a face whose landmarks are the template.
  np.testing.assert_allclose(
      align.similarity_transform(landmarks, align.ARCFACE_TEMPLATE) @ np.r_[landmarks[0], 1.0],
      align.ARCFACE_TEMPLATE[0], atol=3.0)


def _bilinear_per_pixel(image, matrix, size):
  """cv2.warpAffine's bilinear warp with a black border, one output pixel at a time."""
  inverse = np.linalg.inv(np.vstack([matrix, [0.0, 0.0, 1.0]]))
  h, w, c = image.shape
  source = lambda y, x: image[y, x].astype(np.float64) if 0 <= y < h and 0 <= x < w else np.zeros(c)
  out = np.zeros((size, size, c), np.uint8)
  for y in range(size):
    for x in range(size):
      sx = inverse[0, 0] * x + inverse[0, 1] * y + inverse[0, 2]
      sy = inverse[1, 0] * x + inverse[1, 1] * y + inverse[1, 2]
      x0, y0 = math.floor(sx), math.floor(sy)
      fx, fy = sx - x0, sy - y0
      value = ((1 - fy) * ((1 - fx) * source(y0, x0) + fx * source(y0, x0 + 1))
               + fy * ((1 - fx) * source(y0 + 1, x0) + fx * source(y0 + 1, x0 + 1)))
      out[y, x] = np.clip(np.rint(value), 0, 255)
  return out


def test_the_warp_is_bilinear_pixel_by_pixel_with_a_black_border():
  rng = np.random.default_rng(0)
  for _ in range(6):
    image = rng.integers(0, 256, (rng.integers(3, 30), rng.integers(3, 30), 3), dtype=np.uint8)
    # Rotations, scales and shifts that reach past every edge of the source.
    angle, scale = rng.uniform(-math.pi, math.pi), rng.uniform(0.4, 3.0)
    matrix = np.c_[scale * np.array([[math.cos(angle), -math.sin(angle)],
                                     [math.sin(angle), math.cos(angle)]]), rng.uniform(-15, 15, 2)]
    np.testing.assert_array_equal(align.warp_affine(image, matrix, 17),
                                  _bilinear_per_pixel(image, matrix, 17))


# -- the protocol's numbers, against NumPy written here ----------------------------------------

def _reference_templates(features, templates, medias):
  """Per template: the sum over its medias of the media's mean feature, L2-normalised (loops)."""
  out = {}
  for t in np.unique(templates):
    total = 0.0
    for m in np.unique(medias[templates == t]):
      total = total + features[(templates == t) & (medias == m)].mean(0)
    out[int(t)] = total / np.linalg.norm(total)
  return out


def test_templates_and_pair_scores_are_the_pooling_written_out():
  rng = np.random.default_rng(1)
  templates = np.repeat([5, 9, 7], [3, 4, 2])
  medias = np.array([1, 1, 2, 3, 3, 3, 4, 5, 5])
  features = rng.normal(size=(9, 6))
  ids, feats = ijb.template_features(features, templates, medias)
  expected = _reference_templates(features, templates, medias)
  assert ids.tolist() == [5, 7, 9]
  for i, t in enumerate(ids):
    np.testing.assert_allclose(feats[i], expected[int(t)], atol=1e-12)
  pairs = np.array([[5, 9], [9, 7], [7, 5], [5, 5]])
  scores = ijb.pair_scores(ids, feats, pairs, block=3)
  np.testing.assert_allclose(scores, [expected[a] @ expected[b] for a, b in pairs], atol=1e-12)


def _reference_roc(scores, genuine):
  """sklearn's roc_curve, written out: one point per distinct threshold (highest first), then
  every point collinear with both neighbours along an axis-wise second difference of 0 dropped,
  (0, 0) first."""
  thresholds = sorted(set(scores.tolist()), reverse=True)
  tps = [int(np.sum(genuine & (scores >= t))) for t in thresholds]
  fps = [int(np.sum(~genuine & (scores >= t))) for t in thresholds]
  keep = [0] + [i for i in range(1, len(tps) - 1)
                if fps[i - 1] - 2 * fps[i] + fps[i + 1] or tps[i - 1] - 2 * tps[i] + tps[i + 1]]
  keep += [len(tps) - 1]
  fps, tps = [0] + [fps[i] for i in keep], [0] + [tps[i] for i in keep]
  return np.array(fps) / fps[-1], np.array(tps) / tps[-1]


@pytest.mark.parametrize('seed', [0, 1, 2])
def test_tar_at_far_is_the_nearest_roc_point_with_the_highest_tpr(seed):
  rng = np.random.default_rng(seed)
  genuine = rng.random(3000) < 0.1
  # Rounded scores: ties, vertical and horizontal runs, as real scores at float precision have.
  scores = np.round(np.where(genuine, rng.normal(1.0, 0.6, 3000), rng.normal(0, 0.5, 3000)), 2)
  fpr, tpr = _reference_roc(scores, genuine)
  got_fpr, got_tpr = ijb.roc_points(scores, genuine)
  np.testing.assert_array_equal(got_fpr, fpr)
  np.testing.assert_array_equal(got_tpr, tpr)
  fars = (1e-3, 1e-2, 0.05, 1e-1)
  got = ijb.tar_at_far(scores, genuine, fars)
  for far in fars:
    distance = np.abs(fpr - far)
    nearest = distance == distance.min()
    assert got[str(far)] == tpr[nearest].max(), far
  # The project's own rule: at most `far` of the impostors accepted.
  strict = ijb.tar_at_far(scores, genuine, fars, rule='far_at_most')
  for far in fars:
    impostors = np.sort(scores[~genuine])[::-1]
    k = math.floor(far * impostors.size * (1 + 1e-9))
    assert strict[str(far)] == np.mean(scores[genuine] > impostors[k]), far


def test_sklearn_gives_the_same_roc_when_installed():
  metrics = pytest.importorskip('sklearn.metrics')
  rng = np.random.default_rng(4)
  genuine = rng.random(2000) < 0.2
  scores = np.round(rng.normal(genuine * 0.8, 0.5), 2)
  fpr, tpr, _ = metrics.roc_curve(genuine, scores)
  got_fpr, got_tpr = ijb.roc_points(scores, genuine)
  np.testing.assert_array_equal(got_fpr, fpr)
  np.testing.assert_array_equal(got_tpr, tpr)


def test_1n_rates_are_the_brute_force_ones():
  rng = np.random.default_rng(5)
  gallery_subjects = np.arange(30) * 3
  gallery = rng.normal(size=(30, 8))
  gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
  probe_subjects = rng.choice(gallery_subjects, 200)
  probes = gallery[probe_subjects // 3] + rng.normal(0, 0.9, (200, 8))
  probes /= np.linalg.norm(probes, axis=1, keepdims=True)
  got = ijb.identify_mixed(probes, probe_subjects, gallery, gallery_subjects)
  similarity = probes @ gallery.T
  mate = probe_subjects // 3
  own = similarity[np.arange(200), mate]
  ahead = (similarity >= own[:, None]).sum(1) - 1
  for n in (1, 5, 10):
    assert got[f'rank_{n}'] == np.mean(ahead < n)
  negatives = np.sort(np.delete(similarity.reshape(-1), np.arange(200) * 30 + mate))[::-1]
  for f in (1e-2, 1e-1):
    assert got[f'tpir_{f}'] == np.mean(own > negatives[math.ceil(200 * f) - 1])
  # Open set on the first 15 subjects: the others' probes are non-mated.
  open_set = ijb.identify_open_set(probes, probe_subjects, gallery[:15], gallery_subjects[:15])
  mated = mate < 15
  sim = probes @ gallery[:15].T
  own = sim[np.flatnonzero(mated), mate[mated]]
  hit = (sim[mated] >= own[:, None]).sum(1) == 1
  non_mated_top = np.sort(sim[~mated].max(1))[::-1]
  assert open_set['rank_1'] == np.mean(hit) and open_set['mated'] == mated.sum()
  for f in (1e-2, 1e-1):
    k = math.floor(f * non_mated_top.size * (1 + 1e-9))
    expected = (None if k < 1 else np.sum(hit & (own > non_mated_top[k])) / mated.sum())
    assert open_set[f'tpir_{f}'] == expected, f


# -- the evaluator end to end ------------------------------------------------------------------

def _config(root, switches='insightface', layout='insightface'):
  config = ml_collections.ConfigDict({'algorithm': 'test', 'data': {'image_size': 16},
                                      'eval': {'batch_size': 8}})
  config.evals = ml_collections.ConfigDict({'ijb': config_lib.base_config().evals.ijb})
  # A fixture of 28 pairs, not the released set's millions: no published count to hold.
  config.evals.ijb.update(root=str(root), layout=layout, switches=switches,
                          check_pair_count=False)
  return config


def _pixels_embed(images):
  """A fixed linear 'model' of the aligned pixels: 12-d features, deterministic."""
  weights = jax.random.normal(jax.random.PRNGKey(0), (16 * 16 * 3, 12))
  return images.reshape(len(images), -1) @ weights


@pytest.mark.parametrize('switches', ['insightface', 'fedfr', ''])
def test_the_evaluator_embeds_aligned_crops_and_scores_both_protocols(written, switches):
  root, out = written
  config = _config(root, switches)
  ijb.check_ijb(config, config.evals.ijb)
  evaluator = ijb.make_ijb(config, config.evals.ijb, None)
  output = evaluator.evaluate(type('Inputs', (), {'embed': staticmethod(jax.jit(_pixels_embed))}))
  r = output.results
  assert (r['images'], r['templates'], r['genuine_pairs'], r['impostor_pairs']) == (32, 8, 4, 24)
  assert r['switches'] == {'insightface': 'FND', 'fedfr': 'ND', '': ''}[switches]
  # The numbers, recomputed here from the same aligned crops.
  protocol = ijb_format.read_protocol(root)
  crops = np.stack([align.align_face(image, lm, 16) for image, lm in
                    zip(out.images, protocol.landmarks)])
  x = crops.astype(np.float32) / 127.5 - 1.0
  feats = np.asarray(_pixels_embed(jnp.asarray(x)), np.float64)
  if 'F' in r['switches']:
    feats = feats + np.asarray(_pixels_embed(jnp.asarray(x[:, :, ::-1])), np.float64)
  if 'N' not in r['switches']:
    feats = feats / np.linalg.norm(feats, axis=1, keepdims=True)
  if 'D' in r['switches']:
    feats = feats * protocol.faceness[:, None]
  templates = _reference_templates(feats, protocol.templates, protocol.medias)
  scores = np.array([templates[a] @ templates[b] for a, b in protocol.pairs])
  expected = ijb.tar_at_far(scores, protocol.labels)
  assert r['tar'].keys() == expected.keys()
  for far in expected:
    assert r['tar'][far] == pytest.approx(expected[far], abs=1e-12)
  assert set(r['identification']) == {'G1', 'G2', 'mixed'}
  assert r['identification']['mixed']['probes'] == 4
  assert r['identification']['G1']['mated'] == 2
  assert 'ijb_roc.png' in output.figures
  text = '\n'.join(output.markdown)
  assert '| TAR (%) at FAR | 1e-06 | 1e-05 | 0.0001 | 0.001 | 0.01 | 0.1 |' in text
  assert '| mixed | 4 |' in text


def test_worker_processes_load_what_this_process_loads(written, monkeypatch):
  root, _ = written
  protocol = ijb_format.read_protocol(root)
  monkeypatch.setattr(ijb, 'TASK_IMAGES', 3)   # several tasks a chunk, one cut short
  here = list(ijb.aligned_chunks(protocol, 16, chunk=10, workers=1))
  workers = list(ijb.aligned_chunks(protocol, 16, chunk=10, workers=2))
  assert [len(c) for c in workers] == [len(c) for c in here] == [10, 10, 10, 2]
  np.testing.assert_array_equal(np.concatenate(workers), np.concatenate(here))
  np.testing.assert_array_equal(np.concatenate(here)[5], align.align_face(
      np.asarray(Image.open(os.path.join(root, 'loose_crop', protocol.names[5])).convert('RGB')),
      protocol.landmarks[5], 16))


# -- bad input ---------------------------------------------------------------------------------

def _copy(src, dst):
  import shutil
  shutil.copytree(src, dst)
  return dst


def test_bad_meta_files_are_named_with_the_line(written, tmp_path):
  root, _ = written
  meta = lambda r, kind: ijb_format.meta_path(str(r), 'IJBC', 'insightface', kind)
  # A missing meta file.
  bad = _copy(root, tmp_path / 'a')
  os.remove(meta(bad, 'template_pair_label.txt'))
  with pytest.raises(ijb_format.IJBFormatError, match=r'ijbc_template_pair_label.txt: no such '
                                                      'meta file'):
    ijb_format.read_protocol(bad)
  # A template naming a missing image.
  bad = _copy(root, tmp_path / 'b')
  os.remove(os.path.join(bad, 'loose_crop', '1_0_1_0.png'))
  with pytest.raises(ijb_format.IJBFormatError, match=r'ijbc_face_tid_mid.txt:11: template 110 '
                                                      r'names 1_0_1_0.png, which is not in'):
    ijb_format.read_protocol(bad)
  # A malformed landmark line.
  bad = _copy(root, tmp_path / 'c')
  lines = open(meta(bad, 'name_5pts_score.txt')).read().splitlines()
  lines[6] = lines[6].replace(' ', ' x', 1)
  open(meta(bad, 'name_5pts_score.txt'), 'w').write('\n'.join(lines) + '\n')
  with pytest.raises(ijb_format.IJBFormatError, match=r'ijbc_name_5pts_score.txt:7: .*expected 11 '
                                                      'numbers'):
    ijb_format.read_protocol(bad)
  # A gallery CSV with an unknown template.
  bad = _copy(root, tmp_path / 'd')
  with open(meta(bad, '1N_gallery_G2.csv'), 'a') as f:
    f.write('999,7,img/x.png\n')
  with pytest.raises(ijb_format.IJBFormatError, match=r'ijbc_1N_gallery_G2.csv:\d+: the row names '
                                                      r'template 999, which the image list'):
    ijb_format.read_protocol(bad)
  # Landmarks of other images than the image list's.
  bad = _copy(root, tmp_path / 'e')
  lines = open(meta(bad, 'name_5pts_score.txt')).read().splitlines()
  lines[2], lines[3] = lines[3], lines[2]
  open(meta(bad, 'name_5pts_score.txt'), 'w').write('\n'.join(lines) + '\n')
  with pytest.raises(ijb_format.IJBFormatError, match=r'ijbc_name_5pts_score.txt:3: the landmark '
                                                      'list does not follow'):
    ijb_format.read_protocol(bad)


# -- meta files that disagree: each well-formed line by line (issue 56, item 4) -------------------

def _paths(root):
  return {k: ijb_format.meta_path(str(root), 'IJBC', 'insightface', f'{k}.txt')
          for k in ('face_tid_mid', 'name_5pts_score', 'template_pair_label')}


def test_a_pair_list_cut_at_a_line_boundary_is_refused(written, tmp_path):
  # The case: 15 of the fixture's 28 pairs. Every template is still in some pair (the
  # first 7 pairs hold them all), so only the count of the whole list tells.
  root, out = written
  bad = _copy(root, tmp_path / 'cut15')
  p = _paths(bad)
  ijb_files.rewrite_meta(bad, 'template_pair_label.txt',
                         ijb_files.meta_lines(bad, 'template_pair_label.txt')[:15])
  assert len(ijb_format.read_protocol(bad).pairs) == 15   # no count to hold: taken
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad, expected_pairs=len(out.pairs))
  assert str(raised.value) == (
      f"{p['template_pair_label']}: 15 pairs; expected 28 (a list cut short? a protocol of other "
      'pairs turns this check off: evals.ijb.check_pair_count=False)')
  # The whole list holds the count.
  assert len(ijb_format.read_protocol(root, expected_pairs=28).pairs) == 28


@pytest.mark.parametrize('kept, unpaired', [
    (3, '4 of the 8 templates'),
    (1, '6 of the 8 templates'),
])
def test_templates_no_pair_names_are_counted_and_the_first_named(written, tmp_path, kept,
                                                                 unpaired):
  root, _ = written
  bad = _copy(root, tmp_path / f'cut{kept}')
  p = _paths(bad)
  ijb_files.rewrite_meta(bad, 'template_pair_label.txt',
                         ijb_files.meta_lines(bad, 'template_pair_label.txt')[:kept])
  first = {3: '120, 121, 130, 131', 1: '110, 111, 120, 121, 130, ...'}[kept]
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad)
  assert str(raised.value) == (
      f"{p['template_pair_label']}: no pair names {unpaired} of {p['face_tid_mid']} (first: "
      f'{first}); expected every template in some pair (a list cut short?)')


def test_images_without_a_landmark_line_are_counted_and_the_first_named(written, tmp_path):
  root, _ = written
  bad = _copy(root, tmp_path / 'two')
  p = _paths(bad)
  lines = ijb_files.meta_lines(bad, 'name_5pts_score.txt')
  ijb_files.rewrite_meta(bad, 'name_5pts_score.txt', lines[:4] + lines[5:8] + lines[9:])
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad)
  assert str(raised.value) == (
      f"{p['name_5pts_score']}: no landmark line for 2 of the 32 images of {p['face_tid_mid']} "
      '(first: 0_1_0_0.png, 1_0_0_0.png); expected one line per image')
  # The landmark list cut at a line boundary.
  ijb_files.rewrite_meta(bad, 'name_5pts_score.txt', lines[:20])
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad)
  assert str(raised.value) == (
      f"{p['name_5pts_score']}: no landmark line for 12 of the 32 images of {p['face_tid_mid']} "
      '(first: 2_1_0_0.png, 2_1_0_1.png, 2_1_1_0.png, 2_1_1_1.png, 3_0_0_0.png, ...); expected '
      'one line per image')


def test_landmarks_of_an_image_the_image_list_lacks_are_named_with_the_line(written, tmp_path):
  root, _ = written
  bad = _copy(root, tmp_path / 'extra')
  p = _paths(bad)
  lines = ijb_files.meta_lines(bad, 'name_5pts_score.txt')
  stranger = '9_9_9_9.png' + lines[0][len('0_0_0_0.png'):]
  ijb_files.rewrite_meta(bad, 'name_5pts_score.txt', lines + [stranger])
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad)
  assert str(raised.value) == (
      f"{p['name_5pts_score']}:33: 9_9_9_9.png, an image {p['face_tid_mid']} does not hold (1 "
      'such lines: 9_9_9_9.png); expected only its images')


def test_an_empty_image_list_is_refused(written, tmp_path):
  root, _ = written
  bad = _copy(root, tmp_path / 'empty')
  p = _paths(bad)
  ijb_files.rewrite_meta(bad, 'face_tid_mid.txt', [])
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb_format.read_protocol(bad)
  assert str(raised.value) == (f"{p['face_tid_mid']}: no images; expected \"image_name "
                               'template_id media_id" lines')


@pytest.mark.parametrize('ijb_set', ijb_format.SETS)
def test_the_evaluator_holds_a_released_set_to_its_published_pair_count(tmp_path, ijb_set):
  # Made, not evaluated: the check runs while the evaluator is made, before a run writes anything.
  ijb_files.write_ijb(tmp_path, ijb_set=ijb_set, num_subjects=2)   # 6 pairs
  config = _config(tmp_path)
  config.evals.ijb.update(set=ijb_set, check_pair_count=True)
  ijb.check_ijb(config, config.evals.ijb)
  published = {'IJBB': '8,010,270', 'IJBC': '15,658,489'}[ijb_set]
  assert f'{ijb_format.PUBLISHED_PAIRS[ijb_set]:,}' == published
  path = ijb_format.meta_path(str(tmp_path), ijb_set, 'insightface', 'template_pair_label.txt')
  with pytest.raises(ijb_format.IJBFormatError) as raised:
    ijb.make_ijb(config, config.evals.ijb, None)
  assert str(raised.value) == (
      f'{path}: 6 pairs; expected {published} (a list cut short? a protocol of other pairs turns '
      'this check off: evals.ijb.check_pair_count=False)')
  config.evals.ijb.check_pair_count = False
  assert ijb.make_ijb(config, config.evals.ijb, None) is not None


def test_every_meta_error_is_raised_while_the_evaluator_is_made(written, tmp_path):
  # A pair naming an unknown template, a landmark line of 9 numbers: raised by make_ijb itself,
  # not by a later evaluation (the driver makes the evaluators before it writes the workdir).
  root, _ = written
  p = _paths(root)
  for name, kind, edit, message in [
      ('unknown', 'template_pair_label.txt', lambda lines: lines + ['100 999 0'],
       f"{p['template_pair_label']}:29: the pair names template 999, which the image list "
       '(face_tid_mid) does not hold'),
      ('nine', 'name_5pts_score.txt',
       lambda lines: lines[:6] + [' '.join(lines[6].split()[:10])] + lines[7:],
       f"{p['name_5pts_score']}:7: 10 fields; expected \"image_name x1 y1 ... x5 y5 faceness\" "
       '(12)')]:
    bad = _copy(root, tmp_path / name)
    ijb_files.rewrite_meta(bad, kind, edit(ijb_files.meta_lines(bad, kind)))
    config = _config(bad)
    with pytest.raises(ijb_format.IJBFormatError) as raised:
      ijb.make_ijb(config, config.evals.ijb, None)
    assert str(raised.value) == message.replace(str(root), str(bad))


def test_a_corrupt_crop_is_named_by_the_worker_that_reads_it(written, tmp_path):
  root, _ = written
  bad = _copy(root, tmp_path / 'corrupt')
  protocol = ijb_format.read_protocol(bad)
  path = os.path.join(bad, 'loose_crop', protocol.names[20])
  with open(path, 'wb') as f:
    f.write(b'not an image')
  chunks = ijb.aligned_chunks(protocol, 16, chunk=8, workers=2)
  with pytest.raises(ijb_format.IJBFormatError, match=rf'{path}: cannot decode image \(12 bytes\)'):
    list(chunks)


def test_bad_config_fields_are_named(written):
  root, _ = written
  config = _config(root)
  config.evals.ijb.root = ''
  ijb.check_ijb(config, config.evals.ijb)            # off
  assert ijb.make_ijb(config, config.evals.ijb, None) is None
  for field, value, match in [
      ('set', 'IJBA', r"evals.ijb.set='IJBA'"),
      ('layout', 'mine', r"evals.ijb.layout='mine'"),
      ('switches', 'FX', r"config.evals.ijb.switches='FX'; expected a preset"),
      ('tar_rule', 'best', r"evals.ijb.tar_rule='best'"),
      ('workers', -1, r'evals.ijb.workers'),
      ('check_pair_count', None, r'config.evals.ijb.check_pair_count=None; expected True or '
       'False')]:
    config = _config(root)
    config.evals.ijb[field] = value
    with pytest.raises(ValueError, match=match):
      ijb.check_ijb(config, config.evals.ijb)
