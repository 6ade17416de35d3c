"""run/resume.py: which config may open a workdir (`config_differences`, `resumable_fields`,
`check_opening`), the refusals tests/test_refusals.py and tests/test_resume.py reach through full
runs, each here on a workdir built by hand: config.json, stopped.json, results.json and a
checkpoint or two of a few numpy arrays (no training)."""

import copy
import json
import os
import shutil

import numpy as np
import pytest

from fedjax_face import config_lib
from fedjax_face.io import checkpoint, files
from fedjax_face.run import resume

CONFIG = {
    'algorithm': 'fedgc', 'seed': 0, 'num_rounds': 4, 'checkpoint_every': 1, 'log_every': 1,
    'divergence_factor': 1000.0, 'trust_unverified_checkpoints': False,
    'optimizer': {'learning_rate': 0.1, 'momentum': 0.9, 'decay_at': (2 / 3, 13 / 15)},
    'fedgc': {'reg_lambda': 1.0},
    'data': {'source': 'insightface', 'prefetch': 1,
             'insightface': {'root': '/data/casia', 'skip_bad_records': False,
                             'check_record_labels': True},
             'pad_lists': {'skip_bad_records': False}},
    'eval': {'every_rounds': 0}, 'evals': {'verification': {'pair_sets': ('lfw',)}},
    'engine': {'backend': 'auto'}, 'dp': {'enabled': False, 'target_epsilon': 0.0}}


def changed(**fields) -> dict:
  """CONFIG with dotted `fields` (`a__b=1`: a.b = 1) set."""
  config = copy.deepcopy(CONFIG)
  for dotted, value in fields.items():
    *path, key = dotted.split('__')
    section = config
    for part in path:
      section = section[part]
    section[key] = value
  return config


def state(r: int) -> dict:
  return {'server': {'w': np.full(2, r, np.float32)}, 'round': np.int32(r)}


@pytest.fixture(scope='module')
def saved(tmp_path_factory) -> str:
  """A workdir of CONFIG with the checkpoints of rounds 1 and 2 and their run records; tests
  change copies (`workdir`)."""
  path = str(tmp_path_factory.mktemp('saved') / 'run')
  ckpt = checkpoint.Checkpointer(path)
  for r in (1, 2):
    ckpt.save(r, state(r), {'guard': {'round': 1, 'loss': 2.0}, 'done': r})
  ckpt.close()
  write_config(path, CONFIG)
  return path


@pytest.fixture
def workdir(saved, tmp_path) -> str:
  """A copy of `saved`."""
  path = str(tmp_path / 'run')
  shutil.copytree(saved, path)
  return path


def write_config(workdir: str, config: dict) -> None:
  files.write_json_atomic(os.path.join(workdir, 'config.json'), config)


def refusal(workdir: str, config: dict, **kwargs) -> str:
  with pytest.raises(files.WorkdirError) as refused:
    resume.check_opening(workdir, config, **kwargs)
  line = str(refused.value)
  assert '\n' not in line
  return line


def as_json(tree: dict) -> dict:
  return json.loads(json.dumps(tree))


# -- config_differences and the resumable fields ---------------------------------------------

def test_differences_are_each_differing_field_old_to_new_sorted():
  old = {'a': 1, 'b': {'c': [1, 2], 'd': 'x'}, 'e': 1.5}
  new = {'a': 2, 'b': {'c': (1, 2), 'd': 'y'}, 'e': 1.5, 'f': True}
  assert resume.config_differences(old, new) == [
      'a: 1 -> 2', "b.d: 'x' -> 'y'", "f: '<absent>' -> True"]   # a tuple is its JSON list
  assert resume.config_differences(new, old) == [
      'a: 2 -> 1', "b.d: 'y' -> 'x'", "f: True -> '<absent>'"]
  assert resume.config_differences(old, old) == []
  # config.json's provenance record is no field.
  assert resume.config_differences({**old, checkpoint.PROVENANCE_KEY: {'start': 1}}, old) == []
  assert resume.flatten({'a': {'b': (1, 2)}, checkpoint.PROVENANCE_KEY: {'x': 1}}) == {
      'a.b': [1, 2]}


