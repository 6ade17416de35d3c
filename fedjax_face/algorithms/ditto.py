"""Ditto: a global model trained by FedAvg, and on each client a personal model kept near it
(Li, Hu, Beirami & Smith, "Ditto: Fair and Robust Federated Learning Through Personalization",
ICML 2021, its Algorithm 1).

Client k solves, beside the federated objective G(F_1(w), ..., F_K(w)) of the global model w,

    min_{v_k}  h_k(v_k; w) = F_k(v_k) + lambda/2 ||v_k - w||^2              (Ditto's objective)

Algorithm 1, one round t, for each selected client k:
  * the global model's local solver (here FedAvg's local SGD, as FedPE's clients run it):
    w_k^t from the received w^t over the client's steps;
  * the personal model, over the same steps and samples:
        v_k <- v_k - eta (grad F_k(v_k) + lambda (v_k - w^t))      (Alg. 1, personal update)
    the anchor w^t is the model received at the start of the round, not w_k^t;
  * sends w_k^t (Alg. 1, Delta_k = w_k^t - w^t); v_k never leaves the client.
The server averages what it received (Alg. 1, aggregation) and keeps nothing per client.
The comments name Algorithm 1's steps rather than its line or equation numbers, which were not
checked against the paper's text here.

Readings for face recognition (this package's setting; docs/personalization.md):
  * A client's model is its backbone with its own class embeddings W_k, which are private in
    every method here (FedPE): w is FedPE's model, the backbone theta averaged, W_k kept. The
    personal model v_k is a whole copy, backbone and class rows (theta_v, W_v), and h_k's
    proximal term acts on both, towards (theta^t, W_k^t), the client's model as the round starts.
    The personalized evaluation (FedFR's protocol) embeds with theta_v alone.
  * BatchNorm running statistics are no parameters: the personal model keeps its own (from its
    own forward passes); the global model's are averaged with its parameters, as FedPE's.
  * Algorithm 1 writes plain SGD; the term lambda (v - w^t) is added to the gradient before the
    setting's weight decay and momentum (`optimizer`), as FedProx's is here
    (core/local_terms.py). With momentum 0 and weight decay 0 this is Alg. 1's update exactly
    (tests/algorithms/test_ditto_apfl.py checks it by hand on a quadratic).
  * v_k^0: the starting model (the pre-trained one under `config.init_from`), as the authors'
    code starts every personal model from the initial global model (litian96/ditto,
    flearn/trainers_MTL/ditto.py). The personal steps see the global steps' samples and flips,
    as that code trains both on one batch.
  * Alg. 1's aggregation averages the updates uniformly over S_t; here by n_k, as every method
    of this package (`aggregation.weighted_mean`). FedFR's setting deals every client the same
    number of images, so the two agree there.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face.algorithms import common
from fedjax_face.core import aggregation, checks, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import sources

ONE_CLIENT = False


def config_section() -> ml_collections.ConfigDict:
  """`config.ditto` (configs/fedfr/ditto.py)."""
  c = ml_collections.ConfigDict()
  # lambda of h_k: one of the paper's grid {0.01, 0.1, 1, 2}; 0 trains each personal model on
  # its own data alone (from the starting model).
  c.lam = 0.1
  return c


def check_recognition(config, method: str) -> None:
  """Refuses an anti-spoofing source in one line: the method trains with the face-recognition
  heads' losses here."""
  if sources.task_of(config) != 'recognition':
    raise ValueError(f'config.data.source={config.data.source!r}; {method} trains a face '
                     'recognition backbone here: expected a recognition source '
                     f'{sources.of_task("recognition")}.')


def check_config(config) -> None:
  check_recognition(config, 'ditto')
  c = checks.section(config, 'ditto', 'ditto.config_section() (configs/fedfr/ditto.py)')
  checks.check_number('ditto.lam', c.lam, allow_zero=True)


def variant_name(config) -> str:
  del config
  return 'ditto'


class ProximalState(NamedTuple):
  """The anchor of the proximal term: the parameters the optimizer was initialised from."""
  anchor: optax.Params


