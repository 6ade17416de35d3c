"""FedGPAD and FedPAD (Shao, Perera, Yuen, Patel, "Federated Generalized Face Presentation Attack
Detection", TNNLS): data centers train a live / attack detector together without sharing data.

FedPAD (Alg. 1): each data center trains the detector on its own frames and the server averages
every parameter (Eq. 3). The detector is the paper's ResNet-18 (`model.name='pad_resnet18'`, the
default: §IV-A4) trained with the cross-entropy of Eq. 1 (the same as Eq. 4), or, as the named
variant `backbone=pad_net` of configs/pad/fedpad.py, EI, C and the depth head Dep of the Table II
network (`model.disentangle=False`) with Eq. 4 + Eq. 5, so that it differs from FedGPAD in the
disentanglement alone.

FedGPAD (Alg. 2): each data center also has a domain-specific extractor ES and a decoder Dec
(`model.disentangle=True`) and minimises Eq. 8, the weighted sum of Cls (Eq. 4), Dep (Eq. 5), Rec
(Eq. 6) and Diff (Eq. 7) (`algorithms/pad_losses.py`). Only EI, C and Dep are sent and averaged
(Eq. 10); ES and Dec stay in the data center (`RoundState.clients`) from round to round.

Readings:
  * Eq. 9 updates each part with the gradient of the loss terms that contain it (EI: all of Eq.
    8; C: Cls; Dep: Dep; ES: Rec + Diff; Dec: Rec). These are exactly the partial derivatives of
    the Eq. 8 total, since no other term contains the part, so one optimizer step on the total
    is Eq. 9. The term weights (`fedgpad.loss_weights`, the authors' code: cls 1, depth 10, diff
    1, rec 0.1) scale each part's gradient; Adam, the authors' optimizer, is insensitive to that
    scale.
  * Eq. 3 / 10 average uniformly over the data centers, as the paper writes them
    (`fedgpad.weighting='uniform'`); 'examples' weights by frame counts as FedAvg does.
  * The authors run one local step per round with a fresh Adam (lr 1e-2) and batches of 16 live +
    16 attack frames: `federated.local_steps=1`, `optimizer.name='adam'`, the optimizer created
    afresh each round, `federated.balanced_classes=True`, batch 32 in configs/pad/.
  * Subject-level DP-SGD inside each data center (`fedgpad.dp_sgd`, which configs/pad/dp_sgd.py
    adds; absent or off elsewhere): batches drawn by subject, each subject's gradient of Eq. 8 on its own frames clipped, the sum noised, BN
    frozen (algorithms/pad_dp_sgd.py); results.json's 'method_state' holds its ε.
  * Live = an odd local class (a data center's classes are [attack, live]; the pooled 'All'
    client's are [attack, live] of each data center in turn); the depth
    target is the frame's pseudo-depth map (zeros for attacks), resized to the depth head's size.
"""

import jax
import jax.numpy as jnp
import ml_collections
import optax

from fedjax_face.algorithms import common, pad_dp_sgd, pad_losses
from fedjax_face.core import aggregation, checks, local, loss_scale
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.data import preprocess, sources
from fedjax_face.models import pad as pad_model

ONE_CLIENT = False
SECTION = 'fedgpad'   # config.fedgpad for FedPAD too (`config_section`'s name; default: the method's)
# `federated.client_optimizer_state='keep'`: a data center's Adam state persists between rounds
# (All, one client holding every data center, is then plain centralized Adam: configs/pad/all.py).
KEEPS_CLIENT_OPTIMIZER = True
SHARED_PARTS = ('invariant', 'classifier', 'depth')   # Eq. 10: what the server averages
PRIVATE_PARTS = ('specific', 'decoder')               # never leave the data center
SPECIFIC_INITS = ('independent', 'copy_of_invariant')  # config.fedgpad.specific_init
WEIGHTINGS = ('uniform', 'examples')
# The networks each method trains: FedGPAD's Table II network; FedPAD's ResNet-18 (the paper's,
# §IV-A4: the default) or the Table II network without ES and Dec (the project's first FedPAD).
MODELS = {'fedgpad': ('pad_net',), 'fedpad': ('pad_resnet18', 'pad_net')}