def test_skip_names_fields_exactly_and_sections_by_their_dot():
  old = {'a': 1, 'b': {'c': 1, 'd': 1}, 'bb': {'c': 1}, 'data': {'prefetch': 1, 'prefetchx': 1}}
  new = {'a': 2, 'b': {'c': 2, 'd': 2}, 'bb': {'c': 2}, 'data': {'prefetch': 2, 'prefetchx': 2}}
  assert resume.config_differences(old, new, skip=('b.', 'data.prefetch')) == [
      'a: 1 -> 2', 'bb.c: 1 -> 2', 'data.prefetchx: 1 -> 2']
  assert resume.config_differences(old, new, skip=('b.c', 'b')) == [
      'a: 1 -> 2', 'b.d: 1 -> 2', 'bb.c: 1 -> 2', 'data.prefetch: 1 -> 2',
      'data.prefetchx: 1 -> 2']


def test_a_field_the_old_config_lacks_counts_at_its_default():
  defaults = {'a': 1, 'added': 0.5, 'section': {'added': 'x'}}
  old = {'a': 1}
  assert resume.config_differences(old, {'a': 1, 'added': 0.5, 'section': {'added': 'x'}},
                                   defaults) == []
  assert resume.config_differences(old, {'a': 1, 'added': 5.0, 'section': {'added': 'x'}},
                                   defaults) == ["added: '<absent>' -> 5.0"]
  # Without the defaults every absent field counts.
  assert resume.config_differences(old, {'a': 1, 'added': 0.5}) == ["added: '<absent>' -> 0.5"]


def test_a_field_neither_the_new_config_nor_the_defaults_has_is_no_difference():
  old = {'a': 1, 'retired': True, 'model': {'retired_too': 3}}
  assert resume.config_differences(old, {'a': 1}, {'a': 1}) == []
  assert resume.config_differences(old, {'a': 1}) == [
      "model.retired_too: 3 -> '<absent>'", "retired: True -> '<absent>'"]
  # A field the defaults still have is compared: dropping it is a difference.
  assert resume.config_differences(old, {'a': 1}, {'a': 1, 'retired': False}) == [
      "retired: True -> '<absent>'"]


def test_a_field_added_since_a_checkpoint_at_its_default_does_not_block_resuming():
  # As tests/test_faults.py, on the shared base config itself.
  defaults = config_lib.base_config().to_dict()
  new = config_lib.base_config()
  new.algorithm = 'fedgc'
  new = new.to_dict()
  old = json.loads(json.dumps(new, default=files.jsonable))
  del old['divergence_factor'], old['optimizer']['name']   # written before these existed
  assert resume.config_differences(old, new, defaults) == []
  assert resume.config_differences(old, {**new, 'divergence_factor': 5.0}, defaults) == [
      "divergence_factor: '<absent>' -> 5.0"]
  assert len(resume.config_differences(old, new)) == 2


def test_the_resumable_fields_are_the_run_s_and_each_source_s():
  fields = resume.resumable_fields(CONFIG)
  assert fields[:len(resume.RUN_FIELDS)] == resume.RUN_FIELDS
  for field in ('data.insightface.skip_bad_records', 'data.insightface.check_record_labels',
                'data.pad_lists.skip_bad_records', 'num_rounds', 'checkpoint_every',
                'checkpoint_every_seconds', 'log_every', 'eval.', 'evals.', 'engine.',
                'data.prefetch', 'data.decode_threads', 'checkpoint_keep',
                'trust_unverified_checkpoints', 'dp.target_epsilon', 'dp.allow_sigma_increase'):
    assert field in fields, field
  for field in ('seed', 'optimizer.', 'optimizer.learning_rate', 'fedgc.', 'divergence_factor',
                'data.insightface.root', 'dp.enabled', 'dp.noise_multiplier'):
    assert field not in fields, field
  assert resume.resumable_fields({}) == fields   # no method declares any