def proximal_term(lam: float) -> optax.GradientTransformation:
  """g <- g + lam (params - anchor), the gradient of lam/2 ||params - anchor||^2 (h_k), with the
  anchor the parameters `init` was given: initialise from w^t, then update v_k."""

  def init(params):
    return ProximalState(anchor=params)

  def update(grads, state, params=None):
    if params is None:
      raise ValueError("Ditto's proximal term needs the parameters: optimizer.update(grads, "
                       'state, params).')
    pulled = jax.tree.map(lambda g, p, a: g + (lam * (p - a)).astype(g.dtype),
                          grads, params, state.anchor)
    return pulled, state

  return optax.GradientTransformation(init, update)


def uncorrected_optimizer(config) -> optax.GradientTransformation:
  """The setting's local optimizer without the federated blocks' FedProx / SCAFFOLD term: a
  personal model is not averaged, so no block's correction belongs on it."""
  opt = ml_collections.ConfigDict(config.optimizer.to_dict())
  if 'correction' in opt:
    opt.correction = 'none'
  return common.make_optimizer(opt)


def personal_optimizer(lam: float, base: optax.GradientTransformation):
  """Alg. 1's personal update: the proximal term first, then `base` (the setting's SGD)."""
  return optax.chain(proximal_term(lam), base)


def _client_update(train_global, train_personal, client_input: ClientInput, private, data,
                   rng) -> ClientResult:
  received = client_input.shared['model']
  lr_scale = client_input.shared.get('lr_scale')
  # The global model's local solver: FedAvg's local SGD from w^t (FedPE's client).
  w_model, w_rows, _, metrics = train_global(received, private['W'], data, rng,
                                             lr_scale=lr_scale)
  # The anchor w^t = (theta^t, W_k^t): the optimizer is initialised from it (`proximal_term`).
  anchored = train_personal.init_opt_state(received, private['W'])
  personal = private['personal']
  v_model, v_rows, _, personal_metrics = train_personal(personal['model'], personal['W'], data,
                                                        rng, anchored, lr_scale=lr_scale)
  return ClientResult(update={'model': w_model},                        # Alg. 1: Delta_k
                      private={'W': w_rows, 'personal': {'model': v_model, 'W': v_rows}},
                      metrics={**metrics, 'personal_loss': personal_metrics['train_loss']})


def _personalized(apply, state: RoundState):
  """Client k's personal backbone theta_v (its class rows are not needed to embed)."""
  def for_client(k: int):
    variables = jax.tree.map(lambda x: x[k], state.clients['personal']['model'])
    return lambda images: apply(variables, images)
  return for_client


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """Ditto over the partition `fed` (a `data.federated.FederatedData`)."""
  head_kwargs = common.head_kwargs(config)
  train_global = common.local_trainer(model, head_kwargs=head_kwargs,
                                      optimizer=common.make_optimizer(config.optimizer),
                                      step_mode=step_mode)
  train_personal = common.local_trainer(
      model, head_kwargs=head_kwargs, step_mode=step_mode,
      optimizer=personal_optimizer(float(config.ditto.lam), uncorrected_optimizer(config)))
  lr_schedule = common.lr_scale_schedule(config)

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method='ditto')
    stack = lambda x: jnp.broadcast_to(x, (fed.num_clients,) + x.shape)
    personal = {'model': jax.tree.map(stack, variables), 'W': w}   # v_k^0 = w^0
    return RoundState(server={'model': variables}, clients={'W': w, 'personal': personal},
                      round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng  # every client receives w^t
    return ClientInput(shared=common.with_lr_scale({'model': server['model']}, lr_schedule,
                                                   round_index), per_client={})

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del server, client_ids, round_index, rng
    return {'model': aggregation.weighted_mean(updates['model'], weights)}   # Alg. 1: aggregation

  identity_table = np.asarray(fed.identity_table)

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  # Jitted once per run: the personal models are evaluated client by client.
  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  return Algorithm(name='ditto', init=init, broadcast=broadcast,
                   client_update=functools.partial(_client_update, train_global, train_personal),
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   personalized=functools.partial(_personalized, apply),
                   update_origin=lambda ci: origin_by_key(ci, ('model',)))
