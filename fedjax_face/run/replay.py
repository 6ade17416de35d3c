"""Round r's client updates again, from the checkpoint before it: `EvalInputs.replay`, for the
evaluators that look at what the server received (attacks on the updates).

Round r (1-based) trained from the checkpoint of round r-1 (round 1 from the initial state); its
cohort, its data and its key are pure functions of the config and r (run/simulation.py), so
`core.engine.client_messages` on that state recomputes what each client sent: bit for bit when
the round ran on the loop backend, as the engine computes it there (on 'vmap' / 'map', the same
updates up to float rounding). With DP the updates are clipped as sent; secure aggregation's
masking is not applied. A replay uses this start's algorithm (the learning-rate decay rounds the
run kept, run/schedule.py) and DP spec, and reads the workdir: process 0's alone.

A finished run attacked afterwards (`python -m fedjax_face.evaluate --config.init_from=<its
workdir>`, `attacked_run`): the evaluation's config must train what the run trained (its
config.json; the fields a resume may change, `resume.resumable_fields`, aside, and the run's own
`init_from`, `num_rounds`, `checkpoint_keep` and `checkpoint_every` taken from it), so the replay
draws the run's cohorts, data, keys and DP clip. The state attacked is the run's own, restored
from its checkpoint: the final one of a finished run, round `init_from_step` when that is set.
A run the divergence guard stopped (its stopped.json; no results.json) is attacked at its last
accepted checkpoint, the newest it holds (the guard checks a round before it is checkpointed, so
no checkpoint holds a diverged state), and its attacks' results say so (`marks`: `diverged`,
`stopped_at_round`, `attacked_round`). A round r is replayed from the checkpoint of round r-1,
so it can be attacked when r = 1 or r-1 is held, and r is at most the round attacked.
"""

from typing import Any, NamedTuple

import jax

from fedjax_face.core import checks
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import participation
from fedjax_face.io import checkpoint, files
from fedjax_face.models import arcface_torch
from fedjax_face.run import noise, resume, schedule, simulation
from fedjax_face.run import setup as setup_lib


class Replay:
  """`replay(r)`: each real client's `ClientResult.update` in round r (1-based), in the order of
  round r's cohort (`simulation.cohort_of(sim.cohorts, sim.engine, r - 1)`, padding left out)."""

  def __init__(self, config, workdir: str, algorithm, sim: simulation.Simulation, start):
    self.config, self.workdir, self.algorithm, self.sim = config, workdir, algorithm, sim
    self.start = start   # the warm start (None: none, or a resume, which did not read it)
    self._template = None

  def __call__(self, r: int) -> list:
    config, sim = self.config, self.sim
    if not 1 <= r <= config.num_rounds:
      raise checks.UsageError(f'replay({r}): the run has rounds 1..{config.num_rounds}; expected '
                              'one of them.')
    state = self.state_before(r)
    cohort = simulation.cohort_of(sim.cohorts, sim.engine, r - 1)
    data = simulation.round_data(config, sim.fed, sim.cohorts, sim.engine, slice(None), r - 1)
    results = engine_lib.client_messages(
        self.algorithm, state, cohort, data, jax.random.fold_in(sim.root_rng, r), sim.engine.dp,
        num_clients=sim.fed.num_clients)
    return [result.update for result in results]

  def round_batches(self, r: int):
    """(round r's real clients in cohort order, what each trained on): `federated.sample_round`'s
    dict (images, labels, mask, class_mask), padding rows left out; the rows of `replay(r)`."""
    sim = self.sim
    cohort = simulation.cohort_of(sim.cohorts, sim.engine, r - 1)
    data = simulation.round_data(self.config, sim.fed, sim.cohorts, sim.engine, slice(None), r - 1)
    real = cohort < sim.fed.num_clients
    return cohort[real], jax.tree.map(lambda x: x[real], data)

  def state_before(self, r: int):
    """The round state round r trained from: the initial state for round 1, else the checkpoint
    of round r-1, verified as a resume verifies (UsageError naming the rounds held when it is
    not kept)."""
    if r != 1:
      directory = files.join(self.workdir, 'checkpoints')
      held = checkpoint.checkpoint_steps(directory)
      if r - 1 not in held:
        config = self.config
        raise checks.UsageError(
            f'replay({r}): round {r} trained from the checkpoint of round {r - 1}, which '
            f'{directory} no longer holds (rounds held: {", ".join(map(str, held)) or "none"}; '
            f'config.checkpoint_keep={config.checkpoint_keep}, config.checkpoint_every='
            f'{config.checkpoint_every}); expected a round that can be replayed: '
            f'{_listed(replayable(held, config.num_rounds))}.')
    return self.state_after(r - 1, f'replay({r})', f'round {r} cannot be replayed from it')

  def state_after(self, done: int, what: str = '', other: str = ''):
    """The round state after round `done`: the initial state for 0, else the checkpoint of round
    `done`, verified as a resume verifies (`what` reads it; `other`: what to do instead), in
    the structure a resume restores."""
    config = self.config
    if done == 0:
      start = self.start if self.start is not None else setup_lib.warm_start(config)
      state = setup_lib.init_state(config, self.algorithm, start)
    else:
      if self._template is None:   # the structure a resume restores into (made once)
        self._template = setup_lib.init_state(config, self.algorithm, self.start)
      state = checkpoint.read_verified(
          self.workdir, done, what or f'the checkpoint of round {done}',
          config.trust_unverified_checkpoints, trust_hint=resume.TRUST_FLAG,
          other=other or 'rerun the run it comes from', template=self._template)
    if config.engine.client_state == 'host':
      state = state.replace(clients=engine_lib.host_clients(state.clients))
    return state

  def received(self, r: int):
    """(round r's real clients in cohort order, the `ClientInput` the server broadcast to them,
    its `per_client` rows theirs alone): what each client of round r got from the server, the
    curious client's view (FedFV's equivalent embeddings), recomputed from the state before it
    with the round's server key (`core.engine.server_keys`), as the engine's broadcast ran."""
    sim = self.sim
    state = self.state_before(r)
    cohort = simulation.cohort_of(sim.cohorts, sim.engine, r - 1)
    key = engine_lib.server_keys(jax.random.fold_in(sim.root_rng, r))[0]
    client_input = self.algorithm.broadcast(state.server, cohort, state.round, key)
    real = cohort < sim.fed.num_clients
    return cohort[real], client_input._replace(
        per_client=jax.tree.map(lambda x: x[real], client_input.per_client))


