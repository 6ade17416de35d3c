"""End to end, FedFR's runs: its pre-training on the public identities, FedFR from it (on the
device and with client state on the host), and Fig. 4's FedFace from a scenario's pre-training.
Split from tests/test_experiment.py so that pytest-xdist's `--dist loadfile` can run FedFR's and
PAD's runs beside the rest (tests/test_experiment_pad.py)."""

import jax
import numpy as np
import pytest

from fedjax_face import experiment
from fedjax_face.run import setup as run_setup
from tests import config_files, saved_checkpoints

load_config = config_files.load_config


@pytest.fixture(scope='module')
def fedfr_pretraining(tmp_path_factory):
  """(workdir, results) of configs/fedfr/pretrain.py's runlocal run (4 rounds on the public
  identities), trained once: FedFR's and Fig. 4's FedFace runs start from it."""
  workdir = tmp_path_factory.mktemp('fedfr') / 'pre'
  return workdir, experiment.train_and_evaluate(load_config('pretrain'), str(workdir))


def recorded_starts(monkeypatch) -> list:
  """The round state each of the test's driver runs starts from (`run.setup.init_state`'s, before
  any round), as host arrays: the very start the runs train from, not a copy rebuilt beside them."""
  starts, init_state = [], run_setup.init_state

  def recording(*args):
    state = init_state(*args)
    starts.append(jax.device_get(state))
    return state

  monkeypatch.setattr(run_setup, 'init_state', recording)
  return starts


def same_training(a, b) -> bool:
  """Whether two configs differ in their evaluators' sections alone."""
  strip = lambda c: {k: v for k, v in c.to_dict().items() if k != 'evals'}
  return strip(a) == strip(b)


def test_fedfr_starts_from_its_pretraining_run(tmp_path, fedfr_pretraining, monkeypatch):
  # configs/fedfr/pretrain.py trains on the public identities only; FedFR starts from its final
  # backbone and class matrix (config.init_from) and runs every client over the private ones.
  pre_dir, pretrain = fedfr_pretraining
  assert pretrain['config_name'] == 'centralized/cosface/balanced'
  pre_state = saved_checkpoints.restore(str(pre_dir), 4)
  assert pre_state['server']['W'].shape[0] == 8   # K_g public identities
  config = load_config('fedfr')
  config.init_from = str(pre_dir)
  starts = recorded_starts(monkeypatch)
  results = experiment.train_and_evaluate(config, str(tmp_path / 'fedfr'))
  start = starts[0]
  jax.tree.map(np.testing.assert_array_equal, start.server['model'], pre_state['server']['model'])
  np.testing.assert_array_equal(start.server['Phi'], pre_state['server']['W'])
  assert results['config_name'] == 'fedfr/cosface/balanced'
  assert 0.0 <= results['verification']['lfw']['accuracy'] <= 1.0
  # Table 1's personalized columns: the pre-trained model for every client, then each client's.
  assert pretrain['personalized']['model'] == 'global'
  assert results['personalized']['model'] == 'personalized'
  assert results['personalized']['clients'] == 4
  assert 'Personalized evaluation' in (tmp_path / 'fedfr' / 'report.md').read_text()
  # Each client's local model and DFC branch kept in host memory (engine.client_state='host'):
  # the same rounds, and the personalized evaluation reads them from there. The other
  # evaluators score the global model alone, which the checkpoints compare, so they are left out.
  config.engine.client_state = 'host'
  for kind in set(config.evals) - {'personalized'}:
    del config.evals[kind]
  on_host = experiment.train_and_evaluate(config, str(tmp_path / 'fedfr_host'))
  assert on_host['personalized'] == results['personalized']
  rounds = config.num_rounds
  jax.tree.map(np.testing.assert_array_equal,
               saved_checkpoints.restore(str(tmp_path / 'fedfr_host'), rounds),
               saved_checkpoints.restore(str(tmp_path / 'fedfr'), rounds))


