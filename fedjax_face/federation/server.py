"""The federation's server: the method's own sampling, broadcast, server step and server
optimizer, over holders it reaches through an `exchange` (Flower's grid in federation/apps.py, a
direct call in a test). No Flower here.

A round is the simulator's (run/simulation.py `train_round`, the loop backend of core/engine.py):
round r's cohort from `participation.Cohorts`, the broadcast from the server state, each holder's
`client_update` on its own data, then the engine's own jitted server step (`RoundEngine`'s
finish: the weighted mean weights n_k, the method's `server_update`, the metrics' mean) over the
replies in cohort order. The server's `RoundState.clients` is empty: every private row lives with
its holder (federation/holder.py).

Padding clients: a cohort the simulator pads (stragglers dropped) runs its padding rows at
weight 0; a federation has no holder for them, so they are left out. The weighted means are then
the same sums without zero terms: equal, though not promised bit for bit (the reduction's order).

`train_round(exchange, state, r)` is what `run/loop.run_rounds` calls, so the run's hooks
wrap the federation's rounds as they wrap the simulator's. `serve` runs them with the run's
divergence guard and checkpointing hook in a workdir opened by the run's own rules (run/resume.py: config.json, the
lock, verified checkpoints of the server state): a restarted server resumes at its newest
checkpoint, and each holder at the private state it kept for that round, or it refuses in one
line (federation/holder.py).

Privacy modes (federation/protocol.py says what each side runs). Under `dp.enabled` the server
plans the noise as the driver does (`run/noise.plan_noise`: the noise multiplier, from a resumed
checkpoint's history too), draws it in the engine's own server step, records the noise each
round ran at beside each checkpoint, and reports ε (`privacy_ledger`, results.json's 'privacy'
part). Under DP the cohort is fixed (the accountant composes the sampling of exactly m clients,
and the mean divides by m); under secure aggregation the masks of a missing holder do not
cancel. So under either a holder that does not reply stops the run in one line, and
`min_replies` is refused.
"""

import contextlib
import functools
from typing import Callable, NamedTuple

import jax
import numpy as np

from fedjax_face.core import checks, privacy
from fedjax_face.core import engine as engine_lib
from fedjax_face.core.algorithm import ClientResult
from fedjax_face.data import participation
from fedjax_face.federation import protocol, roster
from fedjax_face.io import files, metrics
from fedjax_face.run import hooks as hooks_lib, loop, noise, resume, setup as setup_lib
from fedjax_face.run.hooks import checkpointing, divergence, logging as logging_hook


class Request(NamedTuple):
  """What the server sends holder `client` in round `round`: the broadcast's `shared`, the
  holder's `per_client` row, and the round key; under adaptive clipping the round's clip C_t;
  under secure aggregation the holder's row of the cohort (`position`), its share of the mean
  and the cohort's size (the masks' pairs)."""
  round: int
  client: int
  shared: object
  per_client: object
  key: np.ndarray
  clip: np.ndarray | None = None
  position: int = 0
  share: np.ndarray | None = None
  cohort: int = 0


# (requests of one round, in cohort order) -> their replies (`ClientResult`s, `private` empty;
# None for a holder that did not reply in time).
Exchange = Callable[[list[Request]], list[ClientResult | None]]


