"""The round engine: every backend, step mode, cohort padding, chunking and device count gives one
result, and one compile serves a whole run."""

import functools
import threading

import jax
import numpy as np
import pytest

from fedjax_face import algorithms, config_lib, models
from fedjax_face.core import communication, engine as engine_lib
from fedjax_face.core import privacy
from fedjax_face.data import federated, partition
from tests import engine_cases, forced_devices


def assert_trees_close(a, b, rtol=2e-4, atol=2e-5):
  flat_a, tree_a = jax.tree.flatten(a)
  flat_b, tree_b = jax.tree.flatten(b)
  assert tree_a == tree_b
  for x, y in zip(flat_a, flat_b):
    np.testing.assert_allclose(x, y, rtol=rtol, atol=atol)


# The default cohorts (5 clients, then 3) padded to the first one's 5 rows, for tests whose subject
# is not the cohort size: one compiled round (vmap) or one set of loop programs for both rounds
# rather than one per size. The module's reference (`loop_results`) stays unpadded, so each such
# test also compares a padded round with an unpadded one.
ONE_SIZE = 5


@pytest.fixture(scope='module')
def loop_results():
  return {name: engine_cases.run_rounds(name, 'loop')[0] for name in ('fedpe', 'fedgc')}


def assert_the_wire_is_one_client_s(eng, state):
  """What the engine recorded of its client program's trace (`client_wire`, the run's
  communication ledger) counts the bytes of a one-client round traced for the purpose."""
  fed = engine_cases.tiny_problem()
  row = federated.sample_round(fed, np.array([0], np.int32), round_index=0, seed=0, steps=2,
                               batch_size=4)
  data = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), row)
  expected = communication.one_client_round(eng.algorithm, state, data)
  assert communication.wire_bytes(*eng.client_wire) == expected
  assert expected['up']['model'] > 0


# 'map' in the full tier: FedGC's chunks of 2 (the round 'map' compiles: vmap with a positive
# width) equal the loop's rounds in test_vmap_falls_back_to_chunks_when_the_cohort_does_not_fit,
# and the recorded wire is the client program's, the same on every backend.
@pytest.mark.parametrize('algorithm', ['fedpe', 'fedgc'])
@pytest.mark.parametrize('backend,map_width', [('vmap', 0),
                                               pytest.param('map', 2, marks=pytest.mark.full)])
def test_backends_agree(loop_results, algorithm, backend, map_width):
  state, eng = engine_cases.run_rounds(algorithm, backend, map_width=map_width,
                                       pad_to=ONE_SIZE)
  assert_trees_close(state, loop_results[algorithm])
  assert_the_wire_is_one_client_s(eng, state)


def test_scan_equals_unroll(loop_results):
  state, eng = engine_cases.run_rounds('fedgc', 'loop', step_mode='unroll', pad_to=ONE_SIZE)
  assert_trees_close(state, loop_results['fedgc'])
  assert 'W (own row)' in communication.wire_bytes(*eng.client_wire)['down']
  assert_the_wire_is_one_client_s(eng, state)


def test_padding_clients_change_nothing(loop_results):
  state, _ = engine_cases.run_rounds('fedgc', 'loop', pad_to=8)   # 5 real + 3 padding clients
  assert_trees_close(state, loop_results['fedgc'], rtol=0, atol=0)


def test_loop_threads_give_the_same_round_on_several_threads(loop_results, monkeypatch):
  """Clients run side by side on host threads: the same bits as one at a time."""
  threads = set()
  client_at = engine_lib.RoundEngine._client_at
  def recording_client_at(self, *args):
    threads.add(threading.get_ident())   # runs while tracing, on the calling thread
    return client_at(self, *args)
  monkeypatch.setattr(engine_lib.RoundEngine, '_client_at', recording_client_at)
  run_thread = set()
  real_loop = engine_lib.RoundEngine._loop
  def recording_loop(self, run_client, n, signature):
    def run(i):
      run_thread.add(threading.get_ident())
      return run_client(i)
    return real_loop(self, run, n, signature)
  monkeypatch.setattr(engine_lib.RoundEngine, '_loop', recording_loop)
  state, eng = engine_cases.run_rounds('fedgc', 'loop', loop_threads=3)
  # Traced once per cohort size (5, then 3 clients: the client indexes the cohort's stacked
  # rows), each time on the calling thread, never by a racing pool thread.
  assert eng.loop_threads == 3 and len(threads) == 1 and eng.traces['client'] == 2
  assert len(run_thread) > 1, run_thread   # clients ran on the pool's threads too
  assert_trees_close(state, loop_results['fedgc'], rtol=0, atol=0)


