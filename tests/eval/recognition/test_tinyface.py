"""TinyFace: the Testing_Set's three folders and its file-name labels (written by
`data/formats/tinyface.write_testing_set`), rank-k by hand on 2-D embeddings (ties against the
probe), the evaluator end to end against ranks counted here from the files, and every bad folder,
name and field named in one line."""

import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image

from fedjax_face.data.formats import tinyface as tinyface_format
from fedjax_face.eval import config_section
from fedjax_face.eval.recognition import tinyface

SIZE = 8


@pytest.fixture(scope='module')
def written(tmp_path_factory):
  """4 probes of identities 3, 3, 7, 12; 5 gallery images of 3, 7, 7, 12, 20; 4 distractors; of
  assorted small sizes, as TinyFace's faces are."""
  root = str(tmp_path_factory.mktemp('tinyface') / 'Testing_Set')
  rng = np.random.default_rng(1)
  face = lambda: rng.integers(0, 256, (rng.integers(6, 14), rng.integers(6, 14), 3), np.uint8)
  probes = [(i, face()) for i in (3, 3, 7, 12)]
  matches = [(i, face()) for i in (3, 7, 7, 12, 20)]
  tinyface_format.write_testing_set(root, probes, matches, [face() for _ in range(4)])
  return root


def test_the_testing_set_reads_back_as_written(written):
  t = tinyface_format.read_testing_set(written)
  assert t.probes == ['Probe/12_1.jpg', 'Probe/3_1.jpg', 'Probe/3_2.jpg', 'Probe/7_1.jpg']
  assert t.probe_ids.tolist() == [12, 3, 3, 7]
  assert t.matches == ['Gallery_Match/12_1.jpg', 'Gallery_Match/20_1.jpg',
                       'Gallery_Match/3_1.jpg', 'Gallery_Match/7_1.jpg', 'Gallery_Match/7_2.jpg']
  assert t.match_ids.tolist() == [12, 20, 3, 7, 7]
  assert t.distractors == [f'Gallery_Distractor/{k}.jpg' for k in (1, 2, 3, 4)]


# -- the numbers by hand -----------------------------------------------------------------------

def _unit(degrees):
  return np.array([np.cos(np.radians(degrees)), np.sin(np.radians(degrees))])


def test_ranks_by_hand_with_ties_against_the_probe():
  # Gallery: identity 1 at 0 deg, identity 2 at 90 deg; distractors at 10, 20 and 180 deg.
  # Probe a (identity 1, at 0 deg): its mate scores 1, above all: 0 ahead, rank 1.
  # Probe b (identity 2, at 45 deg, exactly (s, s)): its mate scores s, identity 1 ties it at s
  #   (counted against it), the distractors at 10 and 20 deg score cos 35 and cos 25 > s: 3 ahead.
  # Probe c (identity 1, at 15 deg): the distractors at 10 and 20 deg score cos 5 > cos 15: 2 ahead.
  s = 0.5 ** 0.5
  probes = np.stack([_unit(0), np.array([s, s]), _unit(15)])
  matches, match_ids = np.stack([_unit(0), _unit(90)]), np.array([1, 2])
  distractors = np.stack([_unit(10), _unit(20), _unit(180)])
  gallery = np.concatenate([matches, distractors])
  gallery_ids = np.array([1, 2, -1, -1, -1])
  ahead = tinyface.num_ahead(probes, np.array([1, 2, 1]), gallery, gallery_ids)
  assert ahead.tolist() == [0, 3, 2]
  # One probe's row of scores at a time gives the same counts.
  assert tinyface.num_ahead(probes, np.array([1, 2, 1]), gallery, gallery_ids, block=1).tolist() \
      == [0, 3, 2]
  r = tinyface.identify(probes, np.array([1, 2, 1]), matches, match_ids, distractors, (1, 3, 4))
  assert r == {'probes': 3, 'gallery_match': 2, 'distractors': 3, 'rank_1': 1 / 3,
               'rank_3': 2 / 3, 'rank_4': 1.0}


def test_the_best_of_several_mates_counts():
  # Identity 5 has two gallery images, at 90 and 0 deg; the probe at 0 deg is found by the second.
  ahead = tinyface.num_ahead(_unit(0)[None], np.array([5]), np.stack([_unit(90), _unit(0),
                                                                      _unit(30)]),
                             np.array([5, 5, -1]))
  assert ahead.tolist() == [0]


# -- the evaluator end to end ------------------------------------------------------------------

def _config(root, **fields):
  config = ml_collections.ConfigDict({'algorithm': 'test', 'data': {'image_size': SIZE},
                                      'eval': {'batch_size': 4}})
  config.evals = ml_collections.ConfigDict({'tinyface': config_section('tinyface')})
  config.evals.tinyface.update({'root': root, **fields})
  return config


WEIGHTS = jax.random.normal(jax.random.PRNGKey(1), (SIZE * SIZE * 3, 5))


@jax.jit
def _pixels_embed(images):
  return images.reshape(len(images), -1) @ WEIGHTS


def _expected_embedding(path):
  """The whole image resized (no crop), flip-summed and normalised, written out here."""
  image = Image.open(path).convert('RGB').resize((SIZE, SIZE), Image.Resampling.BILINEAR)
  x = jnp.asarray(np.asarray(image)[None], jnp.float32) / 127.5 - 1.0
  e = np.asarray(_pixels_embed(x) + _pixels_embed(x[:, :, ::-1]), np.float64)[0]
  return e / np.linalg.norm(e)