class Server:
  """The server of one federation: `initial_state()`, then `train_round(exchange, state, r)`."""

  def __init__(self, config, descriptions: list[roster.Description], min_replies: int = 0):
    self.config, self.min_replies = config, int(min_replies)
    self.descriptions = roster.check_roster(config, descriptions, roster.code_label())
    self.agreement = protocol.agree(config, self.descriptions)
    fixed = fixed_cohort(config)
    if fixed and self.min_replies:
      raise checks.UsageError(f'min-replies={self.min_replies} with {fixed}: the cohort is fixed, '
                              'so a round without every reply stops; expected min-replies=0.')
    algorithm, fed = self.agreement.algorithm, self.agreement.fed
    self.cohorts = participation.Cohorts(config.federated, fed.num_examples, config.seed)
    self.num_examples = fed.num_examples.astype(np.float32)
    self.broadcast = jax.jit(algorithm.broadcast)
    # Under DP the noise of a fresh start; `plan_privacy` again on a resume.
    self.noise_secret = (privacy.noise_secret(config.dp.noise_seed) if config.dp.enabled
                         else None)
    self.plan_privacy(None, 0)

  def plan_privacy(self, record: dict | None, start_round: int) -> None:
    """The noise of rounds `start_round`.. (`run/noise.plan_noise` from the run record of the
    checkpoint resumed: its noise history), and the engine that draws it in its server step. A
    refused plan is one line (`checks.UsageError`)."""
    fed = self.agreement.fed
    self.noise_plan = noise.plan_noise(self.config, record, start_round,
                                       self.agreement.algorithm.client_rows, fed.num_clients,
                                       self.cohorts.size)
    self.engine = engine_lib.RoundEngine(
        self.agreement.algorithm, backend='loop', dp=self.noise_plan.dp,
        secure=self.agreement.secure,
        noise_secret=None if self.noise_plan.dp is None else self.noise_secret)

  def privacy_ledger(self, state) -> dict | None:
    """results.json's 'privacy' part for the rounds `state` has run (None without DP): ε by the
    accountants over the noise each round ran at, as the simulator's results report it."""
    plan = self.noise_plan
    if plan.dp is None:
      return None
    done = int(state.round)
    history = privacy.extended(plan.history, done - plan.start_round, plan.dp.noise_multiplier)
    final_clip = (float(np.asarray(privacy.clip_of(state.server))) if plan.dp.adaptive
                  else None)
    return privacy.ledger(self.config, plan.dp, self.agreement.fed.num_clients,
                          self.cohorts.size, done, history, final_clip)

  def initial_state(self):
    """The method's `init` (the config's seed), its per-client rows dropped: each holder draws
    its own (`Holder.initial_private`)."""
    state = self.agreement.algorithm.init(protocol.init_key(self.config))
    return state.replace(clients={})

  def cohort(self, r: int) -> np.ndarray:
    """Round r's real clients, in the simulator's cohort order (padding left out)."""
    ids = self.cohorts.padded(r, self.engine.cohort_multiple())
    return ids[ids < len(self.num_examples)]

  def requests(self, state, r: int) -> list[Request]:
    """Round r's messages, one per holder of the cohort."""
    ids = self.cohort(r)
    key = protocol.round_key(self.config, r)
    client_input = self.broadcast(state.server, ids, state.round, engine_lib.server_keys(key)[0])
    shared = jax.tree.map(np.asarray, client_input.shared)
    clip = engine_lib.round_clip(self.engine.dp, state)
    clip = None if clip is None else np.asarray(clip)
    # The loop backend's shares (`RoundEngine._run`), computed by the same function.
    shares = np.asarray(engine_lib.aggregation_shares(self.num_examples[ids], self.engine.dp),
                        np.float32)
    secure = self.engine.secure is not None
    return [Request(r, int(k), shared,
                    jax.tree.map(lambda x, i=i: np.asarray(x[i]), client_input.per_client),
                    np.asarray(key), clip, i, shares[i] if secure else None,
                    len(ids) if secure else 0)
            for i, k in enumerate(ids)]

  def finish(self, state, r: int, replies: list[ClientResult], ids: np.ndarray | None = None):
    """(the state after round r, its metrics): the engine's server step over the replies of
    clients `ids` (default: round r's cohort), in cohort order."""
    ids = self.cohort(r) if ids is None else np.asarray(ids)
    if len(replies) != len(ids):
      raise RuntimeError(f'round {r}: {len(replies)} replies for {len(ids)} clients.')
    results = [ClientResult(update=reply.update, private={}, metrics=reply.metrics)
               for reply in replies]
    weights = self.num_examples[ids]
    return self.engine._finish_list(   # pylint: disable=protected-access
        state, results, weights, ids.astype(np.int32), ids.astype(np.int32),
        protocol.round_key(self.config, r), self.engine.noise_secret)

  def train_round(self, exchange: Exchange, state, r: int):
    """Round r over the holders `exchange` reaches: what `run/loop.run_rounds` calls. A round
    some holders did not answer goes on with the others when `min_replies` allow it (as the
    simulator's stragglers dropped: their weight leaves the mean, and the line says who), and
    stops in one line otherwise."""
    requests = self.requests(state, r)
    replies = exchange(requests)
    missing = [q.client for q, reply in zip(requests, replies) if reply is None]
    fixed = fixed_cohort(self.config)
    if missing and fixed:
      raise RuntimeError(f'round {r}: clients {missing} did not reply; under {fixed} the cohort '
                         f'of {len(requests)} is fixed, so the run stops (expected every reply).')
    if missing:
      answered = len(requests) - len(missing)
      if not self.min_replies or answered < self.min_replies:
        raise RuntimeError(
            f'round {r}: clients {missing} did not reply; {answered} of {len(requests)} did, '
            f'expected {self.min_replies or len(requests)} (min-replies) to go on.')
      print(f'round {r}: clients {missing} did not reply; going on with the {answered} others '
            f'(min-replies={self.min_replies}).', flush=True)
    kept = [(q.client, reply) for q, reply in zip(requests, replies) if reply is not None]
    return self.finish(state, r, [reply for _, reply in kept],
                       np.array([k for k, _ in kept], np.int64))


