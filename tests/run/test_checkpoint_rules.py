"""The rules a run applies to checkpoints, its own and another run's, each on workdirs built by
hand (config.json of a real config, checkpoints of a small fake state saved through
`resume.open_workdir`; no training): what `config.init_from` may start from
(`resume.init_from_round`, `load_final_state`, `check_init_data`, the model's fit:
`models.starts.matching_tree`), that a resume reads nothing of it (`setup.validate(resuming=True)`
and the driver's own choice), an unwritable checkpoint directory named at opening, a trusted
unverified resume's line, digest files from before the run record, and a DP run resumed or
extended over the noise history its checkpoint records, 2 of 4 clients sampled a round (the
amplified accountant), against dp-accounting called directly.

These were driver runs in tests/test_resume.py, tests/test_faults.py, tests/test_experiment.py and
tests/test_refusals.py; those files keep what only a run proves (a resumed run equals the
uninterrupted one bit for bit, a real process's exit status)."""

import functools
import json
import os
import shutil
import types

import dp_accounting
from dp_accounting import rdp
import jax
import ml_collections
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.algorithms import common
from fedjax_face.core import checks, privacy
from fedjax_face.io import checkpoint, files, metrics
from fedjax_face.models import starts
from fedjax_face.run import loop, noise, resume
from fedjax_face.run import setup as run_setup
from fedjax_face.run.hooks import logging as logging_hook
from tests import config_files, main_in_process, saved_checkpoints
from tests.io.test_checkpoint import assert_state, changed_arrays, flip_a_bit, state

load_config = config_files.load_config
FLAG = '--config.trust_unverified_checkpoints=True'


def make_run(workdir, config, rounds, *, finished: bool = False, records=None) -> str:
  """A workdir `config` opened (config.json written as the driver writes it) with the checkpoints
  of `rounds` (the newest two kept, as `checkpoint_keep` keeps them) and their run records
  (`records[r]`, else {'done': r}); results.json when `finished`."""
  workdir = str(workdir)
  ckpt = resume.open_workdir(workdir, config.to_dict())
  for r in rounds:
    ckpt.save(r, state(r), (records or {}).get(r, {'done': r}))
  ckpt.close()
  if finished:
    files.write_json_atomic(os.path.join(workdir, 'results.json'), {'rounds': config.num_rounds})
  return workdir


def pretraining(workdir, rounds, finished: bool = False) -> str:
  """FedFR's pre-training of 4 rounds (configs/fedfr/pretrain.py) with the checkpoints of
  `rounds`."""
  config = load_config('pretrain')
  config.num_rounds = 4
  return make_run(workdir, config, rounds, finished=finished)


def fedfr_from(pre, **fields):
  config = load_config('fedfr')
  config.init_from = str(pre)
  for name, value in fields.items():
    config[name] = value
  return config


# -- what config.init_from may start from -------------------------------------------------------

def test_an_init_from_that_holds_no_run_is_named(tmp_path):
  nothing = str(tmp_path / 'nothing')
  line = (f"config.init_from='{nothing}' has no checkpoints; expected the --workdir of a finished "
          'run.')
  with pytest.raises(FileNotFoundError) as missing:
    resume.init_from_round(nothing)
  assert str(missing.value) == line
  with pytest.raises(FileNotFoundError) as missing:   # as the driver checks it, before any file
    run_setup.validate(fedfr_from(nothing))
  assert str(missing.value) == line
  assert not os.path.exists(nothing)
  os.makedirs(f'{nothing}/checkpoints')
  with pytest.raises(FileNotFoundError) as missing:
    resume.init_from_round(nothing)
  assert str(missing.value) == (f"config.init_from='{nothing}' has no config.json; expected the "
                                '--workdir of a finished run.')
  files.write_json_atomic(f'{nothing}/config.json', {'num_rounds': 4})
  with pytest.raises(FileNotFoundError) as missing:
    resume.init_from_round(nothing)
  assert str(missing.value) == (f"config.init_from='{nothing}': {nothing}/checkpoints holds no "
                                'checkpoint; expected the --workdir of a finished run.')