def test_the_evaluator_ranks_every_probe_against_matches_and_distractors(written):
  config = _config(written, ranks=(1, 2, 5))
  tinyface.check_tinyface(config, config.evals.tinyface)
  output = tinyface.make_tinyface(config, config.evals.tinyface, None).evaluate(
      type('Inputs', (), {'embed': staticmethod(_pixels_embed)}))
  # Ranks counted here, probe by probe, over every gallery file.
  files = lambda folder: sorted(os.listdir(os.path.join(written, folder)))
  probes = files('Probe')
  gallery = [('Gallery_Match', f) for f in files('Gallery_Match')] + [
      ('Gallery_Distractor', f) for f in files('Gallery_Distractor')]
  ranks = []
  for name in probes:
    p = _expected_embedding(os.path.join(written, 'Probe', name))
    identity = name.split('_')[0]
    scores = [(_expected_embedding(os.path.join(written, folder, f)) @ p,
               folder == 'Gallery_Match' and f.split('_')[0] == identity) for folder, f in gallery]
    best = max(score for score, mate in scores if mate)
    ranks.append(1 + sum(1 for score, mate in scores if not mate and score >= best))
  r = output.results
  assert (r['probes'], r['gallery_match'], r['distractors']) == (4, 5, 4)
  for k in (1, 2, 5):
    assert r[f'rank_{k}'] == np.mean(np.array(ranks) <= k)
  assert output.scalars == {f'rank_{k}': r[f'rank_{k}'] for k in (1, 2, 5)}
  text = '\n'.join(output.markdown)
  assert ('## TinyFace (closed set: 4 probes against 5 mated gallery images and 4 distractors)'
          in text)
  assert '| rank-1 (%) | rank-2 (%) | rank-5 (%) |' in text


def test_the_section_is_off_until_a_root_is_given():
  config = _config('')
  tinyface.check_tinyface(config, config.evals.tinyface)
  assert tinyface.make_tinyface(config, config.evals.tinyface, None) is None
  assert tuple(config_section('tinyface').ranks) == (1, 5, 20)


# -- bad input ---------------------------------------------------------------------------------

@pytest.fixture
def copy(written, tmp_path):
  root = str(tmp_path / 'Testing_Set')
  shutil.copytree(written, root)
  return root


def _error(root) -> str:
  config = _config(root)
  with pytest.raises(tinyface_format.TinyFaceFormatError) as e:
    tinyface.make_tinyface(config, config.evals.tinyface, None)
  return str(e.value)


def test_a_missing_or_empty_folder_is_named(copy):
  shutil.rmtree(os.path.join(copy, 'Gallery_Distractor'))
  assert _error(copy) == (f"{os.path.join(copy, 'Gallery_Distractor')}: no such folder; "
                          "expected TinyFace's Testing_Set (or an aligned copy) holding Probe, "
                          'Gallery_Match, Gallery_Distractor')
  os.makedirs(os.path.join(copy, 'Gallery_Distractor'))
  assert _error(copy) == (f"{os.path.join(copy, 'Gallery_Distractor')}: no images; expected "
                          "files ending ('.jpg', '.jpeg', '.png')")


@pytest.mark.parametrize('name', ['face_1.jpg', '12.jpg', '-3_1.jpg'])
def test_a_name_without_an_identity_is_named(copy, name):
  os.rename(os.path.join(copy, 'Gallery_Match', '20_1.jpg'),
            os.path.join(copy, 'Gallery_Match', name))
  assert _error(copy) == (f"{os.path.join(copy, 'Gallery_Match', name)}: the name does not "
                          'start with an identity; expected <identity>_<n>.jpg, identity an '
                          'integer')


def test_a_probe_of_an_identity_the_gallery_lacks_is_named(copy):
  os.rename(os.path.join(copy, 'Probe', '7_1.jpg'), os.path.join(copy, 'Probe', '99_1.jpg'))
  assert _error(copy) == (f"{os.path.join(copy, 'Probe', '99_1.jpg')}: identity 99, which no "
                          'Gallery_Match image has (1 such probes); expected every probe\'s '
                          'identity in Gallery_Match (the protocol is closed set)')


@pytest.mark.parametrize('field, value, message', [
    ('root', 7, "config.evals.tinyface.root=7; expected TinyFace's Testing_Set (Probe/, "
                "Gallery_Match/, Gallery_Distractor/), or '' for no TinyFace evaluation."),
    ('ranks', (1, 0), 'config.evals.tinyface.ranks=(1, 0); expected positive integers, e.g. '
                      '(1, 5, 20).'),
    ('ranks', (), 'config.evals.tinyface.ranks=(); expected positive integers, e.g. (1, 5, 20).'),
    ('flip', 'yes', "config.evals.tinyface.flip='yes'; expected True or False."),
])
def test_bad_config_fields_are_named(field, value, message):
  config = _config('x')
  section = ml_collections.ConfigDict({**config.evals.tinyface.to_dict(), field: value})
  with pytest.raises(ValueError) as e:
    tinyface.check_tinyface(config, section)
  assert str(e.value) == message
