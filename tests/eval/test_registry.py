"""The evaluator registry: which types exist and the order they run and report in."""

import ml_collections
import numpy as np
import pytest

from fedjax_face import eval as eval_lib


def _evals(*kinds):
  c = ml_collections.ConfigDict()
  c.evals = ml_collections.ConfigDict({kind: ml_collections.ConfigDict() for kind in kinds})
  return c


def test_evaluators_run_in_registry_order_not_name_order():
  # A ConfigDict lists these as diagnostics, identification, verification.
  config = _evals('diagnostics', 'verification', 'identification')
  assert eval_lib.evaluator_types(config) == ['verification', 'identification', 'diagnostics']


def test_deleted_sections_are_skipped():
  assert eval_lib.evaluator_types(_evals('diagnostics')) == ['diagnostics']
  assert eval_lib.evaluator_types(_evals()) == []


def test_unknown_evaluator_type_is_named():
  with pytest.raises(ValueError, match=r"config.evals.pca is not an evaluator type; expected one "
                                       r"of \['diagnostics', 'identification', 'ijb', "
                                       r"'inversion', 'leakage', 'membership', 'pad', "
                                       r"'personalized', 'rfw', 'tinyface', 'verification'\]"):
    eval_lib.evaluator_types(_evals('verification', 'pca'))


class _Detector:
  """A stand-in anti-spoofing model: its output is a dict of heads, as models/pad.py's."""

  def apply(self, variables, images, train):
    assert not train
    return {'logit': images.sum(axis=(1, 2, 3)) * variables['w'], 'depth': images}


def test_each_task_gets_its_own_prediction_and_none_of_the_other():
  predict = eval_lib.predictions(_Detector(), 'anti_spoofing')({'w': 2.0})
  assert predict['embed'] is None
  images = np.ones((3, 2, 2, 1), np.float32)
  np.testing.assert_array_equal(predict['live_logits'](images), np.full(3, 8.0, np.float32))
  inputs = eval_lib.EvalInputs(**predict, class_embeddings=None)
  assert inputs.embed is None and inputs.live_logits is predict['live_logits']
  assert set(eval_lib.predictions(_Detector(), 'recognition')({'w': 1.0})) == {'embed',
                                                                                'live_logits'}