def test_an_unfinished_run_starts_another_only_from_a_round_it_names(tmp_path):
  pre = pretraining(tmp_path / 'pre', (1, 2))   # stopped after round 2 of 4, no results.json
  unfinished = (f"config.init_from='{pre}' is an unfinished run (its newest checkpoint is round "
                '2 of num_rounds=4); expected a finished run, or --config.init_from_step=<round> '
                'to start from one of its checkpoints (rounds 1, 2).')
  with pytest.raises(resume.InitFromError) as refused:
    resume.init_from_round(pre)
  assert str(refused.value) == unfinished
  with pytest.raises(resume.InitFromError) as refused:
    run_setup.validate(fedfr_from(pre))
  assert str(refused.value) == unfinished
  not_held = (f"config.init_from_step=9, but config.init_from='{pre}' holds the checkpoints of "
              'rounds 1, 2; expected one of them.')
  with pytest.raises(resume.InitFromError) as refused:
    resume.init_from_round(pre, 9)
  assert str(refused.value) == not_held
  with pytest.raises(resume.InitFromError) as refused:
    run_setup.validate(fedfr_from(pre, init_from_step=9))
  assert str(refused.value) == not_held
  # Told which round: started from that checkpoint, verified.
  assert resume.init_from_round(pre, 1) == 1 and resume.init_from_round(pre, 2) == 2
  config = fedfr_from(pre, init_from_step=2)
  run_setup.validate(config)
  assert_state(resume.load_final_state(pre, 2), 2)
  assert_state(run_setup.warm_start(config), 2)
  assert_state(run_setup.warm_start(fedfr_from(pre, init_from_step=1)), 1)


def test_a_finished_run_starts_from_its_final_round_and_without_results_json_is_unfinished(
    tmp_path):
  pre = pretraining(tmp_path / 'pre', (1, 2, 3, 4), finished=True)
  assert resume.init_from_round(pre) == 4
  run_setup.validate(fedfr_from(pre))
  assert_state(resume.load_final_state(pre), 4)
  assert_state(run_setup.warm_start(fedfr_from(pre)), 4)
  os.remove(f'{pre}/results.json')
  with pytest.raises(resume.InitFromError) as refused:
    resume.init_from_round(pre)
  assert str(refused.value) == (
      f"config.init_from='{pre}' is an unfinished run (it has no results.json); expected a "
      'finished run, or --config.init_from_step=<round> to start from one of its checkpoints '
      '(rounds 3, 4).')


def test_a_run_trained_on_other_data_cannot_start_this_one(tmp_path):
  pre = pretraining(tmp_path / 'pre', (3, 4), finished=True)
  # Another seed or training-set size draws other identities: the class matrix would name others.
  config = fedfr_from(pre, seed=1)
  config.data.synthetic.num_identities = 20
  other = (f"config.init_from='{pre}' was trained on other data (seed: 0 there, 1 here; "
           'data.synthetic.num_identities: 16 there, 20 here): its identities are not this '
           "run's. Expected the same seed and data fields (pre-train with this run's data "
           'section).')
  with pytest.raises(resume.InitFromError) as refused:
    run_setup.validate(config)
  assert str(refused.value) == other
  # Refused before anything is written: by the driver too, before its workdir is made.
  with pytest.raises(resume.InitFromError) as refused:
    experiment.train_and_evaluate(config, str(tmp_path / 'c'))
  assert str(refused.value) == other
  assert not (tmp_path / 'c').exists()
  # A data field the run's config.json lacks counts at the base config's value.
  saved = json.loads(open(f'{pre}/config.json').read())
  del saved['data']['synthetic']['lookalike_spread']
  files.write_json_atomic(f'{pre}/config.json', saved)
  same = fedfr_from(pre)
  resume.check_init_data(pre, same.to_dict(), ('data.synthetic.lookalike_spread',),
                         defaults=run_setup.defaults(same))
  same.data.synthetic.lookalike_spread = 0.125
  with pytest.raises(resume.InitFromError, match=(
      r"^config\.init_from='.*' was trained on other data \(data\.synthetic\.lookalike_spread: "
      r"[0-9.]+ there, 0\.125 here\)")):
    resume.check_init_data(pre, same.to_dict(), ('data.synthetic.lookalike_spread',),
                           defaults=run_setup.defaults(same))


