"""FedUV: user verification with secret error-correcting codewords (Hosseini et al. 2021; the FedFV
paper's Eq. 4 and Table 3).

Every client is one person. It draws a random message and encodes it with a BCH code of length n
(127, 255 or 511: FedUV-127/255/511); the codeword, mapped from bits {0, 1} to v in {-1, +1}^n,
is its secret class target and never leaves it (`RoundState.clients['codeword']`). BCH codes keep
any two codewords at least the code's designed distance apart in Hamming distance, so the targets
are spread out without the server or any client seeing them, and the client can train with the
positive term alone (FedFV paper Eq. 4):

    L_pos = (1/N) sum_i max(0, 1 - v_{y_i}^T W' g_theta(x_i) / ||v_{y_i}||^2)            (Eq. 4)

W' [n, d] is a shared trained matrix (averaged with the backbone), g_theta the backbone with its
`Scaling` layer (configs/fedfv/feduv.py sets `model.scaling`). The client's class embedding is
then w = W'^T v / ||v||^2 and Eq. 4 is `heads.positive_dot` (max(0, 1 - g . w)) over it
(`common.local_step`'s `class_rows`). After training the client sets its verification threshold
to the `feduv.threshold_quantile` quantile of its own images' scores v^T W' g / ||v||^2 (FedUV's
per-user threshold: 0.1 accepts about 90 % of its own images) and keeps it.

Readings:
  * The FedFV paper prints Eq. 4 with a leading minus sign, which would reward a large hinge; the
    loss minimised here is the hinge itself, as in FedUV.
  * Messages are k bits drawn at random per client (distinct); k (`feduv.message_bits`) defaults
    to about n/2, BCH(127, 64), BCH(255, 131), BCH(511, 259) with designed distances 21, 37 and
    61. Codes are systematic (the message is the codeword's first k bits).
  * `feduv.codeword_scale` 'inverse_squared_norm' is Eq. 4 as printed (1/||v||^2 = 1/n). The
    switch 'inverse_norm' (1/||v||) is not the paper's: it takes out the code length's scale,
    which otherwise shrinks the class embedding W'^T v / n to about 1/sqrt(n) at init and W''s
    gradient v g^T / n to 1/n (docs/fedfv.md, "FedUV's order by code length").
  * The pair sets are verified on the backbone's features g_theta(x), like every other method;
    `class_embeddings` (for the diagnostics and Fig. 5) is W'^T v_i / ||v_i||^2 per client, read
    by the simulator for evaluation: the server never holds v.
"""

import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import bch, common
from fedjax_face.core import aggregation, arrays, checks, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import preprocess

ONE_CLIENT = False
CODE_LENGTHS = (127, 255, 511)
CODEWORD_SCALES = {'inverse_squared_norm': 2.0, 'inverse_norm': 1.0}   # the power of ||v||
DEFAULT_MESSAGE_BITS = {127: 64, 255: 131, 511: 259}   # about n/2; designed distance 21, 37, 61


def config_section() -> ml_collections.ConfigDict:
  """`config.feduv` (configs/fedfv/feduv.py)."""
  c = ml_collections.ConfigDict()
  c.code_length = 511         # n: FedUV-127 / 255 / 511 (Table 3)
  c.message_bits = 0          # k; 0 = DEFAULT_MESSAGE_BITS[n]
  c.threshold_quantile = 0.1  # the per-user threshold: this quantile of the user's own scores
  c.codeword_scale = 'inverse_squared_norm'   # Eq. 4; 'inverse_norm' divides by ||v|| instead
  return c


def message_bits(section) -> int:
  return section.message_bits or DEFAULT_MESSAGE_BITS[section.code_length]


def check_config(config) -> None:
  c = checks.section(config, 'feduv', 'feduv.config_section() (configs/fedfv/feduv.py)')
  checks.check_choice('feduv.code_length', c.code_length, CODE_LENGTHS)
  checks.check_choice('feduv.codeword_scale', c.codeword_scale, tuple(CODEWORD_SCALES))
  checks.check_int('feduv.message_bits', c.message_bits, allow_zero=True)
  q = c.threshold_quantile
  if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < q < 1:
    raise ValueError(f'config.feduv.threshold_quantile={q!r}; expected a fraction in (0, 1).')
  if config.federated.partition != 'one_per_client':
    raise ValueError(f'config.federated.partition={config.federated.partition!r}; FedUV trains '
                     "one identity per client: expected 'one_per_client'.")
  if config.head.loss != 'positive_dot':
    raise ValueError(f"config.head.loss={config.head.loss!r}; FedUV's Eq. 4 is the hinge "
                     "max(0, 1 - g . w): expected 'positive_dot'.")
  k = message_bits(c)
  if 2**k < config.federated.num_clients:
    raise ValueError(f'config.feduv.message_bits={k} gives {2**k} messages for '
                     f'{config.federated.num_clients} clients; expected at least one each.')
  if k not in bch.dimensions(c.code_length):
    raise ValueError(f'config.feduv.message_bits={k}: no binary BCH({c.code_length}, {k}) code; '
                     f'expected one of {bch.dimensions(c.code_length)} (or 0).')


