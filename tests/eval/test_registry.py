"""The evaluator registry: which types exist and the order they run and report in."""

import ml_collections
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
                                       r"'pad', 'personalized', 'verification'\]"):
    eval_lib.evaluator_types(_evals('verification', 'pca'))