def test_weights_that_do_not_fit_this_run_s_model_are_named():
  template = {'batch_stats': {'features': {'mean': np.zeros(16, np.float32)}},
              'params': {'features': {'kernel': np.zeros((4, 16), np.float32)}}}

  def start(mean_shape, **extra):
    return {'server': {'model': {
        'batch_stats': {'features': {'mean': np.ones(mean_shape, np.float64)}},
        'params': {'features': {'kernel': np.ones((4, 16), np.float64)}}, **extra}}}

  # A pre-training of embedding_dim 8 started by a run of 16 (the FedFR case): as the method
  # checks it (algorithms/common.py:start_from), naming the first array that does not fit.
  with pytest.raises(starts.StartError) as refused:
    common.start_from(start(8), template, method='fedfr')
  assert str(refused.value) == (
      "config.init_from: server.model['batch_stats']['features']['mean'] has shape (8,); this "
      'run expects (16,) (same config.model and data.image_size as the run it starts from?).')
  with pytest.raises(starts.StartError) as refused:
    starts.matching_tree('there', template, {'params': template['params'], 'extra': np.zeros(1)})
  assert str(refused.value) == (
      'there does not have this run\'s structure: missing ["[\'batch_stats\'][\'features\']'
      '[\'mean\']"], unexpected ["[\'extra\']"] (was it trained with the same config.model?).')
  # One that fits comes back in the template's dtypes, values kept.
  variables, classes = common.start_from(start(16), template, method='fedfr')
  assert classes is None
  assert jax.tree.map(lambda x: x.dtype, variables) == jax.tree.map(lambda x: x.dtype, template)
  jax.tree.map(np.testing.assert_array_equal, variables,
               jax.tree.map(np.ones_like, template))


def test_a_corrupted_start_is_refused_naming_its_checkpoint_in_one_line(tmp_path, monkeypatch,
                                                                       capsys):
  pre = pretraining(tmp_path / 'pre', (1, 2, 3, 4), finished=True)
  final = f'{pre}/checkpoints/4'
  assert changed_arrays(state(4), flip_a_bit(pre, 4)) == ["['server']['w']"]
  line = (f"config.init_from='{pre}': checkpoint {final} fails verification: 1 array(s) differ "
          "from what was saved (['server']['w']); expected a checkpoint as it was saved (rerun "
          'the run it comes from, or name another round with config.init_from_step).')
  run_setup.validate(fedfr_from(pre))   # the run is finished; its arrays are checked when read
  for read in (lambda: resume.load_final_state(pre),
               lambda: run_setup.warm_start(fedfr_from(pre))):
    with pytest.raises(checkpoint.CheckpointReadError) as refused:
      read()
    assert str(refused.value) == line
  # From the command line: that line alone, exit status 2, nothing made.
  code, lines = main_in_process.run(monkeypatch, capsys, '--config=configs/fedfr/fedfr.py:runlocal',
                                    f'--workdir={tmp_path / "cli"}', f'--config.init_from={pre}')
  assert (code, lines) == (2, [f'{main_in_process.PROG}: {line}'])
  assert not (tmp_path / 'cli').exists()


# -- a resume needs nothing of the run it started from ------------------------------------------

class Reached(Exception):
  """Raised by a stand-in for `run.setup.set_up`: the driver got past its checks and its start."""


def test_a_resume_does_not_read_the_run_it_started_from(tmp_path, monkeypatch):
  start = str(tmp_path / 'start')   # moved or deleted since the run started from it
  config = load_config('fedgc')
  config.init_from = start
  run_setup.validate(config, resuming=True)
  missing = (f"config.init_from='{start}' has no checkpoints; expected the --workdir of a "
             'finished run.')
  with pytest.raises(FileNotFoundError) as refused:
    run_setup.validate(config)
  assert str(refused.value) == missing
  # The driver: a workdir with checkpoints resumes without reading init_from (neither its
  # validation nor its warm start); it gets as far as reading the data with the newest
  # checkpoint's record.
  workdir = make_run(tmp_path / 'run', config, (1, 2))
  assert resume.resuming(workdir) is True
  config.num_rounds = 3

  def set_up(config, method, prior):
    raise Reached(prior)

  monkeypatch.setattr(run_setup, 'set_up', set_up)
  with pytest.raises(Reached) as reached:
    experiment.train_and_evaluate(config, workdir)
  assert reached.value.args == ({'done': 2},)
  # A new run from it is refused before anything is made.
  with pytest.raises(FileNotFoundError) as refused:
    experiment.train_and_evaluate(config, str(tmp_path / 'other'))
  assert str(refused.value) == missing
  assert not (tmp_path / 'other').exists()


