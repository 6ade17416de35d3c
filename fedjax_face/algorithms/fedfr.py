"""FedFR: a pre-trained model improved by clients with private identities, each client also
training a personalized branch (Liu, Wang, Chien & Lai, AAAI 2022).

Setting (`data/splits.py`): K_g public identities pre-trained centrally (configs/fedfr/pretrain.py,
CosFace s = 30, m = 0.4), their images D_g shared with every client; private identities dealt to
the clients. The run starts from the pre-training run's final model and class matrix
(`config.init_from`): the backbone theta_g and the public class matrix Phi_g.

A client's round (Eq. 7, `client_update`):
  1. Hard negatives: features of its local images and of D_g under theta_g; the public images
     whose cosine to any local image exceeds t_HN (`hard_negative_mask`).
  2. E epochs over local + hard public images, in steps of B, minimising
       alpha_1 L_cos + alpha_2 L_con + alpha_3 L_BCE                                     (Eq. 7)
     L_cos: CosFace over [W_l ; Phi] (the local class embeddings and the public class matrix,
     Eq. 3; `head.loss='cosface'`); L_con: the model-contrastive term (Eq. 5,
     `contrastive_loss`); L_BCE: the DFC branch's one-vs-all margin loss (Eq. 6, `dfc_loss`) on
     f' = Pi(f).
  3. Sends theta_l and Phi_l; keeps W_l, the DFC branch (Pi, Omega, b) and theta_l itself (the
     next round's f_prev, and its personalized model [theta_l, Pi]).
The server averages theta (Eq. 2) and Phi (Eq. 4) weighted by the clients' local image counts.

Table 2's two-stage baselines (`fedfr.adaptation`, Yu et al. 2020): the rounds train with hard
negatives and the contrastive term, then the last round is local adaptation -- each client from
the global model, L_cos alone ('finetune') or with T^2 KL to the global model's logits over the
same classes ('kd', `distillation_loss`) -- and the server keeps the global model.

Readings (the paper and the authors' code are silent or slip; REFERENCE_NOTES §4):
  * g(z) = 2((z + 1)/2)^t - 1: the paper prints 2((z+1)^t/2) - 1; the form here maps [-1, 1]
    onto itself, as SphereFace2's does.
  * Eq. 6's bias enters both terms with the logit: z_j = s'(g(cos_j) -/+ m') + b_j.
  * f_prev before a client's first round: the model it starts that round from (theta_g). Eq. 5
    is then log 2 with zero gradient: the term acts from a client's second round on (the
    authors' code uses a randomly initialised network there).
  * f_glob and f_prev are eval-mode features (running batch-norm statistics), held fixed.
  * W_l starts as each local identity's normalised mean feature under theta_g at the client's
    first round (`fedfr.local_class_init='mean_feature'`; 'random' = N(0, head.init_std^2)),
    and Omega starts as W_l then (the issue's "initialised from the client's class
    embeddings"); Pi = identity, its bias and b = 0, so the branch's first scores are the
    class-embedding cosines.
  * Public features under theta_g are computed once per round in `broadcast`: every client
    would compute the same ones (public images, the global model, eval mode).
  * The number of hard public images varies by client and round; shapes do not. Each client
    keeps at most `fedfr.max_public` of them per epoch (0 = every public image: no cap), and its
    epoch's valid samples come first, so the steps past them hold no sample and are skipped
    (`lax.cond`: skipped at run time by the loop backend on CPU; computed and discarded under
    vmap). The metrics report the steps a client actually ran (Fig. 3's steps per epoch).
"""


import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face import config_lib
from fedjax_face.algorithms import class_tables, common
from fedjax_face.core import aggregation, arrays, local
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import preprocess, stores
from fedjax_face.models import heads

ONE_CLIENT = False
LOCAL_CLASS_INITS = ('mean_feature', 'random')
DFC_LOSSES = ('bce', 'cosface')   # Eq. 6 | Table 2's multi-class variant of the branch
ADAPTATIONS = ('none', 'finetune', 'kd')   # Table 2's two-stage baselines


