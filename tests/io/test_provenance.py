"""Provenance: the commit, versions and machine a run records, and config.json's start + resumes."""

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time

import jax
import orbax.checkpoint as ocp
import pytest

import fedjax_face
from fedjax_face.io import checkpoint, files
from fedjax_face.io import provenance
from fedjax_face.run import resume

REPO = os.path.dirname(os.path.dirname(fedjax_face.__file__))


def git(*args: str) -> str:
  return subprocess.run(['git', '-C', REPO, *args], capture_output=True, text=True,
                        check=True).stdout


def test_collect_on_this_checkout_is_its_commit_dirtiness_versions_and_machine():
  if provenance.git_state()['commit'] is None:
    pytest.skip('not run from a git checkout (an unpacked archive): no commit to compare')
  prov = provenance.collect()
  assert json.loads(json.dumps(prov)) == prov   # recorded as JSON as it is
  assert prov['git']['commit'] == git('rev-parse', 'HEAD').strip()
  assert len(prov['git']['commit']) == 40
  dirty = git('status', '--porcelain', '--untracked-files=no').strip() != ''
  assert prov['git']['dirty'] is dirty
  assert prov['versions'] == {
      'python': platform.python_version(),
      'jax': importlib.metadata.version('jax'), 'jaxlib': importlib.metadata.version('jaxlib'),
      'flax': importlib.metadata.version('flax'), 'optax': importlib.metadata.version('optax'),
      'orbax-checkpoint': importlib.metadata.version('orbax-checkpoint'),
      'numpy': importlib.metadata.version('numpy')}
  assert prov['versions']['jax'] == jax.__version__
  assert prov['platform'] == {
      'backend': jax.default_backend(), 'device_kind': jax.devices()[0].device_kind,
      'device_count': jax.device_count(), 'process_count': jax.process_count(),
      'os': platform.platform(), 'cpu': provenance.cpu()}
  assert prov['platform']['cpu']['usable'] >= 1


def test_cpu_reads_the_model_and_vector_extensions_of_proc_cpuinfo(tmp_path):
  cpuinfo = tmp_path / 'cpuinfo'
  cpuinfo.write_text('processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse sse2 avx2 fma '
                     'avx512f amx_tile aes\n\nprocessor\t: 1\nmodel name\t: other\nflags\t: avx\n')
  usable = provenance.cpu()['usable']
  assert provenance.cpu(str(cpuinfo)) == {
      'model': 'AMD EPYC', 'usable': usable,
      'vector_extensions': ['amx_tile', 'avx2', 'avx512f', 'fma', 'sse', 'sse2']}
  assert provenance.cpu(str(tmp_path / 'missing')) == {'usable': usable}   # not Linux


def test_machine_difference_names_what_changed():
  def on(**platform_fields):
    return {'platform': platform_fields}
  host = {'model': 'AMD EPYC', 'vector_extensions': ['avx2', 'avx512f'], 'usable': 2}
  before = on(os='Linux-v769', backend='cpu', cpu=host)
  assert provenance.machine_difference(before, before) == ''
  assert provenance.machine_difference(None, {'git': {}}) == ''   # neither recorded a machine
  assert provenance.machine_difference({'git': {}}, before) == 'machine unrecorded'
  assert provenance.machine_difference(before, on(os='Linux-v769', backend='cpu')) == (
      'CPU unrecorded')   # recorded before the CPU was
  after = on(os='Linux-v669', backend='cpu', cpu={
      'model': 'AMD EPYC', 'vector_extensions': ['avx2', 'avx512_vp2intersect'], 'usable': 1})
  assert provenance.machine_difference(before, after) == (
      'os Linux-v769 -> Linux-v669; CPU gained avx512_vp2intersect; CPU lost avx512f; '
      'usable CPUs 2 -> 1')


def test_collect_is_cheap():
  provenance.collect()   # JAX's backend up
  t0 = time.perf_counter()
  provenance.collect()
  assert time.perf_counter() - t0 < 0.5   # ~25 ms here; a loose bound against a slow runner


