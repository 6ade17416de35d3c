"""What the server and the data holders agree on: the method built on the roster's skeleton, the
round keys, and the shapes of every message, derived from the method's own functions.

Both sides build the method exactly as the simulator does (`run.setup.build_algorithm`: the
method's `build`, wrapped by the federated blocks its config switches on) from the same config
file and the same skeleton (`roster.skeleton`), so a round's functions are the simulator's. The
programs are the engine's own pieces (core/engine.py, the loop backend): the server's broadcast,
one client's update (`_client_row`, as `engine.client_messages` runs it) and the server step
(`RoundEngine`'s jitted finish), so each array is computed by the same compiled computation as
in the simulator.

What a round's messages hold:
  server -> holder k  `shared` (the same for every holder), `per_client` (holder k's own rows,
                      FedGC's W_k), the round index and the round key (a function of the config's
                      seed, which every party reads: it is no secret).
  holder k -> server  `update` (exactly `ClientResult.update`: the tree the "what crosses" tests
                      name) and `metrics` (the training scalars the simulator logs).
  kept by holder k    `private` (`ClientResult.private`: FedPE's W_k, kept optimizer state,
                      SCAFFOLD's c_i, top-k residuals), in its own folder, one file per round.

Privacy modes, as the simulator's engine runs them (core/engine.py `_one_client`, `_finish_fn`):
  dp.enabled          each holder clips its update before it leaves (the engine's own client
                      program with the DP spec: `holder_dp`); under adaptive clipping the round's
                      C_t travels in the message and the holder's bit b_i in its update. The noise
                      is the server's, drawn in its jitted step from the round's server key (XOR
                      the server's own secret under `dp.noise_seed='os'`).
  secure_aggregation  each holder sends its averaged keys as masked ring vectors
                      (core/secure_aggregation.py) at the position and share the server gives
                      it; the pair secrets are the simulator's XOR a secret the holders share and
                      the server does not hold (`mask_secret`), so the server cannot rebuild one
                      holder's masks, and the masks still cancel: the decoded sum is the
                      simulator's, bit for bit.
A cohort under either is fixed: a holder that does not reply stops the round (server.py).
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face import algorithms, models
from fedjax_face.core import checks, policy, privacy, secure_aggregation
from fedjax_face.core import engine as engine_lib
from fedjax_face.run import setup as setup_lib
from fedjax_face.federation import roster

# Combinations the bridge does not carry yet, each with the reason (docs/federation.md).
REFUSED = {
    ('dp.enabled', 'secure_aggregation.enabled'):
        "each holder would draw its share of the noise from keys the server can derive (the "
        "config's seed) unless the holders share a noise secret, which is not built",
    ('secure_aggregation.enabled', 'federated.straggler_drop'):
        "the simulator's dropped stragglers are padding rows that take part in the masks, and a "
        "federation has no holder for them",
}


# Methods the bridge does not carry yet, each with the reason (docs/federation.md).
NOT_YET = {
    'fedma': "its server's matching changes the model's widths between rounds, and the "
             "messages' templates are fixed for a run",
    'fedfr': "the roster's skeleton does not carry its public set D_g yet (every party reads "
             'it: own_data.read_public_set), and its runs start from a pre-trained model '
             '(init_from, not carried yet)',
    'fedgpad': 'over its runlocal config the federation ends up to 3e-3 from the simulator '
               '(elements one float32 step apart first), not yet traced',
}


class Agreement(NamedTuple):
  """The method both sides run, and the templates of its messages (`jax.ShapeDtypeStruct`s):
  `shared`, one holder's `per_client` row and `private` row, its `data` round (no cohort axis),
  and the `update` and `metrics` it sends."""
  algorithm: object
  fed: object
  dp: object
  secure: object
  shared: object
  per_client: object
  private: object
  data: object
  update: object
  metrics: object


def check_federable(config) -> None:
  """One line for a config the method itself refuses (`algorithms.check_config`), a combination
  the bridge does not carry (`REFUSED`), a method it does not carry yet
  (`NOT_YET`), a warm start (`init_from`), a method whose clients are one holder of every identity (`ONE_CLIENT`: the
  centralized bounds have nothing to federate), or a backend other than the loop."""
  for fields, reason in REFUSED.items():
    values = [config[f.split('.')[0]][f.split('.')[1]] for f in fields]
    if all(values):
      raise checks.UsageError(f'{" and ".join(f"{f}={v!r}" for f, v in zip(fields, values))} '
                              f'over Flower: {reason}; expected one of them alone.')
  if config.algorithm in NOT_YET:
    raise checks.UsageError(f'algorithm={config.algorithm!r} over Flower: '
                            f'{NOT_YET[config.algorithm]}; expected one of the methods '
                            'docs/federation.md lists as federated.')
  if config.init_from:   # both sides start from `init`'s draw; a warm start is not carried yet
    raise checks.UsageError(f'init_from={config.init_from!r} over Flower: the server and the '
                            "holders start from the method's init (the config's seed), not from "
                            "a run's checkpoint, yet; expected init_from=''.")
  if algorithms.get(config.algorithm).ONE_CLIENT:
    raise checks.UsageError(f'algorithm={config.algorithm!r} trains one client holding every '
                            'identity; nothing to federate (expected a federated method).')
  backend = policy.resolve_engine(config)[0]
  if backend != 'loop':
    raise checks.UsageError(f'engine.backend={config.engine.backend!r} ({backend} here); a '
                            "federation runs each client on its own holder, as the 'loop' "
                            "backend does: expected 'loop'.")
  try:   # the method's own checks, as the simulator's `setup.validate` runs them (not the data
    algorithms.check_config(config)   # source's: the server holds no data)
  except ValueError as error:
    raise checks.UsageError(str(error)) from None


def subject_frames(config) -> int:
  """Frames per subject of DP-SGD's subject draws (anti-spoofing `data.pad.subject_frames`), 0
  for draws by frame, as the source's training view sets it."""
  return int(config.data.pad.get('subject_frames', 0)) if 'pad' in config.data else 0


