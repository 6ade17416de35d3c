"""FedFR: a pre-trained model improved by clients with private identities, each client also
training a personalized branch (Liu, Wang, Chien & Lai, AAAI 2022).

Setting (`data/splits.py`): K_g public identities pre-trained centrally (configs/fedfr/pretrain.py,
CosFace s = 30, m = 0.4), their images D_g shared with every client; private identities dealt to
the clients. The run starts from the pre-training run's final model and class matrix
(`config.init_from`): the backbone theta_g and the public class matrix Phi_g.

A client's round (Eq. 7, `client.client_update`):
  1. Hard negatives: features of its local images and of D_g under theta_g; the public images
     whose cosine to any local image exceeds t_HN (`hard_negatives.hard_negative_mask`).
  2. E epochs over local + hard public images, in steps of B, minimising
       alpha_1 L_cos + alpha_2 L_con + alpha_3 L_BCE                                     (Eq. 7)
     L_cos: CosFace over [W_l ; Phi] (the local class embeddings and the public class matrix,
     Eq. 3; `head.loss='cosface'`); L_con: the model-contrastive term (Eq. 5,
     `losses.contrastive_loss`); L_BCE: the DFC branch's one-vs-all margin loss (Eq. 6,
     `losses.dfc_loss`) on f' = Pi(f).
  3. Sends theta_l and Phi_l; keeps W_l, the DFC branch (Pi, Omega, b) and theta_l itself (the
     next round's f_prev, and its personalized model [theta_l, Pi]).
The server averages theta (Eq. 2) and Phi (Eq. 4) weighted by the clients' local image counts.

Table 2's two-stage baselines (`fedfr.adaptation`, Yu et al. 2020): the rounds train with hard
negatives and the contrastive term, then the last round is local adaptation -- each client from
the global model, L_cos alone ('finetune') or with T^2 KL to the global model's logits over the
same classes ('kd', `losses.distillation_loss`) -- and the server keeps the global model.

Readings (the paper and the authors' code are silent or slip; docs/references.md,
fedfr-authors-code):
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


import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common
from fedjax_face.algorithms.fedfr import client, losses
from fedjax_face.core import aggregation, checks, class_tables
from fedjax_face.core.algorithm import Algorithm, ClientInput, RoundState, origin_by_key
from fedjax_face.data import stores
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
  c = checks.section(config, 'fedfr', 'fedfr.config_section() (configs/fedfr/fedfr.py)')
  for name in ('public_data', 'dfc'):
    checks.check_bool(f'fedfr.{name}', c[name])
  if not isinstance(c.hn_threshold, (int, float)) or not -1.0 <= c.hn_threshold <= 1.0:
    raise ValueError(f'config.fedfr.hn_threshold={c.hn_threshold!r}; expected a cosine in '
                     '[-1, 1] (-1 keeps every public image).')
  checks.check_int('fedfr.max_public', c.max_public, allow_zero=True)
  for name in ('contrastive_weight', 'cosface_weight', 'dfc_weight', 'dfc_margin'):
    checks.check_number(f'fedfr.{name}', c[name], allow_zero=True)
  for name in ('temperature', 'dfc_scale', 'dfc_power'):
    checks.check_number(f'fedfr.{name}', c[name])
  checks.check_fraction('fedfr.dfc_balance', c.dfc_balance)
  checks.check_choice('fedfr.dfc_loss', c.dfc_loss, DFC_LOSSES)
  checks.check_choice('fedfr.local_class_init', c.local_class_init, LOCAL_CLASS_INITS)
  checks.check_choice('fedfr.adaptation', c.adaptation, ADAPTATIONS)
  checks.check_number('fedfr.kd_weight', c.kd_weight, allow_zero=True)
  checks.check_number('fedfr.kd_temperature', c.kd_temperature)
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



# -- the method ----------------------------------------------------------------------------------

def _public_set(c, fed) -> tuple[np.ndarray, np.ndarray] | None:
  """(uint8 images, int32 public ids) of the shared public set D_g, None when clients train on
  local data only. Every public image must be readable: each client sees all of them."""
  if c.public_data and not fed.num_public:
    raise ValueError('fedfr.public_data=True but the partition has no public identities '
                     '(data.public_identities).')
  if not (c.public_data and fed.num_public > 0):
    return None
  images, readable = stores.take(fed.images, np.asarray(fed.public_indices))
  if not readable.all():
    raise ValueError(f'{int((~readable).sum())} public image(s) could not be read; the shared '
                     'public set must be complete.')
  return images, np.asarray(fed.public_labels, np.int32)


def _setup(config, model, fed, public, step_mode: str) -> client.Setup:
  """What every piece of the round reads, fixed once from the config and the partition."""
  c = config.fedfr
  use_public = public is not None
  return client.Setup(
      fedfr=c, model=model, optimizer=common.make_optimizer(config.optimizer),
      head=common.head_kwargs(config), step_mode=step_mode,
      embed=functools.partial(client.embed, model, config.eval.batch_size),
      alphas={'cosface': c.cosface_weight, 'contrastive': c.contrastive_weight,
              'dfc': c.dfc_weight, 'kd': c.kd_weight},
      adaptation_round=config.num_rounds - 1 if c.adaptation != 'none' else None,
      use_public=use_public, num_public=fed.num_public, max_classes=fed.max_classes,
      capacity=(c.max_public or len(public[1])) if use_public else 0,
      copies=int(config.federated.local_epochs) if use_public else 0)


def _initial_state(setup: client.Setup, config, fed, public, rng, start) -> RoundState:
  """Round 0: theta_g and Phi_g (from `start`, the finished pre-training, when given), every
  client's W_l, its f_prev slot and its DFC branch (Pi = identity, Omega = W_l, b = 0)."""
  dim, init_std = config.model.embedding_dim, config.head.init_std
  backbone_rng, phi_rng, w_rng = jax.random.split(rng, 3)
  variables = common.init_backbone(setup.model, backbone_rng, fed.images.shape[1:])
  phi = (heads.init_class_embeddings(phi_rng, setup.num_public, dim, 'cosface', init_std)
         if setup.use_public else None)
  variables, phi = common.start_from(start, variables, phi, method='fedfr')
  w = common.init_client_class_embeddings(w_rng, fed.class_mask, dim, 'cosface', init_std)
  num_clients = fed.num_clients
  stack = lambda x: jnp.broadcast_to(x, (num_clients,) + x.shape)
  clients = {'W': w, 'prev_model': jax.tree.map(stack, variables),
             'started': jnp.zeros(num_clients, bool),
             **common.initial_loss_scales(setup.model, num_clients)}   # float16's scales
  if setup.fedfr.dfc:
    clients['dfc'] = {'projection': {'kernel': stack(jnp.eye(dim)), 'bias': stack(jnp.zeros(dim))},
                      'omega': w, 'bias': jnp.zeros((num_clients, setup.max_classes))}
  server = {'model': variables}
  if setup.use_public:
    images, labels = public
    server.update(Phi=phi, public_images=jnp.asarray(images), public_labels=jnp.asarray(labels))
  return RoundState(server=server, clients=clients, round=jnp.zeros((), jnp.int32))