def test_a_package_outside_git_has_no_commit_and_does_not_raise(tmp_path):
  # A copy of the package outside any checkout (as a wheel installs it): no commit, its
  # distribution version instead, and no exception.
  copy = tmp_path / 'site-packages' / 'fedjax_face'
  shutil.copytree(os.path.dirname(fedjax_face.__file__), copy,
                  ignore=shutil.ignore_patterns('__pycache__'))
  state = provenance.git_state(str(copy))
  assert state == {'commit': None, 'dirty': None,
                   'version': provenance.version('fedjax_face')}
  # The copy imported in a fresh process from outside the repository reports the same.
  code = ('import json, fedjax_face; from fedjax_face.io import provenance; '
          'print(json.dumps([fedjax_face.__file__, provenance.git_state()]))')
  out = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True,
                       text=True, check=True,
                       env=os.environ | {'PYTHONPATH': str(copy.parent)}).stdout
  where, state = json.loads(out)
  assert where == str(copy / '__init__.py') and state['commit'] is None


def test_a_package_inside_another_repository_is_not_given_its_commit(tmp_path):
  # A virtual environment inside a user's own repository: that repository's commit is not ours.
  subprocess.run(['git', 'init', '-q', str(tmp_path)], check=True)
  copy = tmp_path / 'venv' / 'fedjax_face'
  copy.mkdir(parents=True)
  (copy / '__init__.py').write_text('')
  assert provenance.git_state(str(copy))['commit'] is None


def test_git_missing_or_failing_gives_no_commit(monkeypatch):
  def missing(*args, **kwargs):
    raise FileNotFoundError(2, 'No such file or directory', 'git')
  monkeypatch.setattr(provenance.subprocess, 'run', missing)
  assert provenance.git_state()['commit'] is None and provenance.git_state()['dirty'] is None

  def hung(*args, **kwargs):
    raise subprocess.TimeoutExpired('git', provenance.GIT_TIMEOUT_S)
  monkeypatch.setattr(provenance.subprocess, 'run', hung)
  assert provenance.collect()['git']['commit'] is None


@pytest.mark.parametrize('prov, label', [
    ({'git': {'commit': '0123456789abcdef' * 2 + '01234567', 'dirty': False}}, '0123456789ab'),
    ({'git': {'commit': '0123456789abcdef' * 2 + '01234567', 'dirty': True}},
     '0123456789ab+dirty'),
    ({'git': {'commit': None, 'dirty': None, 'version': '0.1.0'}}, 'fedjax_face==0.1.0'),
    ({'git': {'commit': None, 'dirty': None, 'version': None}}, 'unrecorded'),
    (None, 'unrecorded'),   # a run made before provenance was recorded
    ({}, 'unrecorded'),
])
def test_commit_label(prov, label):
  assert provenance.commit_label(prov) == label


def fake_prov(commit: str, dirty: bool = False) -> dict:
  return {'git': {'commit': commit * 40, 'dirty': dirty, 'version': None}, 'versions': {},
          'platform': {'device_kind': 'cpu'}}


def test_run_provenance_keeps_the_first_start_and_appends_each_resume():
  a, b = fake_prov('a'), fake_prov('b', dirty=True)
  start = checkpoint.run_provenance(None, None, a)
  assert start == {'start': a, 'resumed': []}
  once = checkpoint.run_provenance(start, 4, b)
  twice = checkpoint.run_provenance(once, 6, a)
  assert twice == {'start': a, 'resumed': [b | {'from_round': 4}, a | {'from_round': 6}]}
  assert checkpoint.config_commits({'provenance': twice}) == [
      'aaaaaaaaaaaa', 'bbbbbbbbbbbb+dirty', 'aaaaaaaaaaaa']
  # A run started before provenance was recorded: its start is unknown, its resumes are not.
  assert checkpoint.run_provenance(None, 3, b) == {'start': None,
                                                  'resumed': [b | {'from_round': 3}]}
  assert checkpoint.config_commits({'seed': 0}) == ['unrecorded']
  # A fresh start (no checkpoint survives) replaces what an earlier attempt recorded.
  assert checkpoint.run_provenance(twice, None, b) == {'start': b, 'resumed': []}