def test_round_counter_and_unselected_clients_untouched(loop_results):
  one, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=((0, 1, 2, 3, 4),))
  two = loop_results['fedpe']
  assert int(two.round) == 2
  # Client 0 and 2 were not in the second cohort: their private W must be exactly as after round 1.
  for k in (0, 2):
    np.testing.assert_array_equal(two.clients['W'][k], one.clients['W'][k])
  assert not np.allclose(two.clients['W'][1], one.clients['W'][1])


# The host state is handled in `run_round`, above the backend; 'map' differs from 'vmap' only in
# how the compiled round chunks the clients (test_backends_agree), and 'vmap' repeats the loop's
# equality on another backend (the full tier).
@pytest.mark.parametrize('backend', ['loop', pytest.param('vmap', marks=pytest.mark.full)])
def test_client_state_on_the_host_gives_the_same_rounds(loop_results, backend, monkeypatch):
  """`client_state='host'`: every FedPE client's W_k stays in numpy between rounds, the device
  sees the cohort's rows alone (padding included), and the rounds are the device-state rounds
  bit for bit."""
  seen = []
  real_run = engine_lib.RoundEngine._run
  def recording_run(self, state, client_ids, positions, *args):
    seen.append((len(state.clients['W']), client_ids.tolist(), positions.tolist()))
    return real_run(self, state, client_ids, positions, *args)
  monkeypatch.setattr(engine_lib.RoundEngine, '_run', recording_run)
  # Cohorts (0..4) and (1, 3, 4), padded with id 5 to 8 rows each (one set of programs a run).
  device, _ = engine_cases.run_rounds('fedpe', backend, pad_to=8)
  host, eng = engine_cases.run_rounds('fedpe', backend, client_state='host', pad_to=8)
  assert eng.client_state == 'host'
  # Device state: every client's rows go in, read at the ids; host state: the cohort's rows,
  # read at 0..m-1.
  assert [rows for rows, _, _ in seen] == [5, 5, 8, 8]
  assert seen[0][2] == seen[0][1] == [0, 1, 2, 3, 4, 5, 5, 5]
  assert seen[3][1] == [1, 3, 4, 5, 5, 5, 5, 5] and seen[3][2] == list(range(8))
  jax.tree.map(np.testing.assert_array_equal, host, device)
  if backend == 'loop':   # padding changes nothing in the loop
    jax.tree.map(np.testing.assert_array_equal, host, loop_results['fedpe'])


def test_host_client_state_is_written_in_place_and_padding_rows_are_dropped():
  # Ids 4, 1 and six padding 5s: the 8 rows of the test above, whose programs this reuses.
  state, _ = engine_cases.run_rounds('fedpe', 'loop', client_state='host',
                                     cohorts=((4, 1),), pad_to=8)
  fresh, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=((4, 1),), pad_to=8)
  assert isinstance(state.clients['W'], np.ndarray) and state.clients['W'].shape[0] == 5
  np.testing.assert_array_equal(state.clients['W'], fresh.clients['W'])


def test_bad_client_state_is_named():
  config = engine_cases.tiny_config('fedpe')
  fed = engine_cases.tiny_problem()
  algorithm = algorithms.get('fedpe').build(config, models.build_backbone(config.model), fed,
                                            step_mode='scan')
  with pytest.raises(ValueError, match=r"engine.client_state='disk'; expected one of "
                                       r"\('device', 'host'\)"):
    engine_lib.RoundEngine(algorithm, backend='loop', client_state='disk')


def test_fedgc_without_regularizer_is_fedpe(loop_results):
  """lambda = 0 removes Alg. 1 lines 13-14: FedGC must then be FedPE exactly."""
  fedgc, _ = engine_cases.run_rounds('fedgc', 'loop', reg_lambda=0.0, pad_to=ONE_SIZE)
  fedpe = loop_results['fedpe']
  jax.tree.map(np.testing.assert_array_equal, fedgc.server['model'], fedpe.server['model'])
  np.testing.assert_array_equal(fedgc.server['W'], fedpe.clients['W'])


def lognormal_problem(num_clients: int = 8, num_identities: int = 20, seed: int = 0):
  """Log-normal client sizes (FedGC Table 3), 2 images per identity: n_k ranges from 2 to ~16."""
  rng = np.random.default_rng(seed)
  ids = partition.identity_exclusive(num_identities, num_clients, 'lognormal', rng)
  labels = np.repeat(np.arange(num_identities), 2).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  return federated.build(images, labels, ids)


# One compiled round (vmap) and the loop's three programs in the suite; 'map' is the vmap round
# in chunks, and the loop on 3 threads traces on the calling thread alone
# (test_loop_threads_give_the_same_round_on_several_threads): the full tier.
@pytest.mark.parametrize('backend,map_width,loop_threads', [
    ('vmap', 0, 1), pytest.param('map', 2, 1, marks=pytest.mark.full), ('loop', 0, 1),
    pytest.param('loop', 0, 3, marks=pytest.mark.full)])