def replayer(config, workdir: str, algorithm, sim: simulation.Simulation, start) -> Replay:
  """`replay(r)` of the run in `workdir` (`Replay`): `algorithm` and `sim` the run's, `start` its
  warm start (None when it has none or did not read it: a resume; round 1 then reads it again)."""
  return Replay(config, workdir, algorithm, sim, start)


def replayable(held, last: int) -> list[int]:
  """The rounds up to `last` a replay can recompute from the checkpoints `held`: round 1 (from
  the initial state) and every round whose predecessor is held."""
  return [1] + [s + 1 for s in held if 2 <= s + 1 <= last]


def _listed(rounds) -> str:
  return ', '.join(map(str, rounds)) or 'none'


def _span(rounds) -> str:
  """'round 3', or 'rounds 2-3'."""
  return f'round {rounds[0]}' if len(rounds) == 1 else f'rounds {rounds[0]}-{rounds[-1]}'


def _off(kind: str) -> str:
  field, value, _ = schedule.REPLAYED[kind]
  return f'evals.{kind}.{field}={value!r}'


class AttackedRun(NamedTuple):
  """A run attacked afterwards as it trained (`attacked_run`): its workdir, its config as trained
  with the evaluation's evaluators (`config`), the round whose state is attacked, whether the
  divergence guard stopped it (and at which round), the run record beside that checkpoint, and
  the rounds asked replayed (`replayed_rounds`)."""
  workdir: str
  config: Any
  round: int
  diverged: bool
  stopped_round: int | None
  record: dict | None
  replayed: dict

  def marks(self) -> dict:
    """What each attack's results carry: the state attacked, and whether the run diverged."""
    return {'attacked_round': self.round, 'diverged': self.diverged,
            **({'stopped_at_round': self.stopped_round} if self.diverged else {})}


def last_accepted(workdir: str) -> tuple[dict | None, list[int]]:
  """(the stop record of the run in `workdir`, None when the divergence guard did not stop it;
  the rounds its checkpoints hold). Reads only."""
  stopped = resume.read_stopped(workdir) if files.exists(workdir) else None
  directory = files.join(workdir, 'checkpoints')
  held = checkpoint.checkpoint_steps(directory) if files.exists(directory) else []
  return stopped, held


def at_last_accepted(config):
  """`config`, or a copy whose `init_from_step` names the last accepted checkpoint when
  `init_from` is a run the divergence guard stopped and no step is given (module docstring)."""
  if not config.init_from or config.init_from_step or arcface_torch.is_backbone_file(
      config.init_from):
    return config
  stopped, held = last_accepted(config.init_from)
  if stopped is None or not held:
    return config
  config = config.copy_and_resolve_references()
  config.init_from_step = held[-1]
  return config


