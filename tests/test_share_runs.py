"""launch/share_runs.py: sweep lanes share a queue's runs, each run trained once, a start first."""
import fcntl
import importlib.util
import json
import os

import pytest

from fedjax_face.tools.tables import run as table_runs
from fedjax_face.tools.tables import spec

_script = importlib.util.spec_from_file_location(
    'share_runs', os.path.join(os.path.dirname(__file__), '..', 'launch', 'share_runs.py'))
share_runs = importlib.util.module_from_spec(_script)
_script.loader.exec_module(share_runs)


def test_queue_lists_each_run_once_and_a_start_before_its_runs():
  runs = share_runs.queue_runs(['fedgc10 0,1', 'fedgc11 0,1', 'fedfr1 0'])
  assert len(runs) == len(set(runs))
  ten = share_runs.queue_runs(['fedgc10 0,1'])
  eleven = share_runs.queue_runs(['fedgc11 0,1'])
  shared = set(ten) & set(eleven)
  assert shared   # the two tables hold the same look-alike runs
  fedgc = [r for r in runs if r[0].config.startswith('fedgc')]
  assert len(fedgc) == len(set(ten) | set(eleven))
  started = [(run, seed) for run, seed in runs if run.init_from is not None]
  assert started   # FedFR's rows start from its pre-training
  for run, seed in started:
    assert runs.index((run.init_from, seed)) < runs.index((run, seed))


def _fake_training(monkeypatch, trained):
  def ensure_run(run, root, extra, seed, dry_run):
    assert not dry_run and extra == ()
    run_dir = spec.workdir(root, run, extra, seed)
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, 'results.json'), 'w') as f:
      json.dump({}, f)
    trained.append(run_dir)
    return run_dir
  monkeypatch.setattr(share_runs.table_runs, 'ensure_run', ensure_run)


def test_a_pass_skips_ended_and_claimed_runs_and_puts_off_a_run_whose_start_is_training(
    tmp_path, monkeypatch):
  root, claims = str(tmp_path / 'root'), str(tmp_path / 'claims')
  drain = str(tmp_path / 'drain')   # not the machine's: a sweep here may be draining
  os.makedirs(claims)
  pretrain = spec.Run('fedfr/pretrain')
  fine_tune = spec.Run('fedfr/fedfr', 'row=fedavg', init_from=pretrain)
  ended, plain = spec.Run('fedgc/fedpe'), spec.Run('fedgc/fedgc')
  os.makedirs(spec.workdir(root, ended, (), 0))
  with open(os.path.join(spec.workdir(root, ended, (), 0), table_runs.FAILED), 'w') as f:
    f.write('{}')
  trained = []
  _fake_training(monkeypatch, trained)
  # Another lane holds the pre-training's claim: its fine-tuning waits for a later pass.
  with open(os.path.join(claims, os.path.basename(spec.workdir(root, pretrain, (), 0))),
            'a') as other_lane:
    fcntl.flock(other_lane, fcntl.LOCK_EX)
    runs = [(ended, 0), (pretrain, 0), (fine_tune, 0), (plain, 0), (plain, 1)]
    assert share_runs.one_pass(runs, root, claims, drain) == (2, 1)
    assert trained == [spec.workdir(root, plain, (), 0), spec.workdir(root, plain, (), 1)]
  # The other lane was killed before its run ended (its lock went with it): this lane trains both.
  assert share_runs.one_pass(runs, root, claims, drain) == (2, 0)
  assert trained[2:] == [spec.workdir(root, pretrain, (), 0),
                         spec.workdir(root, fine_tune, (), 0)]
  assert share_runs.one_pass(runs, root, claims, drain) == (0, 0)


def test_a_drained_lane_claims_no_further_run(tmp_path, monkeypatch):
  root, claims, drain = str(tmp_path / 'root'), str(tmp_path / 'claims'), str(tmp_path / 'drain')
  os.makedirs(claims)
  trained = []
  _fake_training(monkeypatch, trained)
  first, second = spec.Run('fedgc/fedpe'), spec.Run('fedgc/fedgc')
  original = share_runs.table_runs.ensure_run

  def train_then_drain(*args, **kwargs):
    open(drain, 'w').close()   # `every_table.sh drain` while the first run trains
    return original(*args, **kwargs)
  monkeypatch.setattr(share_runs.table_runs, 'ensure_run', train_then_drain)
  assert share_runs.one_pass([(first, 0), (second, 0)], root, claims, drain) == (1, 0)
  assert trained == [spec.workdir(root, first, (), 0)]


def test_hours_left_take_a_run_s_archived_time_else_the_paper_s_ended_runs(tmp_path):
  root, archive = str(tmp_path / 'root'), str(tmp_path / 'results')

  def write(run_dir, total_s):
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, 'results.json'), 'w') as f:
      json.dump({'timing': {'total_s': total_s}}, f)

  (run, seed), *others = share_runs.queue_runs(['fedgc1 0'])
  write(spec.workdir(root, run, (), seed), 600.0)                    # ended here: 10 minutes
  namesake = os.path.basename(spec.workdir(root, others[0][0], (), others[0][1]))
  write(os.path.join(archive, 'fedgc_tables', namesake), 7200.0)     # archived: 2 hours
  [(paper, left, hours)] = share_runs.hours_left(['fedgc1 0'], root, archive)
  assert (paper, left) == ('fedgc', len(others))
  assert hours == pytest.approx(2 + (len(others) - 1) * 600 / 3600)