def variant_name(config) -> str:
  return f'feduv-{config.feduv.code_length}'


def random_messages(rng: np.random.Generator, num: int, bits: int) -> np.ndarray:
  """`[num, bits]` uint8: `num` distinct random messages (redrawn until distinct)."""
  while True:
    messages = rng.integers(0, 2, (num, bits), dtype=np.uint8)
    if len(np.unique(messages, axis=0)) == num:
      return messages


def codewords(n: int, k: int, messages: np.ndarray) -> np.ndarray:
  """`[num, n]` float32 in {-1, +1}: BCH(n, k) codewords of `messages` [num, k], bit b -> 2b - 1."""
  bits = bch.encode(bch.code(n, k), messages).astype(np.float32)
  return 2.0 * bits - 1.0


def class_rows(projection: jax.Array, codeword: jax.Array, power: float = 2.0) -> jax.Array:
  """w = W'^T v / ||v||^power, `[m, d]` for codewords `[m, n]`: Eq. 4's score (power 2) is then
  g . w."""
  v = codeword.astype(projection.dtype)
  return (v @ projection) / jnp.sum(v * v, axis=-1, keepdims=True) ** (power / 2)


def user_threshold(scores: jax.Array, mask: jax.Array, quantile: float) -> jax.Array:
  """The `quantile` of the valid `scores` (linear interpolation, as `np.quantile`); 0 if none.

  Fixed shapes (it runs in the jitted client): invalid scores sort last as +inf and the quantile's
  position counts valid entries only.
  """
  count = jnp.sum(mask)
  ordered = jnp.sort(jnp.where(mask, scores, jnp.inf))
  position = quantile * jnp.maximum(count - 1, 0).astype(jnp.float32)
  lo = jnp.floor(position).astype(jnp.int32)
  hi = jnp.minimum(lo + 1, jnp.maximum(count - 1, 0))
  frac = position - lo
  value = ordered[lo] + frac * (ordered[hi] - ordered[lo])
  return jnp.where(count > 0, value, 0.0)


def own_scores(model, variables, projection, codeword, data,
               power: float = 2.0) -> tuple[jax.Array, jax.Array]:
  """`([S·B] scores, [S·B] mask)`: v^T W' g(x) / ||v||^power of the client's images (eval
  mode)."""
  images = data['images'].reshape((-1,) + data['images'].shape[2:])
  features = model.apply(variables, preprocess.normalize(images), train=False)
  w = class_rows(projection, codeword[None, :], power)[0]
  return features @ w, data['mask'].reshape(-1)


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedUV over a one-identity-per-client partition `fed`."""
  if fed.max_classes != 1:
    raise ValueError(f'FedUV needs one identity per client; the partition gives up to '
                     f'{fed.max_classes} (federated.partition=\'one_per_client\').')
  c = config.feduv
  n, k = c.code_length, message_bits(c)
  power = CODEWORD_SCALES[c.codeword_scale]
  rows = functools.partial(class_rows, power=power)
  train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode, class_rows=rows)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  num_clients, dim = fed.num_clients, config.model.embedding_dim

  def init(rng, start=None):
    backbone_rng, projection_rng = jax.random.split(rng)
    variables = common.init_backbone(model, backbone_rng, fed.images.shape[1:])
    if start is not None:
      variables, _ = common.start_from(start, variables, method='feduv')
    # W' as a linear layer's usual init (std 1/sqrt(d)).
    projection = arrays.drawn_flat(jax.random.normal, projection_rng, (n, dim),
                                   dtype=jnp.float32) / np.sqrt(dim)
    # Each client's secret message, from the run's seed on the host (the encoder is numpy).
    messages = random_messages(np.random.default_rng([config.seed, n, k]), num_clients, k)
    clients = {'codeword': jnp.asarray(codewords(n, k, messages)),
               'threshold': jnp.zeros(num_clients, jnp.float32),
               **common.initial_loss_scales(model, num_clients)}   # float16's scales
    return RoundState(server={'model': variables, 'projection': projection}, clients=clients,
                      round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng
    shared = common.with_lr_scale(dict(server), lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    shared = client_input.shared
    v = private['codeword']
    model_vars, projection, opt_state, metrics = train(
        shared['model'], shared['projection'], data, rng, lr_scale=shared.get('lr_scale'),
        row_input=v[None, :], loss_scale_state=private.get('loss_scale'))
    scores, mask = own_scores(model, model_vars, projection, v, data, power)
    threshold = user_threshold(scores, mask, c.threshold_quantile)
    return ClientResult(update={'model': model_vars, 'projection': projection},
                        private={'codeword': v, 'threshold': threshold,
                                 **common.kept_loss_scale(private, opt_state)},
                        metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del server, client_ids, round_index, rng
    return aggregation.weighted_mean(updates, weights)   # FedAvg of theta and W'

  def class_embeddings(state: RoundState):
    embeddings = rows(state.server['projection'], state.clients['codeword'])
    return class_tables.to_identity_rows(embeddings[:, None, :], identity_table,
                                         fed.num_identities)

  return Algorithm(name='feduv', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server['model'],
                   class_embeddings=class_embeddings,
                   update_origin=lambda ci: origin_by_key(ci, ('model', 'projection')))

