"""What a run builds before it opens its workdir: the config checked, the data read, the model it
starts from, the algorithm, and (once the state exists) the engine. Nothing here writes a file."""

import time
from typing import NamedTuple

import jax
import numpy as np

from fedjax_face import algorithms, config_lib, eval as eval_lib, models
from fedjax_face.core import blocks as blocks_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import distributed, policy, privacy, secure_aggregation
from fedjax_face.data import federated, sources
from fedjax_face.models import arcface_torch, starts
from fedjax_face.run import resume, schedule


def defaults(config) -> dict:
  """The base config of the config's task with every source's section and the method's own, at
  their defaults: what a field missing from an older config.json is compared at (run/resume.py;
  a method's section added since the run counts at its defaults, as a shared field does)."""
  base = config_lib.base_config(sources.task_of(config))
  section = algorithms.get(config.algorithm).config_section()
  if section is not None:
    base[algorithms.section_name(config.algorithm)] = section
  return base.to_dict()


def validate(config, resuming: bool = False) -> None:
  """Every check of a config: the shared sections and the data source's, the method's, each
  evaluator's, and that a run it starts from (`init_from`) exists, finished (or `init_from_step`
  names a round it holds) and trained on the same data (the source's `data_fields`). A run
  `resuming` its own checkpoints needs nothing of `init_from` (they hold everything), so it is
  not read: a start that has been moved or deleted since does not block the resume."""
  config_lib.validate(config)
  algorithms.check_config(config)
  eval_lib.check_config(config)
  if resuming:
    return
  if config.init_from and arcface_torch.is_backbone_file(config.init_from):
    if config.init_from_step:
      raise ValueError(f'config.init_from_step={config.init_from_step} with the backbone file '
                       f'config.init_from={config.init_from!r}; expected 0 (a file has no rounds).')
    _, name, dim = arcface_torch.read_backbone(config.init_from, config.model)
    arcface_torch.check_model(config.init_from, name, dim, config.model)
  elif config.init_from:
    resume.init_from_round(config.init_from, config.init_from_step)
    resume.check_init_data(config.init_from, config.to_dict(), sources.data_fields(config),
                           defaults=defaults(config))


def warm_start(config):
  """What `Algorithm.init` starts from, or None: the arcface_torch backbone file or the finished
  run (its round `init_from_step`) `config.init_from` names (`models.starts.load_init`). The one
  place a run reads another run's weights."""
  if not config.init_from:
    return None
  step = (0 if arcface_torch.is_backbone_file(config.init_from) else
          resume.init_from_round(config.init_from, config.init_from_step))
  return starts.load_init(config.init_from, config.model, config.data.image_size, step=step,
                          trust_unverified=config.trust_unverified_checkpoints,
                          trust_hint=resume.TRUST_FLAG)


def one_client_data(fed, config):
  """One client's round data without the cohort axis: the shapes `engine.plan_width` sizes from
  (a padding client, so nothing is decoded but one image)."""
  fl = config.federated
  data = federated.sample_round(fed, np.array([fed.num_clients], np.int32), round_index=0,
                                seed=config.seed, steps=fl.local_steps, batch_size=fl.batch_size,
                                local_epochs=fl.local_epochs)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), data)


def load_data(config, method):
  """(the data source, its data, what the method trains on, the evaluators built on the source's
  federated view): what a run and an evaluation alone both start from."""
  source = sources.get(config.data.source)
  data = source.load(config)
  fed_view, fed = source.training_views(config, data, method.ONE_CLIENT)
  evaluators = eval_lib.make_evaluators(config, eval_lib.EvalSetup(config, data, fed_view))
  return source, data, fed, evaluators


def build_algorithm(config, method, model, fed, step_mode: str):
  """The method's `Algorithm`, wrapped in the federated blocks its config switches on
  (core/blocks.py: server optimizer, FedProx / SCAFFOLD, compression)."""
  algorithm = method.build(config, model, fed, step_mode=step_mode)
  blocks = blocks_lib.from_config(config)
  return blocks_lib.wrap(algorithm, blocks, fed.num_clients) if blocks.active else algorithm


class Setup(NamedTuple):
  """What a run builds before it opens its workdir (`set_up`): the data source, its data, the
  method's training view and the evaluators (`load_data`), the seconds reading them took, the
  engine settings `policy.resolve_engine` chose, the model, the algorithm, the newest
  checkpoint's run record it was built with, and the line saying which learning-rate decay
  rounds an extension kept ('' when none)."""
  source: object
  data: object
  fed: object
  evaluators: list
  data_s: float
  backend: str
  step_mode: str
  loop_threads: int
  conv_gradient: str
  model: object
  algorithm: object
  prior: dict | None
  kept: str