# -- opening a workdir --------------------------------------------------------------------------

def test_an_unwritable_checkpoint_directory_is_named_at_opening(tmp_path):
  workdir = str(tmp_path / 'run')
  os.makedirs(workdir)
  with open(f'{workdir}/checkpoints', 'w') as f:   # a regular file where the directory goes
    f.write('')
  with pytest.raises(files.WorkdirError) as refused:
    resume.open_workdir(workdir, load_config('fedgc').to_dict())
  assert str(refused.value) == (f'cannot write checkpoints to {workdir}/checkpoints: Not a '
                                'directory; expected a writable directory.')
  assert not os.path.exists(f'{workdir}/config.json')
  assert open(f'{workdir}/checkpoints').read() == ''


def test_checkpoints_without_digests_are_resumed_with_one_line_only_when_trusted(tmp_path, capsys):
  config = load_config('fedgc')
  workdir = make_run(tmp_path / 'run', config, (1, 2))
  shutil.rmtree(f'{workdir}/checkpoint_digests')
  config.num_rounds = 3
  before = saved_checkpoints.workdir_files(workdir)
  capsys.readouterr()
  with pytest.raises(files.WorkdirError) as refused:   # the driver's opening
    resume.check_opening(workdir, config.to_dict(), **experiment._opening(config))
  assert str(refused.value) == (
      f'no checkpoint under {workdir}/checkpoints can be verified (rounds 2, 1 have no digest '
      f'file in {workdir}/checkpoint_digests); delete those step directories to start the run '
      f'afresh, use a new --workdir, or {FLAG} to resume from round 2 without verifying it.')
  assert saved_checkpoints.workdir_files(workdir) == before
  assert capsys.readouterr().out == ''
  # Trusted: resumed from the newest, said in one line naming the flag.
  config.trust_unverified_checkpoints = True
  ckpt = resume.open_workdir(workdir, config.to_dict(), **experiment._opening(config))
  assert_state(ckpt.restore(state(0)), 2)
  ckpt.close()
  assert ckpt.run_record is None
  assert capsys.readouterr().out == (
      f'checkpoint {workdir}/checkpoints/2 is unverified (no {workdir}/checkpoint_digests/2.json); '
      f'resuming from it as {FLAG} says\n')


def _old_format(workdir, step: int) -> None:
  """The digest file of `step` as written before the run record was kept: its arrays alone."""
  path = checkpoint.digest_path(workdir, step)
  files.write_json_atomic(path, json.loads(open(path).read())['arrays'])


def test_digests_written_before_the_run_record_open_and_resume(tmp_path, capsys):
  config = load_config('fedgc')
  workdir = make_run(tmp_path / 'run', config, (1, 2))
  for step in (1, 2):
    _old_format(workdir, step)
  config.num_rounds = 3
  opening = resume.check_opening(workdir, config.to_dict(), **experiment._opening(config))
  assert opening.latest == 2 and opening.record is None
  capsys.readouterr()
  ckpt = resume.open_workdir(workdir, config.to_dict(), **experiment._opening(config))
  assert_state(ckpt.restore(state(0)), 2)
  ckpt.close()
  assert ckpt.run_record is None and capsys.readouterr().out == ''


# -- a DP run resumed or extended: 2 of 4 clients a round, the sampled accountant ----------------

DELTA = 1e-5
CLIENTS, COHORT = 4, 2


def _dp_config(num_rounds: int, target: float = 4.0):
  config = load_config('fedpe')
  config.num_rounds = num_rounds
  config.federated.participation = 0.5   # 2 of 4 clients a round: the sampled accountant
  config.dp.enabled = True
  config.dp.target_epsilon = target
  return config


def _plan(config, record=None, start_round=0) -> noise.NoisePlan:
  # FedPE sends no client rows (its W_k stays with the client): the amplified accountant.
  return noise.plan_noise(config, record, start_round, (), CLIENTS, COHORT)


def _dp_accounting_epsilon(history) -> float:
  """dp-accounting called directly over [(rounds, sigma), ...]: replace-one neighbours (so the
  Gaussian of sensitivity 2S has noise multiplier sigma / 2), 2 of 4 clients without
  replacement, each segment's rounds composed at its own sigma."""
  return _direct(tuple((int(n), float(s)) for n, s in history))


