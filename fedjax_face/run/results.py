"""results.json: what a run reports (`run_results`), its name (`run_name`), the federated blocks
it trained with (`blocks_in_effect`), and the digest that ties it to its config.json: a reader
refuses results that are not the result of the config beside them (`stale_results`; a run that
opens a workdir removes them first: run/resume.py)."""

import hashlib
import json
import time

import jax
import numpy as np

from fedjax_face.core import communication, precision, privacy, xla_flags
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import sources
from fedjax_face.io import checkpoint, files, provenance
from fedjax_face.run import resume
from fedjax_face.run import setup as setup_lib



def run_name(config, method) -> str:
  """results.json's `config_name`: the method's variant, then what the data source calls the run
  (recognition: the head's loss and the partition; anti-spoofing: the centers and the target)."""
  return f'{method.variant_name(config)}/{sources.run_name(config)}'


def config_digest(config_dict: dict) -> str:
  """The SHA-256 of a config as config.json records it (its provenance record left out):
  results.json carries it, so a reader can tell that the two describe the same run."""
  config_dict = {k: v for k, v in config_dict.items() if k != checkpoint.PROVENANCE_KEY}
  return hashlib.sha256(json.dumps(resume.as_json(config_dict), sort_keys=True).encode()
                        ).hexdigest()


def stale_results(workdir: str, results: dict) -> str | None:
  """Why `results` (the workdir's results.json) is not the result of the run its config.json
  describes, or None when it is (or when no readable config.json can tell): its `config_sha256`
  differs from config.json's, or, for results written before the digest was recorded, its
  algorithm or rounds. A run that starts in a workdir writes config.json first, so a results.json
  left from an earlier run never matches it."""
  path = files.join(workdir, 'config.json')
  try:
    config_dict = files.read_json(path)
  except (OSError, ValueError):
    return None
  if 'config_sha256' in results:
    if results['config_sha256'] != config_digest(config_dict):
      return f'its config_sha256 is not that of {path}'
    return None
  for field, key in (('algorithm', 'algorithm'), ('rounds', 'num_rounds')):
    if field in results and key in config_dict and results[field] != config_dict[key]:
      return f'its {field} {results[field]!r} is not {path}\'s {config_dict[key]!r}'
  return None


def blocks_in_effect(config, method) -> dict:
  """results.json's record of the federated blocks a run trained with, each with its settings, or
  'none' / 'fedavg' when off: the server optimizer, the client correction (FedProx / SCAFFOLD),
  the update codec, secure aggregation and who takes part in each round (core/blocks.py,
  core/secure_aggregation.py, data/participation.py)."""
  if method.ONE_CLIENT:
    return {'server_optimizer': 'none (centralized)', 'correction': 'none', 'compression': 'none',
            'secure_aggregation': 'none', 'sampling': 'none (centralized)'}
  so, comp, sa, fl = (config.server_optimizer, config.compression, config.secure_aggregation,
                      config.federated)
  plain = so.name == 'fedavg' and so.learning_rate in (0, 1)
  optimizer = 'fedavg' if plain else {
      'name': so.name, 'learning_rate': so.learning_rate,
      **({'momentum': so.momentum} if so.name == 'fedavgm' else
         {'b1': so.b1, 'b2': so.b2, 'tau': so.tau} if so.name != 'fedavg' else {})}
  correction = config.optimizer.correction
  return {
      'server_optimizer': optimizer,
      'correction': (correction if correction != 'fedprox' else
                     {'name': 'fedprox', 'mu': config.optimizer.prox_mu}),
      'compression': 'none' if comp.codec == 'none' else {
          'codec': comp.codec, **({'bits': comp.bits} if comp.codec == 'quantize' else
                                  {'fraction': comp.fraction})},
      'secure_aggregation': 'none' if not sa.enabled else {
          'fraction_bits': sa.fraction_bits, 'neighbors': sa.neighbors},
      'sampling': {'name': fl.sampling, 'participation': fl.participation,
                   'straggler_drop': fl.straggler_drop,
                   **({'availability_alpha': fl.availability_alpha}
                      if fl.sampling == 'availability' else {})},
  }


def engine_record(setup, engine, plan) -> dict:
  """results.json's `engine`: how the rounds ran."""
  return {'backend': setup.backend, 'step_mode': setup.step_mode, 'devices': jax.device_count(),
          'processes': jax.process_count(), 'clients_devices': engine.num_shards,
          'map_width': engine.width, 'width_plan': plan._asdict() if plan else None,
          'loop_threads': engine.loop_threads if setup.backend == 'loop' else None,
          'conv_gradient': setup.conv_gradient,
          'cpu_convolutions': (xla_flags.cpu_convolutions_in_effect()
                               if jax.default_backend() == 'cpu' else None),
          'platform': jax.default_backend()}


def final_clip(dp, state) -> float | None:
  """The adaptive clip after the last round (None under a fixed clip)."""
  if dp is None or not dp.adaptive:
    return None
  return float(np.asarray(engine_lib.local_copy(privacy.clip_of(state.server))))


def run_results(config, method, setup, sim, plan, noise, trained, outputs, plots, last_logged,
                start_round: int, eval_s: float, t_start: float) -> dict:
  """results.json of a finished run. `sim`: the run's `simulation.Simulation`; `plan`: the
  engine's memory plan (None: none); `noise`: its `noise.NoisePlan`; `trained`: what
  `loop.run_rounds` returned; `outputs`: the final evaluation; `last_logged`: the metrics of the
  last logged round."""
  fl, fed, algorithm, state = config.federated, setup.fed, setup.algorithm, trained.state
  cohort_size = sim.cohorts.size
  return {
      'algorithm': config.algorithm,
      'config_name': run_name(config, method),
      'config_sha256': config_digest(config.to_dict()),
      'rounds': config.num_rounds,
      'images_seen': config.num_rounds * cohort_size * fl.local_steps * fl.batch_size,
      'blocks': blocks_in_effect(config, method),
      # The compute dtype 'auto' resolved to here (core/precision.py): a workdir resumed on
      # another platform says what each start computed in (config.json's provenance).
      'engine': {**engine_record(setup, sim.engine, plan),
                 'compute_dtype': precision.resolve_here(config.model.dtype)},
      'timing': {'data_s': setup.data_s, 'train_s': trained.train_s, 'eval_s': eval_s,
                 'first_round_s': trained.first_round_s, 'in_rounds_s': trained.in_rounds_s,
                 'between_rounds_s': trained.train_s - trained.in_rounds_s,
                 'resumed_from_round': start_round,
                 'total_s': time.perf_counter() - t_start},
      'last_logged_round': last_logged,
      'privacy': (privacy.ledger(config, noise.dp, fed.num_clients, cohort_size,
                                 config.num_rounds, noise.total, final_clip(noise.dp, state))
                  if noise.dp is not None else {'enabled': False}),
      'communication': None if method.ONE_CLIENT else communication.ledger(
          algorithm, state, setup_lib.one_client_data(fed, config),
          [sim.cohorts(r) for r in range(config.num_rounds)], fed.num_clients,
          wire=sim.engine.client_wire),
      **{kind: out.results for kind, out in outputs.items()},
      **({'method_state': algorithm.summary(state)} if algorithm.summary else {}),
      'plots': plots,
      'provenance': provenance.collect(),
  }