@pytest.mark.parametrize('ids', ['2'])
def test_fig4_fedface_and_fedfr_start_from_the_scenarios_pretraining(tmp_path, ids,
                                                                    fedfr_pretraining):
  # FedFR's Fig. 4: a pre-training per scenario (the training-set size decides the identities),
  # then FedFace (CosFace over several identities, the positive loss over one) and FedFR from it.
  # Scenario ids=2's pre-training trains as the module's runlocal one (the same fields but the
  # personalized evaluator's section): that run serves as it.
  pre_dir, _ = fedfr_pretraining
  assert same_training(load_config('fedfr/pretrain', f'ids={ids},runlocal'),
                       load_config('pretrain'))
  loss = 'cosface' if ids == '2' else 'positive_cosine'
  partition = 'balanced' if ids == '2' else 'one_per_client'
  for name in ('fedface',):   # FedFR from its pre-training: test_fedfr_starts_from_its_...
    config = load_config(f'fedfr/{name}', f'ids={ids},runlocal')
    config.init_from = str(pre_dir)
    results = experiment.train_and_evaluate(config, str(tmp_path / name))
    expected_loss = loss if name == 'fedface' else 'cosface'
    assert results['config_name'] == f'{name}/{expected_loss}/{partition}'
    assert 'personalized' not in results      # Fig. 4 compares the generic model only
    assert 0.0 <= results['verification']['lfw']['accuracy'] <= 1.0
  # A scenario's run cannot start from another scenario's pre-training.
  other = load_config('fedfr/fedface', 'ids=8,runlocal')
  other.init_from = str(pre_dir)
  with pytest.raises(ValueError, match=r'data.synthetic.num_identities: \d+ there, 40 here'):
    experiment.validate(other)


@pytest.mark.parametrize('name', ['ditto', 'apfl'])
def test_ditto_and_apfl_start_from_the_pretraining_and_score_each_clients_model(tmp_path, name,
                                                                               fedfr_pretraining,
                                                                               monkeypatch):
  # Ditto's and APFL's personal models start as the pre-trained model (v_k^0 = w^0, the
  # modules' readings); the personalized evaluation then scores each client's own model.
  pre_dir, _ = fedfr_pretraining
  pre_model = saved_checkpoints.restore(str(pre_dir), 4)['server']['model']
  config = load_config(f'fedfr/{name}')
  config.init_from = str(pre_dir)
  starts = recorded_starts(monkeypatch)
  results = experiment.train_and_evaluate(config, str(tmp_path / name))
  personal = starts[0].clients['personal']
  personal = {'params': personal['params']['backbone'], 'batch_stats': personal['batch_stats']}
  assert len(jax.tree.leaves(personal)[0]) == config.federated.num_clients
  for k in range(config.federated.num_clients):
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(lambda x: x[k], personal), pre_model)
  assert results['config_name'] == f'{name}/cosface/balanced'
  assert results['personalized']['model'] == 'personalized'
  assert results['personalized']['clients'] == 4
  assert 0.0 <= results['verification']['lfw']['accuracy'] <= 1.0


@pytest.mark.parametrize('name,kept', [('fedbn', 'start_bn'), ('fedrep', 'start_head')])
def test_fedbn_and_fedrep_start_from_the_pretraining_and_score_each_clients_model(
    tmp_path, name, kept, fedfr_pretraining):
  # The server never receives a client's BatchNorm (FedBN) or head (FedRep): the shared model
  # keeps the pre-trained ones, bit for bit after the rounds; each client is scored with its own.
  pre_dir, _ = fedfr_pretraining
  pre_model = saved_checkpoints.restore(str(pre_dir), 4)['server']['model']
  config = load_config(f'fedfr/{name}')
  config.init_from = str(pre_dir)
  results = experiment.train_and_evaluate(config, str(tmp_path / name))
  assert results['config_name'] == f'{name}/cosface/balanced'
  assert results['personalized']['model'] == 'personalized'
  assert results['personalized']['clients'] == 4
  server = saved_checkpoints.restore(str(tmp_path / name), config.num_rounds)['server']
  layers = {'fedbn': ('bn0', 'bn1', 'bn2', 'features'), 'fedrep': ('fc', 'features')}[name]
  for collection, tree in server[kept].items():
    assert set(tree) == {layer for layer in layers if layer in pre_model[collection]}
    for layer in tree:
      jax.tree.map(np.testing.assert_array_equal, tree[layer], pre_model[collection][layer])
