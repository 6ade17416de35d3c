"""No command overwrites or misreports a run, and every refusal is one line (issue 56): each case
runs `fedjax_face.main` or `fedjax_face.evaluate` in this process (tests/main_in_process.py) and
asserts exit status 2, the exact line, and that the workdir is byte for byte as it was (or was
never made). Other processes only where a process is the point: a workdir another process holds,
and an empty `--workdir` (whose outputs would land in the process's current directory); each is
the command run in a child forked from a process that has imported its dependencies
(tests/forked_commands.py), with its own current directory, exit status and stderr."""

import errno
import json
import logging as pylogging
import os
import shutil

import numpy as np
import pytest

from fedjax_face import algorithms, evaluate, experiment
from fedjax_face.core import blocks as blocks_lib
from fedjax_face.io import checkpoint, files
from fedjax_face.tools.tables import run as table_runs
from fedjax_face.run import results as run_results
from fedjax_face.run import resume
from tests import config_files, forked_commands, main_in_process, saved_checkpoints, torch_files

load_config = config_files.load_config
CONFIG = 'configs/fedgc/fedgc.py:runlocal'


@pytest.fixture(scope='module')
def finished(tmp_path_factory):
  """(workdir, results) of a finished runlocal FedGC run, made once; tests change copies."""
  workdir = tmp_path_factory.mktemp('finished') / 'run'
  return workdir, experiment.train_and_evaluate(load_config('fedgc'), str(workdir))


def copy_of(finished, to) -> str:
  shutil.copytree(finished[0], to)
  return str(to)


def refused(monkeypatch, capsys, *args, action=None) -> str:
  """The one line `args` is refused with (exit status 2), less the program's name."""
  code, lines = main_in_process.run(monkeypatch, capsys, *args, action=action)
  assert code == 2 and len(lines) == 1, (code, lines)
  assert lines[0].startswith(f'{main_in_process.PROG}: '), lines[0]
  return lines[0][len(main_in_process.PROG) + 2:]


# -- refusals found before anything is written -------------------------------------------------

def test_bad_values_are_one_line_and_nothing_is_made(tmp_path, monkeypatch, capsys):
  workdir = tmp_path / 'run'
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 '--config.seed=-1') == 'config.seed=-1; expected a non-negative integer.'
  # The clients' count is checked before the data source's fields that compare against it.
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 '--config.federated.num_clients=-3') == (
                     'config.federated.num_clients=-3; expected a positive integer.')
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 action=evaluate.evaluate_model) == (
                     'config.init_from is empty; expected the model to evaluate: a finished '
                     "run's workdir or an arcface_torch backbone file (.pth or .onnx).")
  # A run that would delete a checkpoint its final evaluation's attack replays from.
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 '--config.evals.leakage.round=2', '--config.evals.leakage.rounds=2',
                 '--config.checkpoint_keep=1') == (
                     'config.checkpoint_keep=1 with config.evals.leakage.round=2: the run saves 2 '
                     'checkpoints from round 1 (which the attacks replay from) to round 2, so the '
                     'oldest would be deleted before the final evaluation reads it; expected '
                     'checkpoint_keep >= 2.')
  assert not workdir.exists()


def test_a_backbone_file_that_does_not_fit_is_one_line_and_nothing_is_made(tmp_path, monkeypatch,
                                                                            capsys):
  odd = tmp_path / 'odd.pth'
  torch_files.write_pth(odd, {'layer1.0.conv1.weight': np.zeros(1, np.float32),
                              'fc.weight': np.zeros((2, 2), np.float32)})
  workdir = tmp_path / 'run'
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 f'--config.init_from={odd}').startswith(
                     f'{odd}: blocks per stage (1,); expected an arcface_torch IResNet')
  cut = tmp_path / 'cut.pth'
  cut.write_bytes(odd.read_bytes()[:200])
  assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                 f'--config.init_from={cut}').startswith(str(cut))
  assert not workdir.exists()


