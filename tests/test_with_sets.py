"""configs/with_sets.py: any recognition config with the RFW and TinyFace sections added at their
defaults (off), nothing else changed, and a wrong argument refused in one line."""

import pytest

from fedjax_face import config_lib
from fedjax_face import eval as eval_lib
from tests.config_files import load_config


@pytest.mark.parametrize('arg, base, base_arg', [
    ('configs/fedfr/fedfr.py:runlocal', 'fedfr/fedfr', 'runlocal'),
    ('fedfv/fedfv.py', 'fedfv/fedfv', None),
    ('runlocal', 'fedgc', 'runlocal')])
def test_the_sections_are_added_to_the_named_config_and_nothing_else(arg, base, base_arg):
  config = load_config('with_sets', arg)
  for kind in ('rfw', 'tinyface'):
    assert config.evals[kind].to_dict() == eval_lib.config_section(kind).to_dict()
    assert config.evals[kind].root == ''
  rest = config.to_dict()
  del rest['evals']['rfw'], rest['evals']['tinyface']
  assert rest == load_config(base, base_arg).to_dict()
  config_lib.validate(config)
  eval_lib.check_config(config)


@pytest.mark.parametrize('arg, message', [
    ('configs/nope.py', 'configs/with_sets.py:configs/nope.py: no config file configs/nope.py; '
                        'expected <config file>[:<its argument>], e.g. configs/fedgc.py:runlocal'),
    ('configs/pad/fedgpad.py:runlocal',
     "configs/with_sets.py:configs/pad/fedgpad.py:runlocal: the config's task is anti_spoofing; "
     'expected a recognition config (RFW and TinyFace evaluate a face recognition model)')])
def test_a_wrong_argument_is_refused_in_one_line(arg, message):
  with pytest.raises(ValueError) as e:
    load_config('with_sets', arg)
  assert str(e.value) == message
