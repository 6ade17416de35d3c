"""The round engine: every backend, step mode, cohort padding and device count gives one result."""


import jax
import numpy as np
import pytest

from fedjax_face.core import engine as engine_lib
from tests import engine_cases, forced_devices


def assert_trees_close(a, b, rtol=2e-4, atol=2e-5):
  flat_a, tree_a = jax.tree.flatten(a)
  flat_b, tree_b = jax.tree.flatten(b)
  assert tree_a == tree_b
  for x, y in zip(flat_a, flat_b):
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


@pytest.fixture(scope='module')
def loop_results():
  return {name: engine_cases.run_rounds(name, 'loop')[0] for name in ('fedpe', 'fedgc')}


@pytest.mark.parametrize('algorithm', ['fedpe', 'fedgc'])
@pytest.mark.parametrize('backend,map_width', [('vmap', 1), ('map', 2)])
def test_backends_agree(loop_results, algorithm, backend, map_width):
  state, _ = engine_cases.run_rounds(algorithm, backend, map_width=map_width)
  assert_trees_close(state, loop_results[algorithm])


def test_scan_equals_unroll(loop_results):
  state, _ = engine_cases.run_rounds('fedgc', 'loop', step_mode='unroll')
  assert_trees_close(state, loop_results['fedgc'])


def test_padding_clients_change_nothing(loop_results):
  state, _ = engine_cases.run_rounds('fedgc', 'loop', pad_to=8)   # 5 real + 3 padding clients
  assert_trees_close(state, loop_results['fedgc'], rtol=0, atol=0)


def test_round_counter_and_unselected_clients_untouched(loop_results):
  one, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=((0, 1, 2, 3, 4),))
  two = loop_results['fedpe']
  assert int(two.round) == 2
  # Client 0 and 2 were not in the second cohort: their private W must be exactly as after round 1.
  for k in (0, 2):
    np.testing.assert_array_equal(two.clients['W'][k], one.clients['W'][k])
  assert not np.allclose(two.clients['W'][1], one.clients['W'][1])


def test_fedgc_without_regularizer_is_fedpe(loop_results):
  """lambda = 0 removes Alg. 1 lines 13-14: FedGC must then be FedPE exactly."""
  fedgc, _ = engine_cases.run_rounds('fedgc', 'loop', reg_lambda=0.0)
  fedpe = loop_results['fedpe']
  jax.tree.map(np.testing.assert_array_equal, fedgc.server['model'], fedpe.server['model'])
  np.testing.assert_array_equal(fedgc.server['W'], fedpe.clients['W'])


def test_no_recompilation_across_rounds():
  _, eng = engine_cases.run_rounds('fedgc', 'vmap', cohorts=((0, 1, 2, 3, 4), (1, 3, 4, 0, 2)))
  assert eng.trace_count == 1


def test_bad_backend_is_refused():
  with pytest.raises(ValueError, match=r"engine.backend='pmap'; expected one of \('vmap', 'map', 'loop'\)"):
    engine_lib.RoundEngine(None, backend='pmap')


_EIGHT_DEVICES = """
import jax, numpy as np
assert jax.device_count() == 8, jax.devices()
from fedjax_face.core import engine as engine_lib
from tests import engine_cases, test_engine
mesh = engine_lib.make_mesh()
for name in ('fedgc',):
  ref, _ = engine_cases.run_rounds(name, 'loop')
  sharded, _ = engine_cases.run_rounds(name, 'vmap', mesh=mesh)
  # Sharded reductions sum in another order: float32 rounding, amplified by two rounds of SGD.
  test_engine.assert_trees_close(sharded, ref, rtol=1e-3, atol=1e-4)
  mapped, _ = engine_cases.run_rounds(name, 'map', map_width=8, mesh=mesh)
  test_engine.assert_trees_close(mapped, ref, rtol=1e-3, atol=1e-4)
print('OK 8 devices')
"""


def test_eight_forced_cpu_devices_give_the_same_round():
  assert 'OK 8 devices' in forced_devices.run(_EIGHT_DEVICES)
