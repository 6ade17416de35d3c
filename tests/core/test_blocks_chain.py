"""core/blocks.py as chained wrappers: `chain` applies them in order, `wrappers` picks them from
the switches, and each block puts only its own keys into the one 'blocks' dict."""

import jax
import pytest

from fedjax_face import algorithms, models
from fedjax_face.core import blocks
from tests import engine_cases


ORDER = ('nested', 'server_optimizer', 'fedprox', 'scaffold', 'compression')


def _renamed(suffix):
  return lambda algorithm: algorithm._replace(name=f'{algorithm.name}+{suffix}')


def test_chain_applies_the_first_wrapper_next_to_the_method():
  config = engine_cases.tiny_config('fedpe')
  algorithm = algorithms.get('fedpe').build(config, models.build_backbone(config.model),
                                            engine_cases.tiny_problem(), step_mode='scan')
  assert blocks.chain(_renamed('a'), _renamed('b'))(algorithm).name == 'fedpe+a+b'
  assert blocks.chain()(algorithm) is algorithm


@pytest.mark.parametrize('fields, server_keys, client_keys', [
    ({'server_optimizer__name': 'fedadam'}, {'optimizer'}, set()),
    ({'optimizer__correction': 'fedprox'}, set(), set()),
    ({'optimizer__correction': 'scaffold'}, {'control'}, {'control'}),
    ({'compression__codec': 'topk'}, set(), {'residual'}),
    ({'compression__codec': 'quantize'}, set(), set()),
    ({'server_optimizer__name': 'fedyogi', 'optimizer__correction': 'scaffold',
      'compression__codec': 'topk'}, {'optimizer', 'control'}, {'control', 'residual'}),
])
def test_each_block_keeps_its_own_keys_in_one_blocks_dict(fields, server_keys, client_keys):
  config = engine_cases.tiny_config('fedgc')
  engine_cases.set_fields(**fields)(config)
  fed = engine_cases.tiny_problem()
  switched = blocks.from_config(config)
  # `nested` first, then one wrapper per switch, in the data's order (compression outermost).
  names = [w.__qualname__.split('.')[0] for w in blocks.wrappers(switched, fed.num_clients)]
  assert len(names) == 1 + len(fields)
  assert names == [n for n in ORDER if n in names]
  method = algorithms.get('fedgc').build(config, models.build_backbone(config.model), fed,
                                         step_mode='scan')
  state = jax.eval_shape(blocks.wrap(method, switched, fed.num_clients).init,
                         jax.random.PRNGKey(0))
  alone = jax.eval_shape(method.init, jax.random.PRNGKey(0))
  assert set(state.server['blocks']) == server_keys
  assert set(state.clients['blocks']) == client_keys
  assert jax.tree.structure(state.server['method']) == jax.tree.structure(alone.server)
  assert jax.tree.structure(state.clients['method']) == jax.tree.structure(alone.clients)
