"""FedProx and SCAFFOLD: their gradient terms and variates by hand, and on real rounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, experiment, models
from fedjax_face.core import blocks, local_terms
from fedjax_face.data import sources
from fedjax_face.run import setup as run_setup
from tests import config_files, engine_cases

COHORTS = ((0, 1, 2, 3, 4), (1, 3, 4))


def one_stage(**fields):
  """A `configure` for `engine_cases.run_rounds`: `section__key=value` fields on a one-stage small
  CNN. The terms act on every parameter leaf alike, whatever the depth, and a run's programs
  compile in about half the time of the three stages'."""
  return engine_cases.set_fields(model__num_stages=1, **fields)



def test_fedprox_gradient_is_mu_times_the_distance_to_what_was_received():
  received = jnp.array([1.0, -2.0, 0.5])
  own = jnp.array([3.0, 4.0])                      # a parameter the client did not receive
  params = {'model': received, 'W': own}
  with local_terms.applied([received], None, mu=0.1) as matched:
    state = local_terms.transform().init(params)
  assert matched == {0}
  moved = {'model': jnp.array([1.5, -2.5, 0.5]), 'W': jnp.array([0.0, 0.0])}
  grads = {'model': jnp.array([0.2, 0.3, -0.1]), 'W': jnp.array([1.0, 2.0])}
  out, _ = local_terms.transform().update(grads, state, moved)
  np.testing.assert_allclose(out['model'], [0.2 + 0.1 * 0.5, 0.3 - 0.1 * 0.5, -0.1], rtol=1e-6)
  np.testing.assert_array_equal(out['W'], grads['W'])


def test_scaffold_adds_c_minus_c_i_and_fedprox_at_mu_zero_adds_nothing():
  received = jnp.array([1.0, 2.0])
  with local_terms.applied([received], [jnp.array([0.25, -0.5])], mu=0.0):
    state = local_terms.transform().init({'p': received})
  grads = {'p': jnp.array([1.0, 1.0])}
  out, _ = local_terms.transform().update(grads, state, {'p': jnp.array([9.0, 9.0])})
  np.testing.assert_array_equal(out['p'], [1.25, 0.5])
  with local_terms.applied([received], None, mu=0.0):
    state = local_terms.transform().init({'p': received})
  out, _ = local_terms.transform().update(grads, state, {'p': jnp.array([9.0, 9.0])})
  np.testing.assert_array_equal(out['p'], grads['p'])


def test_an_optimizer_initialised_outside_a_client_update_is_refused():
  with pytest.raises(ValueError, match='outside a client update'):
    local_terms.transform().init({'p': jnp.zeros(2)})


def test_scaffold_option_two_by_hand():
  c_i, c = [jnp.array([0.1, 0.2])], [jnp.array([0.3, -0.1])]
  x, y = [jnp.array([1.0, 1.0])], [jnp.array([0.8, 1.1])]
  new = local_terms.scaffold_control(c_i, c, x, y, jnp.float32(4), jnp.float32(0.05))
  # c_i − c + (x − y) / (K η) = [0.1 − 0.3 + 0.2 / 0.2, 0.2 + 0.1 − 0.1 / 0.2]
  np.testing.assert_allclose(new[0], [0.8, -0.2], rtol=1e-6)
  kept = local_terms.scaffold_control(c_i, c, x, y, jnp.float32(0), jnp.float32(0.05))
  np.testing.assert_array_equal(kept[0], c_i[0])   # a client without a step keeps c_i


# The term acts inside the client update, the same program on every backend: 'vmap' repeats the
# loop's equality (the full tier).
@pytest.mark.parametrize('backend', ['loop', pytest.param('vmap', marks=pytest.mark.full)])
def test_fedprox_at_mu_zero_is_fedavg_bit_for_bit(backend):
  # Both cohorts (5 and 3 clients) padded to 5 rows: one program per engine rather than one per
  # cohort size (padding changes nothing: test_engine's test_padding_clients_change_nothing).
  plain, _ = engine_cases.run_rounds('fedpe', backend, cohorts=COHORTS, pad_to=5,
                                     configure=one_stage())
  prox, _ = engine_cases.run_rounds(
      'fedpe', backend, cohorts=COHORTS, pad_to=5,
      configure=one_stage(optimizer__correction='fedprox', optimizer__prox_mu=0.0))
  jax.tree.map(np.testing.assert_array_equal, prox.server['method'], plain.server)
  jax.tree.map(np.testing.assert_array_equal, prox.clients['method'], plain.clients)


def test_fedprox_pulls_the_clients_toward_the_global_model():
  plain, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=COHORTS[:1], configure=one_stage())
  x0, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=(), configure=one_stage())
  prox, _ = engine_cases.run_rounds(
      'fedpe', 'loop', cohorts=COHORTS[:1],
      configure=one_stage(optimizer__correction='fedprox', optimizer__prox_mu=5.0))
  start = blocks.chosen_leaves(x0.server['model'])
  distance = lambda s: np.sqrt(sum(np.sum((v - start[p])**2)
                                   for p, v in blocks.chosen_leaves(s).items()))
  assert distance(prox.server['method']['model']) < distance(plain.server['model'])


