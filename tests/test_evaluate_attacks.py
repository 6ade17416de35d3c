"""The attacks on a finished workdir (issue 59 part 5): `python -m fedjax_face.evaluate
--config.init_from=<run> --config.evals.<attack>...` evaluates the run's own state with a replay of
its rounds (run/replay.py `attacked_run`), and writes under evaluations/<name>/ the attack results
the run's own final evaluation gave, marked with the round attacked. A run the divergence guard
stopped is attacked at its last accepted checkpoint and marked `diverged`. Each refusal (a
backbone file, a round whose previous checkpoint is not held, a run trained otherwise) is one
line, exit status 2, and leaves the workdir byte for byte as it was.

One runlocal FedGC run, trained once with leakage (round 2) and membership on at small sizes, is
copied by each test. Inversion is left off there (its compile alone is most of a minute on a busy
CPU): it reads the same `EvalInputs.replay` leakage does, and its own tests
(tests/eval/privacy/) hold its known answers; here its refusals are checked."""

import os
import shutil

import pytest

from fedjax_face import evaluate, experiment
from fedjax_face.io import checkpoint, files
from fedjax_face.run import resume
from tests import config_files, main_in_process, saved_checkpoints

CONFIG = 'configs/fedgc/fedgc.py:runlocal'
ATTACKS = ('leakage', 'membership')


def attacked_config():
  """The runlocal FedGC config with leakage and membership on, at small sizes."""
  config = config_files.load_config('fedgc')
  config.evals.leakage.update(round=2, max_identities=8, num_distractors=8, probes_per_identity=2)
  config.evals.membership.samples = 8
  return config


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
  """(workdir, its results.json) of the runlocal FedGC run with two attacks on, trained once."""
  workdir = tmp_path_factory.mktemp('attacked') / 'run'
  experiment.train_and_evaluate(attacked_config(), str(workdir))
  return str(workdir), files.read_json(os.path.join(workdir, 'results.json'))


def copy_of(trained, to) -> str:
  shutil.copytree(trained[0], to)
  return str(to)


def evaluated(workdir: str, **evals):
  """`attacked_config()` evaluating the run in `workdir`, `evals` setting 'kind.field' values."""
  config = attacked_config()
  config.init_from = workdir
  for name, value in evals.items():
    kind, field = name.split('__')
    config.evals[kind][field] = value
  return config


def refused(monkeypatch, capsys, workdir: str, *args) -> str:
  """The one line `python -m fedjax_face.evaluate` refuses `args` with (exit status 2), the
  workdir left byte for byte as it was."""
  before = saved_checkpoints.workdir_files(workdir)
  code, lines = main_in_process.run(monkeypatch, capsys, f'--config={CONFIG}',
                                    f'--workdir={workdir}', *args,
                                    action=evaluate.evaluate_model)
  assert code == 2 and len(lines) == 1, (code, lines)
  assert saved_checkpoints.workdir_files(workdir) == before
  return lines[0][len(main_in_process.PROG) + 2:]


def without_marks(section: dict) -> dict:
  return {k: v for k, v in section.items()
          if k not in ('attacked_round', 'diverged', 'stopped_at_round')}


def test_an_attack_on_a_finished_workdir_gives_the_run_s_own_results(tmp_path, trained):
  workdir = copy_of(trained, tmp_path / 'run')
  experiment.evaluate_model(evaluated(workdir), workdir)
  got = files.read_json(os.path.join(workdir, 'evaluations', 'run', 'results.json'))
  run = trained[1]
  for kind in ATTACKS:   # the run's final state, its round 2 replayed as the run replayed it
    assert got[kind] == {**run[kind], 'attacked_round': 2, 'diverged': False}, kind
  assert got['verification'] == run['verification']
  assert (got['evaluated_round'], got['diverged'], got['rounds']) == (2, False, 0)
  report = open(os.path.join(workdir, 'evaluations', 'run', 'report.md')).read()
  assert "Evaluated: the run's own state after round 2.\n" in report


