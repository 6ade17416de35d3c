"""A config per task: `config_lib.base_config(task)` holds the shared sections and the task's own,
each asked of the module that owns it, so a config of one task carries no field of the other."""

import pytest

from fedjax_face import config_lib, eval as eval_lib
from fedjax_face.data import sources, splits
from fedjax_face.models import heads
from tests.config_files import load_config

SPLIT_FIELDS = ('public_identities', 'private_test_fraction', 'centralized_on')


def sections(config) -> set[str]:
  return {key for key, value in config.items() if hasattr(value, 'items')}


def test_the_anti_spoofing_config_is_the_recognition_one_without_its_fields():
  recognition = config_lib.base_config('recognition')
  anti_spoofing = config_lib.base_config('anti_spoofing')
  assert sections(recognition) - sections(anti_spoofing) == {'head'}
  assert sections(anti_spoofing) <= sections(recognition)
  assert set(recognition.data) - set(anti_spoofing.data) == (
      set(SPLIT_FIELDS) | set(sources.of_task('recognition')))
  assert set(anti_spoofing.data) - set(recognition.data) == set(sources.of_task('anti_spoofing'))
  assert sorted(anti_spoofing.evals) == sorted(eval_lib.TASK_EVALUATORS['anti_spoofing'])
  assert set(eval_lib.TASK_EVALUATORS['anti_spoofing']) == {'pad', 'membership', 'inversion'}
  assert sorted(recognition.evals) == sorted(eval_lib.TASK_EVALUATORS['recognition'])
  assert (recognition.data.source, anti_spoofing.data.source) == ('synthetic', 'pad')


def test_each_task_section_is_the_one_its_owner_gives():
  recognition = config_lib.base_config('recognition')
  assert recognition.head.to_dict() == heads.config_section().to_dict()
  added = config_lib.base_config('anti_spoofing').data
  splits.add_fields(added)
  assert {k: recognition.data[k] for k in SPLIT_FIELDS} == {k: added[k] for k in SPLIT_FIELDS}
  for task, kinds in eval_lib.TASK_EVALUATORS.items():
    evals = config_lib.base_config(task).evals
    for kind in kinds:
      assert evals[kind].to_dict() == eval_lib.config_section(kind).to_dict()
  for kind in eval_lib.EVALUATORS:   # every evaluator owns a section, on by default or not
    assert eval_lib.config_section(kind) is not None


@pytest.mark.parametrize('name', ['pad/fedgpad', 'pad/fedpad', 'pad/fedma', 'pad/all',
                                  'pad/single'])
def test_a_pad_config_holds_no_face_recognition_field(name):
  config = load_config(name)
  assert 'head' not in config
  assert not set(SPLIT_FIELDS) & set(config.data)
  # PAD's evaluator and the attacks that apply to a PAD model (off), no recognition evaluator.
  assert set(config.evals) == {'pad', 'membership', 'inversion'}
  assert (config.evals.membership.samples, config.evals.inversion.targets) == (0, 0)
  config_lib.validate(config)


def test_an_unknown_task_is_refused_naming_the_tasks():
  with pytest.raises(ValueError, match=r"task='pad'; expected one of \('recognition', "
                                       r"'anti_spoofing'\)\."):
    config_lib.base_config('pad')


def test_the_split_and_the_head_are_checked_by_their_owners_when_present():
  config = config_lib.base_config('recognition')
  config.algorithm = 'fedavg'
  config.data.centralized_on = 'public'
  with pytest.raises(ValueError, match=r"config.data.centralized_on='public' needs public "
                                       r'identities \(data.public_identities > 0\)\.'):
    config_lib.validate(config)
  config = config_lib.base_config('recognition')
  config.algorithm = 'fedavg'
  config.head.loss = 'triplet'
  with pytest.raises(ValueError, match=r"config.head.loss='triplet'; expected one of"):
    config_lib.validate(config)