def test_every_refusal_of_a_workdir_is_one_line_and_leaves_it_as_it_was(
    tmp_path, monkeypatch, capsys, finished):
  config_dict = load_config('fedgc').to_dict()
  workdir = copy_of(finished, tmp_path / 'run')
  before = saved_checkpoints.workdir_files(workdir)
  run = lambda *extra: refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                               *extra)
  assert run('--config.num_rounds=1') == (
      f'config.num_rounds=1 but {workdir} holds round 2; a run cannot be shortened. Expected '
      'config.num_rounds >= 2 (=2 re-evaluates it), or a new --workdir for a 1-round run.')
  was = load_config('fedgc')
  assert run('--config.optimizer.learning_rate=0.5', '--config.fedgc.reg_lambda=2.0') == (
      f'--workdir={workdir} holds checkpoints of a different config; refusing to resume. '
      f'Differences (checkpoint -> now): fedgc.reg_lambda: {was.fedgc.reg_lambda!r} -> 2.0; '
      f'optimizer.learning_rate: {was.optimizer.learning_rate!r} -> 0.5. Use a new --workdir, '
      'or the same config to resume.')
  with files.workdir_lock(workdir):   # another open file holding the lock: another run
    assert run() == (f'--workdir={workdir} is in use by pid {os.getpid()} on host '
                     f'{os.uname().nodename}; two runs on one workdir would overwrite each other. '
                     'Wait for it, stop it, or use another --workdir.')
  assert saved_checkpoints.workdir_files(workdir) == before
  # A run the divergence guard stopped, rerun unchanged.
  resume.write_stopped(workdir, 2, 'round 2: training loss nan; lower the rate', config_dict)
  before = saved_checkpoints.workdir_files(workdir)
  assert run().startswith(f'--workdir={workdir} stopped at round 2 (round 2: training loss nan; ')
  assert saved_checkpoints.workdir_files(workdir) == before
  os.remove(os.path.join(workdir, resume.STOPPED_FILE))
  # Checkpoints none of which has its digests.
  shutil.rmtree(os.path.join(workdir, 'checkpoint_digests'))
  before = saved_checkpoints.workdir_files(workdir)
  assert run().startswith(f'no checkpoint under {workdir}/checkpoints can be verified (rounds 2, '
                          '1 have no digest file in ')
  assert saved_checkpoints.workdir_files(workdir) == before


def test_a_new_run_beside_another_runs_results_is_refused(tmp_path, monkeypatch, capsys,
                                                          finished):
  # Its checkpoints deleted, the finished run's results.json is still another run's files.
  workdir = copy_of(finished, tmp_path / 'run')
  shutil.rmtree(os.path.join(workdir, 'checkpoints'))
  before = saved_checkpoints.workdir_files(workdir)
  # (fedpe's own section, absent from fedgc's config.json, counts at its defaults: run/setup.py's
  # `defaults` holds the method's section.)
  assert refused(monkeypatch, capsys, '--config=configs/fedgc/fedpe.py:runlocal',
                 f'--workdir={workdir}') == (
                     f'--workdir={workdir} holds the results of another run ({workdir}/'
                     "results.json; differences (results -> now): algorithm: 'fedgc' -> 'fedpe'); "
                     'a new run would mix its files with them. Use a new --workdir, or the same '
                     'config to rerun it.')
  assert saved_checkpoints.workdir_files(workdir) == before


# -- results that cannot go stale ----------------------------------------------------------------

def test_a_run_that_would_replace_the_results_removes_them_first(tmp_path, finished):
  workdir = copy_of(finished, tmp_path / 'run')
  results = json.loads(open(os.path.join(workdir, 'results.json')).read())
  config = load_config('fedgc')
  assert results['config_sha256'] == run_results.config_digest(config.to_dict())
  assert table_runs.read_results(workdir) == results
  # An extension opens the workdir (what the driver does before its first round): from then on
  # until it ends there is no results.json to mistake for its own.
  config.num_rounds = 3
  with files.workdir_lock(workdir):
    resume.open_workdir(workdir, config.to_dict()).close()
  assert not os.path.exists(os.path.join(workdir, 'results.json'))
  assert not os.path.exists(os.path.join(workdir, 'report.md'))
  assert json.loads(open(os.path.join(workdir, 'config.json')).read())['num_rounds'] == 3
  # A results.json left beside another config.json (a workdir from before this check) is refused
  # by the tables, by its digest or, for results that predate it, by its rounds.
  stale = os.path.join(workdir, 'results.json')
  files.write_json_atomic(stale, results)
  with pytest.raises(ValueError, match=rf'^{stale} is stale: its config_sha256 is not that of '
                     rf'{workdir}/config.json; expected the results of the run config.json '
                     r'describes \(rerun it, or delete both\)\.$'):
    table_runs.read_results(workdir)
  files.write_json_atomic(stale, {k: v for k, v in results.items() if k != 'config_sha256'})
  with pytest.raises(ValueError, match=rf"is stale: its rounds 2 is not {workdir}/config.json's "
                     r'3;'):
    table_runs.read_results(workdir)


def test_results_name_every_block_in_effect(finished):
  assert finished[1]['blocks'] == {
      'server_optimizer': 'fedavg', 'correction': 'none', 'compression': 'none',
      'secure_aggregation': 'none',
      'sampling': {'name': 'uniform', 'participation': 1.0, 'straggler_drop': 0.0}}
  config = load_config('fedgc')
  config.server_optimizer.name, config.server_optimizer.learning_rate = 'fedadam', 0.01
  config.optimizer.correction, config.optimizer.prox_mu = 'fedprox', 0.1
  config.compression.codec, config.compression.fraction = 'topk', 0.05
  config.secure_aggregation.enabled = True
  config.federated.sampling, config.federated.participation = 'availability', 0.5
  so, sa = config.server_optimizer, config.secure_aggregation
  method = algorithms.get(config.algorithm)
  assert run_results.blocks_in_effect(config, method) == {
      'server_optimizer': {'name': 'fedadam', 'learning_rate': 0.01, 'b1': so.b1, 'b2': so.b2,
                           'tau': so.tau},
      'correction': {'name': 'fedprox', 'mu': 0.1},
      'compression': {'codec': 'topk', 'fraction': 0.05},
      'secure_aggregation': {'fraction_bits': sa.fraction_bits, 'neighbors': sa.neighbors},
      'sampling': {'name': 'availability', 'participation': 0.5, 'straggler_drop': 0.0,
                   'availability_alpha': config.federated.availability_alpha}}
  # Each block the record names is one the blocks layer switches on.
  blocks = blocks_lib.from_config(config)
  assert blocks.server_optimizer is not None and blocks.compression is not None