def config_section() -> ml_collections.ConfigDict:
  """`config.fedfr` (configs/fedfr/fedfr.py); the defaults are the paper's."""
  c = ml_collections.ConfigDict()
  c.public_data = True         # train with public images (Eq. 3); False: FedAvg on local data
  c.hn_threshold = 0.4         # t_HN; -1 keeps every public image (Fig. 3's "no sampling")
  c.max_public = 0             # public images kept per client and epoch; 0 = no cap
  c.contrastive_weight = 5.0   # alpha_2 (0 = no contrastive term, Table 1 rows 2-3)
  c.temperature = 0.5          # tau (Eq. 5)
  c.cosface_weight = 1.0       # alpha_1
  c.dfc = True                 # the DFC branch (Table 1 row 5)
  c.dfc_weight = 10.0          # alpha_3
  c.dfc_loss = 'bce'           # 'bce' (Eq. 6) | 'cosface' (Table 2's variant)
  c.dfc_scale = 30.0           # s'
  c.dfc_margin = 0.4           # m'
  c.dfc_balance = 0.7          # lambda (Eq. 6)
  c.dfc_power = 3.0            # t of g(z)
  c.local_class_init = 'mean_feature'   # W_l at a client's first round | 'random'
  # Table 2's two-stage personalization (Yu et al. 2020): the last round is local adaptation,
  # each client from the global model, the server unchanged; 'finetune' trains L_cos alone,
  # 'kd' adds the KL divergence to the global model's logits.
  c.adaptation = 'none'        # 'none' | 'finetune' | 'kd'
  c.kd_weight = 1.0            # the KD term's weight (the paper gives none)
  c.kd_temperature = 1.0       # its softmax temperature T (the loss is T^2 KL)
  return c


def check_config(config) -> None:
  c = config_lib.section(config, 'fedfr', 'fedfr.config_section() (configs/fedfr/fedfr.py)')
  for name in ('public_data', 'dfc'):
    config_lib.check_bool(f'fedfr.{name}', c[name])
  if not isinstance(c.hn_threshold, (int, float)) or not -1.0 <= c.hn_threshold <= 1.0:
    raise ValueError(f'config.fedfr.hn_threshold={c.hn_threshold!r}; expected a cosine in '
                     '[-1, 1] (-1 keeps every public image).')
  config_lib.check_int('fedfr.max_public', c.max_public, allow_zero=True)
  for name in ('contrastive_weight', 'cosface_weight', 'dfc_weight', 'dfc_margin'):
    config_lib.check_number(f'fedfr.{name}', c[name], allow_zero=True)
  for name in ('temperature', 'dfc_scale', 'dfc_power'):
    config_lib.check_number(f'fedfr.{name}', c[name])
  config_lib.check_fraction('fedfr.dfc_balance', c.dfc_balance)
  config_lib.check_choice('fedfr.dfc_loss', c.dfc_loss, DFC_LOSSES)
  config_lib.check_choice('fedfr.local_class_init', c.local_class_init, LOCAL_CLASS_INITS)
  config_lib.check_choice('fedfr.adaptation', c.adaptation, ADAPTATIONS)
  config_lib.check_number('fedfr.kd_weight', c.kd_weight, allow_zero=True)
  config_lib.check_number('fedfr.kd_temperature', c.kd_temperature)
  if c.adaptation != 'none' and c.dfc:
    raise ValueError(f"config.fedfr.adaptation={c.adaptation!r} with fedfr.dfc=True: the "
                     'two-stage baselines personalize the local model itself (Table 2); expected '
                     'fedfr.dfc=False.')
  if c.adaptation != 'none' and config.num_rounds < 2:
    raise ValueError(f'config.num_rounds={config.num_rounds} with fedfr.adaptation='
                     f'{c.adaptation!r}: the last round adapts locally, so at least one federated '
                     'round must come first; expected >= 2.')
  if config.head.loss != 'cosface':
    raise ValueError(f'config.head.loss={config.head.loss!r}; FedFR trains CosFace (Eq. 1, 3): '
                     "expected 'cosface'.")
  epochs = config.federated.local_epochs
  if c.public_data and (epochs < 1 or epochs != int(epochs)):
    raise ValueError(f'config.federated.local_epochs={epochs!r}; FedFR with public data runs E '
                     'whole epochs over local + hard public images: expected an integer >= 1.')
  if c.public_data and not config.data.public_identities:
    raise ValueError('config.fedfr.public_data=True needs public identities: set '
                     'data.public_identities (K_g > 0), or fedfr.public_data=False.')