def config_section() -> ml_collections.ConfigDict:
  """`config.fedgpad` (configs/pad/fedgpad.py and fedpad.py)."""
  c = ml_collections.ConfigDict()
  c.loss_weights = ml_collections.ConfigDict(dict(pad_losses.LOSS_WEIGHTS))
  c.weighting = 'uniform'   # Eq. 3 / 10: the data centers' mean | 'examples' (FedAvg's n_k)
  # How each data center's ES starts. The paper does not say; 'independent' (ours) draws it
  # apart from EI, 'copy_of_invariant' starts it as a copy of EI, as the authors' code does
  # (`copy.deepcopy(FeatExt)` in core/train_FedAvgDep.py), so Diff starts near zero.
  c.specific_init = 'independent'
  # Subject-level DP-SGD's section `dp_sgd` (pad_dp_sgd.config_section()) is added by
  # configs/pad/dp_sgd.py alone, so that the PAD configs (and their workdirs' config.json) stay
  # as they were.
  return c


def check_config(config) -> None:
  c = checks.section(config, 'fedgpad', 'fedgpad.config_section() (configs/pad/)')
  checks.check_choice('fedgpad.weighting', c.weighting, WEIGHTINGS)
  checks.check_choice('fedgpad.specific_init', c.specific_init, SPECIFIC_INITS)
  if set(c.loss_weights) != set(pad_losses.LOSS_WEIGHTS):
    raise ValueError(f'config.fedgpad.loss_weights has {sorted(c.loss_weights)}; expected '
                     f'{sorted(pad_losses.LOSS_WEIGHTS)}.')
  for name, value in c.loss_weights.items():
    checks.check_number(f'fedgpad.loss_weights.{name}', value, allow_zero=True)
  if sources.get(config.data.source).TASK != 'anti_spoofing':
    raise ValueError(f"config.data.source={config.data.source!r}; {config.algorithm} trains a "
                     "presentation-attack detector: expected an anti-spoofing source "
                     f"{sources.of_task('anti_spoofing')}.")
  m = config.model
  names = MODELS[config.algorithm]
  if m.name not in names:
    raise ValueError(f'config.model.name={m.name!r} with {config.algorithm}; expected one of '
                     f'{names} (models/pad.py).')
  if m.image_size != config.data.image_size:
    raise ValueError(f'config.model.image_size={m.image_size} but data.image_size='
                     f'{config.data.image_size}; expected the same.')
  expected = config.algorithm == 'fedgpad'
  if m.name == 'pad_net' and m.disentangle != expected:
    raise ValueError(f'config.model.disentangle={m.disentangle!r} with {config.algorithm}: '
                     f'expected {expected} ({"ES and Dec" if expected else "no ES or Dec"}).')
  if 'dp_sgd' in c:
    pad_dp_sgd.check_config(config)


def variant_name(config) -> str:
  w = config.fedgpad.loss_weights
  dropped = [name for name in ('depth', 'rec', 'diff') if name in w and not w[name]]
  d = config.fedgpad.get('dp_sgd')
  private = f'+dp_sgd-{d.clip_unit}' if d is not None and d.enabled else ''
  return config.algorithm + ''.join(f'-no_{name}' for name in dropped) + private


def _split(tree: dict, parts) -> dict:
  """The top-level entries of `tree` named in `parts` (a variables collection's parts)."""
  return {k: v for k, v in tree.items() if k in parts}


def _variables(shared: dict, private: dict) -> dict:
  """Model variables from the shared parts and a data center's own."""
  out = {}
  for collection in ('params', 'batch_stats'):
    merged = {**shared.get(collection, {}), **private.get(collection, {})}
    if merged:
      out[collection] = merged
  return out


