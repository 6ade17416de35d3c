"""A workdir written before fedjax_face/run/ existed resumes under it: the archived config.json
of a run of each paper (results/<paper>_tables/), beside a checkpoint with its digests, opens for
the config the current package builds from it, and a config.json holding a field the package no
longer has opens too."""

import glob
import json
import os

import numpy as np
import pytest

from fedjax_face import algorithms, config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.data import sources
from fedjax_face.io import checkpoint, files
from fedjax_face.run import resume
from fedjax_face.run import setup as run_setup

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# One federated run of each paper's archive (the first in name order that is not centralized).
PAPERS = ('fedgc', 'fedfv', 'fedfr', 'pad')


def archived_config(paper: str) -> dict:
  for path in sorted(glob.glob(os.path.join(REPO, 'results', f'{paper}_tables', '*',
                                            'config.json'))):
    saved = files.read_json(path)
    if saved['algorithm'] != 'centralized':
      return saved
  raise AssertionError(f'no federated run archived under results/{paper}_tables')


def current_config(saved: dict):
  """The config the current package holds for `saved`: its task's base config with the method's
  section, set to every value of `saved` whose field the package still has."""
  config = config_lib.base_config(sources.get(saved['data']['source']).TASK)
  section = algorithms.get(saved['algorithm']).config_section()
  if section is not None:
    config[algorithms.section_name(saved['algorithm'])] = section
  known = set(resume.flatten(config.to_dict()))
  config.update_from_flattened_dict({k: tuple(v) if isinstance(v, list) else v
                                     for k, v in resume.flatten(saved).items() if k in known})
  return config


def workdir_of(tmp_path, saved: dict) -> str:
  """A workdir as the code before run/ left it: config.json as archived, one checkpoint of the
  run's last round with its digest file."""
  workdir = str(tmp_path / 'run')
  ckpt = checkpoint.Checkpointer(workdir)
  ckpt.save(saved['num_rounds'], {'w': np.arange(3, dtype=np.float32)},
            {'privacy': None, 'guard': None, 'lr_schedule': None, 'last_logged': None})
  ckpt.close()
  files.write_json_atomic(os.path.join(workdir, 'config.json'), saved)
  return workdir


@pytest.mark.parametrize('paper', PAPERS)
def test_an_archived_run_of_each_paper_opens_for_the_config_it_now_builds(tmp_path, paper):
  saved = archived_config(paper)
  config = current_config(saved)
  workdir = workdir_of(tmp_path, saved)
  opening = resume.check_opening(workdir, config.to_dict(), defaults=run_setup.defaults(config))
  assert (opening.latest, opening.old) == (saved['num_rounds'], saved)
  resume.open_workdir(workdir, config.to_dict(), defaults=run_setup.defaults(config)).close()
  written = files.read_json(os.path.join(workdir, 'config.json'))
  assert written['provenance']['start'] == saved['provenance']['start']
  assert written['provenance']['resumed'][-1]['from_round'] == saved['num_rounds']


@pytest.mark.parametrize('paper', PAPERS)
def test_a_field_the_package_no_longer_has_is_no_difference_but_a_changed_one_is(tmp_path, paper):
  saved = archived_config(paper)
  config = current_config(saved)
  retired = json.loads(json.dumps(saved))
  retired['evals']['retired_evaluator'] = {'pairs': 6000}   # a section a narrower base dropped
  retired['data']['retired_knob'] = 3
  workdir = workdir_of(tmp_path, retired)
  resume.check_opening(workdir, config.to_dict(), defaults=run_setup.defaults(config))
  config.seed += 1
  with pytest.raises(files.WorkdirError, match=f"seed: {saved['seed']} -> {saved['seed'] + 1}"):
    resume.check_opening(workdir, config.to_dict(), defaults=run_setup.defaults(config))


def test_a_field_added_to_fedpad_s_section_since_an_archived_run_does_not_block_it(
    tmp_path, monkeypatch):
  """FedPAD's own section is `config.fedgpad` (algorithms.section_name): a field added to it
  since a run counts at its default, as for every other method's section."""
  saved = next(files.read_json(path) for path in sorted(glob.glob(os.path.join(
      REPO, 'results', 'pad_tables', '*', 'config.json')))
      if files.read_json(path)['algorithm'] == 'fedpad')
  original = fedgpad.config_section

  def grown():
    section = original()
    section.added_since = 0
    return section

  monkeypatch.setattr(fedgpad, 'config_section', grown)
  config = current_config(saved)
  assert config.fedgpad.added_since == 0 and 'fedpad' not in config
  assert algorithms.section_name('fedpad') == 'fedgpad'
  workdir = workdir_of(tmp_path, saved)
  resume.check_opening(workdir, config.to_dict(), defaults=run_setup.defaults(config))
  config.fedgpad.added_since = 1
  with pytest.raises(files.WorkdirError, match="fedgpad.added_since: '<absent>' -> 1"):
    resume.check_opening(workdir, config.to_dict(), defaults=run_setup.defaults(config))
