"""The simulated federation's training step: round r's cohort, its data (drawn ahead in a
background thread while the round before trains), and the engine's round (core/engine.py)."""

from typing import NamedTuple

import jax
import numpy as np

from fedjax_face.data import federated, participation, pipeline


class Simulation(NamedTuple):
  """What `train_round` needs: the engine, the cohorts (`participation.Cohorts`), the training
  view, each client's example count (the aggregation weights), the rows of the cohort this
  process loads, the prefetcher of round data, and the run's root key."""
  engine: object
  cohorts: participation.Cohorts
  fed: object
  num_examples: np.ndarray
  rows: object
  round_data: pipeline.Prefetcher
  root_rng: jax.Array


def cohort_of(cohorts: participation.Cohorts, engine, r: int) -> np.ndarray:
  """Round r's cohort, padded to the engine's multiple."""
  return cohorts.padded(r, engine.cohort_multiple())


def round_data(config, fed, cohorts, engine, rows, r: int):
  """Round r's batches of this process's cohort rows. `sample_round` is a pure function of (seed,
  round, client), so prefetching changes only when the data is made, and each process can draw
  just its own rows."""
  fl = config.federated
  return federated.sample_round(
      fed, cohort_of(cohorts, engine, r)[rows], round_index=r, seed=config.seed,
      steps=fl.local_steps, batch_size=fl.batch_size, local_epochs=fl.local_epochs,
      balanced=fl.balanced_classes)


def simulation(config, engine, fed, start_round: int) -> Simulation:
  """The simulation of `config`'s rounds `start_round`.. on `engine` (its prefetcher started)."""
  cohorts = participation.Cohorts(config.federated, fed.num_examples, config.seed)
  rows = engine.process_rows(len(cohort_of(cohorts, engine, 0)))
  prefetcher = pipeline.Prefetcher(
      lambda r: round_data(config, fed, cohorts, engine, rows, r),
      range(start_round, config.num_rounds), depth=config.data.prefetch)
  return Simulation(engine, cohorts, fed, fed.num_examples.astype(np.float32), rows, prefetcher,
                    jax.random.PRNGKey(config.seed))


def train_round(sim: Simulation, state, r: int):
  """Round r: (the state after it, its training metrics). Padding clients weigh nothing."""
  cohort = cohort_of(sim.cohorts, sim.engine, r)
  num_clients = sim.fed.num_clients
  weights = np.where(cohort < num_clients,
                     sim.num_examples[np.minimum(cohort, num_clients - 1)], 0.0)
  data = sim.round_data.get(r)
  return sim.engine.run_round(state, cohort, weights, data, jax.random.fold_in(sim.root_rng, r + 1))
