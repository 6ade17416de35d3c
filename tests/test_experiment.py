"""End to end: `train_and_evaluate` per config, exact resume, and clear errors for bad input.
FedFR's runs: tests/test_experiment_fedfr.py; PAD's: tests/test_experiment_pad.py (files of their
own, which pytest-xdist's `--dist loadfile` runs beside this one). The workdir and init_from rules
without a run: tests/run/ (test_resume_rules, test_checkpoint_rules); an unknown --config field:
tests/test_main.py."""

import glob
import json
import os
import shutil

import jax
import numpy as np
from PIL import Image
import pytest

from fedjax_face import experiment
from fedjax_face.data import sources, views
from fedjax_face.io import files
from fedjax_face.data.synthetic import pairs
from tests import config_files, saved_checkpoints

load_config = config_files.load_config




@pytest.fixture(scope='module')
def fedgc_run(tmp_path_factory):
  """(workdir, results) of the runlocal FedGC run, trained once: its outputs are checked as they
  are, and evaluated alone in a copy."""
  workdir = tmp_path_factory.mktemp('fedgc') / 'run'
  return workdir, experiment.train_and_evaluate(load_config('fedgc'), str(workdir))


# FEDJAX_FACE_TESTS=full: the `[fedpe]` case. The outputs are the driver's, whatever the method
# (the suite checks each of them in `[fedgc]` and `[fedgc/centralized]`); the fedpe config runs
# end to end in the suite in test_client_state_on_the_host_trains_checkpoints_and_resumes_as_on_
# the_device (its runlocal run on the device, its verification the host run's).
@pytest.mark.parametrize('name,algorithm', [('fedgc', 'fedgc'),
                                            pytest.param('fedpe', 'fedpe', marks=pytest.mark.full),
                                            ('fedgc/centralized', 'centralized')])
def test_train_and_evaluate_writes_every_output(tmp_path, request, name, algorithm):
  config = load_config(name)
  if name == 'fedgc':
    tmp_path, results = request.getfixturevalue('fedgc_run')
  else:
    results = experiment.train_and_evaluate(config, str(tmp_path))
  for f in ('config.json', 'results.json', 'report.md', 'roc.png', 'samples.png',
            'class_embedding_similarity.png'):
    assert (tmp_path / f).exists(), f
  assert os.listdir(tmp_path / 'tensorboard')
  saved = json.loads((tmp_path / 'results.json').read_text())
  assert saved['algorithm'] == algorithm and saved['rounds'] == config.num_rounds
  # The FedGC paper's configs evaluate all six pair sets of the benchmark.
  assert set(saved['verification']) == set(pairs.ALL_PAIR_SET_NAMES)
  for metrics in saved['verification'].values():
    assert 0.0 <= metrics['accuracy'] <= 1.0
    assert metrics['num_pairs'] == config.data.synthetic.num_pairs
    assert metrics['protocol'].startswith('insightface 10-fold')
  assert results['verification']['lfw']['accuracy'] == saved['verification']['lfw']['accuracy']
  ident, id_config = saved['identification'], config.evals.identification
  assert ident['num_enrolled'] == id_config.num_enrolled
  assert ident['num_distractors'] == id_config.num_distractors
  assert ident['num_mated'] == id_config.num_enrolled * id_config.probes_per_identity
  assert ident['num_non_mated'] == id_config.num_non_mated
  assert 0.0 <= ident['rank_1'] <= ident['rank_5'] <= 1.0
  norms = saved['diagnostics']['class_embedding_norm']
  assert 0.0 < norms['class_embeddings/norm_mean'] <= norms['class_embeddings/norm_max']
  report = (tmp_path / 'report.md').read_text()
  assert '| LFW-like |' in report and 'AgeDB-30-like' in report
  assert '1:N identification' in report and 'rank-1 (%)' in report


def test_lookalike_run_spreads_families_and_measures_them(tmp_path):
  config = load_config('fedgc/fedpe', 'lookalikes,runlocal')
  assert config.data.synthetic.lookalike_family_size == 4
  benchmark = sources.load(config)
  clients = views.client_partition(config, benchmark.num_identities, benchmark.train_families)
  for ids in clients:                      # every family member on a different client
    families = benchmark.train_families[ids]
    assert len(set(families.tolist())) == len(ids)
  saved = experiment.train_and_evaluate(config, str(tmp_path))
  look = saved['diagnostics']['lookalikes']
  # 16 identities in 4 families of 4 over 4 clients: all 4·6 member pairs are cross-client.
  assert look['pairs'] == 24
  for key in ('class_cos_lookalike', 'class_cos_stranger', 'feature_cos_lookalike',
              'feature_cos_stranger', 'feature_cos_same_identity'):
    assert -1.0 <= look[key] <= 1.0, key
  report = (tmp_path / 'report.md').read_text()
  assert 'Cross-client look-alike pairs (24) vs as many strangers' in report
  assert 'lookalikes.png' in saved['plots']
  with Image.open(tmp_path / 'lookalikes.png') as picture:   # 4 families x (4 members x 3)
    assert picture.size == (12 * (96 + 2) + 2, 4 * (96 + 2) + 2)