def test_one_compile_for_a_run_with_changing_cohorts_and_uneven_clients(backend, map_width,
                                                                         loop_threads):
  """Participation 1/2 picks another cohort every round; with local_epochs = 1 each client runs
  ceil(n_k / B) of the 3 steps (the rest masked): neither may change a compiled shape."""
  config = engine_cases.tiny_config('fedgc')
  fed = lognormal_problem()
  algorithm = algorithms.get('fedgc').build(config, models.build_backbone(config.model), fed,
                                            step_mode='scan')
  eng = engine_lib.RoundEngine(algorithm, backend=backend, map_width=map_width,
                               loop_threads=loop_threads)
  state = algorithm.init(jax.random.PRNGKey(0))
  cohorts, steps_run = set(), set()
  for r in range(3):
    ids = federated.select_clients(fed.num_clients, 0.5, r, seed=0)
    cohorts.add(tuple(ids))
    ids = federated.pad_cohort(ids, eng.cohort_multiple(), fed.num_clients)
    weights = np.where(ids < fed.num_clients,
                       fed.num_examples[np.minimum(ids, fed.num_clients - 1)], 0).astype(np.float32)
    data = federated.sample_round(fed, ids, round_index=r, seed=0, steps=3, batch_size=4,
                                  local_epochs=1.0)
    steps_run.update(data['mask'].any(-1).sum(-1)[ids < fed.num_clients].tolist())
    state, _ = eng.run_round(state, ids, weights, data, jax.random.PRNGKey(r + 1))
  jax.block_until_ready(state)
  assert len(cohorts) == 3 and len(steps_run) > 1, (cohorts, steps_run)   # the test's premise
  expected = {'prepare', 'client', 'finish'} if backend == 'loop' else {'round'}
  assert set(eng.traces) == expected and eng.trace_count == 1, dict(eng.traces)


@pytest.mark.parametrize('cohort,capacity,devices,width', [
    (36, 100, 1, 36),   # fits: the whole cohort at once
    (36, 10, 1, 9),     # 4 chunks either way; 9 pads nothing, 10 would pad 4
    (37, 10, 1, 10),
    (36, 2, 4, 8),      # 8 clients (2 per device) at a time, 5 chunks
    (10, 0, 2, 2),      # not even one client per device fits: one each (and a warning in the log)
])
def test_choose_width(cohort, capacity, devices, width):
  assert engine_lib.choose_width(cohort, capacity, devices) == width


def _fedgc_plan_inputs():
  """(problem, FedGC on it, its first state, one client's round data) for `plan_width`."""
  config = engine_cases.tiny_config('fedgc')
  fed = engine_cases.tiny_problem()
  algorithm = algorithms.get('fedgc').build(config, models.build_backbone(config.model), fed,
                                            step_mode='scan')
  state = algorithm.init(jax.random.PRNGKey(0))
  client_data = jax.tree.map(
      lambda x: x[0], federated.sample_round(fed, np.array([5], np.int32), round_index=0, seed=0,
                                             steps=2, batch_size=4))
  return fed, algorithm, state, client_data


def test_vmap_falls_back_to_chunks_when_the_cohort_does_not_fit(loop_results, monkeypatch):
  fed, algorithm, state, client_data = _fedgc_plan_inputs()
  plan = engine_lib.plan_width(algorithm, state, 5, client_data, backend='vmap')
  assert (plan.map_width, plan.width, plan.chunks) == (0, 5, 1)   # this machine: the cohort fits
  assert engine_lib.RoundEngine(algorithm, backend='vmap', map_width=plan.map_width).width is None
  assert 0 < plan.client_bytes < plan.budget_bytes
  # A device with room for two clients beside the resident state and data.
  free = (plan.resident_bytes + 2.5 * plan.client_bytes) / engine_lib.MEMORY_FRACTION
  monkeypatch.setattr(engine_lib, 'device_free_bytes', lambda device: int(free))
  plan = engine_lib.plan_width(algorithm, state, 5, client_data, backend='vmap')
  eng = engine_lib.RoundEngine(algorithm, backend='vmap', map_width=plan.map_width)
  assert (plan.map_width, plan.width, plan.chunks, eng.cohort_multiple()) == (2, 2, 3, 2)
  # Both cohorts padded to 6 rows (3 chunks of 2): one compiled round for the two.
  for r, cohort in enumerate(((0, 1, 2, 3, 4), (1, 3, 4))):
    ids = federated.pad_cohort(np.asarray(cohort, np.int32), 3 * eng.cohort_multiple(), 5)
    weights = np.where(ids < 5, fed.num_examples[np.minimum(ids, 4)], 0).astype(np.float32)
    data = federated.sample_round(fed, ids, round_index=r, seed=0, steps=2, batch_size=4)
    state, _ = eng.run_round(state, ids, weights, data, jax.random.PRNGKey(r + 1))
  assert_trees_close(jax.tree.map(np.asarray, state), loop_results['fedgc'])