def _broadcast(setup: client.Setup, lr_schedule, server, client_ids, round_index,
               rng) -> ClientInput:
  """The server's state to every client, with the round's stage and theta_g's public features
  (the same for every client: computed once, see the module docstring)."""
  del client_ids, rng
  shared = dict(server)
  if setup.adaptation_round is not None:
    shared['adapting'] = round_index >= setup.adaptation_round
  if setup.use_public:
    shared['public_features'] = setup.embed(server['model'], server['public_images'])
  return ClientInput(shared=common.with_lr_scale(shared, lr_schedule, round_index),
                     per_client={})


def _server_update(adaptation_round, server, updates, weights, client_ids, round_index, rng):
  """Eq. 2 and Eq. 4: theta and Phi averaged by the clients' image counts; in Table 2's
  adaptation round the global model stays."""
  del client_ids, rng
  averaged = {**server, **aggregation.weighted_mean(updates, weights)}   # Eq. 2 and Eq. 4
  if adaptation_round is None:
    return averaged
  adapting = round_index >= adaptation_round   # local adaptation: the global model stays
  return jax.tree.map(lambda old, new: jnp.where(adapting, old, new), server, averaged)


def _class_embeddings(setup: client.Setup, identity_table, num_identities: int,
                      state: RoundState):
  """One row per identity: the clients' W_l, and the server's Phi for the public identities."""
  rows = class_tables.to_identity_rows(state.clients['W'], identity_table, num_identities)
  if setup.use_public:   # the public identities' rows are the server's Phi
    rows = rows.at[:setup.num_public].set(state.server['Phi'].astype(rows.dtype))
  return rows


def _personalized(dfc: bool, apply, transformed, state: RoundState):
  """Client k's personalized model: [theta_l, Pi] with the DFC branch, theta_l without (the
  paper's Table 1 rows evaluate each local model)."""
  def for_client(k: int):
    take = lambda x: x[k]
    variables = jax.tree.map(take, state.clients['prev_model'])
    if not dfc:
      return lambda images: apply(variables, images)
    projection = jax.tree.map(take, state.clients['dfc']['projection'])
    return lambda images: transformed(variables, projection, images)
  return for_client


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedFR over the private partition `fed` (`fed.public_indices`: the shared public images)."""
  public = _public_set(config.fedfr, fed)
  setup = _setup(config, model, fed, public, step_mode)
  if not config.init_from:
    print("fedfr: no init_from: starting from random weights (the paper starts from "
          "configs/fedfr/pretrain.py's model)", flush=True)

  def init(rng, start=None):
    """`start`: the final state of the run `config.init_from` names (read by the driver), or
    None for random weights (also what a resume starts from: its checkpoint replaces them)."""
    return _initial_state(setup, config, fed, public, rng, start)

  # Jitted once per run: the personalized models are evaluated client by client.
  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  transformed = jax.jit(lambda variables, projection, x: losses.dfc_transform(
      model.apply(variables, x, train=False), projection))
  keys = ('model', 'Phi') if setup.use_public else ('model',)
  return Algorithm(
      name='fedfr', init=init,
      broadcast=functools.partial(_broadcast, setup, common.lr_scale_schedule(config)),
      client_update=functools.partial(client.client_update, setup),
      server_update=functools.partial(_server_update, setup.adaptation_round),
      eval_variables=lambda server: server['model'],
      class_embeddings=functools.partial(_class_embeddings, setup, np.asarray(fed.identity_table),
                                         fed.num_identities),
      personalized=functools.partial(_personalized, config.fedfr.dfc, apply, transformed),
      update_origin=lambda ci: origin_by_key(ci, keys),
      sent_once=('public_images', 'public_labels'))   # the shared public data set
