"""FedMA: the BBP-MAP cost against the formula written out here, permuted copies of one network
matched back to it, the width cap and new neurons, masked channels exactly zero through training,
what crosses to the server at each stage, and one compile for a whole run."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms import common
from fedjax_face.algorithms.fedma import algorithm as fedma_algorithm
from fedjax_face.algorithms.fedma import layers, matching
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated, sources
from tests.config_files import load_config


# -- the matching ------------------------------------------------------------------------------

def test_the_cost_matrix_is_the_bbp_map_formula_written_out():
  prior = matching.Prior(sigma=0.5, sigma0=2.0, mu0=0.3, gamma=4.0)
  neurons = np.array([[1.0, -2.0], [0.5, 0.25]])                 # one data center's, Lj = 2
  g = np.array([[0.9, 0.1], [-1.0, 3.0]])                        # natural means of L = 2
  s = np.array([2.5, 4.5])                                       # their precisions
  counts = np.array([1, 2])
  J, cap = 3, 3                                                  # one new column (cap - L)
  cost = matching.cost_matrix(neurons, g, s, counts, J, cap, prior)
  assert cost.shape == (2, 3)
  for l in range(2):
    for i in range(2):
      total = 0.0
      for d in range(2):
        wt = neurons[l, d] / prior.sigma
        total += (g[i, d] + wt) ** 2 / (s[i] + 1 / prior.sigma) - g[i, d] ** 2 / s[i]
      total += math.log(counts[i] / (J - counts[i]))
      assert cost[l, i] == pytest.approx(total, rel=1e-12)
    new = 0.0
    for d in range(2):
      wt = neurons[l, d] / prior.sigma
      p = prior.mu0 / prior.sigma0
      new += (p + wt) ** 2 / (1 / prior.sigma0 + 1 / prior.sigma) - p ** 2 * prior.sigma0
    assert cost[l, 2] == pytest.approx(new - 2 * math.log(1) + 2 * math.log(prior.gamma / J),
                                       rel=1e-12)


def test_counts_above_ten_count_as_ten():
  prior = matching.Prior()
  args = (np.ones((1, 2)), np.ones((1, 2)), np.array([5.0]))
  many = matching.cost_matrix(*args, np.array([15]), 40, 1, prior)
  ten = matching.cost_matrix(*args, np.array([10]), 40, 1, prior)
  assert many.shape == (1, 1) and many[0, 0] == ten[0, 0]


def test_a_neuron_far_from_every_global_one_opens_a_new_one_up_to_the_cap():
  rng = np.random.default_rng(0)
  shared = rng.normal(size=(3, 8)) * 4
  prior = matching.Prior(sigma=0.1)
  # Two data centers share three neurons; the second also has one of its own, far away.
  own = np.vstack([shared[[2, 0, 1]], 40.0 * np.eye(8)[0]])
  first = np.vstack([shared, -40.0 * np.eye(8)[1]])
  m = matching.match_layer([first, own], cap=6, prior=prior, estimate='matched_mean')
  assert len(m.counts) == 5 and sorted(m.counts) == [1, 1, 2, 2, 2]
  first_of, own_of = m.assignments
  np.testing.assert_array_equal(own_of[:3], first_of[[2, 0, 1]])   # the shared ones, matched
  assert own_of[3] not in first_of and first_of[3] not in own_of   # each far one: its own
  np.testing.assert_array_equal(m.neurons[own_of[3]], own[3])
  np.testing.assert_array_equal(m.neurons[first_of[:3]], shared)
  # At the cap (4) the far neuron cannot open one; every global neuron is still shared.
  capped = matching.match_layer([first, own], cap=4, prior=prior, estimate='matched_mean')
  assert len(capped.counts) == 4 and sorted(capped.counts) == [2, 2, 2, 2]


def _random_network(cap_width: int, seed: int):
  config = load_config('pad/fedma', 'runlocal')
  config.model.width = cap_width
  model = models.build_backbone(config.model)
  shape = (config.data.image_size, config.data.image_size, 6)
  # Values drawn on the host at the init's shapes (the compiled init took ~2.5 s): the matching
  # needs distinct values, not the initializers'.
  rng = np.random.default_rng(seed)
  variables = jax.tree.map(lambda s: rng.normal(size=s.shape).astype(s.dtype), jax.eval_shape(
      lambda: common.init_backbone(model, jax.random.PRNGKey(seed), shape, train=True)))
  # Distinct BatchNorm values and statistics, so that every part of a channel must follow it.
  for index, layer in enumerate(layers.MATCHED):
    norm = layers.get(variables['params'], layer.norm) if layer.norm else None
    if norm is not None:
      width = norm['scale'].shape[0]
      variables = layers.with_layer(variables, index, {
          **layers.layer_variables(variables, index),
          'norm': {'scale': rng.uniform(0.5, 1.5, width).astype(np.float32),
                   'bias': rng.normal(size=width).astype(np.float32)},
          'stats': {'mean': rng.normal(size=width).astype(np.float32),
                    'var': rng.uniform(0.5, 2.0, width).astype(np.float32)}})
  return config, jax.tree.map(np.asarray, variables)


def _permuted(variables, perms, cap_width):
  """A copy whose matched layer l's channels are reordered by perms[l] (new[k] = old[perms[l][k]])
  with every consumer's inputs moved along."""
  out = jax.tree.map(np.array, variables)
  for index, layer in enumerate(layers.MATCHED):
    p = perms[index]
    values = layers.layer_variables(out, index)
    values = jax.tree.map(lambda x: x[..., p], values)
    out = layers.with_layer(out, index, values)
  for layer in layers.LAYERS:
    kernel = layers.get(out['params'], layer.kernel)
    w, offset, order = kernel['kernel'], 0, []
    for prod in layer.producers:
      order.append(offset + perms[prod])
      offset += layers.MATCHED[prod].channels(cap_width)
    if order:
      w = np.take(w, np.concatenate(order), axis=w.ndim - 2)
    out['params'] = layers.replace(out['params'], layer.kernel, {**kernel, 'kernel': w})
  return out


