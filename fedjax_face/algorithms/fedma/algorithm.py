"""FedMA (Wang, Yurochkin, Sun, Papailiopoulos, Khazaeni, "Federated Learning with Matched
Averaging", ICLR 2020), the baseline of the FedGPAD paper's Table V, on the Table II network
without ES and Dec (`layers.py`: EI, C and Dep, the network of FedPAD's `backbone=pad_net`).

The schedule, one engine round per matched layer (L = 16, `layers.MATCHED`):

  round r < L   every data center takes the layers matched so far from the server (frozen),
                moves the input channels of what layer r - 1 feeds to the global order that
                layer's matching gave it, trains the rest for `federated.local_steps` steps and
                sends them; the server matches layer r (`matching.match_layer`, on the host)
  round L       the data centers train the two output layers alone; the server averages them
  round > L     FedAvg rounds on the matched network, every layer trained and averaged (the
                authors' code follows its matching with more communication rounds)

so `num_rounds` >= L + 1. What a data center sends in round r <= L is every layer from r on
(its layers before r are the server's own); the server uses layer r (the output layers in round
L). In the FedAvg rounds it sends the whole network.

Fixed shapes: the network is built at the cap width (`model.width`), every layer's global width
at most its cap; a data center trains `fedma.client_width`'s channels of every layer it has not
received from the server. Inactive channels are zero and stay zero (`layers.apply_masks`).
Every round runs the same compiled programs: the round index selects, inside them, what is
frozen, whose inputs move and which layer the server matches (`lax.switch`, one branch per layer,
each a host callback).

Readings (the authors' code where the paper does not say; `matching.py` has the matching's):
  * Every data center starts from its own random initialisation (the code's local models), and
    the FedAvg rounds average by frame counts as FedAvg does; the output layers too (the code
    weights each class's output by the data centers' shares of that class: the same here, where
    every data center holds live and attack frames in the same ratio).
  * BatchNorm: the scale and bias are part of the neuron matched (the code has no BatchNorm);
    the running mean and variance follow their channel and the global ones are the mean over
    the data centers matched to it.
  * The code trains the output layer for three times the epochs at a tenth of the learning
    rate; here every round trains the same steps at the same rate (one compiled program).
  * One Adam a round, fresh (the FedGPAD authors' local training), and the PAD losses of FedPAD's
    `backbone=pad_net` (Eq. 4 + Eq. 5, `fedgpad.loss_weights`' defaults).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face.algorithms import common, fedgpad, pad_losses
from fedjax_face.algorithms.fedma import layers, matching
from fedjax_face.core import aggregation, checks, local, loss_scale
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.data import sources
from fedjax_face.models import pad as pad_model

ONE_CLIENT = False
L = layers.NUM_MATCHED


def config_section() -> ml_collections.ConfigDict:
  """`config.fedma` (configs/pad/fedma.py)."""
  c = ml_collections.ConfigDict()
  c.client_width = 8           # the width each data center trains; model.width is the cap
  # The matching's prior and iterations: the authors' BBP_MAP (sigma = sigma0 = 1, gamma = 7,
  # 5 passes); mu0 0 for every coordinate (matching.py).
  c.sigma = 1.0
  c.sigma0 = 1.0
  c.mu0 = 0.0
  c.gamma = 7.0
  c.iterations = 5
  c.estimate = 'posterior_mean'   # the code's | 'matched_mean' (no prior: plain mean of matches)
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedma', 'fedma.config_section() (configs/pad/fedma.py)')
  if sources.get(config.data.source).TASK != 'anti_spoofing':
    raise ValueError(f"config.data.source={config.data.source!r}; fedma trains a "
                     "presentation-attack detector: expected an anti-spoofing source "
                     f"{sources.of_task('anti_spoofing')}.")
  m = config.model
  if m.name != 'pad_net' or m.disentangle:
    raise ValueError(f'config.model.name={m.name!r}, model.disentangle={m.disentangle!r} with '
                     "fedma; expected 'pad_net' and False (the Table II network without ES and "
                     'Dec: fedma/layers.py lists its layers).')
  if m.image_size != config.data.image_size:
    raise ValueError(f'config.model.image_size={m.image_size} but data.image_size='
                     f'{config.data.image_size}; expected the same.')
  if m.batch_norm_groups != 1:
    raise ValueError(f'config.model.batch_norm_groups={m.batch_norm_groups} with fedma; '
                     'expected 1 (each data center trains alone).')
  checks.check_int('fedma.client_width', c.client_width)
  if c.client_width > m.width:
    raise ValueError(f'config.fedma.client_width={c.client_width} > model.width={m.width}; '
                     'model.width is the cap of the matched widths: expected client_width <= it.')
  for name in ('sigma', 'sigma0', 'gamma'):
    checks.check_number(f'fedma.{name}', c[name])
  if not isinstance(c.mu0, (int, float)):
    raise ValueError(f'config.fedma.mu0={c.mu0!r}; expected a number.')
  checks.check_int('fedma.iterations', c.iterations, allow_zero=True)
  checks.check_choice('fedma.estimate', c.estimate, matching.ESTIMATES)
  if config.federated.participation != 1.0:
    raise ValueError(f'config.federated.participation={config.federated.participation} with '
                     'fedma; expected 1.0: a layer is matched over every data center, and '
                     'every one of them must take the permutation it gave.')
  if config.num_rounds < L + 1:
    raise ValueError(f'config.num_rounds={config.num_rounds} with fedma; expected at least '
                     f'{L + 1}: one round per matched layer ({L}) and one for the output layers.')


def variant_name(config) -> str:
  return 'fedma' + ('' if config.fedma.estimate == 'posterior_mean' else '-matched_mean')


def _host_match(index: int, cap_width: int, client_width: int, prior: matching.Prior,
                iterations: int, estimate: str):
  """The host side of matching layer `index`: (stacked layer variables [m, ...], weights [m],
  seed) -> (the global layer, its active mask [cap], assignments [m, max cap] (-1: none))."""
  layer = layers.MATCHED[index]
  cap, own = layer.channels(cap_width), layer.channels(client_width)
  max_cap = max(l.channels(cap_width) for l in layers.MATCHED)

  def match(values, weights, seed):
    values = jax.tree.map(np.asarray, values)
    present = np.flatnonzero(np.asarray(weights) > 0)
    one = lambda j: jax.tree.map(lambda x: x[j], values)
    rows = [layers.neuron_rows(one(j), layer)[:own] for j in present]
    matched = matching.match_layer(rows, cap, prior, iterations=iterations, estimate=estimate,
                                   rng=np.random.default_rng(int(seed)))
    width = len(matched.counts)
    neurons = np.zeros((cap, rows[0].shape[1]))
    neurons[:width] = matched.neurons
    out = layers.from_neuron_rows(neurons, layer, one(0))
    if layer.norm:   # running statistics follow their channel: the mean over its matches
      out['stats'] = {
          name: np.r_[matching.matched_mean([values['stats'][name][j][:own] for j in present],
                                            matched.assignments, width),
                      np.full(cap - width, inactive)].astype(np.float32)
          for name, inactive in (('mean', 0.0), ('var', 1.0))}
    assign = np.full((len(weights), max_cap), -1, np.int32)
    for j, a in zip(present, matched.assignments):
      assign[j, :own] = a
    return out, (np.arange(cap) < width).astype(np.float32), assign

  return match


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedMA over the data centers `fed` (every one in every round)."""
  c = config.fedma
  weights = dict(pad_losses.LOSS_WEIGHTS)
  # Under float16 the loss scale rides in the optimizer's state, which starts afresh each round;
  # between rounds each data center keeps it (core/loss_scale.py).
  optimizer = common.scaled_for(model, common.make_optimizer(config.optimizer))
  cap_width, client_width = config.model.width, c.client_width
  own_masks = tuple(jnp.asarray(m, jnp.float32)
                    for m in layers.client_masks(client_width, cap_width))
  max_cap = max(l.channels(cap_width) for l in layers.MATCHED)
  prior = matching.Prior(c.sigma, c.sigma0, c.mu0, c.gamma)
  image_shape = (config.data.image_size, config.data.image_size, pad_model.PAD_CHANNELS)

  def own_network(rng):
    return layers.apply_masks(common.init_backbone(model, rng, image_shape, train=True),
                              own_masks)

  def init(rng, start=None):
    if start is not None:
      raise ValueError(f'config.init_from={config.init_from!r}: fedma starts every data center '
                       "from its own random weights; expected ''.")
    keys = jax.random.split(rng, fed.num_clients + 1)
    clients = jax.tree.map(lambda *xs: jnp.stack(xs), *[own_network(k) for k in keys[1:]])
    server = {'model': own_network(keys[0]), 'masks': own_masks,
              'assign': jnp.full((fed.num_clients, max_cap), -1, jnp.int32)}
    kept = {'model': clients, **common.initial_loss_scales(model, fed.num_clients)}
    return RoundState(server=server, clients=kept, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del rng
    return ClientInput(
        shared={'model': server['model'], 'masks': server['masks'], 'round': round_index},
        per_client={'assign': jnp.take(server['assign'], client_ids, axis=0, mode='clip')})

  def loss_fn(params, batch_stats, batch):
    outputs, state = model.apply({'params': params, 'batch_stats': batch_stats},
                                 batch['inputs'], train=True, mutable=['batch_stats'])
    total, terms = pad_losses.total_loss(outputs, batch, weights)
    return total, (state['batch_stats'], terms)

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    shared, r = client_input.shared, client_input.shared['round']
    matched = jnp.minimum(r, L)   # layers matched before this round
    fedavg = r > L
    count = len(layers.LAYERS)
    # From the server: the layers matched so far, and in the FedAvg rounds every layer. Held
    # (not trained, not sent): the matched layers until the FedAvg rounds.
    from_server = [(index < matched) | fedavg for index in range(count)]
    held = [(index < matched) & ~fedavg for index in range(count)]
    trainable = [~h for h in held]
    out_masks = [jnp.where(from_server[index], shared['masks'][index], own_masks[index])
                 for index in range(L)]
    start = layers.select_layers(from_server, shared['model'], private['model'])
    moved = layers.permute_inputs(start, matched - 1, client_input.per_client['assign'],
                                  cap_width)
    start = layers.apply_masks(jax.tree.map(lambda m, s: jnp.where(fedavg, s, m), moved, start),
                               out_masks)
    zeros = jax.tree.map(jnp.zeros_like, start)

    def step(carry, batch):
      params, old_stats, opt_state = carry
      (_, (batch_stats, terms)), grads = loss_scale.value_and_grad_of(loss_fn, has_aux=True)(
          opt_state, params, old_stats, fedgpad.training_batch(batch))
      # Held layers get no gradient (a fresh Adam then never moves them).
      grads = layers.select_layers(trainable, {'params': grads, 'batch_stats': batch_stats},
                                   {'params': jax.tree.map(jnp.zeros_like, grads),
                                    'batch_stats': batch_stats})['params']
      updates, new_opt_state = optimizer.update(grads, opt_state, params)
      masked = layers.apply_masks({'params': optax.apply_updates(params, updates),
                                   'batch_stats': batch_stats}, out_masks)
      new = loss_scale.undo_if_skipped(new_opt_state, opt_state,
                                       (masked['params'], masked['batch_stats']),
                                       (params, old_stats))
      return (*new, new_opt_state), terms

    start_opt_state = loss_scale.with_scale(optimizer.init(start['params']),
                                            private.get('loss_scale'))
    carry = (start['params'], start['batch_stats'], start_opt_state)
    (params, batch_stats, opt_state), terms = local.run_steps(
        local.skip_if_empty(step), carry, fedgpad.step_inputs(data, rng), mode=step_mode)
    # The held layers' running statistics stay the server's.
    trained = layers.select_layers(held, start, {'params': params, 'batch_stats': batch_stats})
    metrics = {**fedgpad.loss_metrics(terms, data['mask'], weights),
               **loss_scale.round_metrics(start_opt_state, opt_state)}
    own = {'model': trained, **common.kept_loss_scale(private, opt_state)}
    # What crosses: every layer the server does not already hold.
    return ClientResult(update=layers.select_layers(held, zeros, trained), private=own,
                        metrics=metrics)

  def match_branch(index, server, updates, client_weights, client_ids, rng):
    values = layers.layer_variables(updates, index)
    template = layers.layer_variables(server['model'], index)
    shapes = (jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), template),
              jax.ShapeDtypeStruct(server['masks'][index].shape, jnp.float32),
              jax.ShapeDtypeStruct((len(client_ids), max_cap), jnp.int32))
    seed = jax.random.randint(rng, (), 0, np.iinfo(np.int32).max)
    host = _host_match(index, cap_width, client_width, prior, c.iterations, c.estimate)
    layer, mask, assign = jax.pure_callback(host, shapes, values, client_weights, seed)
    masks = tuple(mask if i == index else m for i, m in enumerate(server['masks']))
    return {'model': layers.with_layer(server['model'], index, layer), 'masks': masks,
            'assign': server['assign'].at[client_ids].set(assign, mode='drop')}

  def average_outputs(server, updates, client_weights, client_ids, rng):
    del client_ids, rng
    mean = aggregation.weighted_mean(updates, client_weights)
    model = server['model']
    for index in range(L, len(layers.LAYERS)):
      model = layers.with_layer(model, index, layers.layer_variables(mean, index))
    return {**server, 'model': model}

  def average_all(server, updates, client_weights, client_ids, rng):
    del client_ids, rng
    mean = aggregation.weighted_mean(updates, client_weights)
    return {**server, 'model': layers.apply_masks(mean, server['masks'])}

  def server_update(server, updates, client_weights, client_ids, round_index, rng):
    branches = [functools.partial(match_branch, index) for index in range(L)]
    branches += [average_outputs, average_all]
    return jax.lax.switch(jnp.clip(round_index, 0, L + 1), branches, server, updates,
                          client_weights, client_ids, rng)

  def summary(state: RoundState) -> dict:
    """Each matched layer's global width (its active channels), in `layers.MATCHED` order."""
    return {'widths': [int(np.asarray(mask).sum()) for mask in state.server['masks']]}

  return Algorithm(name='fedma', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update,
                   eval_variables=lambda server: server['model'],
                   class_embeddings=lambda state: None, summary=summary)