def _parts(variables: dict, parts) -> dict:
  return {collection: _split(tree, parts) for collection, tree in variables.items()
          if _split(tree, parts)}


def training_batch(batch: dict) -> dict:
  """A data center's step batch as the PAD losses take it: frames and depth maps flipped together
  at random, RGB + HSV inputs, live = an odd local class."""
  images = preprocess.random_flip(batch['rng'], batch['images'])
  depth = preprocess.random_flip(batch['rng'], batch['depth'][..., None])[..., 0]
  return {'inputs': preprocess.rgb_hsv(images), 'depth': depth,
          'live': batch['labels'] % 2 == 1, 'mask': batch['mask']}


def step_inputs(data: dict, rng) -> dict:
  """The local steps' inputs `[steps, ...]` (`training_batch`'s fields) of a round's data, and
  each frame's subject slot when the batches were drawn by subject (DP-SGD)."""
  num_steps = data['images'].shape[0]
  subject = ({'subject': data['targets']['subject']} if 'subject' in data['targets'] else {})
  return {'images': data['images'], 'labels': data['labels'], 'mask': data['mask'],
          'depth': data['targets']['depth'], 'rng': jax.random.split(rng, num_steps), **subject}


def loss_metrics(terms: dict, mask, weights: dict) -> dict:
  """Each loss term's mean over the steps that had frames (`mask` [steps, batch]), and their
  weighted sum as 'train_loss'."""
  active = jnp.any(mask, axis=-1)
  mean = lambda x: jnp.sum(x * active) / jnp.maximum(active.sum(), 1)
  metrics = {f'loss_{k}': mean(v) for k, v in terms.items()}
  metrics['train_loss'] = sum(weights[k] * metrics[f'loss_{k}'] for k in terms)
  return metrics


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedGPAD (`model.disentangle`) or FedPAD over the data centers `fed` (clients)."""
  weights = dict(config.fedgpad.loss_weights)
  # Under float16 the loss scale lives in the optimizer's state: fresh each round, or the data
  # center's own with its kept Adam state (core/loss_scale.py). DP-SGD refuses float16.
  optimizer = common.scaled_for(model, common.make_optimizer(config.optimizer))
  lr_schedule = common.lr_scale_schedule(config)
  private_parts = PRIVATE_PARTS if model.disentangle else ()
  keep_opt_state = common.keeps_client_optimizer(config)
  uniform = config.fedgpad.weighting == 'uniform'
  image_shape = (config.data.image_size, config.data.image_size, pad_model.PAD_CHANNELS)
  dp = pad_dp_sgd.spec(config) if pad_dp_sgd.enabled(config) else None

  def init(rng, start=None):
    if start is not None:
      raise ValueError(f'config.init_from={config.init_from!r}: {config.algorithm} starts from '
                       'random weights (its data centers keep parts of the network the server '
                       "never holds); expected ''.")
    variables = common.init_backbone(model, rng, image_shape, train=True)
    if private_parts and config.fedgpad.specific_init == 'copy_of_invariant':
      variables = {name: {**tree, 'specific': tree['invariant']} if 'specific' in tree else tree
                   for name, tree in variables.items()}
    clients = {}
    if private_parts:   # every data center starts its own ES and Dec from the same draw
      clients = _parts(variables, private_parts)
    if keep_opt_state:   # over every trained parameter, shared and own
      clients = {**clients, 'opt_state': optimizer.init(variables['params'])}
    clients = jax.tree.map(lambda x: jnp.broadcast_to(x, (fed.num_clients,) + x.shape), clients)
    if not keep_opt_state:   # float16: the loss scale, kept apart from the fresh optimizer
      clients = {**clients, **common.initial_loss_scales(model, fed.num_clients)}
    return RoundState(server=_parts(variables, SHARED_PARTS), clients=clients,
                      round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng
    return ClientInput(shared=common.with_lr_scale({'model': server}, lr_schedule, round_index),
                       per_client={})

  def loss_fn(params, batch_stats, batch):
    variables = {'params': params, 'batch_stats': batch_stats}
    outputs, state = model.apply(variables, batch['inputs'], train=True, mutable=['batch_stats'])
    total, terms = pad_losses.total_loss(outputs, batch, weights)   # Eq. 8
    return total, (state['batch_stats'], terms)

  def step(carry, batch):
    params, batch_stats, opt_state = carry
    # Eq. 9: each part's partial derivative of Eq. 8.
    (_, (new_stats, terms)), grads = loss_scale.value_and_grad_of(loss_fn, has_aux=True)(
        opt_state, params, batch_stats, training_batch(batch))
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    if batch.get('lr_scale') is not None:
      updates = jax.tree.map(lambda u: u * batch['lr_scale'], updates)
    params, batch_stats = loss_scale.undo_if_skipped(
        new_opt_state, opt_state, (optax.apply_updates(params, updates), new_stats),
        (params, batch_stats))
    return (params, batch_stats, new_opt_state), terms

  def dp_step(carry, batch):
    """One DP-SGD step (core/dp_sgd.py, Alg. 1) on Eq. 8, each subject's loss on its own frames,
    BatchNorm frozen at the carried statistics."""
    params, batch_stats, opt_state = carry
    frames = training_batch(batch)

    def subject_loss(p, examples):
      outputs = model.apply({'params': p, 'batch_stats': batch_stats}, examples['inputs'],
                            train=False, disentangled=model.disentangle)
      return pad_losses.total_loss(outputs, examples, weights)   # Eq. 8 on one subject

    grads, terms, kept = pad_dp_sgd.private_gradient(
        subject_loss, params, frames, batch['subject'], jax.random.fold_in(batch['rng'], 1), dp)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if batch.get('lr_scale') is not None:
      updates = jax.tree.map(lambda u: u * batch['lr_scale'], updates)
    terms = pad_dp_sgd.step_terms(terms, kept, frames['mask'], batch['subject'], dp['subjects'])
    return (optax.apply_updates(params, updates), batch_stats, opt_state), terms

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    variables = _variables(client_input.shared['model'], private)
    params, batch_stats = variables['params'], variables.get('batch_stats', {})
    # A fresh optimizer every round (the authors' code), or the data center's own kept one.
    opt_state = private['opt_state'] if keep_opt_state else optimizer.init(params)
    opt_state = loss_scale.with_scale(opt_state, private.get('loss_scale'))
    carry, start_opt_state = (params, batch_stats, opt_state), opt_state
    xs = step_inputs(data, rng)
    lr_scale = client_input.shared.get('lr_scale')
    one_step = dp_step if dp else step
    run = (lambda c, b: one_step(c, {**b, 'lr_scale': lr_scale}))
    (params, batch_stats, opt_state), terms = local.run_steps(local.skip_if_empty(run), carry, xs,
                                                              mode=step_mode)
    trained = {'params': params, 'batch_stats': batch_stats}
    metrics = {**loss_metrics(terms, data['mask'], weights),
               **loss_scale.round_metrics(start_opt_state, opt_state)}
    kept = _parts(trained, private_parts) if private_parts else {}
    if keep_opt_state:
      kept['opt_state'] = opt_state
    kept.update(common.kept_loss_scale(private, opt_state))
    return ClientResult(update=_parts(trained, SHARED_PARTS),              # Eq. 10's parts
                        private=kept, metrics=metrics)

  def server_update(server, updates, client_weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    if uniform:   # Eq. 3 / 10: the data centers' plain mean (padding clients weigh 0)
      client_weights = (client_weights > 0).astype(jnp.float32)
    return aggregation.weighted_mean(updates, client_weights)

  return Algorithm(name=config.algorithm, init=init, broadcast=broadcast,
                   client_update=client_update, server_update=server_update,
                   eval_variables=lambda server: server, class_embeddings=lambda state: None,
                   update_origin=lambda ci: ci.shared['model'],   # the parts it received
                   summary=(lambda state: {'dp_sgd': pad_dp_sgd.ledger(config)}) if dp else None)