# One program for every layer and data center of both cases (the producer is a traced index), as
# in a run's compiled round; run op by op, its one-hots and einsums compiled ~100 small programs.
_permute_inputs = jax.jit(layers.permute_inputs, static_argnums=3)


@pytest.mark.parametrize('estimate', matching.ESTIMATES)
def test_permuted_copies_of_one_network_are_matched_back_to_it(estimate):
  """Data center 0 holds the network, 1 and 2 copies with every hidden layer's channels (and
  their BatchNorm) permuted at random. Matched layer by layer as a run does, each data center
  moving its inputs to the previous layer's global order, they give back the network: exactly
  with the plain matched mean; the posterior mean is it shrunk by J/sigma / (1/sigma0 + J/sigma)."""
  cap_width = 2
  config, network = _random_network(cap_width, seed=3)
  rng = np.random.default_rng(7)
  perms = [[np.arange(l.channels(cap_width)) for l in layers.MATCHED]]
  perms += [[rng.permutation(l.channels(cap_width)) for l in layers.MATCHED] for _ in range(2)]
  clients = [_permuted(network, p, cap_width) for p in perms]
  prior = matching.Prior(sigma=0.01)
  for index in range(layers.NUM_MATCHED):
    stacked = jax.tree.map(lambda *xs: np.stack(xs),
                           *[layers.layer_variables(c, index) for c in clients])
    host = fedma_algorithm._host_match(index, cap_width, cap_width, prior, 5, estimate)
    layer, mask, assign = host(stacked, np.ones(3, np.float32), 11)
    width = layers.MATCHED[index].channels(cap_width)
    assert mask.sum() == width   # no neuron opened
    for j in range(3):   # data center j's channel k is the network's perms[j][k]
      np.testing.assert_array_equal(assign[j, :width], perms[j][index])
    original = layers.layer_variables(network, index)
    if estimate == 'matched_mean':
      jax.tree.map(np.testing.assert_array_equal, layer, original)
    else:
      shrink = (3 / prior.sigma) / (1 / prior.sigma0 + 3 / prior.sigma)
      jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b * shrink, rtol=1e-6, atol=1e-7),
                   {k: v for k, v in layer.items() if k != 'stats'},
                   {k: v for k, v in original.items() if k != 'stats'})
      jax.tree.map(np.testing.assert_array_equal, layer.get('stats'), original.get('stats'))
    clients = [jax.tree.map(np.asarray, _permute_inputs(
        layers.with_layer(c, index, layer), jnp.int32(index), jnp.asarray(assign[j]), cap_width))
        for j, c in enumerate(clients)]
  # After the last matched layer every data center's consumers read the network's order.
  for c in clients:
    for index in range(layers.NUM_MATCHED, len(layers.LAYERS)):
      jax.tree.map(np.testing.assert_array_equal, layers.layer_variables(c, index),
                   layers.layer_variables(network, index))