def test_resumable_fields_may_differ_and_the_rest_may_not():
  skip = resume.resumable_fields(CONFIG)
  resumable = changed(num_rounds=8, checkpoint_every=0, log_every=5, eval__every_rounds=2,
                      evals__verification__pair_sets=('lfw', 'cfp_fp'), engine__backend='loop',
                      data__prefetch=0, data__insightface__skip_bad_records=True,
                      data__insightface__check_record_labels=False,
                      data__pad_lists__skip_bad_records=True, dp__target_epsilon=8.0,
                      trust_unverified_checkpoints=True)
  assert resume.config_differences(as_json(CONFIG), as_json(resumable), skip=skip) == []
  other = changed(seed=1, data__insightface__root='/data/other', dp__enabled=True)
  assert resume.config_differences(as_json(CONFIG), as_json(other), skip=skip) == [
      "data.insightface.root: '/data/casia' -> '/data/other'", 'dp.enabled: False -> True',
      'seed: 0 -> 1']


# -- check_opening ---------------------------------------------------------------------------

def test_a_new_workdir_opens_with_nothing_in_it(tmp_path):
  assert resume.check_opening(str(tmp_path / 'new'), CONFIG) == resume.Opening(None, None, None,
                                                                               None)
  assert not os.path.exists(tmp_path / 'new')
  assert resume.resuming(str(tmp_path / 'new')) is False


def test_the_same_config_resumes_the_newest_checkpoint_with_its_record(workdir):
  opening = resume.check_opening(workdir, CONFIG)
  assert opening == resume.Opening(2, as_json(CONFIG), None,
                                   {'guard': {'round': 1, 'loss': 2.0}, 'done': 2})
  assert resume.resuming(workdir) is True
  # So do the resumable fields changed, and a field the old config.json lacks at its default.
  assert resume.check_opening(workdir, changed(num_rounds=6, engine__backend='loop')).latest == 2
  write_config(workdir, {k: v for k, v in CONFIG.items() if k != 'divergence_factor'})
  assert resume.check_opening(workdir, CONFIG, defaults={'divergence_factor': 1000.0}).latest == 2
  assert 'divergence_factor' in refusal(workdir, CONFIG)


def test_checkpoints_of_another_config_are_refused_naming_each_field(workdir):
  assert refusal(workdir, changed(optimizer__learning_rate=0.5, fedgc__reg_lambda=2.0)) == (
      f'--workdir={workdir} holds checkpoints of a different config; refusing to resume. '
      'Differences (checkpoint -> now): fedgc.reg_lambda: 1.0 -> 2.0; optimizer.learning_rate: '
      '0.1 -> 0.5. Use a new --workdir, or the same config to resume.')


def test_checkpoints_without_config_json_are_refused(workdir):
  os.remove(os.path.join(workdir, 'config.json'))
  assert refusal(workdir, CONFIG) == (
      f'--workdir={workdir} has checkpoints but no config.json, so it is unknown which config '
      'wrote them. Use a new --workdir.')


def test_a_config_json_that_is_not_json_is_named(workdir):
  with open(os.path.join(workdir, 'config.json'), 'w') as f:
    f.write('{"algorithm": ')
  assert refusal(workdir, CONFIG).startswith(
      f'{workdir}/config.json is not valid JSON (Expecting value: line 1 column 15 (char 14)); '
      'it should record the config of the run in this workdir. Use a new --workdir.')


def test_a_shorter_run_is_refused(workdir):
  assert refusal(workdir, changed(num_rounds=1)) == (
      f'config.num_rounds=1 but {workdir} holds round 2; a run cannot be shortened. Expected '
      'config.num_rounds >= 2 (=2 re-evaluates it), or a new --workdir for a 1-round run.')
  assert resume.check_opening(workdir, changed(num_rounds=2)).latest == 2