def test_a_diverged_run_is_attacked_at_its_last_accepted_checkpoint(tmp_path, trained,
                                                                   monkeypatch, capsys):
  # The workdir the divergence guard leaves when round 2 diverges: stopped.json, the checkpoint
  # of round 1 alone (the guard runs before round 2 is checkpointed), no results.
  workdir = copy_of(trained, tmp_path / 'run')
  for name in resume.RESULT_FILES:
    os.remove(os.path.join(workdir, name))
  shutil.rmtree(os.path.join(workdir, 'checkpoints', '2'))
  os.remove(checkpoint.digest_path(workdir, 2))
  resume.write_stopped(workdir, 2, 'round 2: training loss nan; the run diverged',
                       attacked_config().to_dict())
  config = evaluated(workdir, leakage__round=1)
  got = experiment.evaluate_model(config, workdir)
  # The same checkpoint named explicitly (init_from_step=1) of the run as it finished.
  reference = evaluated(trained[0], leakage__round=1)
  reference.init_from_step = 1
  expected = experiment.evaluate_model(reference, str(tmp_path / 'reference'))
  for kind in ATTACKS:
    assert got[kind] == {**without_marks(expected[kind]), 'attacked_round': 1, 'diverged': True,
                         'stopped_at_round': 2}, kind
    assert (expected[kind]['attacked_round'], expected[kind]['diverged']) == (1, False)
  assert 'inversion' not in got
  assert got['verification'] == expected['verification'] != trained[1]['verification']
  assert (got['evaluated_round'], got['diverged']) == (1, True)
  report = open(os.path.join(workdir, 'evaluations', 'run', 'report.md')).read()
  assert ("the run DIVERGED (the divergence guard stopped it at round 2), so this is its last "
          'accepted checkpoint.') in report
  # Round 2 came after the last accepted checkpoint: refused in one line.
  assert refused(monkeypatch, capsys, workdir, f'--config.init_from={workdir}',
                 '--config.evals.leakage.round=2', '--name=again') == (
      'config.evals.leakage.round=2 asks round 2: the state attacked is round 1, the last accepted '
      'checkpoint of a run the divergence guard stopped at round 2; expected a round that can be '
      'replayed: 1.')


def test_a_round_whose_previous_checkpoint_is_gone_is_refused(tmp_path, trained, monkeypatch,
                                                             capsys):
  # What checkpoint_keep=1 leaves: round 2's checkpoint alone, so round 2 cannot be replayed.
  workdir = copy_of(trained, tmp_path / 'run')
  shutil.rmtree(os.path.join(workdir, 'checkpoints', '1'))
  os.remove(checkpoint.digest_path(workdir, 1))
  saved = files.read_json(os.path.join(workdir, 'config.json'))
  files.write_json_atomic(os.path.join(workdir, 'config.json'), {**saved, 'checkpoint_keep': 1})
  assert refused(monkeypatch, capsys, workdir, f'--config.init_from={workdir}',
                 '--config.evals.inversion.targets=1', '--config.evals.inversion.round=2') == (
      'config.evals.inversion.targets=1 asks round 2: round 2 is replayed from the checkpoint of '
      f'round 1, which {workdir}/checkpoints no longer holds (rounds held: 2; the run\'s '
      'checkpoint_keep=1, checkpoint_every=1); expected a round that can be replayed: 1.')


def test_a_run_trained_otherwise_is_refused_naming_the_field(tmp_path, trained, monkeypatch,
                                                             capsys):
  workdir = copy_of(trained, tmp_path / 'run')
  assert refused(monkeypatch, capsys, workdir, f'--config.init_from={workdir}',
                 '--config.evals.leakage.round=2', '--config.fedgc.reg_lambda=7.0') == (
      f"config.evals.leakage.round=2 replays round 2 of the run config.init_from='{workdir}', "
      'which trained otherwise (its config.json -> here: fedgc.reg_lambda: 20.0 -> 7.0); '
      "expected the run's own value of every field that changes what was trained, or "
      'evals.leakage.round=0.')


def test_a_backbone_file_has_no_rounds_to_replay(tmp_path, monkeypatch, capsys):
  from tests.models.test_arcface_torch import _r18_file
  path, _, _ = _r18_file(tmp_path)
  workdir = str(tmp_path / 'eval')
  os.makedirs(workdir)
  assert refused(monkeypatch, capsys, workdir, f'--config.init_from={path}',
                 '--config.model.name=iresnet18', '--config.model.embedding_dim=8',
                 '--config.data.image_size=112', '--config.evals.inversion.targets=1') == (
      "config.evals.inversion.targets=1 replays the client updates of round 1 from a run's "
      f"checkpoints, but config.init_from='{path}' is an arcface_torch backbone file (no rounds); "
      "expected a finished run's workdir as config.init_from, or evals.inversion.targets=0.")