# -- the method in rounds ----------------------------------------------------------------------

@pytest.fixture(scope='module')
def setup():
  config = load_config('pad/fedma', 'runlocal')
  fed, _ = sources.training_views(config, sources.load(config), one_client=False)
  model = models.build_backbone(config.model)
  algorithm = algorithms.get('fedma').build(config, model, fed, step_mode='scan')
  return config, fed, algorithm


def _round_data(config, fed, r):
  ids = np.arange(fed.num_clients, dtype=np.int32)
  return ids, federated.sample_round(fed, ids, round_index=r, seed=0,
                                     steps=config.federated.local_steps,
                                     batch_size=config.federated.batch_size, balanced=True)


@pytest.fixture(scope='module')
def run(setup):
  """A whole runlocal schedule on the loop engine (the CPU default): the engine and the state
  before every round. The tests that look inside a round call the engine's own compiled pieces
  (`_client`), so the client update compiles once for the module."""
  config, fed, algorithm = setup
  eng = engine_lib.RoundEngine(algorithm, backend='loop')
  states = [algorithm.init(jax.random.PRNGKey(0))]
  for r in range(config.num_rounds):
    ids, data = _round_data(config, fed, r)
    weights = fed.num_examples[ids].astype(np.float32)
    states.append(eng.run_round(states[-1], ids, weights, data, jax.random.PRNGKey(r + 1))[0])
  return eng, states


def _inactive_is_zero(variables, out_masks):
  """Every inactive channel of `variables`: zero weights in and out, BatchNorm 0 / 0, 0 / 1."""
  for index, layer in enumerate(layers.LAYERS):
    out = np.asarray(out_masks[index]) if index < layers.NUM_MATCHED else np.ones(1)
    inp = np.asarray(layers.input_mask(layer, out_masks))
    w = np.asarray(layers.get(variables['params'], layer.kernel)['kernel'])
    assert not np.any(w[..., inp == 0, :]) and not np.any(w[..., out == 0]), layer.name
    if layer.norm:
      norm = layers.get(variables['params'], layer.norm)
      stats = layers.get(variables['batch_stats'], layer.norm)
      for x in (norm['scale'], norm['bias'], stats['mean']):
        assert not np.any(np.asarray(x)[out == 0]), layer.name
      assert np.all(np.asarray(stats['var'])[out == 0] == 1.0), layer.name


def _client(eng, state, config, fed, k, r):
  """Data center k's update in round r from `state`, through the engine's compiled round pieces
  (`_prepare`, then `_client` on row k, as `RoundEngine._run` calls them on the loop backend):
  (its private state before, its ClientResult)."""
  ids, data = _round_data(config, fed, r)
  rng = jax.random.PRNGKey(1)
  prepare, client = eng._prepare, eng._client   # pylint: disable=protected-access
  client_input, private = prepare(state, ids, ids, rng)
  shares = np.asarray(engine_lib.aggregation_shares(
      fed.num_examples[ids].astype(np.float32), None), np.float32)
  result = client(client_input.shared, client_input.per_client, private,
                  jax.tree.map(lambda x: x[k], data), np.int32(k), ids[k], rng, np.int32(k),
                  shares, None, None)
  return jax.tree.map(lambda x: x[k], state.clients), result


def _layer_is_zero(tree, index):
  return not any(np.any(np.asarray(x)) for x in jax.tree.leaves(
      layers.layer_variables(tree, index)))