def test_checkpoints_without_digests_are_refused_unless_trusted(workdir):
  shutil.rmtree(os.path.join(workdir, 'checkpoint_digests'))
  assert refusal(workdir, CONFIG) == (
      f'no checkpoint under {workdir}/checkpoints can be verified (rounds 2, 1 have no digest '
      f'file in {workdir}/checkpoint_digests); delete those step directories to start the run '
      'afresh, use a new --workdir, or --config.trust_unverified_checkpoints=True to resume from '
      'round 2 without verifying it.')
  assert resume.check_opening(workdir, CONFIG, trust_unverified=True) == resume.Opening(
      2, as_json(CONFIG), None, None)


def test_one_checkpoint_with_its_digests_is_enough_to_open(workdir):
  os.remove(checkpoint.digest_path(workdir, 2))
  opening = resume.check_opening(workdir, CONFIG)
  assert opening.latest == 2 and opening.record is None   # the newest is checked at restore


def test_the_privacy_budget_check_is_a_workdir_refusal(workdir, tmp_path):
  seen = []

  def check_resume(record):
    seen.append(record)
    raise ValueError('config.dp.target_epsilon=2 cannot be met')

  assert refusal(workdir, CONFIG, check_resume=check_resume) == (
      'config.dp.target_epsilon=2 cannot be met')
  assert seen == [{'guard': {'round': 1, 'loss': 2.0}, 'done': 2}]
  # Nothing to resume: not asked.
  assert resume.check_opening(str(tmp_path / 'new'), CONFIG, check_resume=check_resume).latest is None
  assert len(seen) == 1


def test_a_workdir_another_process_holds_is_refused(workdir):
  with files.workdir_lock(workdir):
    assert refusal(workdir, CONFIG) == (
        f'--workdir={workdir} is in use by pid {os.getpid()} on host {os.uname().nodename}; two '
        'runs on one workdir would overwrite each other. Wait for it, stop it, or use another '
        '--workdir.')
    assert resume.check_opening(workdir, CONFIG, lock_held=True).latest == 2


def test_a_checkpoints_link_to_nowhere_is_named(tmp_path):
  os.symlink(tmp_path / 'gone', tmp_path / 'checkpoints')
  assert refusal(str(tmp_path), CONFIG) == (
      f"{tmp_path / 'checkpoints'} is a symbolic link to {tmp_path / 'gone'}, which does not "
      'exist; expected a checkpoint directory (create the target, or remove the link).')


def test_an_evaluation_s_folder_compares_every_field(workdir):
  line = refusal(workdir, changed(num_rounds=6), every_field=True)
  assert 'Differences (checkpoint -> now): num_rounds: 4 -> 6.' in line


# -- a run the divergence guard stopped ---------------------------------------------------------

def stop(workdir: str, config: dict = CONFIG) -> None:
  resume.write_stopped(workdir, 3, 'round 3: training loss nan; the run diverged (lower '
                       'optimizer.learning_rate)', config)


def test_a_stopped_run_is_not_rerun_unchanged(workdir):
  stop(workdir)
  line = (f'--workdir={workdir} stopped at round 3 (round 3: training loss nan; '
          f'{workdir}/stopped.json), and the same config would stop there again; change '
          'optimizer.* (e.g. a lower learning_rate), the fedgc section or divergence_factor (0 = '
          'off) to go on from its last checkpoint, or use a new --workdir.')
  assert refusal(workdir, CONFIG) == line
  # The fields that do not change the model do not cure it either.
  assert refusal(workdir, changed(num_rounds=8, engine__backend='loop')) == line
  assert resume.stopped_line(workdir, resume.read_stopped(workdir), '') == line.replace(
      ', the fedgc section', '')


@pytest.mark.parametrize('fields', [{'optimizer__learning_rate': 0.01}, {'optimizer__momentum': 0.5},
                                    {'fedgc__reg_lambda': 0.1}, {'divergence_factor': 0.0}])