@functools.lru_cache(maxsize=None)
def _direct(history) -> float:   # about a second of dp-accounting's sampled RDP: each asked once
  accountant = rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
  for rounds, sigma in history:
    one_round = dp_accounting.SampledWithoutReplacementDpEvent(
        CLIENTS, COHORT, dp_accounting.GaussianDpEvent(sigma / 2))
    accountant.compose(dp_accounting.SelfComposedDpEvent(one_round, rounds))
  return accountant.get_epsilon(DELTA)


@pytest.fixture(scope='module')
def three_rounds():
  """The plan of a 3-round DP run calibrated to epsilon 4, and its round-3 checkpoint's record."""
  first = _plan(_dp_config(3))
  return first, first.record(3)


def test_a_fresh_sampled_dp_run_is_calibrated_on_dp_accounting(three_rounds):
  first, record = three_rounds
  sigma_1 = first.dp.noise_multiplier
  assert privacy.amplified(first.dp) and first.total == [[3, sigma_1]]
  for r in (1, 2, 3):
    assert first.epsilons[r - 1] == pytest.approx(_dp_accounting_epsilon([(r, sigma_1)]), rel=1e-6)
  assert 3.99 <= _dp_accounting_epsilon([(3, sigma_1)]) <= 4.0
  assert record['privacy'] == {'noise_history': [[3, sigma_1]], 'rounds': 3,
                               'epsilon': first.epsilons[2], 'delta': DELTA,
                               'plan': {'num_rounds': 3, 'target_epsilon': 4.0,
                                        'noise_multiplier': sigma_1}}


def test_extending_a_dp_run_accounts_each_round_at_the_noise_it_ran_at(three_rounds):
  first, record = three_rounds
  sigma_1 = first.dp.noise_multiplier
  # The target was spent over the 3 rounds: the 2 new ones would need more noise. Refused, with
  # the rounds the budget affords at sigma_1 (dp-accounting's own count), unless
  # dp.allow_sigma_increase says the jump is wanted.
  affordable = max(k for k in range(3) if _dp_accounting_epsilon([(3 + k, sigma_1)]) <= 4.0)
  higher = privacy.noise_for_epsilon(4.0, CLIENTS, COHORT, 2, DELTA, True, [[3, sigma_1]])
  with pytest.raises(checks.UsageError) as refused:
    _plan(_dp_config(5), record, 3)
  assert str(refused.value) == (
      f'config.num_rounds=5 with dp.target_epsilon=4: rounds 4-5 would run at noise multiplier '
      f'{higher:.4g}, up from the {sigma_1:.4g} of the rounds before; the budget affords '
      f'{affordable} more round(s) at {sigma_1:.4g}. Expected config.num_rounds <= '
      f'{3 + affordable}, a higher dp.target_epsilon, or dp.allow_sigma_increase=True for the '
      'jump.')
  config = _dp_config(5)
  config.dp.allow_sigma_increase = True
  plan = _plan(config, record, 3)
  sigma_2 = plan.dp.noise_multiplier
  assert sigma_2 == higher and sigma_2 != sigma_1
  # Rounds 1-3 ran at sigma_1 (calibrated for 3 rounds), rounds 4-5 at sigma_2.
  assert plan.total == [[3, sigma_1], [2, sigma_2]]
  real = _dp_accounting_epsilon([(3, sigma_1), (2, sigma_2)])
  assert plan.epsilons[-1] == pytest.approx(real, rel=1e-12)
  # The target is met over the whole history, not over a history that never ran.
  assert 3.99 <= real <= 4.0
  # The checkpoint records that history; results.json's privacy ledger gives it (run/results.py
  # composes it over `plan.total`).
  assert plan.record(5)['privacy']['noise_history'] == [[3, sigma_1], [2, sigma_2]]
  ledger = privacy.ledger(config, plan.dp, CLIENTS, COHORT, 5, plan.total)
  assert ledger['amplified_by_sampling'] is True
  assert ledger['epsilon'] == pytest.approx(real, rel=1e-12)
  assert ledger['noise_history'] == [{'rounds': 3, 'noise_multiplier': sigma_1},
                                     {'rounds': 2, 'noise_multiplier': sigma_2}]
  # TensorBoard's dp/epsilon after each round: dp-accounting over the history up to it. Rounds
  # 1-3 were written by the first start, rounds 4-5 by the extension's logging hook.
  cut = [[(1, sigma_1)], [(2, sigma_1)], [(3, sigma_1)], [(3, sigma_1), (1, sigma_2)],
         [(3, sigma_1), (2, sigma_2)]]
  assert plan.epsilons[:3] == first.epsilons
  for step, history in zip(range(1, 6), cut):
    assert plan.epsilons[step - 1] == pytest.approx(_dp_accounting_epsilon(history),
                                                    rel=1e-6), step
  written = []

  class Writer:
    def write_scalars(self, step, scalars):
      written.append((step, scalars['dp/epsilon']))

  hook = logging_hook.logging(
      ml_collections.ConfigDict({'log_every': 1, 'num_rounds': 5}),
      types.SimpleNamespace(class_embeddings=lambda state: None), Writer(),
      metrics.Progress(5, 3, 100), 3, plan.epsilons, None)
  loop.run_rounds(lambda s, r: (s + 1, {'train_loss': np.float32(1.0)}), 3, 3, 5, [hook])
  assert written == [(4, plan.epsilons[3]), (5, plan.epsilons[4])]