@pytest.mark.parametrize('r', [0, 3, layers.NUM_MATCHED, layers.NUM_MATCHED + 1])
def test_what_crosses_is_the_layer_being_matched_and_the_layers_after_it(setup, run, r):
  config, fed, _ = setup
  eng, states = run
  state = states[r]
  private, result = _client(eng, state, config, fed, 1, r)
  assert set(result.update) == {'params', 'batch_stats'} and set(result.private) == {'model'}
  assert jax.tree.structure(result.update) == jax.tree.structure(private['model'])
  fedavg = r > layers.NUM_MATCHED
  for index in range(len(layers.LAYERS)):
    sent = fedavg or index >= r
    assert _layer_is_zero(result.update, index) != sent, (r, layers.LAYERS[index].name)
    if not sent:   # the server's own layer, unchanged in the data center
      jax.tree.map(np.testing.assert_array_equal, layers.layer_variables(result.private['model'],
                                                                         index),
                   layers.layer_variables(state.server['model'], index))
  assert {k for k in result.metrics if k.startswith('loss_')} == {'loss_cls', 'loss_depth'}


def test_masked_channels_stay_exactly_zero_and_widths_stay_under_the_cap(setup, run):
  config, fed, _ = setup
  eng, states = run
  r = 6   # six layers matched: the first six global, the rest the data center's own width
  state = states[r]
  caps = [l.channels(config.model.width) for l in layers.MATCHED]
  widths = [int(np.asarray(m).sum()) for m in state.server['masks']]
  own = [l.channels(config.fedma.client_width) for l in layers.MATCHED]
  assert all(o <= w <= c for o, w, c in zip(own, widths[:r], caps))
  assert widths[r:] == own[r:]
  _inactive_is_zero(state.server['model'], state.server['masks'])
  private, result = _client(eng, state, config, fed, 0, r)
  out_masks = list(state.server['masks'][:r]) + [np.arange(c) < o for c, o in
                                                 zip(caps[r:], own[r:])]
  _inactive_is_zero(result.private['model'], out_masks)
  for index in range(r, len(layers.LAYERS)):   # it trained its own layers and sent them
    mine = layers.layer_variables(result.private['model'], index)
    jax.tree.map(np.testing.assert_array_equal, layers.layer_variables(result.update, index), mine)
    before = layers.layer_variables(private['model'], index)['kernel']['kernel']
    assert np.any(np.asarray(mine['kernel']['kernel']) != np.asarray(before))


def test_a_whole_run_compiles_its_round_once(setup, run):
  """Every stage (16 matched layers, the output layers, a FedAvg round) runs one set of programs
  (the loop backend's: the broadcast, the client, the server step)."""
  config, _, algorithm = setup
  eng, states = run
  assert set(eng.traces) == {'prepare', 'client', 'finish'} and eng.trace_count == 1, dict(
      eng.traces)
  assert int(states[-1].round) == config.num_rounds == layers.NUM_MATCHED + 2
  _inactive_is_zero(states[-1].server['model'], states[-1].server['masks'])
  widths = [[int(np.asarray(m).sum()) for m in s.server['masks']] for s in states]
  for r in range(1, layers.NUM_MATCHED + 1):   # round r - 1 matched layer r - 1, and only it
    changed = [i for i in range(layers.NUM_MATCHED) if widths[r][i] != widths[r - 1][i] or not
               np.array_equal(states[r].server['masks'][i], states[r - 1].server['masks'][i])]
    assert set(changed) <= {r - 1}, (r, changed)
  # What results.json records of it ('method_state'): each matched layer's active channels.
  assert algorithm.summary(states[-1]) == {'widths': widths[-1]}


@pytest.mark.parametrize('field, value, match', [
    ('fedma.client_width', 9, r'fedma.client_width=9 > model.width=3'),
    ('fedma.estimate', 'mean', r"fedma.estimate='mean'; expected one of"),
    ('fedma.gamma', 0.0, r'fedma.gamma'),
    ('federated.participation', 0.5, r'participation=0.5 with fedma; expected 1.0'),
    ('num_rounds', 10, r'num_rounds=10 with fedma; expected at least 17'),
    ('model.disentangle', True, r"model.disentangle=True with fedma; expected 'pad_net' and "
                                'False'),
])
def test_config_errors_name_the_field(field, value, match):
  config = load_config('pad/fedma', 'runlocal')
  section, _, key = field.rpartition('.')
  if section:
    config[section][key] = value
  else:
    config[key] = value
  with pytest.raises(ValueError, match=match):
    algorithms.check_config(config)