def test_the_plan_measures_the_client_update_that_runs_with_dp(monkeypatch):
  # With DP the client clips its update: the plan compiles that update, not the bare one.
  _, algorithm, state, client_data = _fedgc_plan_inputs()
  seen = []
  one_client = engine_lib._one_client  # pylint: disable=protected-access

  # Under the wrapped function's name, so the plan without DP is the program the test above
  # compiled (its name is part of the compilation cache's key): a cache hit, not ~3 s of CPU.
  @functools.wraps(one_client)
  def recording_one_client(*args, dp=None):
    seen.append(dp)
    return one_client(*args, dp=dp)

  monkeypatch.setattr(engine_lib, '_one_client', recording_one_client)
  spec = privacy.DpSpec(clip_norm=1.0, noise_std=1.0, client_rows=('W',), noise_multiplier=1.0)
  engine_lib.plan_width(algorithm, state, 5, client_data, backend='vmap', dp=spec)
  engine_lib.plan_width(algorithm, state, 5, client_data, backend='vmap')
  assert seen == [spec, None]


def test_map_needs_a_positive_width_from_the_plan():
  with pytest.raises(ValueError, match=r"backend 'map' needs a positive map_width: pass the one "
                                       r'plan_width'):
    engine_lib.RoundEngine(None, backend='map', map_width=0)
  with pytest.raises(ValueError, match=r"plan_width sizes vmap / map chunks, not backend 'loop'"):
    engine_lib.plan_width(None, None, 5, None, backend='loop')


@pytest.mark.parametrize('field,value,match', [
    ('map_width', -1, r'engine.map_width=-1; expected a non-negative integer'),
    ('loop_threads', -2, r'engine.loop_threads=-2; expected a non-negative integer'),
    ('memory_fraction', 1.5, r'engine.memory_fraction=1.5; expected a fraction in \(0, 1\]'),
    ('distributed', 'yes', r"engine.distributed='yes'; expected one of \('off', 'auto', 'on'\)"),
])
def test_bad_engine_fields_are_named(field, value, match):
  config = engine_cases.tiny_config()
  config.engine[field] = value
  with pytest.raises(ValueError, match=match):
    config_lib.validate(config)


def test_bad_backend_is_refused():
  with pytest.raises(ValueError, match=r"engine.backend='pmap'; expected one of \('vmap', 'map', 'loop'\)"):
    engine_lib.RoundEngine(None, backend='pmap')
  with pytest.raises(ValueError, match=r'engine.loop_threads=0; expected a positive integer'):
    engine_lib.RoundEngine(None, backend='loop', loop_threads=0)


_EIGHT_DEVICES = """
import sys
import jax, numpy as np
assert jax.device_count() == 8, jax.devices()
from fedjax_face.core import engine as engine_lib
from tests import engine_cases
from tests.core import test_engine
mesh = engine_lib.make_mesh()
# The loop backend's rounds on one device, as the module's fixture computed them.
ref = dict(np.load(sys.argv[1]))
for name in ('fedgc',):
  sharded, _ = engine_cases.run_rounds(name, 'vmap', mesh=mesh)
  # Sharded reductions sum in another order: float32 rounding, amplified by two rounds of SGD.
  test_engine.assert_trees_close(test_engine.flat(sharded), ref, rtol=1e-3, atol=1e-4)
  mapped, _ = engine_cases.run_rounds(name, 'map', map_width=8, mesh=mesh)
  test_engine.assert_trees_close(test_engine.flat(mapped), ref, rtol=1e-3, atol=1e-4)
for backend in ('vmap', 'map'):   # a chunk must split evenly over the devices
  try:
    engine_lib.RoundEngine(None, backend=backend, map_width=4, mesh=mesh)
    raise AssertionError('map_width=4 on 8 devices was accepted')
  except ValueError as e:
    assert 'engine.map_width=4 must be a multiple of the device count 8' in str(e), e
print('OK 8 devices')
"""


def flat(tree) -> dict[str, np.ndarray]:
  """A pytree as {path: array}: what np.savez writes and np.load gives back."""
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {jax.tree_util.keystr(path): np.asarray(x) for path, x in leaves}


def test_eight_forced_cpu_devices_give_the_same_round(loop_results, tmp_path):
  # The one-device reference is the fixture's FedGC rounds on the loop backend (computed once
  # for the module), handed to the 8-device process as a file rather than trained there again.
  reference = tmp_path / 'fedgc_loop.npz'
  np.savez(reference, **flat(loop_results['fedgc']))
  assert 'OK 8 devices' in forced_devices.run(_EIGHT_DEVICES, args=(str(reference),))
