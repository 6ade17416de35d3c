"""Plug-ins: a data source and an evaluator defined only in this file, registered in
`data.sources.SOURCES` and `eval.EVALUATORS`, run through the driver (`experiment.train_and_evaluate`)
like the package's own: the source's section is checked before anything is written, its data train
the method, and the evaluator's results and report section are written as given."""

import json
import types

import ml_collections
import numpy as np
import pytest

from fedjax_face import eval as eval_lib, experiment, models
from fedjax_face.core import checks
from fedjax_face.data import sources, views
from fedjax_face.data.types import FaceBenchmark
from tests import saved_checkpoints
from tests.config_files import load_config

# ------------------------------------------------------------------------------------------------
# The toy data source: a few identities of random uint8 images.
# ------------------------------------------------------------------------------------------------


def _toy_config_section() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.num_identities = 6
  c.images_per_identity = 4
  return c


def _toy_check_config(config) -> None:
  d = config.data.toy
  checks.check_int('data.toy.num_identities', d.num_identities)
  checks.check_int('data.toy.images_per_identity', d.images_per_identity)
  if d.num_identities < config.federated.num_clients:
    raise ValueError(f'config.data.toy.num_identities={d.num_identities}; the toy source needs one '
                     f'identity per client: expected at least federated.num_clients='
                     f'{config.federated.num_clients}.')


def _toy_images(seed: int, count: int, size: int) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def _toy_load(config) -> FaceBenchmark:
  d = config.data.toy
  n = d.num_identities * d.images_per_identity
  return FaceBenchmark(
      train_images=_toy_images(config.seed, n, config.data.image_size),
      train_labels=np.repeat(np.arange(d.num_identities), d.images_per_identity).astype(np.int32),
      num_identities=d.num_identities)


def _toy_data_fields(config) -> tuple[str, ...]:
  del config
  return ('data.toy.num_identities', 'data.toy.images_per_identity')


def _toy_describe(data) -> str:
  return f'{len(data.train_images)} toy images of {data.num_identities} identities'


TOY_SOURCE = types.ModuleType('toy_source')
TOY_SOURCE.__dict__.update(
    TASK='recognition', config_section=_toy_config_section, check_config=_toy_check_config,
    load=_toy_load, training_views=views.identity_views, data_fields=_toy_data_fields,
    describe=_toy_describe)

# ------------------------------------------------------------------------------------------------
# The toy evaluator: the mean embedding norm of fixed images.
# ------------------------------------------------------------------------------------------------

TOY_EVAL_SEED = 1234


def _mean_norm(embeddings) -> float:
  return float(np.mean(np.linalg.norm(np.asarray(embeddings, np.float64), axis=1)))


def _toy_markdown(mean_norm: float, num_images: int) -> str:
  return f'Toy evaluator: mean embedding norm {mean_norm:.6f} over {num_images} fixed images.'


def check_toy_eval(config, section) -> None:
  del config
  checks.check_int('evals.toy_eval.num_images', section.num_images)


def make_toy_eval(config, section, setup) -> eval_lib.Evaluator:
  images = _toy_images(TOY_EVAL_SEED, section.num_images, config.data.image_size)
  num_identities, num_clients = setup.benchmark.num_identities, setup.fed_view.num_clients

  def evaluate(inputs) -> eval_lib.EvalOutput:
    mean_norm = _mean_norm(inputs.embed(images))
    return eval_lib.EvalOutput(
        results={'mean_norm': mean_norm, 'num_images': section.num_images,
                 'num_identities': num_identities, 'num_clients': num_clients},
        scalars={'mean_norm': mean_norm}, figures={}, arrays={},
        markdown=[_toy_markdown(mean_norm, section.num_images), ''])

  return eval_lib.Evaluator('toy_eval', evaluate)


TOY_EVAL = types.ModuleType('toy_eval')
TOY_EVAL.__dict__.update(check_toy_eval=check_toy_eval, make_toy_eval=make_toy_eval)