def variant_name(config) -> str:
  """The Table 1 / 2 row: 'fedavg' (local data only), 'hn', 'hn+con', 'fedfr' (all modules),
  'hn+con+dfc_cosface' (Table 2's CosFace branch); 'public' when t_HN = -1 keeps every image."""
  c = config.fedfr
  if not c.public_data:
    name = 'fedavg'
  else:
    name = 'hn' if c.hn_threshold > -1 else 'public'
  if c.contrastive_weight:
    name += '+con'
  if c.dfc:
    name += '+dfc' if c.dfc_loss == 'bce' else '+dfc_cosface'
  if c.adaptation != 'none':
    name += '+' + c.adaptation
  return 'fedfr' if name == 'hn+con+dfc' else name


# -- the paper's terms, as pure functions ------------------------------------------------------

def hard_negative_mask(local_features: jax.Array, local_mask: jax.Array,
                       public_features: jax.Array, threshold: float) -> jax.Array:
  """bool `[P]`: public images whose cosine to any valid local image exceeds `threshold`
  (FedFR "Hard Negative Sampling"; features of the global model). Inputs need not be unit."""
  cos = arrays.l2_normalize(public_features) @ arrays.l2_normalize(local_features).T   # [P, L]
  cos = jnp.where(local_mask[None, :], cos, -jnp.inf)
  return jnp.max(cos, axis=1) > threshold


def contrastive_loss(features: jax.Array, global_features: jax.Array, prev_features: jax.Array,
                     temperature: float, sample_mask: jax.Array) -> jax.Array:
  """Eq. 5, averaged over the valid samples:
  -log(e^{sim(f, f_glob)/tau} / (e^{sim(f, f_glob)/tau} + e^{sim(f, f_prev)/tau}))."""
  f = arrays.l2_normalize(features.astype(jnp.float32))
  positive = jnp.sum(f * arrays.l2_normalize(global_features), axis=-1) / temperature
  negative = jnp.sum(f * arrays.l2_normalize(prev_features), axis=-1) / temperature
  per_sample = jnp.logaddexp(positive, negative) - positive
  return heads.masked_mean(per_sample, sample_mask)


def distillation_loss(student_logits: jax.Array, teacher_logits: jax.Array, temperature: float,
                      sample_mask: jax.Array) -> jax.Array:
  """T^2 KL(softmax(teacher / T) || softmax(student / T)), averaged over the valid samples (the
  'KD' local adaptation of Table 2; the teacher is the global model)."""
  teacher = jax.nn.log_softmax(teacher_logits / temperature)
  student = jax.nn.log_softmax(student_logits / temperature)
  per_sample = jnp.sum(jnp.exp(teacher) * (teacher - student), axis=-1) * temperature**2
  return heads.masked_mean(per_sample, sample_mask)


def dynamic_range(z: jax.Array, power: float) -> jax.Array:
  """g(z) = 2((z + 1)/2)^t - 1 (Eq. 6's g; maps [-1, 1] onto itself)."""
  return 2.0 * ((z + 1.0) / 2.0) ** power - 1.0