def round_key(config, r: int) -> jax.Array:
  """Round r's key, as the simulator's `train_round` makes it from the run's seed."""
  return jax.random.fold_in(jax.random.PRNGKey(config.seed), r + 1)


def init_key(config) -> jax.Array:
  """The key of `Algorithm.init`, as `run.setup.init_state` makes it."""
  return jax.random.fold_in(jax.random.PRNGKey(config.seed), 0)


def holder_dp(config, client_rows) -> privacy.DpSpec | None:
  """What a holder needs of the run's DP spec: the clip (fixed S, or the adaptive rule whose C_t
  comes in each message) and which keys it covers. The noise is the server's (its multiplier,
  which may depend on a resumed run's history, is the server's plan: `run/noise.plan_noise`),
  so it is left at 0 here; a client's clip reads none of it (core/engine.py `_one_client`)."""
  if not config.dp.enabled:
    return None
  clip_only = config.dp.to_dict()   # no accountant on the holder: the noise is not its to draw
  clip_only.update(target_epsilon=0.0, noise_multiplier=0.0)
  return privacy.spec_from_config(_with_section(config, 'dp', clip_only), tuple(client_rows))


def _with_section(config, name: str, values: dict):
  """A copy of `config` whose section `name` holds `values`."""
  copy = config.copy_and_resolve_references()
  copy[name].update(values)
  return copy


def secure_spec(config) -> secure_aggregation.Spec | None:
  """The masks' fixed point and neighbours (`secure_aggregation` config), or None when off."""
  sa = config.secure_aggregation
  return secure_aggregation.Spec(sa.fraction_bits, sa.neighbors) if sa.enabled else None


def agree(config, descriptions: list[roster.Description]) -> Agreement:
  """The method over the roster's skeleton, and its message templates (nothing runs: shapes
  from `jax.eval_shape` of the method's own functions)."""
  check_federable(config)
  fed = roster.skeleton(descriptions, subject_frames(config))
  method = algorithms.get(config.algorithm)
  _, step_mode, _, conv_gradient = policy.resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  algorithm = setup_lib.build_algorithm(config, method, model, fed, step_mode)
  state = jax.eval_shape(algorithm.init, init_key(config))
  one_id = jax.ShapeDtypeStruct((1,), jnp.int32)
  key = jax.eval_shape(lambda: jax.random.PRNGKey(0))
  client_input = jax.eval_shape(algorithm.broadcast, state.server, one_id, state.round, key)
  row = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), tree)
  per_client, private = row(client_input.per_client), row(state.clients)
  data = setup_lib.one_client_data(fed, config)
  dp, secure = holder_dp(config, algorithm.client_rows), secure_spec(config)
  scalar = lambda dtype: jax.ShapeDtypeStruct((), dtype)
  one_client = engine_lib._one_client   # pylint: disable=protected-access
  result = jax.eval_shape(
      # The masks' cohort size changes their values, not their shapes.
      functools.partial(one_client, algorithm, dp=dp, secure=secure, cohort=2),
      client_input.shared, per_client, private, data, scalar(jnp.int32), key,
      position=scalar(jnp.int32), share=scalar(jnp.float32),
      clip=scalar(jnp.float32) if dp is not None and dp.adaptive else None)
  return Agreement(algorithm, fed, dp, secure, client_input.shared, per_client, private, data,
                   result.update, result.metrics)


def stacked(tree):
  """`tree` with a leading axis of one (a cohort of one row, as the engine's programs take)."""
  return jax.tree.map(lambda x: np.asarray(x)[None], tree)


def client_program(agreement: Agreement):
  """One holder's round: the engine's jitted `_client_row` with the run's clip, what
  `engine.client_messages` runs (compiled once per algorithm, so holders sharing one process
  share it), on the holder's own rows stacked as a cohort of one. Under secure aggregation,
  `masked_program` instead."""
  programs = engine_lib._message_programs   # pylint: disable=protected-access
  return programs(agreement.algorithm, agreement.dp)[1]


@functools.lru_cache(maxsize=8)
def masked_program(algorithm, dp, secure, cohort: int):
  """One holder's round under secure aggregation: the loop backend's client
  (`RoundEngine._client_at`: row 0 of its stacked rows taken inside the program, then
  `_one_client` with the masks of a `cohort`-row cohort), jitted once per cohort size. Arguments
  (shared, per_client, private, data, client_id, rng, position, share, mask_secret, clip)."""
  def one(shared, per_client, private, data, client_id, rng, position, share, mask_secret, clip):
    take = lambda x: x[0]
    return engine_lib._one_client(   # pylint: disable=protected-access
        algorithm, shared, jax.tree.map(take, per_client), jax.tree.map(take, private), data,
        client_id, rng, dp, secure, position, share, cohort, None, clip, mask_secret)
  return jax.jit(one)