def save_round(workdir: str, step: int) -> None:
  """A checkpoint at `step` under workdir/checkpoints, as the driver leaves it."""
  manager = ocp.CheckpointManager(os.path.join(workdir, 'checkpoints'),
                                  options=ocp.CheckpointManagerOptions(create=True))
  manager.save(step, args=ocp.args.StandardSave({'round': step}), force=True)
  manager.wait_until_finished()
  manager.close()
  files.write_json_atomic(os.path.join(workdir, 'checkpoint_digests', f'{step}.json'),
                          {'arrays': checkpoint.array_digests({'round': step}), 'run': None})


def as_recorded(prov: dict) -> dict:
  """`prov` as a start records it: with the dtype it computed in (these configs name none:
  float32; run/resume.py `compute_dtype`)."""
  return prov | {'compute_dtype': 'float32'}


def open_run(workdir: str, config: dict, prov: dict, monkeypatch) -> dict:
  """Opens the run's Checkpointer at the provenance `prov`; returns config.json."""
  monkeypatch.setattr(provenance, 'collect', lambda: prov)
  resume.open_workdir(workdir, config).close()
  with open(os.path.join(workdir, 'config.json')) as f:
    return json.load(f)


def test_config_json_records_the_start_and_each_resume_at_another_commit(tmp_path, monkeypatch):
  workdir, config = str(tmp_path), {'seed': 0, 'num_rounds': 2, 'model': {'width': 8}}
  a, b = fake_prov('a'), fake_prov('b')
  saved = open_run(workdir, config, a, monkeypatch)
  # The config's fields stay at the top level, the record beside them.
  assert saved == config | {'provenance': {'start': as_recorded(a), 'resumed': []}}
  save_round(workdir, 2)
  # Resumed at another commit (and extended): accepted, provenance being no config field.
  saved = open_run(workdir, config | {'num_rounds': 4}, b, monkeypatch)
  assert saved['provenance'] == {'start': as_recorded(a),
                                 'resumed': [as_recorded(b) | {'from_round': 2}]}
  assert saved['num_rounds'] == 4
  save_round(workdir, 4)
  saved = open_run(workdir, config | {'num_rounds': 4}, a, monkeypatch)
  assert saved['provenance']['start'] == as_recorded(a)
  assert [r['from_round'] for r in saved['provenance']['resumed']] == [2, 4]
  # Another config is still refused, and config.json is left as it was.
  before = (tmp_path / 'config.json').read_text()
  with pytest.raises(ValueError, match=r'(?s)different config.*seed: 0 -> 1'):
    open_run(workdir, config | {'seed': 1}, b, monkeypatch)
  assert (tmp_path / 'config.json').read_text() == before
  # A tool reopening the run with its saved config.json (as proj/fedgc/visualize.py does)
  # records no resume.
  monkeypatch.setattr(provenance, 'collect', lambda: fake_prov('c'))
  resume.open_workdir(workdir, json.loads(before)).close()
  assert (tmp_path / 'config.json').read_text() == before


def test_a_config_json_from_before_provenance_still_resumes(tmp_path, monkeypatch):
  workdir, config = str(tmp_path), {'seed': 0, 'num_rounds': 2}
  (tmp_path / 'config.json').write_text(json.dumps(config))
  save_round(workdir, 2)
  b = fake_prov('b')
  saved = open_run(workdir, config, b, monkeypatch)
  assert saved == config | {'provenance': {'start': None,
                                           'resumed': [as_recorded(b) | {'from_round': 2}]}}
  assert checkpoint.config_commits(saved) == ['unrecorded', 'bbbbbbbbbbbb']


def test_the_provenance_record_is_no_config_field():
  saved = {'seed': 1, 'data': {'source': 'synthetic'},
           'provenance': {'start': fake_prov('a'), 'resumed': []}}
  assert resume.flatten(saved) == {'seed': 1, 'data.source': 'synthetic'}
  assert resume.config_differences(saved, {'seed': 1, 'data': {'source': 'synthetic'}}) == []