def dfc_transform(features: jax.Array, projection: dict) -> jax.Array:
  """f' = Pi(f) = f Pi + bias: the DFC branch's client-specific feature."""
  return features.astype(jnp.float32) @ projection['kernel'] + projection['bias']


def dfc_cosines(features: jax.Array, projection: dict, omega: jax.Array) -> jax.Array:
  """`[B, C]` cos theta_j between f' = Pi(f) and the rows of Omega."""
  return arrays.l2_normalize(dfc_transform(features, projection)) @ arrays.l2_normalize(omega).T


def dfc_loss(cos: jax.Array, bias: jax.Array, labels: jax.Array, is_local: jax.Array,
             class_mask: jax.Array, sample_mask: jax.Array, *, scale: float, margin: float,
             balance: float, power: float) -> jax.Array:
  """Eq. 6 summed over the client's classes, averaged over the valid samples:

      lambda/s' log(1 + exp(-(s'(g(cos_k) - m') + b_k)))                 (the sample's class k)
    + (1 - lambda)/s' sum_{j != k} log(1 + exp(s'(g(cos_j) + m') + b_j))   (every other class)

  A public image (`is_local` False) is a negative of every local class.
  """
  g = dynamic_range(cos, power)
  target = jax.nn.one_hot(labels, cos.shape[1], dtype=jnp.bool_) & is_local[:, None]
  positive = balance / scale * jax.nn.softplus(-(scale * (g - margin) + bias))
  negative = (1.0 - balance) / scale * jax.nn.softplus(scale * (g + margin) + bias)
  per_class = jnp.where(target, positive, negative) * class_mask[None, :]
  return heads.masked_mean(per_class.sum(axis=1), sample_mask)


# -- the epoch over local and hard public images -------------------------------------------------

def epoch_order(rng: jax.Array, local_mask: jax.Array, public_valid: jax.Array, copies: int,
                batch_size: int) -> tuple[jax.Array, jax.Array]:
  """(`[T, B]` positions, `[T, B]` valid) of one round's samples in a random order, the valid
  ones first: positions < L are the round's local samples (`local_mask` `[L]`), L + j the j-th
  kept public slot of one of `copies` passes (`public_valid` `[P]`). T = ceil((L + copies·P)/B)."""
  valid = jnp.concatenate([local_mask, jnp.tile(public_valid, copies)])
  keys = jnp.where(valid, jax.random.uniform(rng, valid.shape), 2.0)
  order = jnp.argsort(keys)
  total = arrays.round_up(valid.shape[0], batch_size)
  order = jnp.pad(order, (0, total - valid.shape[0]))
  valid = jnp.pad(valid[order[:valid.shape[0]]], (0, total - valid.shape[0]))
  return order.reshape(-1, batch_size), valid.reshape(-1, batch_size)


def kept_public(rng: jax.Array, hard: jax.Array, capacity: int) -> tuple[jax.Array, jax.Array]:
  """(`[capacity]` indices of public images, `[capacity]` valid): the hard ones in a random order
  (a random subset of them when there are more than `capacity`)."""
  keys = jnp.where(hard, jax.random.uniform(rng, hard.shape), 2.0)
  chosen = jnp.argsort(keys)[:capacity]
  return chosen, hard[chosen]


# -- the method ----------------------------------------------------------------------------------