# -- evaluate writes only under its own folder ----------------------------------------------------

def test_evaluate_beside_a_training_process_writes_only_its_own_folder(tmp_path, finished):
  # A real process: evaluate into a workdir whose lock another process (this one: the training)
  # holds. It writes under evaluations/<name>/ alone, so both go on (issue 56 items 1 and 2).
  workdir = copy_of(finished, tmp_path / 'run')
  before = saved_checkpoints.workdir_files(workdir)
  with files.workdir_lock(workdir):
    out = forked_commands.run_module('fedjax_face.evaluate', f'--config={CONFIG}',
                                     f'--workdir={workdir}', f'--config.init_from={workdir}',
                                     timeout=300)
  assert out.returncode == 0, out.stderr
  # Not one orbax "read only" warning on the way (issue 56 item 10).
  assert 'read only' not in out.stderr and 'read_only' not in out.stderr, out.stderr
  after = saved_checkpoints.workdir_files(workdir)
  ours = {k: v for k, v in after.items() if not k.startswith('evaluations/')}
  assert ours == before
  evaluated = json.loads(after['evaluations/run/results.json'])
  assert evaluated['verification'] == finished[1]['verification']
  assert evaluated['evaluated'] == workdir and evaluated['rounds'] == 0


def test_an_evaluation_in_progress_holds_its_folder(tmp_path, monkeypatch, capsys, finished):
  workdir = copy_of(finished, tmp_path / 'run')
  folder = os.path.join(workdir, experiment.EVALUATIONS, 'run')
  os.makedirs(folder)
  with files.workdir_lock(folder):   # another evaluation of the same model, under way
    assert refused(monkeypatch, capsys, f'--config={CONFIG}', f'--workdir={workdir}',
                   f'--config.init_from={workdir}', action=evaluate.evaluate_model) == (
                       f'--workdir={folder} is in use by pid {os.getpid()} on host '
                       f'{os.uname().nodename}; two runs on one workdir would overwrite each '
                       'other. Wait for it, stop it, or use another --workdir. (python -m '
                       f'fedjax_face.evaluate: --name=<another folder under '
                       f'{os.path.dirname(folder)}>)')
  assert os.listdir(folder) == ['.lock']


def test_an_empty_workdir_is_refused_and_nothing_lands_in_the_current_directory(tmp_path):
  out = forked_commands.run_module(
      'fedjax_face.main',
      f'--config={os.path.join(config_files.ROOT, "configs/fedgc/fedgc.py")}:runlocal',
      '--workdir=', cwd=tmp_path, timeout=300)
  assert out.returncode == 2
  [line] = out.stderr.strip().splitlines()
  assert line.endswith("--workdir='' is empty; expected the run's directory, e.g. "
                       '--workdir=/tmp/fedgc (the current directory is not taken for one).')
  assert os.listdir(tmp_path) == []


# -- smaller ones ----------------------------------------------------------------------------------

def test_a_full_disk_at_the_digest_write_is_the_save_line_and_leaves_no_tmp(tmp_path, monkeypatch,
                                                                            finished):
  workdir = copy_of(finished, tmp_path / 'run')
  config = load_config('fedgc')
  config.num_rounds = 3

  def disk_full(path, obj):   # as write_json_atomic fails when the disk fills mid-file
    with open(f'{path}.tmp', 'w') as f:
      f.write('{"arr')
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), f'{path}.tmp')

  with files.workdir_lock(workdir):
    ckpt = resume.open_workdir(workdir, config.to_dict())
    monkeypatch.setattr(checkpoint.files, 'write_json_atomic', disk_full)
    with pytest.raises(checkpoint.SaveError) as failed:
      ckpt.save(3, {'round': np.int32(3)})
    monkeypatch.undo()
    ckpt.close()
  assert str(failed.value) == (
      f'saving checkpoint {workdir}/checkpoints/3 failed: No space left on device (errno 28); '
      'nothing after it was trained or saved (free space or fix the directory, then rerun the '
      'same command to resume from the checkpoint before).')
  assert sorted(os.listdir(os.path.join(workdir, 'checkpoint_digests'))) == ['1.json', '2.json']


def test_reading_another_runs_checkpoints_says_nothing_of_orbax(finished, caplog):
  caplog.set_level(pylogging.DEBUG, logger='absl')
  state = resume.load_final_state(str(finished[0]))
  assert int(state['round']) == 2
  assert [r.getMessage() for r in caplog.records if r.levelno >= pylogging.WARNING] == []