# ------------------------------------------------------------------------------------------------
# Tests.
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def registered(monkeypatch):
  monkeypatch.setitem(sources.SOURCES, 'toy', TOY_SOURCE)
  monkeypatch.setitem(eval_lib.EVALUATORS, 'toy_eval', TOY_EVAL)


def toy_config():
  """FedPE runlocal (2 rounds, small CNN, 4 clients) on the toy source, with the toy evaluator
  alone."""
  config = load_config('fedpe')
  config.data.source = 'toy'
  config.data.toy = TOY_SOURCE.config_section()
  config.evals = ml_collections.ConfigDict()
  config.evals.toy_eval = ml_collections.ConfigDict({'num_images': 5})
  return config


def test_a_source_and_an_evaluator_of_a_test_run_through_the_driver(registered, tmp_path, capsys):
  del registered
  config = toy_config()
  assert config.num_rounds == 2
  assert sources.data_fields(config) == ('seed', 'data.source', 'data.image_size',
                                         'data.toy.num_identities', 'data.toy.images_per_identity')
  results = experiment.train_and_evaluate(config, str(tmp_path))
  assert 'data (toy): 24 toy images of 6 identities; evaluators [\'toy_eval\']' in (
      capsys.readouterr().out)

  # The mean norm again by hand: the final checkpoint's model on the same fixed images.
  state = saved_checkpoints.restore(tmp_path, 2)
  model = models.build_backbone(config.model)
  images = _toy_images(TOY_EVAL_SEED, 5, config.data.image_size)
  mean_norm = _mean_norm(eval_lib.make_embed(model)(state['server']['model'])(images))
  expected = {'mean_norm': mean_norm, 'num_images': 5, 'num_identities': 6, 'num_clients': 4}
  assert mean_norm > 0
  assert results['toy_eval'] == expected
  saved = json.loads((tmp_path / 'results.json').read_text())
  assert saved['toy_eval'] == expected
  assert not {'verification', 'identification', 'diagnostics'} & set(saved)   # only the toy one
  report = (tmp_path / 'report.md').read_text()
  assert _toy_markdown(mean_norm, 5) + '\n' in report.splitlines(keepends=True)
  assert saved['last_logged_round']['round'] == 2
  assert np.isfinite(saved['last_logged_round']['train_loss'])
  config_json = json.loads((tmp_path / 'config.json').read_text())
  assert config_json['data']['toy'] == {'num_identities': 6, 'images_per_identity': 4}


@pytest.mark.parametrize('section,field,value,match', [
    ('data.toy', 'num_identities', 3,
     r'^config\.data\.toy\.num_identities=3; the toy source needs one identity per client: '
     r'expected at least federated\.num_clients=4\.$'),
    ('data.toy', 'images_per_identity', 0,
     r'^config\.data\.toy\.images_per_identity=0; expected a positive integer\.$'),
    ('evals.toy_eval', 'num_images', 0,
     r'^config\.evals\.toy_eval\.num_images=0; expected a positive integer\.$'),
])
def test_a_wrong_field_of_a_plugin_is_refused_before_anything_is_written(
    registered, tmp_path, section, field, value, match):
  del registered
  config = toy_config()
  part = config
  for key in section.split('.'):
    part = part[key]
  part[field] = value
  workdir = tmp_path / 'run'
  with pytest.raises(ValueError, match=match):
    experiment.train_and_evaluate(config, str(workdir))
  assert not workdir.exists()


def test_an_unregistered_source_is_refused_naming_the_registered_ones(tmp_path):
  config = toy_config()   # data.source='toy' without the registration
  with pytest.raises(ValueError, match=r"config\.data\.source='toy'; expected one of "
                     r"\('synthetic', 'insightface', 'image_folder', 'tfds', 'fedfr_split', "
                     r"'client_folders', 'pad', 'pad_lists'\)\."):
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()