def attacked_run(config) -> AttackedRun | None:
  """The run `config.init_from` names, attacked as it trained (module docstring), or None when
  the evaluation cannot be the run's own (a backbone file, or a config that trains otherwise) and
  no section asks a round replayed: the model then goes through the method's `init` as before.
  Reads only. Refused in one line (UsageError) naming the field and what was expected: a replay
  asked of a backbone file, of a run trained otherwise (the fields that differ), of a round
  whose previous checkpoint is not held or later than the state attacked; a stopped run with no
  checkpoint. FileNotFoundError / `resume.InitFromError` as `run.setup.validate` raises them."""
  path, asked = config.init_from, schedule.replayed_rounds(config)
  first = next(iter(asked.items()), None)   # the attack a refusal names
  if arcface_torch.is_backbone_file(path):
    if first:
      kind, (field, rounds) = first
      raise checks.UsageError(
          f"{field} replays the client updates of {_span(rounds)} from a run's checkpoints, but "
          f'config.init_from={path!r} is an arcface_torch backbone file (no rounds); expected '
          f"a finished run's workdir as config.init_from, or {_off(kind)}.")
    return None
  stopped, held = last_accepted(path)
  if stopped is not None and not config.init_from_step:
    if not held:
      raise checks.UsageError(
          f'config.init_from={path!r} was stopped by the divergence guard at round '
          f'{stopped.get("round")} before its first checkpoint; expected a run with a '
          'checkpoint to evaluate.')
    attacked = held[-1]
  else:
    attacked = resume.init_from_round(path, config.init_from_step)
  old = files.read_json(files.join(path, 'config.json'))
  new = config.to_dict()
  skip = resume.resumable_fields(new) + ('init_from', 'init_from_step')
  diffs = resume.config_differences(old, resume.as_json(new),
                                    resume.as_json(setup_lib.defaults(config)), skip)
  if diffs:
    if first:
      kind, (field, rounds) = first
      raise checks.UsageError(
          f'{field} replays {_span(rounds)} of the run config.init_from={path!r}, which '
          f'trained otherwise (its config.json -> here: {"; ".join(diffs)}); expected the '
          f"run's own value of every field that changes what was trained, or {_off(kind)}.")
    return None
  for field, r in [(field, r) for field, rounds in asked.values() for r in rounds]:
    if r > attacked or (r > 1 and r - 1 not in held):
      why = (f'the state attacked is round {attacked}' + (
          ', the last accepted checkpoint of a run the divergence guard stopped at round '
          f'{stopped.get("round")}' if stopped is not None else '') if r > attacked else
          f'round {r} is replayed from the checkpoint of round {r - 1}, which '
          f'{files.join(path, "checkpoints")} no longer holds (rounds held: {_listed(held)}; the '
          f'run\'s checkpoint_keep={old.get("checkpoint_keep")}, checkpoint_every='
          f'{old.get("checkpoint_every")})')
      raise checks.UsageError(f'{field} asks round {r}: {why}; expected a round that can be '
                              f'replayed: {_listed(replayable(held, attacked))}.')
  run_config = config.copy_and_resolve_references()
  for field in ('init_from', 'init_from_step', 'num_rounds', 'checkpoint_keep',
                'checkpoint_every'):
    if field in old:
      run_config[field] = old[field]
  if 'init_from' not in old:
    run_config.init_from, run_config.init_from_step = '', 0
  record = (checkpoint.read_digest_file(checkpoint.digest_path(path, attacked))[1]
            if files.exists(checkpoint.digest_path(path, attacked)) else None)
  return AttackedRun(path, run_config, attacked, stopped is not None,
                     None if stopped is None else stopped.get('round'), record,
                     {kind: rounds for kind, (_, rounds) in asked.items()})


def attacked_replay(attacked: AttackedRun, setup, state) -> Replay:
  """The replay of the run `attacked` names, on `setup` (`setup_lib.set_up` of its config with
  its checkpoint's run record) and its restored `state`: its cohorts, its engine with the DP
  spec its rounds ran under (`noise.plan_noise` from that record), nothing prefetched."""
  config = attacked.config
  cohort_size = participation.Cohorts(config.federated, setup.fed.num_examples, config.seed).size
  dp = noise.plan_noise(config, attacked.record, attacked.round, setup.algorithm.client_rows,
                        setup.fed.num_clients, cohort_size, epsilons=False).dp
  eng, _ = setup_lib.plan_engine(config, setup.algorithm, state, setup.fed, cohort_size,
                                 setup.backend, setup_lib.make_mesh(config, setup.backend),
                                 setup.loop_threads, dp)
  sim = simulation.simulation(config, eng, setup.fed, config.num_rounds)   # prefetches nothing
  return Replay(config, attacked.workdir, setup.algorithm, sim, None)
