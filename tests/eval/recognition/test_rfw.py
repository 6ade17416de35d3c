"""RFW: the pair lists and images in RFW's layout (written by `data/formats/rfw.write_race`), the
spread over races and a race's 10-fold accuracy by hand, the evaluator end to end against the
same numbers computed here from the files, and every bad list, line and field named in one
line."""

import os
import shutil

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from PIL import Image

from fedjax_face.data.formats import rfw as rfw_format
from fedjax_face.eval import config_section
from fedjax_face.eval.recognition import rfw, verification

SIZE = 8
RACES = ('African', 'Indian')   # two of the four keep the fixture small; the rest is the same code


def _race_fixture(rng, race):
  """10 folds of one genuine and one impostor pair over 4 identities of 3 images (sizes 10 x 12,
  so the evaluator crops and resizes)."""
  ids = [f'm.{race[:2].lower()}{k}' for k in range(4)]
  images = {(i, n): rng.integers(0, 256, (10, 12, 3), dtype=np.uint8) for i in ids
            for n in (1, 2, 3)}
  pairs = []
  for fold in range(10):
    a, b = ids[fold % 4], ids[(fold + 1) % 4]
    pairs += [(a, 1 + fold % 3, 1 + (fold + 1) % 3), (a, 1 + fold % 3, b, 1 + (fold + 2) % 3)]
  return pairs, images


@pytest.fixture(scope='module')
def written(tmp_path_factory):
  root = str(tmp_path_factory.mktemp('rfw') / 'test')
  rng = np.random.default_rng(0)
  fixtures = {race: _race_fixture(rng, race) for race in RACES}
  for race, (pairs, images) in fixtures.items():
    rfw_format.write_race(root, race, pairs, images)
  return root, fixtures


def test_the_pair_list_reads_back_as_written(written):
  root, fixtures = written
  pairs, _ = fixtures['Indian']
  read = rfw_format.read_pairs(root, 'Indian', os.path.join(root, 'data'), expected_pairs=20)
  with open(os.path.join(root, 'txts', 'Indian', 'Indian_pairs.txt')) as f:
    assert f.readline() == 'm.in0\t1\t2\n'          # tab-separated, no header line
  expected = []
  for pair in pairs:
    a, b = (pair[0], pair[1]), (pair[0], pair[2]) if len(pair) == 3 else (pair[2], pair[3])
    expected += [f'Indian/{a[0]}/{a[0]}_{a[1]:04d}.jpg', f'Indian/{b[0]}/{b[0]}_{b[1]:04d}.jpg']
  assert read.images == expected
  assert read.issame.tolist() == [True, False] * 10
  assert read.lines.tolist() == list(range(1, 21))
  assert os.path.isfile(os.path.join(root, 'data', 'Indian', 'm.in2', 'm.in2_0003.jpg'))


# -- the numbers by hand -----------------------------------------------------------------------

def test_the_spread_over_races_is_the_population_std_with_the_sample_one_beside_it():
  s = rfw.spread({'African': 0.9, 'Asian': 0.8, 'Caucasian': 0.7, 'Indian': 0.6})
  # mean 0.75; squared deviations 0.0225, 0.0025, 0.0025, 0.0225 (sum 0.05): / 4 and / 3.
  assert s['mean'] == pytest.approx(0.75, abs=1e-15)
  assert s['std'] == pytest.approx(0.0125 ** 0.5, abs=1e-15)
  assert s['std_sample'] == pytest.approx((0.05 / 3) ** 0.5, abs=1e-15)
  assert rfw.spread({'Asian': 0.8}) == {'mean': 0.8, 'std': 0.0, 'std_sample': None}