def test_scaffold_first_round_is_fedavg_and_its_variates_follow_option_two():
  cohort = ((0, 2, 4),)
  config = engine_cases.tiny_config('fedpe')
  # The cohort padded to 5 rows, as the FedProx runs above: the plain round is then their
  # programs again (padding changes nothing: test_engine's test_padding_clients_change_nothing).
  plain, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=cohort, pad_to=5,
                                     configure=one_stage())
  x0, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=(), configure=one_stage())
  sc, _ = engine_cases.run_rounds('fedpe', 'loop', cohorts=cohort, pad_to=5,
                                  configure=one_stage(optimizer__correction='scaffold'))
  # Zero variates: the corrected gradient is the plain one, so the round is FedAvg's bit for bit.
  jax.tree.map(np.testing.assert_array_equal, sc.server['method'], plain.server)
  # c_i⁺ = (x − y_i) / (K η) with K = 2 local steps (c = c_i = 0); y_i is not kept by FedPE, so
  # recompute it: the server's mean of the y_i, weighted by n_k, equals the weighted mean of
  # x − K η c_i⁺, and c = |S|/N · mean(c_i⁺).
  fed = engine_cases.tiny_problem()
  ids = np.array(cohort[0])
  weights = fed.num_examples[ids].astype(np.float64)
  k_eta = 2 * config.optimizer.learning_rate
  x = blocks.chosen_leaves({'model': x0.server['model']})
  mean = blocks.chosen_leaves({'model': plain.server['model']})
  control = sc.clients['blocks']['control']
  for path in x:
    c_i = control[path][ids].astype(np.float64)
    y = x[path] - k_eta * c_i
    np.testing.assert_allclose(np.tensordot(weights / weights.sum(), y, axes=1), mean[path],
                               rtol=1e-4, atol=1e-6, err_msg=path)
    others = np.setdiff1d(np.arange(fed.num_clients), ids)
    assert not np.any(control[path][others])
    np.testing.assert_allclose(sc.server['blocks']['control'][path],
                               len(ids) / fed.num_clients * c_i.mean(axis=0), rtol=1e-5,
                               atol=1e-7)


def _state(wrapped):
  """A RoundState at `wrapped.init`'s structure, shapes and dtypes. Where every leaf but the round
  is a float (the PAD methods: their init compiles all of their networks as one large program),
  each is drawn on the host, uniform in [0.5, 1.5): the key must not reach what a client receives
  from any server state, and a generic one (its control variates nonzero, unlike init's) shows
  that at least as well as init's. Other methods hold flags or data whose values mean something
  (FedFace's `initialised`, FedFR's public set and `started`), so they are initialized."""
  shapes = jax.eval_shape(wrapped.init, jax.random.PRNGKey(0))
  if not all(jnp.issubdtype(s.dtype, jnp.floating)
             for s in jax.tree.leaves((shapes.server, shapes.clients))):
    return wrapped.init(jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  draw = lambda s: jnp.asarray(rng.uniform(0.5, 1.5, s.shape), s.dtype)
  return shapes.replace(server=jax.tree.map(draw, shapes.server),
                        clients=jax.tree.map(draw, shapes.clients),
                        round=jnp.zeros(shapes.round.shape, shapes.round.dtype))


MODEL_SENDING = ['fedgc/fedpe', 'fedgc', 'fedfv', 'fedfv/fedaws', 'fedfv/fedface', 'fedfv/feduv',
                 'fedfr/fedfr', 'pad/fedpad', 'pad/fedgpad']


@pytest.mark.parametrize('name', MODEL_SENDING)
def test_every_averaged_parameter_is_tied_and_its_origin_is_the_server_s(name):
  """The link FedProx / SCAFFOLD make by identity reaches every parameter leaf the method
  averages, and what a client received for them does not depend on the broadcast's key (the
  server's compression decoder recomputes it from its own state)."""
  config = config_files.load_config(name)
  config.optimizer.correction = 'scaffold'
  fed, _ = sources.training_views(config, sources.load(config), one_client=False)
  algorithm = algorithms.get(config.algorithm).build(config, models.build_backbone(config.model),
                                                     fed, step_mode='scan')
  wrapped = blocks.wrap(algorithm, blocks.from_config(config), fed.num_clients)
  state = _state(wrapped)
  ids = jnp.array([0, 1], jnp.int32)
  row = lambda ci: ci._replace(per_client=jax.tree.map(lambda x: x[0], ci.per_client))
  origin = jax.jit(lambda server, key: wrapped.update_origin(row(wrapped.broadcast(
      server, ids, state.round, key))))
  first = origin(state.server, jax.random.PRNGKey(1))
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(first))
  jax.tree.map(np.testing.assert_array_equal, first, origin(state.server, jax.random.PRNGKey(2)))
  data = run_setup.one_client_data(fed, config)
  slots = {}

  def traced(server, clients, data):
    ci = row(algorithm.broadcast(server['method'], ids, state.round, jax.random.PRNGKey(1)))
    received = blocks.chosen_leaves({k: v for k, v in algorithm.update_origin(ci).items()
                                     if k not in algorithm.client_rows})
    private = jax.tree.map(lambda x: x[0], clients['method'])
    with local_terms.applied(list(received.values()), None, 0.0) as matched:
      algorithm.client_update(ci, private, data, jax.random.PRNGKey(0))
    slots['all'], slots['matched'] = list(received), sorted(matched)
    return 0

  jax.eval_shape(traced, state.server, state.clients, data)
  assert slots['all'] and slots['matched'] == list(range(len(slots['all']))), [
      p for i, p in enumerate(slots['all']) if i not in slots['matched']]