# FEDJAX_FACE_TESTS=full: FedGC's finished run extended by a larger num_rounds ends bit for bit as
# the straight run in the suite's tests/test_faults.py
# test_a_corrupted_checkpoint_falls_back_to_the_newest_good_one (a finished 4-round run rerun at
# 8 rounds, against the uninterrupted 8-round run) and, resumed from a checkpoint, in
# test_kill_9_at_a_random_point_resumes_to_the_uninterrupted_result[0]; `resumed_from_round` in
# test_client_state_on_the_host_trains_checkpoints_and_resumes_as_on_the_device below.
@pytest.mark.full
def test_four_rounds_equal_two_plus_resume_plus_two(tmp_path, fedgc_run):
  config = load_config('fedgc')
  config.num_rounds = 4
  experiment.train_and_evaluate(config, str(tmp_path / 'straight'))

  # The first two rounds: the module's finished runlocal run (this config at num_rounds=2),
  # copied, so that its own outputs stay as the other tests read them.
  assert fedgc_run[1]['rounds'] == 2
  shutil.copytree(fedgc_run[0], tmp_path / 'resumed')
  # num_rounds may change on resume: it extends the run
  results = experiment.train_and_evaluate(config, str(tmp_path / 'resumed'))
  assert results['timing']['resumed_from_round'] == 2

  straight = saved_checkpoints.restore(str(tmp_path / 'straight'), 4)
  resumed = saved_checkpoints.restore(str(tmp_path / 'resumed'), 4)
  jax.tree.map(np.testing.assert_array_equal, straight, resumed)
  assert int(resumed['round']) == 4


def test_client_state_on_the_host_trains_checkpoints_and_resumes_as_on_the_device(tmp_path):
  """FedPE keeps each client's W_k: with engine.client_state='host' those rows live in numpy
  between rounds, and a run resumed from a checkpoint saved that way ends where a straight run
  with device state does."""
  config = load_config('fedpe')   # runlocal as it is: 2 rounds, a checkpoint after each
  device = experiment.train_and_evaluate(config, str(tmp_path / 'device'))
  config.engine.client_state = 'host'
  # Round 1 on the host, stopped there: no evaluator, as nothing reads that run's evaluation
  # (evaluators may change on resume, run/resume.py's RUN_FIELDS); then resumed to the end.
  first = config.copy_and_resolve_references()
  first.num_rounds = 1
  for kind in list(first.evals):
    del first.evals[kind]
  experiment.train_and_evaluate(first, str(tmp_path / 'host'))
  host = experiment.train_and_evaluate(config, str(tmp_path / 'host'))
  assert host['timing']['resumed_from_round'] == 1
  on_device = saved_checkpoints.restore(str(tmp_path / 'device'), config.num_rounds)
  on_host = saved_checkpoints.restore(str(tmp_path / 'host'), config.num_rounds)
  assert on_host['clients']['W'].shape[0] == config.federated.num_clients
  jax.tree.map(np.testing.assert_array_equal, on_host, on_device)
  assert host['verification'] == device['verification']


