"""Round r's client updates again, from the checkpoint before it: `EvalInputs.replay`, for the
evaluators that look at what the server received (attacks on the updates).

Round r (1-based) trained from the checkpoint of round r-1 (round 1 from the initial state); its
cohort, its data and its key are pure functions of the config and r (run/simulation.py), so
`core.engine.client_messages` on that state recomputes what each client sent: bit for bit when
the round ran on the loop backend, as the engine computes it there (on 'vmap' / 'map', the same
updates up to float rounding). With DP the updates are clipped as sent; secure aggregation's
masking is not applied. A replay uses this start's algorithm (the learning-rate decay rounds the
run kept, run/schedule.py) and DP spec, and reads the workdir: process 0's alone.
"""

import jax

from fedjax_face.core import checks
from fedjax_face.core import engine as engine_lib
from fedjax_face.io import checkpoint, files
from fedjax_face.run import resume, simulation
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
    config = self.config
    if r == 1:
      start = self.start if self.start is not None else setup_lib.warm_start(config)
      state = setup_lib.init_state(config, self.algorithm, start)
    else:
      directory = files.join(self.workdir, 'checkpoints')
      held = checkpoint.checkpoint_steps(directory)
      if r - 1 not in held:
        rounds = ', '.join(['1'] + [str(s + 1) for s in held if s + 1 <= config.num_rounds])
        raise checks.UsageError(
            f'replay({r}): round {r} trained from the checkpoint of round {r - 1}, which '
            f'{directory} no longer holds (rounds held: {", ".join(map(str, held)) or "none"}; '
            f'config.checkpoint_keep={config.checkpoint_keep}, config.checkpoint_every='
            f'{config.checkpoint_every}); expected a round that can be replayed: {rounds}.')
      if self._template is None:   # the structure a resume restores into (made once)
        self._template = setup_lib.init_state(config, self.algorithm, self.start)
      state = checkpoint.read_verified(
          self.workdir, r - 1, f'replay({r})', config.trust_unverified_checkpoints,
          trust_hint=resume.TRUST_FLAG, other=f'round {r} cannot be replayed from it',
          template=self._template)
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