def test_a_stopped_run_goes_on_once_a_field_that_could_fix_it_changes(workdir, fields):
  stop(workdir)
  opening = resume.check_opening(workdir, changed(**fields))
  assert opening.latest == 2 and opening.stopped == resume.read_stopped(workdir)
  assert opening.stopped['round'] == 3 and opening.stopped['config'] == as_json(CONFIG)


def test_a_stopped_run_changed_elsewhere_is_another_config(workdir):
  stop(workdir)
  assert refusal(workdir, changed(seed=1, optimizer__learning_rate=0.01)) == (
      f'--workdir={workdir} holds checkpoints of a different config; refusing to resume. '
      'Differences (checkpoint -> now): seed: 0 -> 1. Use a new --workdir, or the same config to '
      'resume.')


def test_a_stopped_json_that_is_not_json_is_named(workdir):
  with open(os.path.join(workdir, resume.STOPPED_FILE), 'w') as f:
    f.write('{')
  assert refusal(workdir, CONFIG).startswith(f'{workdir}/stopped.json is not valid JSON (')
  assert refusal(workdir, CONFIG).endswith('it records why the run in this workdir stopped. '
                                           'Delete it to rerun anyway.')


def test_opening_a_stopped_run_that_goes_on_records_what_changed_and_removes_the_stop(workdir):
  stop(workdir)
  files.write_json_atomic(os.path.join(workdir, 'results.json'), {'rounds': 4})
  fixed = changed(optimizer__learning_rate=0.01)
  with files.workdir_lock(workdir):
    resume.open_workdir(workdir, fixed).close()
  assert resume.read_stopped(workdir) is None
  assert not os.path.exists(os.path.join(workdir, 'results.json'))
  written = json.loads(open(os.path.join(workdir, 'config.json')).read())
  record = written.pop(checkpoint.PROVENANCE_KEY)
  assert written == as_json(fixed)
  assert record['resumed'][-1]['from_round'] == 2
  assert record['resumed'][-1]['after_stop'] == {
      'round': 3, 'reason': 'round 3: training loss nan; the run diverged (lower '
      'optimizer.learning_rate)', 'changed': ['optimizer.learning_rate: 0.1 -> 0.01']}
  # Opened again as it now stands: nothing stopped, the same config.
  assert resume.check_opening(workdir, fixed).stopped is None


# -- the results of another run -----------------------------------------------------------------

def results_only(tmp_path, config: dict | None) -> str:
  """A workdir with a results.json (and `config`'s config.json) and no checkpoint."""
  path = str(tmp_path / 'results_only')
  os.makedirs(path)
  files.write_json_atomic(os.path.join(path, 'results.json'), {'rounds': 4})
  if config is not None:
    write_config(path, config)
  return path


def test_a_new_run_beside_another_run_s_results_is_refused(tmp_path):
  path = results_only(tmp_path, CONFIG)
  assert refusal(path, changed(algorithm='fedpe', fedgc__reg_lambda=2.0)) == (
      f'--workdir={path} holds the results of another run ({path}/results.json; differences '
      "(results -> now): algorithm: 'fedgc' -> 'fedpe'; fedgc.reg_lambda: 1.0 -> 2.0); a new run "
      'would mix its files with them. Use a new --workdir, or the same config to rerun it.')


def test_results_without_config_json_are_another_run_s(tmp_path):
  path = results_only(tmp_path, None)
  assert refusal(path, CONFIG) == (
      f'--workdir={path} holds the results of another run ({path}/results.json; no config.json); '
      'a new run would mix its files with them. Use a new --workdir, or the same config to rerun '
      'it.')


def test_the_same_run_beside_its_results_reruns(tmp_path):
  path = results_only(tmp_path, CONFIG)
  assert resume.check_opening(path, CONFIG) == resume.Opening(None, as_json(CONFIG), None, None)
  assert resume.check_opening(path, changed(num_rounds=6)).old == as_json(CONFIG)
