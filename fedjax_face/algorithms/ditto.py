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

Readings for face recognition (FedFR's setting; docs/personalization.md):
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
    flearn/trainers_MTL/fedbase.py). The personal steps see the global steps' samples and flips,
    as that code (flearn/trainers_MTL/ditto.py) trains both on one batch.
  * Alg. 1's aggregation averages the updates uniformly over S_t; here by n_k, as every method
    of this package (`aggregation.weighted_mean`). FedFR's setting deals every client the same
    number of images, so the two agree there.

Anti-spoofing (configs/pad/ditto.py): each data center's model is FedPAD's detector, trained on
FedPAD's loss (`personal_training.detector_model`); the whole detector crosses, the personal
detector stays, and the 'pad' evaluator scores each center's held-out subjects with its personal
detector ('in_domain_personal') and the unseen target with the shared one. The server weights by
frame counts n_k, where FedPAD averages its data centers uniformly (`fedgpad.weighting`).
"""

import functools
from typing import NamedTuple

import jax
import ml_collections
import optax

from fedjax_face.algorithms import common, personal_training
from fedjax_face.core import checks, loss_scale
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

ONE_CLIENT = False


def config_section() -> ml_collections.ConfigDict:
  """`config.ditto` (configs/fedfr/ditto.py, configs/pad/ditto.py)."""
  c = ml_collections.ConfigDict()
  # lambda of h_k: one of the paper's grid {0.01, 0.1, 1, 2}; 0 trains each personal model on
  # its own data alone (from the starting model).
  c.lam = 0.1
  return c


def check_config(config) -> None:
  personal_training.check_task(config, 'ditto')
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


def local_step(loss_fn, w_optimizer: optax.GradientTransformation,
               v_optimizer: optax.GradientTransformation):
  """One step of Algorithm 1 on `x` for both models: `step(carry, x) -> (carry, (loss_w,
  loss_v))`, `carry = (w, w_state, w_opt, v, v_state, v_opt)`; `v_opt` was initialised from
  w^t (`personal_optimizer`), `x['lr_scale']` scales both rates. `loss_fn(params, state, x) ->
  (loss, new_state)`."""

  def step(carry, x):
    w, w_state, w_opt, v, v_state, v_opt = carry
    (loss_w, new_w_state), grad_w = personal_training.value_and_grad(loss_fn, w_opt, w, w_state,
                                                                     x)
    (loss_v, new_v_state), grad_v = personal_training.value_and_grad(loss_fn, v_opt, v, v_state,
                                                                     x)
    # The global model's local solver: FedAvg's local SGD from w^t.
    new_w, new_w_opt = personal_training.apply_update(w_optimizer, w, w_opt, grad_w,
                                                      x['lr_scale'])
    # Alg. 1's personal update: grad F_k(v) + lambda (v - w^t), then the setting's SGD.
    new_v, new_v_opt = personal_training.apply_update(v_optimizer, v, v_opt, grad_v,
                                                      x['lr_scale'])
    # Under loss scaling an overflowed model's step keeps its statistics too (core/loss_scale.py).
    new_w_state = loss_scale.undo_if_skipped(new_w_opt, w_opt, new_w_state, w_state)
    new_v_state = loss_scale.undo_if_skipped(new_v_opt, v_opt, new_v_state, v_state)
    return (new_w, new_w_state, new_w_opt, new_v, new_v_state, new_v_opt), (loss_w, loss_v)

  return step


def _client_update(task, step, optimizers, step_mode, client_input: ClientInput, private, data,
                   rng) -> ClientResult:
  received = client_input.shared['model']
  w_optimizer, v_optimizer = optimizers
  w = task.pack(received, private.get('W'))
  personal = private['personal']
  # w's optimizer starts from the very arrays received (a block's FedProx / SCAFFOLD term ties
  # to them, core/local_terms.py); v's from w^t too: that is the proximal term's anchor.
  start_w_opt, start_v_opt = personal_training.start_scales(private, w_optimizer.init(w),
                                                            v_optimizer.init(w))
  carry = (w, received.get('batch_stats', {}), start_w_opt,
           personal['params'], personal['batch_stats'], start_v_opt)
  (w, w_state, w_opt, v, v_state, v_opt), (loss_w, loss_v) = personal_training.run_round(
      step, carry, task.step_inputs(data, rng), client_input.shared.get('lr_scale'), step_mode)
  kept = {'personal': {'params': v, 'batch_stats': v_state},
          **personal_training.end_scales(w_opt, v_opt)}
  if task.recognition:
    kept['W'] = w['W']
  return ClientResult(update={'model': task.variables(w, w_state)},    # Alg. 1: Delta_k
                      private=kept,
                      metrics={'train_loss': personal_training.mean_over_steps(loss_w,
                                                                              data['mask']),
                               'personal_loss': personal_training.mean_over_steps(
                                   loss_v, data['mask']),
                               **personal_training.scaling_metrics(start_w_opt, w_opt),
                               **personal_training.scaling_metrics(
                                   start_v_opt, v_opt, 'personal_')})


def _personalized(task, state: RoundState):
  """Client k's personal model v_k (on recognition its backbone: the class rows do not embed)."""
  def for_client(k: int):
    personal = jax.tree.map(lambda x: x[k], state.clients['personal'])
    variables = task.variables(personal['params'], personal['batch_stats'])
    return lambda images: task.predict(variables, images)
  return for_client


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """Ditto over the partition `fed` (a `data.federated.FederatedData`): a recognition client's
  backbone and class rows, or a data center's detector."""
  task = personal_training.local_model(config, model, fed)
  optimizers = personal_training.scaled_optimizers(model, (
      common.make_optimizer(config.optimizer),
      personal_optimizer(float(config.ditto.lam), uncorrected_optimizer(config))))
  step = local_step(task.loss, *optimizers)
  lr_schedule = common.lr_scale_schedule(config)

  def init(rng, start=None):
    variables, rows = personal_training.initial(config, model, fed, task, rng, start, 'ditto')
    personal = personal_training.personal_start(task, variables, rows, fed.num_clients)
    clients = {'personal': personal,
               **personal_training.initial_scales(model, fed.num_clients)}
    return personal_training.initial_state(variables, rows, clients, task)

  # The server's step is Alg. 1's aggregation of w (`personal_training.global_model_algorithm`).
  return personal_training.global_model_algorithm(
      'ditto', task, fed, lr_schedule, init,
      functools.partial(_client_update, task, step, optimizers, step_mode),
      functools.partial(_personalized, task))
