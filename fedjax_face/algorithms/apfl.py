"""APFL: each client mixes a personal model with the global one, alpha learned on its own data
(Deng, Kamani & Mahdavi, "Adaptive Personalized Federated Learning", 2020, its Algorithm 1 and
its adaptive alpha).

Client i holds the local copy w_i of the global model, a personal model v_i and a mixing weight
alpha_i in [0, 1]; its personalized model is the mixed model

    v_bar_i = alpha_i v_i + (1 - alpha_i) w_i

Every local step t, on one sample xi (Algorithm 1):
    w_i <- w_i - eta grad f_i(w_i; xi)                                            (w step)
    v_i <- v_i - eta grad_v f_i(v_bar_i; xi),  grad_v = alpha_i grad f_i(v_bar_i)  (v step)
    alpha_i <- P_[0,1](alpha_i - eta grad_alpha f_i(v_bar_i; xi)),
        grad_alpha = <v_i - w_i, grad f_i(v_bar_i)>                                (adaptive alpha)
all three at the values before the step; P_[0,1] projects onto the set alpha lives in. At the
round's end w_i is sent and averaged (the synchronisation); v_i and alpha_i never leave the
client. `mixing_gradients` is the autodiff of f(alpha v + (1 - alpha) stop_gradient(w)) in
(v, alpha), which is exactly the two gradients above (tests/algorithms/test_ditto_apfl.py checks
them by hand on a quadratic). The comments name Algorithm 1's steps rather than its line or
equation numbers, which were not checked against the paper's text here.

Readings for face recognition (docs/personalization.md):
  * A client's model is its backbone with its own class rows; w_i is FedPE's (theta averaged,
    W_i kept on the client), v_i a whole personal copy (theta_v, W_v), and the mix takes both
    parts. The personalized evaluation embeds with the mixed backbone
    alpha_i theta_v + (1 - alpha_i) theta, theta the global one (the output v_bar_i^T of
    Algorithm 1 is taken at a synchronisation, where w_i is the average).
  * BatchNorm running statistics are no parameters and are not mixed: the global model's are
    averaged with it (as FedPE's); the personalized model keeps the ones of its own (mixed)
    forward passes, and evaluates with them.
  * Algorithm 1 writes plain SGD. v and w step with the setting's optimizer (`optimizer`: weight
    decay, momentum; fresh each round; a federated block's FedProx / SCAFFOLD term on w only),
    alpha with plain SGD at `apfl.alpha_learning_rate` (the paper uses one eta_t for all three:
    the default is the FedFR setting's rate).
  * The paper mixes parameters. The authors' code (MLOPTPSU/FedTorch) mixes the two models'
    outputs instead (fedtorch/comms/utils/eval.py, `inference_personal`), and its alpha step
    (fedtorch/comms/utils/flow_utils.py, `alpha_update`) runs once per round and adds 0.02 alpha
    to the gradient. Neither is done here.
  * alpha_i^0 = `apfl.alpha_init` (0.5, FedTorch's default `--fed_personal_alpha`); a fixed
    alpha (0.25 / 0.5 / 0.75, configs/fedfr/apfl.py:alpha=) with `apfl.adaptive_alpha=False`.
    v_i^0 = w^0, the starting model (the pre-trained one under `config.init_from`).

Anti-spoofing (configs/pad/apfl.py): each data center's model is FedPAD's detector, trained on
FedPAD's loss (`personal_training.detector_model`), mixed as a whole; the whole shared detector
crosses, the personal detector and alpha stay, and the 'pad' evaluator scores each center's
held-out subjects with its mixed detector ('in_domain_personal') and the unseen target with the
shared one. alpha steps at the setting's rate there (configs/pad/apfl.py). The server weights by
frame counts n_k, where FedPAD averages its data centers uniformly (`fedgpad.weighting`).
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import optax

from fedjax_face.algorithms import common, ditto, personal_training
from fedjax_face.core import checks, loss_scale
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState

ONE_CLIENT = False


def config_section() -> ml_collections.ConfigDict:
  """`config.apfl` (configs/fedfr/apfl.py, configs/pad/apfl.py)."""
  c = ml_collections.ConfigDict()
  c.alpha_init = 0.5                # alpha_i^0 (FedTorch's default)
  c.adaptive_alpha = True           # the adaptive alpha step; False keeps alpha_i = alpha_init
  c.alpha_learning_rate = 0.001     # eta of the alpha step (the FedFR setting's rate)
  return c


def check_config(config) -> None:
  personal_training.check_task(config, 'apfl')
  c = checks.section(config, 'apfl', 'apfl.config_section() (configs/fedfr/apfl.py)')
  checks.check_fraction('apfl.alpha_init', c.alpha_init, closed_below=True)
  checks.check_bool('apfl.adaptive_alpha', c.adaptive_alpha)
  checks.check_number('apfl.alpha_learning_rate', c.alpha_learning_rate, allow_zero=True)


def variant_name(config) -> str:
  """'apfl' with the adaptive alpha, 'apfl-alpha<alpha_init>' with a fixed one."""
  c = config.apfl
  return 'apfl' if c.adaptive_alpha else f'apfl-alpha{c.alpha_init:g}'


def mix(v, w, alpha):
  """alpha v + (1 - alpha) w, leaf by leaf: the mixed model."""
  return jax.tree.map(lambda a, b: (alpha * a + (1.0 - alpha) * b).astype(a.dtype), v, w)


def mixing_gradients(loss_fn, v, w, alpha, state, batch, v_opt_state=None):
  """((loss, new_state), (grad_v, grad_alpha)) of f(alpha v + (1 - alpha) w) with w held fixed:
  grad_v = alpha grad f(v_bar), grad_alpha = <v - w, grad f(v_bar)> (the v step, adaptive alpha).
  `loss_fn(params, state, batch) -> (loss, new_state)`. Under loss scaling (`v_opt_state` a
  `loss_scale.scaled_optimizer`'s) both gradients come from one backward pass at v's scale."""
  def mixed_loss(v, alpha):
    return loss_fn(mix(v, jax.lax.stop_gradient(w), alpha), state, batch)
  if not loss_scale.is_scaled(v_opt_state):
    return jax.value_and_grad(mixed_loss, argnums=(0, 1), has_aux=True)(v, alpha)
  return loss_scale.value_and_grad_of(lambda va: mixed_loss(*va), has_aux=True)(
      v_opt_state, (v, alpha))


def local_step(loss_fn, w_optimizer: optax.GradientTransformation,
               v_optimizer: optax.GradientTransformation, alpha_learning_rate: float,
               adaptive: bool):
  """One step of Algorithm 1 on `batch`: `step(carry, batch) -> (carry, (loss_w, loss_v_bar))`,
  `carry = (w, w_state, w_opt, v, v_state, v_opt, alpha)`; `batch['lr_scale']` scales the three
  rates (`common.lr_scale_schedule`)."""

  apply = personal_training.apply_update

  def step(carry, batch):
    w, w_state, w_opt, v, v_state, v_opt, alpha = carry
    scale = batch['lr_scale']
    (loss_w, new_w_state), grad_w = personal_training.value_and_grad(loss_fn, w_opt, w, w_state,
                                                                     batch)
    (loss_v, new_v_state), (grad_v, grad_alpha) = mixing_gradients(loss_fn, v, w, alpha, v_state,
                                                                    batch, v_opt)
    new_w, new_w_opt = apply(w_optimizer, w, w_opt, grad_w, scale)     # w step
    new_v, new_v_opt = apply(v_optimizer, v, v_opt, grad_v, scale)     # v step
    new_alpha = alpha
    if adaptive:                                                       # adaptive alpha, projected
      new_alpha = jnp.clip(alpha - alpha_learning_rate * scale * grad_alpha, 0.0, 1.0)
    # Under loss scaling an overflowed step keeps its model's statistics (and, for v, alpha,
    # whose gradient came from the same backward pass) as they were (core/loss_scale.py).
    new_w_state = loss_scale.undo_if_skipped(new_w_opt, w_opt, new_w_state, w_state)
    new_v_state, new_alpha = loss_scale.undo_if_skipped(new_v_opt, v_opt,
                                                        (new_v_state, new_alpha),
                                                        (v_state, alpha))
    return (new_w, new_w_state, new_w_opt, new_v, new_v_state, new_v_opt, new_alpha), (loss_w, loss_v)

  return step


def _client_update(task, step, optimizers, step_mode, client_input: ClientInput, private, data,
                   rng) -> ClientResult:
  received = client_input.shared['model']
  personal = private['personal']
  w_optimizer, v_optimizer = optimizers
  w = task.pack(received, private.get('W'))
  # Both optimizers start afresh every round; w's from the very arrays received, so that a
  # federated block's FedProx / SCAFFOLD term ties to them (core/local_terms.py).
  start_w_opt, start_v_opt = personal_training.start_scales(
      private, w_optimizer.init(w), v_optimizer.init(personal['params']))
  carry = (w, received.get('batch_stats', {}), start_w_opt, personal['params'],
           personal['batch_stats'], start_v_opt, private['alpha'])
  # One sample xi for the three updates of a step (Algorithm 1): the step's rng draws its flips.
  (w, w_state, w_opt, v, v_state, v_opt, alpha), (loss_w, loss_v) = personal_training.run_round(
      step, carry, task.step_inputs(data, rng), client_input.shared.get('lr_scale'), step_mode)
  kept = {'alpha': alpha, 'personal': {'params': v, 'batch_stats': v_state},
          **personal_training.end_scales(w_opt, v_opt)}
  if task.recognition:
    kept['W'] = w['W']
  return ClientResult(update={'model': task.variables(w, w_state)},     # synchronisation
                      private=kept,
                      metrics={'train_loss': personal_training.mean_over_steps(loss_w,
                                                                              data['mask']),
                               'personal_loss': personal_training.mean_over_steps(
                                   loss_v, data['mask']),
                               'alpha': alpha,
                               **personal_training.scaling_metrics(start_w_opt, w_opt),
                               **personal_training.scaling_metrics(start_v_opt, v_opt,
                                                                   'personal_')})


def _personalized(task, state: RoundState):
  """Client k's mixed model v_bar = alpha_k v_k + (1 - alpha_k) w, w the averaged model (with
  the client's own class rows on recognition), and the personal BatchNorm statistics."""
  def for_client(k: int):
    personal = jax.tree.map(lambda x: x[k], state.clients['personal'])
    rows = state.clients['W'][k] if task.recognition else None
    w = task.pack(state.server['model'], rows)
    alpha = jnp.asarray(state.clients['alpha'][k], jnp.float32)
    variables = task.variables(mix(personal['params'], w, alpha), personal['batch_stats'])
    return lambda images: task.predict(variables, images)
  return for_client


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """APFL over the partition `fed` (a `data.federated.FederatedData`): a recognition client's
  backbone and class rows, or a data center's detector."""
  c = config.apfl
  task = personal_training.local_model(config, model, fed)
  # w's optimizer is the global model's (a block's correction applies to it); v's is not averaged.
  optimizers = personal_training.scaled_optimizers(
      model, (common.make_optimizer(config.optimizer), ditto.uncorrected_optimizer(config)))
  step = local_step(task.loss, *optimizers, float(c.alpha_learning_rate), bool(c.adaptive_alpha))
  lr_schedule = common.lr_scale_schedule(config)

  def init(rng, start=None):
    variables, rows = personal_training.initial(config, model, fed, task, rng, start, 'apfl')
    personal = personal_training.personal_start(task, variables, rows, fed.num_clients)
    alpha = jnp.full((fed.num_clients,), c.alpha_init, jnp.float32)
    clients = {'personal': personal, 'alpha': alpha,
               **personal_training.initial_scales(model, fed.num_clients)}
    return personal_training.initial_state(variables, rows, clients, task)

  # The server's step is the synchronisation of w (`personal_training.global_model_algorithm`).
  return personal_training.global_model_algorithm(
      'apfl', task, fed, lr_schedule, init,
      functools.partial(_client_update, task, step, optimizers, step_mode),
      functools.partial(_personalized, task))