@pytest.mark.parametrize('field,value,match', [
    ('algorithm', 'fedavgx',
     r"algorithm='fedavgx' is unknown; expected one of \['apfl', 'centralized', 'ditto', 'fedaws', 'fedbn', 'fedface', 'fedfr', 'fedfv', 'fedgc', 'fedgpad', 'fedma', 'fedpad', 'fedpe', 'fedrep', 'feduv'\]"),
    ('head.loss', 'sphereface', r"head.loss='sphereface'; expected one of \('softmax', 'cosface', 'arcface', "
     r"'positive_cosine', 'positive_dot'\)"),
    ('engine.backend', 'pmap', r"engine.backend='pmap'; expected one of"),
    ('federated.participation', 1.5, r'participation=1.5; expected a fraction in \(0, 1\]'),
    ('federated.batch_size', 0, r'federated.batch_size=0; expected a positive integer'),
    ('evals.identification.num_non_mated', 0,
     r'evals.identification.num_non_mated=0; expected a positive integer'),
    ('evals.verification.far_target', 2.0,
     r'evals.verification.far_target=2.0; expected a fraction in \(0, 1\]'),
    ('fedgc.regularizer', 'hinge', r"fedgc.regularizer='hinge'; expected one of \('softmax', 'cosine'\)"),
    ('fedgc.reg_implementation', 'fast',
     r"fedgc.reg_implementation='fast'; expected one of \('dense', 'blockwise', 'auto'\)"),
    ('head.loss', 'positive_cosine',
     r"fedgc.reg_form='' takes the head's form, but head.loss='positive_cosine' has no logits"),
    ('engine.client_state', 'disk', r"engine.client_state='disk'; expected one of "
                                    r"\('device', 'host'\)"),
    ('federated.client_optimizer_state', 'carry',
     r"federated.client_optimizer_state='carry'; expected one of \('reset', 'keep'\)"),
    ('data.synthetic.lookalike_spread', 0.0, r'data.synthetic.lookalike_spread=0.0; expected a number in \(0, 1\]'),
    ('data.synthetic.lookalike_family_size', 0,
     r'data.synthetic.lookalike_family_size=0; expected a positive integer'),
    ('data.synthetic.lookalike_family_size', 99,
     r'lookalike_family_size=99 cannot be spread over federated.num_clients=\d+'),
    ('evals.verification.pair_sets', ('lfw', 'ijbc'),
     r"evals.verification.pair_sets\[...\]='ijbc'; expected one of \('lfw', 'cfp_fp', 'agedb_30', "
     r"'sllfw', 'cplfw', 'calfw'\)"),
])
def test_bad_config_values_are_named(tmp_path, field, value, match):
  config = load_config('fedgc')
  section, _, leaf = field.rpartition('.')
  (config[section] if section else config)[leaf] = value
  with pytest.raises(ValueError, match=match):
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()   # nothing half-written


def test_sections_are_checked_by_their_owner(tmp_path):
  config = load_config('fedgc')
  del config.fedgc
  with pytest.raises(ValueError, match=r'config.fedgc is missing; .*adds it'):
    experiment.validate(config)
  config = load_config('fedpe')
  config.evals.pca = {}
  with pytest.raises(ValueError, match=r"config.evals.pca is not an evaluator type; expected one "
                                       r"of \['diagnostics', 'identification', 'ijb', 'inversion', "
                                       r"'leakage', 'membership', 'pad', 'personalized', "
                                       r"'rfw', 'tinyface', 'verification'\]"):
    experiment.validate(config)
  config = load_config('fedpe')
  config.evals.verification.pair_sets = ()
  with pytest.raises(ValueError, match=r'evals.verification.pair_sets=\(\); expected a non-empty'):
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()


def test_impossible_partition_is_refused(tmp_path):
  config = load_config('fedpe')
  config.federated.num_clients = 40   # runlocal has 16 training identities
  with pytest.raises(ValueError, match=r'num_clients=40 but there are only 16 client identities'):
    experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert not (tmp_path / 'run').exists()   # refused before anything is written


def test_config_argument_errors_list_the_valid_choices():
  with pytest.raises(ValueError, match=r"config argument 'lossx' is unknown; expected one of"):
    load_config('fedgc', 'lossx=cosface')
  with pytest.raises(ValueError, match=r"loss='sphereface'; expected one of \('softmax', 'cosface', 'arcface'\)"):
    load_config('fedgc', 'loss=sphereface')
  assert load_config('fedgc', 'loss=arcface,runlocal').head.loss == 'arcface'


# FEDJAX_FACE_TESTS=full: the fedgc config end to end with an option (the suite runs it in
# test_train_and_evaluate_writes_every_output); the shared identities' partition and server step
# are tests/algorithms/test_algorithms.py's test_shared_identities_split_images_between_holders and
# test_general_case_averages_shared_identity_and_regularizes_against_exclusive_classes.
@pytest.mark.full
def test_general_case_with_shared_identities_runs_end_to_end(tmp_path):
  config = load_config('fedgc')
  config.federated.shared_fraction = 0.25
  results = experiment.train_and_evaluate(config, str(tmp_path))
  assert results['config_name'] == 'fedgc/softmax/balanced'
  assert 0.0 <= results['verification']['lfw']['accuracy'] <= 1.0


