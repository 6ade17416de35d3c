"""The federated blocks around a method (core/blocks.py): what crosses with each, off means
unwrapped, the refusals and config errors, and a run with them resumed as the uninterrupted one."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, config_lib, experiment, models
from fedjax_face.core import blocks, secure_aggregation
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated
from fedjax_face.run import setup as run_setup
from tests import config_files, engine_cases


def _wire(name: str, secure=None, **fields):
  """(down keys -> dtypes, up keys -> dtypes, update shapes) of one client of `name` on the tiny
  problem, traced as the engine runs it (shapes only: nothing compiles)."""
  config = engine_cases.tiny_config(name)
  engine_cases.set_fields(**fields)(config)
  fed = engine_cases.tiny_problem()
  algorithm = run_setup.build_algorithm(config, algorithms.get(name),
                                         models.build_backbone(config.model), fed, 'scan')
  data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                      federated.sample_round(fed, np.array([0]), round_index=0, seed=0, steps=2,
                                             batch_size=4))
  key = jax.random.PRNGKey(0)

  def one(state, data):
    ids = jnp.array([0, 1, 2], jnp.int32)
    ci = algorithm.broadcast(state.server, ids, state.round, key)
    row = jax.tree.map(lambda x: x[0], ci.per_client)
    private = jax.tree.map(lambda x: x[0], state.clients)
    result = engine_lib._one_client(algorithm, ci.shared, row, private, data, 0, key,
                                    secure=secure, position=jnp.int32(0),
                                    share=jnp.float32(1 / 3), cohort=3)
    return ci.shared, row, result.update

  shared, row, update = jax.eval_shape(one, jax.eval_shape(algorithm.init, key), data)
  dtypes = lambda tree: {k: sorted({str(x.dtype) for x in jax.tree.leaves(v)})
                         for k, v in tree.items()}
  return dtypes({**shared, **row}), dtypes(update), update


def test_what_crosses_with_each_block():
  down, up, _ = _wire('fedpe')
  assert down == up == {'model': ['float32']}
  # A server optimizer's moments stay on the server.
  assert _wire('fedpe', server_optimizer__name='fedyogi')[:2] == (down, up)
  # FedProx sends nothing more.
  assert _wire('fedpe', optimizer__correction='fedprox')[:2] == (down, up)
  # SCAFFOLD: c down with the model, Δc up with it.
  down_s, up_s, update = _wire('fedpe', optimizer__correction='scaffold')
  assert down_s == {'model': ['float32'], 'scaffold_c': ['float32']}
  assert up_s == {'model': ['float32'], blocks.CONTROL_DELTA: ['float32']}
  assert set(update[blocks.CONTROL_DELTA]) == set(blocks.chosen_leaves({'model': update['model']}))
  # Compressed: the payload (codes and per-tensor scales; values and indices) for the parameters
  # and W_k; BatchNorm's running statistics whole, float32, as without compression.
  _, _, plain = _wire('fedgc')
  for codec, payload in (('quantize', {'codes', 'low', 'step'}), ('topk', {'values', 'indices'})):
    _, up_c, update = _wire('fedgc', compression__codec=codec, compression__bits=4)
    assert up_c == {'model': ['float32', 'uint8' if codec == 'quantize' else 'int32'],
                    'W': ['float32', 'uint8' if codec == 'quantize' else 'int32']}
    assert set(update['W']) == payload
    coded = jax.tree.leaves(update['model']['params'],
                            is_leaf=lambda x: isinstance(x, dict) and payload <= set(x))
    assert coded and all(set(p) == payload for p in coded)
    assert (jax.tree.structure(update['model']['batch_stats'])
            == jax.tree.structure(plain['model']['batch_stats']))
    assert all((x.shape, x.dtype) == (y.shape, jnp.float32) for x, y in zip(
        jax.tree.leaves(update['model']['batch_stats']),
        jax.tree.leaves(plain['model']['batch_stats'])))
  # Secure aggregation: the averaged model as masked ring vectors; FedGC's W_k as they are.
  _, up_a, _ = _wire('fedgc', secure=secure_aggregation.Spec())
  assert up_a == {'model': ['uint32'], 'W': ['float32']}


def test_with_every_block_off_the_method_is_not_wrapped():
  config = config_files.load_config('fedgc/fedpe')
  assert not blocks.from_config(config).active
  fed = engine_cases.tiny_problem()
  config = engine_cases.tiny_config('fedpe')
  algorithm = run_setup.build_algorithm(config, algorithms.get('fedpe'),
                                         models.build_backbone(config.model), fed, 'scan')
  assert algorithm.init.__module__ == 'fedjax_face.algorithms.fedpe'
  config.server_optimizer.name = 'fedavgm'
  wrapped = run_setup.build_algorithm(config, algorithms.get('fedpe'),
                                       models.build_backbone(config.model), fed, 'scan')
  assert wrapped.init.__module__ == 'fedjax_face.core.blocks'


def test_a_started_run_reads_the_method_part_of_a_wrapped_run():
  inner = {'server': {'model': 1}, 'clients': {'W': 2}, 'round': 3}
  wrapped = {'server': {'method': {'model': 1}, 'blocks': {'control': 0}},
             'clients': {'method': {'W': 2}, 'blocks': {}}, 'round': 3}
  assert blocks.method_start(wrapped) == inner
  assert blocks.method_start(inner) is inner and blocks.method_start(None) is None


@pytest.mark.parametrize('field, value, message', [
    ('server_optimizer.name', 'fedsgd', "server_optimizer.name='fedsgd'"),
    ('server_optimizer.b1', 1.0, 'server_optimizer.b1=1.0'),
    ('server_optimizer.tau', 0.0, 'server_optimizer.tau=0.0'),
    ('optimizer.correction', 'prox', "optimizer.correction='prox'"),
    ('optimizer.prox_mu', -0.1, 'optimizer.prox_mu=-0.1'),
    ('compression.codec', 'zip', "compression.codec='zip'"),
    ('compression.bits', 3, 'compression.bits=3'),
    ('compression.fraction', 0.0, 'compression.fraction=0.0'),
    ('secure_aggregation.fraction_bits', 31, 'secure_aggregation.fraction_bits=31'),
    ('secure_aggregation.neighbors', -1, 'secure_aggregation.neighbors=-1'),
])
def test_block_config_errors_name_the_field(field, value, message):
  config = engine_cases.tiny_config('fedpe')
  config_files.set_field(config, field, value)
  with pytest.raises(ValueError, match=message.replace('.', r'\.').replace('(', r'\(')):
    config_lib.validate(config)


def test_refused_combinations_say_why():
  config = config_files.load_config('pad/fedma')
  config.server_optimizer.name = 'fedadam'
  with pytest.raises(ValueError, match="server_optimizer.name='fedadam' with fedma: its server "
                                       'matches neurons'):
    algorithms.check_config(config)
  config = config_files.load_config('pad/fedgpad')
  config.secure_aggregation.enabled = True
  with pytest.raises(ValueError, match="fedgpad.weighting='uniform'"):
    algorithms.check_config(config)
  config.fedgpad.weighting = 'examples'
  algorithms.check_config(config)
  config = config_files.load_config('fedgc/fedpe')
  config.optimizer.correction = 'fedprox'
  config.federated.client_optimizer_state = 'keep'
  with pytest.raises(ValueError, match="client_optimizer_state='reset'"):
    algorithms.check_config(config)
  config.federated.client_optimizer_state = 'reset'
  config.optimizer.correction = 'scaffold'
  config.dp.enabled = True
  with pytest.raises(ValueError, match="'scaffold' with dp.enabled"):
    algorithms.check_config(config)


def test_a_run_with_the_blocks_resumes_to_the_uninterrupted_run(tmp_path):
  config = config_files.load_config('fedgc/fedpe')
  config.num_rounds = 2
  config.checkpoint_every = 1
  config.checkpoint_keep = 2
  config.optimizer.correction = 'scaffold'
  config.server_optimizer.name = 'fedadam'
  config.compression.codec = 'topk'
  config.federated.participation = 0.5
  config.federated.straggler_drop = 0.5
  config.evals = type(config.evals)()   # training state only
  straight = experiment.train_and_evaluate(config, str(tmp_path / 'straight'))
  # The same run stopped after round 1: its round-2 checkpoint and results removed.
  shutil.copytree(tmp_path / 'straight', tmp_path / 'cut')
  shutil.rmtree(tmp_path / 'cut' / 'checkpoints' / '2')
  os.remove(tmp_path / 'cut' / 'checkpoint_digests' / '2.json')
  os.remove(tmp_path / 'cut' / 'results.json')
  resumed = experiment.train_and_evaluate(config, str(tmp_path / 'cut'))
  assert resumed['timing']['resumed_from_round'] == 1
  assert resumed['last_logged_round'] == straight['last_logged_round']
  assert resumed['communication'] == straight['communication']
  assert resumed['communication']['client_rounds'] == 2   # 2 of 4, one of them dropped, 2 rounds


def test_the_blocks_config_runs_fedfv_with_secure_aggregation_and_dp_end_to_end(tmp_path):
  config = config_files.load_config('blocks/fedfv_setting', 'block=secagg_dp16,runlocal')
  config.num_rounds = 2
  config.evals = type(config.evals)({'verification': config.evals.verification})
  config.evals.verification.pair_sets = ('lfw',)
  results = experiment.train_and_evaluate(config, str(tmp_path / 'run'))
  assert results['privacy']['noise_drawn_by'].startswith('the clients')
  assert results['privacy']['amplified_by_sampling'] is False   # FedFV's class rows leave
  assert 0 < results['privacy']['epsilon'] <= 16.0 + 1e-6
  # Up: the model as masked ring vectors (4 bytes a coordinate) and the client's own row.
  by_key = results['communication']['bytes_per_client_round']['up_by_key']
  assert set(by_key) == {'model', 'W'}
  assert 0 <= results['verification']['lfw']['accuracy'] <= 1