def fixed_cohort(config) -> str:
  """Why a round cannot go on without one of its holders ('' when it can): DP's fixed
  denominator and accountant, or secure aggregation's masks (no dropout recovery)."""
  return ' and '.join(why for on, why in (
      (config.dp.enabled, 'dp.enabled (the mean divides by the fixed cohort size m, and the '
                          'accountant composes the sampling of exactly m clients)'),
      (config.secure_aggregation.enabled, 'secure_aggregation.enabled (a missing holder\'s '
                                          'masks do not cancel: no dropout recovery)')) if on)


def server_side(algorithm):
  """`algorithm` as the server's log sees it: without the class embeddings' norms, which the
  driver's log reads from every client's rows (FedPE's W_k), rows the server does not hold."""
  return algorithm._replace(class_embeddings=lambda state: None)


def serve(srv: Server, exchange: Exchange, workdir: str | None, hooks=()) -> loop.Trained:
  """The federation's rounds: from the newest checkpoint of `workdir` (or the start), with the
  run's divergence guard, training log (TensorBoard) and checkpointing hooks there, then
  `hooks`. `workdir` None: no checkpoint, from the start."""
  config, state = srv.config, srv.initial_state()
  with contextlib.ExitStack() as stack:
    # The noise each round ran at, beside each checkpoint (what a resume plans from).
    hook_list = (hooks_lib.Hook(record=lambda done: srv.noise_plan.record(done)),) + tuple(hooks)
    if workdir:
      files.make_workdir(workdir)
      stack.enter_context(files.workdir_lock(workdir))
      ckpt = resume.open_workdir(workdir, config.to_dict(), max_to_keep=config.checkpoint_keep,
                                 defaults=setup_lib.defaults(config),
                                 trust_unverified=config.trust_unverified_checkpoints)
      # Saves in flight are waited for on every way out; a failing run's own error stays the one
      # raised (as the driver does: experiment._finish).
      stack.push(lambda kind, error, trace: ckpt.finish(failing=error is not None))
      record = {}
      if ckpt.latest_round() is not None:
        state = ckpt.restore(state)
        record = ckpt.run_record or {}
        srv.plan_privacy(record, int(state.round))
      # The run's training log (TensorBoard under <workdir>/tensorboard, the progress rates), as
      # the driver writes it; closed on every way out.
      start_round, fl = int(state.round), config.federated
      writer = metrics.MetricWriter(files.join(workdir, 'tensorboard'))
      stack.callback(writer.close)
      progress = metrics.Progress(config.num_rounds, start_round,
                                  srv.cohorts.size * fl.local_steps * fl.batch_size)
      # In the driver's order (experiment.py): the divergence guard (stopped.json), the log,
      # the noise record, then the checkpoints, then the caller's hooks.
      hook_list = (divergence.divergence_guard(config, workdir, True, record.get('guard')),
                   logging_hook.logging(config, server_side(srv.agreement.algorithm), writer,
                                        progress,
                                        start_round, srv.noise_plan.epsilons,
                                        record.get('last_logged')),
                   hook_list[0], checkpointing.checkpointing(config, ckpt)) + hook_list[1:]
    return loop.run_rounds(functools.partial(srv.train_round, exchange), state, int(state.round),
                           config.num_rounds, hook_list)