def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedFR over the private partition `fed` (`fed.public_indices`: the shared public images)."""
  c = config.fedfr
  head = common.head_kwargs(config)
  optimizer = common.make_optimizer(config.optimizer)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  dim, max_classes, num_public = config.model.embedding_dim, fed.max_classes, fed.num_public
  use_public = c.public_data and num_public > 0
  if c.public_data and not num_public:
    raise ValueError('fedfr.public_data=True but the partition has no public identities '
                     '(data.public_identities).')
  if use_public:
    public_images, readable = stores.take(fed.images, np.asarray(fed.public_indices))
    if not readable.all():
      raise ValueError(f'{int((~readable).sum())} public image(s) could not be read; the shared '
                       'public set must be complete.')
    public_labels = np.asarray(fed.public_labels, np.int32)
    capacity = c.max_public or len(public_labels)
  copies = int(config.federated.local_epochs) if use_public else 0
  alphas = {'cosface': c.cosface_weight, 'contrastive': c.contrastive_weight, 'dfc': c.dfc_weight,
            'kd': c.kd_weight}
  adaptation_round = config.num_rounds - 1 if c.adaptation != 'none' else None

  def stage_weights(adapting):
    """Eq. 7's alphas; in the adaptation round the contrastive term is off and KD on."""
    if adaptation_round is None:
      return alphas
    on = adapting.astype(jnp.float32)
    return {**alphas, 'contrastive': alphas['contrastive'] * (1.0 - on),
            'kd': alphas['kd'] * on}
  eval_batch = config.eval.batch_size

  def embed(variables, images):
    """Eval-mode unit features of uint8 images, in batches of `eval.batch_size`."""
    n = images.shape[0]
    size = min(eval_batch, n)
    padded = jnp.pad(images, [(0, arrays.round_up(n, size) - n)] + [(0, 0)] * (images.ndim - 1))
    chunks = padded.reshape((-1, size) + images.shape[1:])
    out = jax.lax.map(lambda x: model.apply(variables, preprocess.normalize(x), train=False),
                      chunks)
    return arrays.l2_normalize(out.reshape(-1, out.shape[-1])[:n].astype(jnp.float32))

  def init(rng):
    backbone_rng, phi_rng, w_rng = jax.random.split(rng, 3)
    variables = common.init_backbone(model, backbone_rng, fed.images.shape[1:])
    phi = (heads.init_class_embeddings(phi_rng, num_public, dim, 'cosface', config.head.init_std)
           if use_public else None)
    variables, phi = common.start_from(config, variables, phi, method='fedfr')
    w = common.init_client_class_embeddings(w_rng, fed.class_mask, dim, 'cosface',
                                            config.head.init_std)
    num_clients = fed.num_clients
    stack = lambda x: jnp.broadcast_to(x, (num_clients,) + x.shape)
    clients = {'W': w, 'prev_model': jax.tree.map(stack, variables),
               'started': jnp.zeros(num_clients, bool)}
    if c.dfc:
      clients['dfc'] = {'projection': {'kernel': stack(jnp.eye(dim)), 'bias': stack(jnp.zeros(dim))},
                        'omega': w, 'bias': jnp.zeros((num_clients, max_classes))}
    server = {'model': variables}
    if use_public:
      server.update(Phi=phi, public_images=jnp.asarray(public_images),
                    public_labels=jnp.asarray(public_labels))
    return RoundState(server=server, clients=clients, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng
    shared = dict(server)
    if adaptation_round is not None:
      shared['adapting'] = round_index >= adaptation_round
    if use_public:   # the same for every client: computed once (see the module docstring)
      shared['public_features'] = embed(server['model'], server['public_images'])
    return ClientInput(shared=common.with_lr_scale(shared, lr_schedule, round_index),
                       per_client={})

  def loss_fn(params, batch_stats, fixed, batch, class_mask):
    variables = {'params': params['backbone']}
    if batch_stats:
      variables['batch_stats'] = batch_stats
    images = preprocess.normalize(preprocess.random_flip(batch['rng'], batch['images']))
    features, new_state = model.apply(variables, images, train=True, mutable=['batch_stats'])
    mask, labels, is_local = batch['mask'], batch['labels'], batch['is_local']
    terms = {}
    # Eq. 3: CosFace over [W_l ; Phi] (public images are labelled max_classes + public id).
    w = params['W']
    all_mask = class_mask
    if use_public:
      w = jnp.concatenate([w, params['Phi']])
      all_mask = jnp.concatenate([class_mask, jnp.ones(num_public, bool)])
    terms['cosface'] = heads.loss(features, w, labels, all_mask, mask, **head)
    if c.contrastive_weight or c.adaptation == 'kd':
      global_features = model.apply(fixed['global'], images, train=False)
    if c.contrastive_weight:   # Eq. 5
      prev_features = model.apply(fixed['prev'], images, train=False)
      terms['contrastive'] = contrastive_loss(features, global_features, prev_features,
                                              c.temperature, mask)
    if c.adaptation == 'kd':   # Table 2's KD: the global model's logits over the same classes
      logits_of = lambda f, w: heads.logits(f, w, None, all_mask, kind='cosface',
                                            scale=head['scale'])
      teacher = logits_of(global_features, jax.lax.stop_gradient(w))
      terms['kd'] = distillation_loss(logits_of(features, w), teacher, c.kd_temperature, mask)
    if c.dfc:
      dfc = params['dfc']
      cos = dfc_cosines(features, dfc['projection'], dfc['omega'])
      local_labels = jnp.where(is_local, labels, 0)
      if c.dfc_loss == 'bce':   # Eq. 6
        terms['dfc'] = dfc_loss(cos, dfc['bias'], local_labels, is_local, class_mask, mask,
                                scale=c.dfc_scale, margin=c.dfc_margin, balance=c.dfc_balance,
                                power=c.dfc_power)
      else:   # Table 2: the branch trained with CosFace over the local classes (local images)
        target = jax.nn.one_hot(local_labels, max_classes, dtype=jnp.bool_)
        logits = c.dfc_scale * jnp.where(target, cos - c.dfc_margin, cos)
        logits = jnp.where(class_mask[None, :], logits, heads.PAD_LOGIT)
        terms['dfc'] = heads.cross_entropy(logits, local_labels, mask & is_local)
    weights = stage_weights(fixed.get('adapting'))
    total = sum(weights[k] * v for k, v in terms.items())   # Eq. 7
    return total, (new_state.get('batch_stats', {}), terms)

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    shared = client_input.shared
    global_vars = shared['model']
    order_rng, public_rng, step_rng = jax.random.split(rng, 3)
    data = jax.tree.map(jnp.asarray, data)
    local_images = data['images'].reshape((-1,) + data['images'].shape[2:])
    local_labels = data['labels'].reshape(-1)
    local_mask = data['mask'].reshape(-1)
    class_mask = data['class_mask']

    # A client's first round: W_l (and Omega) from its identities' mean features under theta_g.
    started = private['started']
    w = private['W']
    local_features = embed(global_vars, local_images)   # theta_g's: class init and hard negatives
    if c.local_class_init == 'mean_feature':
      means = common.class_mean_features(local_features, local_labels, local_mask, max_classes)
      w = jnp.where(started, w, means)
    params = {'backbone': global_vars['params'], 'W': w}
    if use_public:
      params['Phi'] = shared['Phi']
    if c.dfc:
      dfc = private['dfc']
      params['dfc'] = {**dfc, 'omega': jnp.where(started, dfc['omega'], w)}
    # f_prev: the client's last local model; before its first round, the model it starts from.
    prev = jax.tree.map(lambda p, g: jnp.where(started, p, g), private['prev_model'], global_vars)
    fixed = {'global': global_vars, 'prev': prev}
    if adaptation_round is not None:
      fixed['adapting'] = shared['adapting']

    if use_public:
      hard = hard_negative_mask(local_features, local_mask,
                                shared['public_features'], c.hn_threshold)
      chosen, chosen_valid = kept_public(public_rng, hard, capacity)
    else:
      hard = jnp.zeros(0, bool)
      chosen, chosen_valid = jnp.zeros(0, jnp.int32), jnp.zeros(0, bool)
    batch_size = data['images'].shape[1]
    positions, valid = epoch_order(order_rng, local_mask, chosen_valid, copies, batch_size)
    num_local = local_mask.shape[0]

    def gather(pos, ok):
      is_local = pos < num_local
      local_pos = jnp.minimum(pos, num_local - 1)
      images, labels = local_images[local_pos], local_labels[local_pos]
      if use_public:
        slot = chosen[jnp.maximum(pos - num_local, 0) % capacity]
        images = jnp.where(is_local[:, None, None, None], images, shared['public_images'][slot])
        labels = jnp.where(is_local, labels, max_classes + shared['public_labels'][slot])
      return {'images': images, 'labels': labels, 'mask': ok, 'is_local': is_local}

    def step(carry, xs):
      params, batch_stats, opt_state = carry
      batch = {**gather(xs['positions'], xs['valid']), 'rng': xs['rng']}
      (_, (batch_stats, terms)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
          params, batch_stats, fixed, batch, class_mask)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      if 'lr_scale' in shared:
        updates = jax.tree.map(lambda u: u * shared['lr_scale'].astype(u.dtype), updates)
      return (optax.apply_updates(params, updates), batch_stats, opt_state), terms

    def step_or_skip(carry, xs):
      zero_terms = jax.eval_shape(lambda: step(carry, xs)[1])
      skip = lambda carry, xs: (carry, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                                                    zero_terms))
      return jax.lax.cond(jnp.any(xs['valid']), step, skip, carry, xs)

    carry = (params, global_vars.get('batch_stats', {}), optimizer.init(params))
    xs = {'positions': positions, 'valid': valid,
          'rng': jax.random.split(step_rng, positions.shape[0])}
    (params, batch_stats, _), terms = local.run_steps(step_or_skip, carry, xs, mode=step_mode)

    ran = jnp.any(valid, axis=1)
    steps_run = ran.sum()
    mean = lambda x: jnp.sum(x * ran) / jnp.maximum(steps_run, 1)
    metrics = {f'loss_{k}': mean(v) for k, v in terms.items()}
    weights = stage_weights(shared.get('adapting'))
    metrics['train_loss'] = sum(weights[k] * metrics[f'loss_{k}'] for k in terms)
    metrics['steps_run'] = steps_run.astype(jnp.float32)
    metrics['hard_public'] = hard.sum().astype(jnp.float32)
    local_model = {'params': params['backbone']}
    if batch_stats:
      local_model['batch_stats'] = batch_stats
    update = {'model': local_model}
    if use_public:
      update['Phi'] = params['Phi']
    kept = {'W': params['W'], 'prev_model': local_model, 'started': jnp.ones((), bool)}
    if c.dfc:
      kept['dfc'] = params['dfc']
    return ClientResult(update=update, private=kept, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, rng
    averaged = {**server, **aggregation.weighted_mean(updates, weights)}   # Eq. 2 and Eq. 4
    if adaptation_round is None:
      return averaged
    adapting = round_index >= adaptation_round   # local adaptation: the global model stays
    return jax.tree.map(lambda old, new: jnp.where(adapting, old, new), server, averaged)

  def class_embeddings(state: RoundState):
    rows = class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)
    if use_public:   # the public identities' rows are the server's Phi
      rows = rows.at[:num_public].set(state.server['Phi'].astype(rows.dtype))
    return rows

  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  transformed = jax.jit(lambda variables, projection, x: dfc_transform(
      model.apply(variables, x, train=False), projection))

  def personalized(state: RoundState):
    """Client k's personalized model: [theta_l, Pi] with the DFC branch, theta_l without (the
    paper's Table 1 rows evaluate each local model)."""
    def for_client(k: int):
      take = lambda x: x[k]
      variables = jax.tree.map(take, state.clients['prev_model'])
      if not c.dfc:
        return lambda images: apply(variables, images)
      projection = jax.tree.map(take, state.clients['dfc']['projection'])
      return lambda images: transformed(variables, projection, images)
    return for_client

  return Algorithm(name='fedfr', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings, personalized=personalized,
                   update_origin=lambda ci: origin_by_key(
                       ci, ('model', 'Phi') if use_public else ('model',)),
                   sent_once=('public_images', 'public_labels'))   # the shared public data set