def test_a_race_accuracy_is_the_ten_fold_mean_by_hand():
  # 10 folds of (genuine, impostor); genuine pairs identical (squared distance 0), impostors
  # orthogonal (2), but fold 3's impostor is identical too. Every fold's threshold is 0.01 (the
  # first of the grid with 17 of the 18 training pairs right), so fold 3 scores 1/2, the others 1:
  # accuracy (9 + 0.5) / 10 = 0.95, population std over folds sqrt((9 x 0.05^2 + 0.45^2) / 10).
  e1, e2 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
  rows = []
  for fold in range(10):
    rows += [e1, e1, e1, e1 if fold == 3 else e2]
  pairs = rfw_format.RacePairs('Asian', [], np.array([True, False] * 10), np.arange(20))
  r = rfw.evaluate_race(np.array(rows), pairs)
  assert r['fold_accuracy'] == [1.0] * 3 + [0.5] + [1.0] * 6
  assert r['accuracy'] == pytest.approx(0.95, abs=1e-15)
  assert r['accuracy_std'] == pytest.approx(0.15, abs=1e-15)
  assert r['fold_threshold'] == pytest.approx([0.01] * 10, abs=1e-15)
  assert 'roc_fpr' not in r and 'roc_tpr' not in r


# -- the evaluator end to end ------------------------------------------------------------------

def _config(root, **fields):
  config = ml_collections.ConfigDict({'algorithm': 'test', 'data': {'image_size': SIZE},
                                      'eval': {'batch_size': 4}})
  config.evals = ml_collections.ConfigDict({'rfw': config_section('rfw')})
  config.evals.rfw.update({'root': root, 'races': RACES, 'check_pair_count': False,
                           'center_crop': 0.9, **fields})
  return config


WEIGHTS = jax.random.normal(jax.random.PRNGKey(0), (SIZE * SIZE * 3, 6))


@jax.jit
def _pixels_embed(images):
  """A fixed linear 'model' of the pixels: 6-d features."""
  return images.reshape(len(images), -1) @ WEIGHTS


def _expected_embedding(path):
  """The image at `path` cropped (the central 0.9 x 10 = 9 pixels square), resized, flip-summed
  and normalised, written out here."""
  image = np.asarray(Image.open(path).convert('RGB'))
  image = np.asarray(Image.fromarray(image[0:9, 1:10]).resize((SIZE, SIZE),
                                                               Image.Resampling.BILINEAR))
  x = jnp.asarray(image[None], jnp.float32) / 127.5 - 1.0
  e = np.asarray(_pixels_embed(x) + _pixels_embed(x[:, :, ::-1]), np.float64)[0]
  return e / np.linalg.norm(e)


def test_the_evaluator_scores_each_race_from_its_files(written):
  root, _ = written
  config = _config(root)
  rfw.check_rfw(config, config.evals.rfw)
  output = rfw.make_rfw(config, config.evals.rfw, None).evaluate(
      type('Inputs', (), {'embed': staticmethod(_pixels_embed)}))
  r = output.results
  assert list(r['races']) == list(RACES)
  accuracies = {}
  for race in RACES:
    pairs = rfw_format.read_pairs(root, race, os.path.join(root, 'data'), expected_pairs=None)
    embeddings = np.stack([_expected_embedding(os.path.join(root, 'data', p))
                           for p in pairs.images])
    expected = verification.evaluate_pairs(embeddings, pairs.issame)
    assert r['races'][race]['fold_accuracy'] == expected['fold_accuracy']
    assert r['races'][race]['num_pairs'] == 20
    accuracies[race] = expected['accuracy']
  values = np.array(list(accuracies.values()))
  assert r['mean'] == pytest.approx(values.mean(), abs=1e-12)
  assert r['std'] == pytest.approx(abs(values[0] - values[1]) / 2, abs=1e-12)
  assert r['std_sample'] == pytest.approx(abs(values[0] - values[1]) / 2 ** 0.5, abs=1e-12)
  assert set(output.scalars) == {'accuracy_African', 'accuracy_Indian', 'accuracy_mean',
                                 'accuracy_std', 'accuracy_std_sample'}
  text = '\n'.join(output.markdown)
  assert '| African | Indian | mean | std (sample) |' in text
  assert (f'| {100 * accuracies["African"]:.2f} | {100 * accuracies["Indian"]:.2f} | '
          f'{100 * values.mean():.2f} |') in text


def test_the_section_is_off_until_a_root_is_given(written):
  config = _config('')
  rfw.check_rfw(config, config.evals.rfw)
  assert rfw.make_rfw(config, config.evals.rfw, None) is None
  assert config_section('rfw').root == ''


# -- bad input ---------------------------------------------------------------------------------