def test_a_spent_target_is_refused_at_opening_and_a_raised_one_is_reached_over_the_history(
    tmp_path, three_rounds):
  first, record = three_rounds
  sigma_1 = first.dp.noise_multiplier
  spent = record['privacy']['epsilon']
  assert spent == pytest.approx(_dp_accounting_epsilon([(3, sigma_1)]), rel=1e-12)
  # As the driver opens the workdir of that run: refused before anything is written.
  workdir = make_run(tmp_path / 'run', _dp_config(3), (1, 2, 3),
                     records={r: first.record(r) for r in (1, 2, 3)})
  before = saved_checkpoints.workdir_files(workdir)
  config = _dp_config(5, target=2.0)
  with pytest.raises(files.WorkdirError) as refused:
    resume.check_opening(workdir, config.to_dict(), **experiment._opening(config))
  assert str(refused.value) == (
      f'config.dp.target_epsilon=2 cannot be met: the 3 rounds already run spent '
      f'epsilon={spent:.4g} (delta=1e-05); expected a target above it, or a new --workdir.')
  assert saved_checkpoints.workdir_files(workdir) == before
  # A raised target: the noise of rounds 4-5 is solved so that all 5 rounds reach it.
  config = _dp_config(5, target=6.0)
  assert resume.check_opening(workdir, config.to_dict(),
                              **experiment._opening(config)).record == first.record(3)
  raised = _plan(config, record, 3)
  real = _dp_accounting_epsilon([(3, sigma_1), (2, raised.dp.noise_multiplier)])
  assert raised.total == [[3, sigma_1], [2, raised.dp.noise_multiplier]]
  assert raised.epsilons[-1] == pytest.approx(real, rel=1e-12)
  assert privacy.ledger(config, raised.dp, CLIENTS, COHORT, 5, raised.total)['epsilon'] == (
      pytest.approx(real, rel=1e-12))
  assert 5.99 <= real <= 6.0


def test_a_dp_checkpoint_without_its_noise_history_is_refused_at_opening(tmp_path):
  workdir = make_run(tmp_path / 'run', _dp_config(2), (1, 2))
  _old_format(workdir, 2)   # its record gone: the epsilon of its rounds cannot be accounted
  config = _dp_config(3)
  before = saved_checkpoints.workdir_files(workdir)
  with pytest.raises(files.WorkdirError) as refused:
    resume.check_opening(workdir, config.to_dict(), **experiment._opening(config))
  assert str(refused.value) == (
      'dp: the checkpoint records no noise history (saved before it was recorded, or its '
      'checkpoint_digests/ file is missing), so the epsilon of its rounds cannot be accounted; '
      f'expected a checkpoint with its digest file, or {FLAG} to assume every round ran at this '
      "config's noise multiplier (config.dp.target_epsilon=4).")
  assert saved_checkpoints.workdir_files(workdir) == before
  config.trust_unverified_checkpoints = True
  assert resume.check_opening(workdir, config.to_dict(), **experiment._opening(config)).latest == 2