def set_up(config, method, prior: dict | None) -> Setup:
  """Reads the data and builds the model and algorithm (nothing compiled, nothing written);
  `prior`: the newest checkpoint's run record, whose learning-rate decay rounds an extension
  keeps (`schedule.with_start_decay_rounds`). A reader's error here is a usage error naming the
  file and line, raised before the workdir is touched."""
  t0 = time.perf_counter()
  source, data, fed, evaluators = load_data(config, method)
  data_s = time.perf_counter() - t0
  backend, step_mode, loop_threads, conv_gradient = policy.resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  build_config, kept = schedule.with_start_decay_rounds(config, prior)
  algorithm = build_algorithm(build_config, method, model, fed, step_mode)
  return Setup(source, data, fed, evaluators, data_s, backend, step_mode, loop_threads,
               conv_gradient, model, algorithm, prior, kept)


def make_mesh(config, backend: str):
  """The clients mesh, or None for the loop backend in one process (several processes: the mesh
  spans them)."""
  if backend != 'loop' or jax.process_count() > 1:
    return engine_lib.make_mesh(config.engine.num_devices or None)
  return None


def init_state(config, algorithm, start):
  """The round state before any round (`start`: the warm start, or None). With
  `engine.client_state='host'` the per-client state is made in host memory (the CPU device),
  never whole on an accelerator."""
  if config.engine.client_state == 'host' and jax.process_count() > 1:
    raise ValueError(f"engine.client_state='host' runs in one process ({jax.process_count()} "
                     "here): each process would need every client's rows; use 'device'.")
  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 0)
  if config.engine.client_state != 'host':
    return algorithm.init(rng, start)
  with jax.default_device(jax.local_devices(backend='cpu')[0]):
    return algorithm.init(rng, start)


def placed_like(template, restored):
  """`restored` (a checkpoint's host arrays) put where `template`'s leaves are when a leaf spans
  several devices (a centralized run's class rows split over its `classes` mesh and the state
  replicated beside them: algorithms/sharded_classes.py); every other leaf as it was read (the
  engine places it)."""
  def put(like, x):
    if isinstance(like, jax.Array) and len(like.sharding.device_set) > 1:
      return jax.device_put(x, like.sharding)
    return x
  return jax.tree.map(put, template, restored)


def restored_state(config, algorithm, start, ckpt):
  """(the round state to train from, the run record of the checkpoint it came from, or None):
  process 0 (`ckpt` not None) restores the newest checkpoint that verifies and broadcasts it;
  without one, every process starts from `init_state`."""
  chief = ckpt is not None
  state, record = init_state(config, algorithm, start), None
  if chief and ckpt.latest_round() is not None:
    state = placed_like(state, ckpt.restore(state))
    record = ckpt.run_record
  state = distributed.process_zero_value(state, chief)   # only process 0 reads the workdir
  record = distributed.shared_json(record, chief)
  if config.engine.client_state == 'host':   # kept as numpy arrays the engine updates in place
    state = state.replace(clients=engine_lib.host_clients(state.clients))
  return state, record


def plan_engine(config, algorithm, state, fed, cohort_size: int, backend: str, mesh,
                loop_threads: int, dp: privacy.DpSpec | None = None):
  """(engine, memory plan or None): the chunk width sized from the device memory first when
  `engine.map_width` is 0 (auto) and the backend batches clients."""
  map_width, plan = config.engine.map_width, None
  if backend != 'loop' and not map_width:
    plan = engine_lib.plan_width(algorithm, state, cohort_size, one_client_data(fed, config),
                                 backend=backend, mesh=mesh,
                                 memory_fraction=config.engine.memory_fraction, dp=dp,
                                 client_state=config.engine.client_state)
    map_width = plan.map_width
  secure = config.secure_aggregation
  eng = engine_lib.RoundEngine(
      algorithm, backend=backend, map_width=map_width, mesh=mesh, loop_threads=loop_threads,
      dp=dp, client_state=config.engine.client_state,
      secure=secure_aggregation.Spec(secure.fraction_bits, secure.neighbors)
      if secure.enabled else None,
      noise_secret=privacy.noise_secret(config.dp.noise_seed) if dp is not None else None)
  return eng, plan