@pytest.fixture
def copy(written, tmp_path):
  root = str(tmp_path / 'test')
  shutil.copytree(written[0], root)
  return root


def _make(root, **fields):
  config = _config(root, **fields)
  return rfw.make_rfw(config, config.evals.rfw, None)


def _pair_list(root, race='Indian'):
  return os.path.join(root, 'txts', race, f'{race}_pairs.txt')


def _set_line(path, number, text):
  with open(path) as f:
    lines = f.readlines()
  lines[number - 1] = text + '\n'
  with open(path, 'w') as f:
    f.writelines(lines)


def test_a_missing_pair_list_is_named(copy):
  os.remove(_pair_list(copy))
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy)
  assert str(e.value) == (f"{_pair_list(copy)}: no such pair list; expected RFW's test/ folder "
                          '(txts/<Race>/<Race>_pairs.txt) as the root')


@pytest.mark.parametrize('line', ['m.in0\t1', 'm.in0\t1\tx', 'm.in0\t0\t2', 'a\t1\tb\t2\t3'])
def test_a_malformed_pair_line_is_named_with_its_number(copy, line):
  _set_line(_pair_list(copy), 7, line)
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy)
  assert str(e.value) == (f'{_pair_list(copy)}:7: {line!r}; expected "<identity> <i> <j>" '
                          '(genuine) or "<identity_a> <i> <identity_b> <j>" (impostor), i and j '
                          'positive integers')


def test_an_unknown_identity_and_a_missing_image_are_named_with_the_line(copy):
  _set_line(_pair_list(copy), 4, 'm.in1\t2\tm.nobody\t1')
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy)
  race_dir = os.path.join(copy, 'data', 'Indian')
  assert str(e.value) == (f'{_pair_list(copy)}:4: identity m.nobody, which {race_dir} does not '
                          'hold (no folder of that name)')
  _set_line(_pair_list(copy), 4, 'm.in1\t2\tm.in3\t9')
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy)
  image = os.path.join(copy, 'data', 'Indian/m.in3/m.in3_0009.jpg')
  assert str(e.value) == f'{_pair_list(copy)}:4: image 9 of m.in3, {image}, is not there'


def test_a_missing_race_folder_and_a_list_of_another_length_are_named(copy):
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy, check_pair_count=True)
  assert str(e.value) == (f'{_pair_list(copy, "African")}: 20 pairs; expected 6,000 (a list cut '
                          'short? a protocol of other pairs turns this check off: '
                          'evals.rfw.check_pair_count=False)')
  shutil.rmtree(os.path.join(copy, 'data', 'African'))
  with pytest.raises(rfw_format.RFWFormatError) as e:
    _make(copy)
  assert str(e.value) == (f'{os.path.join(copy, "data", "African")}: no such folder; expected '
                          'the images of African as <images>/<Race>/<identity>/'
                          '<identity>_<nnnn>.jpg')


@pytest.mark.parametrize('field, value, message', [
    ('root', 3, "config.evals.rfw.root=3; expected RFW's test/ folder (txts/ and data/), or '' "
                'for no RFW evaluation.'),
    ('images', None, "config.evals.rfw.images=None; expected the images' folder "
                     "(<Race>/<identity>/...), or '' for <root>/data."),
    ('races', ('Asian', 'Martian'), "config.evals.rfw.races=('Asian', 'Martian'); expected "
                                    "distinct names among ('African', 'Asian', 'Caucasian', "
                                    "'Indian')."),
    ('races', ('Asian', 'Asian'), "config.evals.rfw.races=('Asian', 'Asian'); expected distinct "
                                  "names among ('African', 'Asian', 'Caucasian', 'Indian')."),
    ('center_crop', 0.0, 'config.evals.rfw.center_crop=0.0; expected a fraction in (0, 1].'),
    ('flip', 1, 'config.evals.rfw.flip=1; expected True or False.'),
])
def test_bad_config_fields_are_named(field, value, message):
  config = _config('x')
  section = ml_collections.ConfigDict({**config.evals.rfw.to_dict(), field: value})
  with pytest.raises(ValueError) as e:
    rfw.check_rfw(config, section)
  assert str(e.value) == message