@pytest.mark.parametrize('name,method', [('fedcos', 'fedcos'), ('fedpe_fixed', 'fedpe+fixed')])
def test_variant_configs_run_and_are_named(tmp_path, name, method):
  results = experiment.train_and_evaluate(load_config(name), str(tmp_path))
  assert results['config_name'] == f'{method}/softmax/balanced'


@pytest.mark.parametrize('name,config_name', [
    ('fedfv', 'fedfv-4/cosface/one_per_client'),
    ('fedaws', 'fedaws/positive_cosine/one_per_client'),
    ('fedfv/fedface', 'fedface/positive_cosine/one_per_client'),
    ('feduv', 'feduv-511/positive_dot/one_per_client'),
    ('fedfv/centralized', 'centralized/cosface/one_per_client')])
def test_one_identity_per_client_configs_run_end_to_end(tmp_path, name, config_name):
  results = experiment.train_and_evaluate(load_config(name), str(tmp_path))
  assert results['config_name'] == config_name
  assert 0.0 <= results['verification']['lfw']['accuracy'] <= 1.0
  # Fig. 5's statistic: every pair of class embeddings is a cross-client pair here.
  similarity = results['diagnostics']['class_embedding_similarity']
  assert similarity['within_count'] == 0 and similarity['cross_count'] == 16 * 15 // 2


def test_every_config_file_validates_with_runlocal():
  # Every config accepts `runlocal`; the bench's config is no training run.
  paths = sorted(glob.glob(os.path.join(config_files.ROOT, 'configs', '*', '*.py')))
  assert len(paths) >= 14      # the three papers so far
  for path in paths:
    name = os.path.relpath(path, os.path.join(config_files.ROOT, 'configs'))[:-3]
    experiment.validate(load_config(name))


def test_a_model_evaluated_alone_scores_as_its_run_did_and_on_ijb(tmp_path, fedgc_run):
  # `python -m fedjax_face.evaluate`: a finished run's model on the same evaluators gives the run's
  # own numbers; with evals.ijb.root set, IJB-C's 1:1 and 1:N too (a fixture of tests/ijb_files).
  # Evaluated into the run's own workdir, it writes under evaluations/<name>/ alone: the run's
  # files stay byte for byte as they were, and the run still reruns (issue 56 item 1).
  from tests import ijb_files
  config = load_config('fedgc')
  rundir = tmp_path / 'run'
  shutil.copytree(fedgc_run[0], rundir)   # the finished run, trained once for the module
  run = fedgc_run[1]
  kept = {name: (rundir / name).read_bytes() for name in ('results.json', 'report.md',
                                                           'config.json')}
  ijb_files.write_ijb(tmp_path / 'ijbc')
  evaluated = config.copy_and_resolve_references()
  evaluated.init_from = str(rundir)
  evaluated.evals.ijb.root = str(tmp_path / 'ijbc')
  evaluated.evals.ijb.check_pair_count = False   # a 28-pair fixture, not the released IJB-C
  alone = experiment.evaluate_model(evaluated, str(rundir))
  assert alone['verification'] == run['verification']
  assert alone['identification'] == run['identification']
  assert alone['evaluated'] == str(rundir) and alone['rounds'] == 0
  assert alone['ijb']['templates'] == 8 and set(alone['ijb']['identification']) == {
      'G1', 'G2', 'mixed'}
  assert {name: (rundir / name).read_bytes() for name in kept} == kept
  outdir = rundir / 'evaluations' / 'run'
  saved = json.loads((outdir / 'results.json').read_text())
  assert saved['ijb']['tar'] == alone['ijb']['tar']
  assert '## IJBC 1:1' in (outdir / 'report.md').read_text()
  assert (outdir / 'ijb_roc.png').exists()
  assert json.loads((outdir / 'config.json').read_text())['evals']['ijb']['root'] == str(
      tmp_path / 'ijbc')
  # Another config into the same folder is refused, naming --name, before anything is read.
  evaluated.evals.ijb.tar_rule = 'far_at_most'
  with pytest.raises(files.WorkdirError, match=r'evaluations/run holds the results of another '
                     r'run .*evals.ijb.tar_rule.*--name=<another folder'):
    experiment.evaluate_model(evaluated, str(rundir))
  # The run itself reruns as before (its evaluation again, nothing refused).
  assert experiment.train_and_evaluate(config, str(rundir))['verification'] == run['verification']
  config.init_from = ''
  with pytest.raises(ValueError, match=r'config.init_from is empty; expected the model to '
                                       'evaluate'):
    experiment.evaluate_model(config, str(tmp_path / 'eval2'))
  assert not (tmp_path / 'eval2').exists()
