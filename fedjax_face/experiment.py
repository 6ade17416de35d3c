"""`train_and_evaluate(config, workdir)`: data -> partition -> algorithm -> rounds -> evaluation.

Everything a run does lives here so tests can call it directly; `main.py` only parses flags.
Outputs in the workdir: config.json, checkpoints/ (resumed automatically), tensorboard/,
results.json, report.md and PNG plots (data samples, ROC curves, class-embedding similarity).

Multi-host (`initialize_distributed`, `launch/tpu_pod.sh`, `launch/slurm_gpu.sh`): every process
runs this same function. Each samples and loads only the cohort rows of its own devices
(`RoundEngine.process_rows`); the round state is replicated, so every process logs and evaluates
the same numbers, but only process 0 touches the workdir (it alone reads a checkpoint to resume,
and broadcasts it).
"""

import io
import os
import re
import time

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from fedjax_face import algorithms, config_lib, models
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated, identification_set, partition, pipeline, sources, stores
from fedjax_face.data import synthetic
from fedjax_face.eval import diagnostics, identification, plots, verification
from fedjax_face.io import checkpoint, files, metrics, report


# On XLA CPU (canonical conv gradient) unrolled local steps beat scanned ones only for a few
# steps: the README run (2 steps) trained at 3,515 img/s unrolled vs 3,138 scanned; one client's 8
# steps ran at 2,444 vs 2,768; at 38 steps scanned ran at 3,828 vs 3,142 img/s and compiled in
# seconds instead of ~70 s.
UNROLL_MAX_STEPS = 4


def resolve_engine(config, platform: str | None = None) -> tuple[str, str, int, str]:
  """(backend, step_mode, loop_threads, conv_gradient), 'auto' (0 threads) resolved by platform.

  The rules come from `python -m fedjax_face.bench` and the runs in BUILD_NOTES.md ("Round engine
  throughput", "Known XLA quirks"):
  XLA CPU: a loop over clients ('loop'), one client per usable CPU at once
    (`engine.loop_threads=0`): XLA CPU runs a small client's program on about one core. On 2 cores
    that is 1.34-1.64x the sequential loop of a jitted step (one thread: 0.93-1.19x) and 2.3-3.9x
    centralized training on the same images; vmap over clients ran at 0.21-0.44x the one-thread
    loop (per-client weights make grouped convolutions). Local steps are unrolled up to
    `UNROLL_MAX_STEPS` and scanned beyond (constant compile time). Inside while loops (scanned
    steps, `map`'s lax.map) convolutions use the 'canonical' gradient (`models/conv.py`): with
    XLA's own a conv's gradients ran ~34x slower there (loop/scan 146 vs 2,252 img/s on the
    FedGC-like bench cohort); unrolled, XLA's own was faster (loop/unroll 2,663 vs 2,245).
  GPU / TPU: all clients at once with scanned steps ('vmap', 'scan'), chunked by memory
    (`engine.map_width=0`, `RoundEngine.plan`), XLA's own conv gradient; not measured here (no
    accelerator was lent).
  """
  platform = platform or jax.default_backend()
  on_cpu = platform == 'cpu'
  backend = config.engine.backend
  if backend == 'auto':
    backend = 'loop' if on_cpu else 'vmap'
  step_mode = config.engine.step_mode
  if step_mode == 'auto':
    step_mode = 'unroll' if on_cpu and config.federated.local_steps <= UNROLL_MAX_STEPS else 'scan'
  # One accelerator runs one program at a time: more threads would only queue on it.
  loop_threads = config.engine.loop_threads or (stores.usable_cpus() if on_cpu else 1)
  return backend, step_mode, loop_threads, conv_gradient_for(config, backend, step_mode, platform)


def conv_gradient_for(config, backend: str, step_mode: str, platform: str | None = None) -> str:
  """`engine.conv_gradient`, 'auto' resolved: 'canonical' where XLA CPU runs convs in while loops
  (scanned steps, `map`'s lax.map), else XLA's own ('xla'), which was faster unrolled."""
  if config.engine.conv_gradient != 'auto':
    return config.engine.conv_gradient
  in_loops = step_mode == 'scan' or backend == 'map'
  return 'canonical' if (platform or jax.default_backend()) == 'cpu' and in_loops else 'xla'


DISTRIBUTED_ENV = 'FEDJAX_FACE_DISTRIBUTED'   # off | auto | on; read when engine.distributed='auto'
_PROCESS_ENV = {'coordinator_address': 'JAX_COORDINATOR_ADDRESS',
                'num_processes': 'JAX_NUM_PROCESSES', 'process_id': 'JAX_PROCESS_ID'}


def distributed_settings(mode: str, *, coordinator_address: str | None = None,
                         num_processes: int | None = None, process_id: int | None = None,
                         environ=None) -> dict | None:
  """The arguments of `jax.distributed.initialize`, or None for a one-process run. Starts nothing.

  Modes (`config.engine.distributed`): 'off' one process; 'on' always initialise; 'auto' (the
  default) initialise only when something names a multi-process run — the environment variable
  FEDJAX_FACE_DISTRIBUTED=on, a coordinator address, or more than one process — so a plain run on
  one host never waits for peers. Explicit arguments (main.py's flags) win over the environment
  (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID); what both leave out (None) JAX
  finds itself under SLURM, Open MPI and on Cloud TPU VMs.
  """
  environ = os.environ if environ is None else environ
  source = 'config.engine.distributed'
  if mode == 'auto' and environ.get(DISTRIBUTED_ENV, '').strip():
    mode, source = environ[DISTRIBUTED_ENV].strip().lower(), DISTRIBUTED_ENV
  if mode not in config_lib.DISTRIBUTED_MODES:
    raise ValueError(f'{source}={mode!r}; expected one of {config_lib.DISTRIBUTED_MODES}.')
  address = coordinator_address or environ.get(_PROCESS_ENV['coordinator_address']) or None
  if address is not None and not re.fullmatch(r'\S+:\d+', address):
    raise ValueError(f'coordinator address {address!r} (--coordinator_address or '
                     'JAX_COORDINATOR_ADDRESS); expected HOST:PORT, e.g. 10.0.0.1:1234.')
  num = _process_setting('num_processes', num_processes, environ, minimum=1)
  pid = _process_setting('process_id', process_id, environ, minimum=0)
  if num is not None and pid is not None and pid >= num:
    raise ValueError(f'process id {pid} (--process_id or JAX_PROCESS_ID) with {num} processes; '
                     f'expected 0..{num - 1}.')
  if mode == 'off' or (mode == 'auto' and address is None and (num or 1) == 1):
    return None
  return {'coordinator_address': address, 'num_processes': num, 'process_id': pid}


def _process_setting(name: str, value, environ, *, minimum: int) -> int | None:
  """An integer setting from its flag or else its environment variable, checked."""
  where = f'--{name}'
  if value is None and environ.get(_PROCESS_ENV[name], '').strip():
    value, where = environ[_PROCESS_ENV[name]].strip(), _PROCESS_ENV[name]
  if value is None:
    return None
  try:
    number = int(value)
  except (TypeError, ValueError):
    number = None
  if number is None or number < minimum or isinstance(value, float):
    raise ValueError(f'{where}={value!r}; expected an integer >= {minimum}.')
  return number


def initialize_distributed(mode: str, *, coordinator_address: str | None = None,
                           num_processes: int | None = None, process_id: int | None = None) -> bool:
  """Starts JAX's distributed runtime when `distributed_settings` asks for it (once per process).

  Must run before anything touches a JAX device: main.py calls it first with its flags, and
  `train_and_evaluate` calls it again (then a no-op) for runs started from Python.

  Returns:
    Whether the distributed runtime is running.
  """
  settings = distributed_settings(mode, coordinator_address=coordinator_address,
                                  num_processes=num_processes, process_id=process_id)
  if jax.distributed.is_initialized():
    return True
  if settings is None:
    return False
  if getattr(jax.config, 'jax_cpu_collectives_implementation', 'gloo') in (None, 'none'):
    # XLA CPU needs a collectives library across processes (CPU runs: tests, laptops).
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  try:
    jax.distributed.initialize(**settings)
  except ValueError as e:   # JAX found no cluster to fill in what was left out
    missing = ', '.join(k for k, v in settings.items() if v is None)
    raise ValueError(
        f'engine.distributed asks for several processes but {missing or "a setting"} is unknown '
        f'({e}). Pass --coordinator_address=HOST:PORT --num_processes=N --process_id=I (or set '
        'JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID), or launch with srun, '
        'mpirun or on a Cloud TPU VM, where JAX finds them itself.') from e
  except RuntimeError as e:
    raise RuntimeError(f'{e} (initialize_distributed must run before anything touches a JAX '
                       'device; main.py calls it first).') from e
  return True


def _process_zero_value(value, chief: bool):
  """Process 0's value of a small host tree, on every process (identity with one process)."""
  if jax.process_count() == 1:
    return value
  return jax.tree.map(np.asarray, multihost_utils.broadcast_one_to_all(value, is_source=chief))


def one_client_data(fed, config):
  """One client's round data without the cohort axis: the shapes `RoundEngine.plan` sizes from
  (a padding client, so nothing is decoded but one image)."""
  fl = config.federated
  data = federated.sample_round(fed, np.array([fed.num_clients], np.int32), round_index=0,
                                seed=config.seed, steps=fl.local_steps, batch_size=fl.batch_size,
                                local_epochs=fl.local_epochs)
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), data)


def load_data(config):
  """The data source named by config.data.source: training images/labels and the pair sets.

  For real data (`data/sources.py`) `train_images` is a store that decodes on demand and the
  pair sets are the `<name>.bin` / `<name>.txt` files of `config.eval.pair_sets`.
  """
  return sources.load(config)


def load_identification_set(config):
  """The 1:N gallery / probe set of held-out identities, or None when disabled."""
  cfg = config.eval.identification
  if not cfg.enabled or config.data.source != 'synthetic':
    return None   # real data: no 1:N set of held-out identities is read yet
  return identification_set.make_identification_set(
      config.seed, image_size=config.data.image_size, num_enrolled=cfg.num_enrolled,
      num_distractors=cfg.num_distractors, num_non_mated=cfg.num_non_mated,
      probes_per_identity=cfg.probes_per_identity, difficulty=config.data.difficulty)


def client_partition(config, num_identities: int) -> list[np.ndarray]:
  """The identity partition over the clients: exclusive, plus shared identities when
  `federated.shared_fraction` > 0 (the FedGC general case)."""
  rng = np.random.default_rng([config.seed, 0xc11e47])
  clients = partition.identity_exclusive(num_identities, config.federated.num_clients,
                                         config.federated.partition, rng)
  return partition.share_identities(clients, config.federated.shared_fraction,
                                    config.federated.shared_group_size, rng)


def grouped_class_embeddings(class_embeddings: np.ndarray, identity_table: np.ndarray):
  """Global `[num_identities, d]` class embeddings -> `[K, C_max, d]` grouped by client."""
  grouped = class_embeddings[np.maximum(identity_table, 0)]
  return grouped * (identity_table >= 0)[..., None]


def class_embedding_norms(algorithm, state) -> dict:
  """Mean / max L2 norm of the real class embeddings (empty when the algorithm keeps none).

  Logged every `log_every` rounds: FedGC's server step changes these norms, and with the unnormalised
  softmax their scale sets the sharpness of every client's local loss.
  """
  class_embeddings = algorithm.class_embeddings(engine_lib.local_copy(state))
  if class_embeddings is None:
    return {}
  norms = np.linalg.norm(np.asarray(class_embeddings), axis=-1)   # [num_identities]
  return {'class_embeddings/norm_mean': float(np.mean(norms)),
          'class_embeddings/norm_max': float(np.max(norms))}


def evaluate(config, model, algorithm, state, benchmark, fed_view, workdir: str,
             id_set=None, *, write: bool = True) -> dict:
  """Verification on every pair set, 1:N identification when `id_set` is given, and the FedGC
  Fig. 3 class-embedding diagnostic; plots and arrays are written to `workdir` when `write`."""
  state = engine_lib.local_copy(state)   # evaluation runs in each process alone
  variables = algorithm.eval_variables(state.server)
  apply = jax.jit(lambda v, x: model.apply(v, x, train=False))
  embed_fn = lambda x: apply(variables, x)
  results, curves = {}, {}
  for name in config.eval.pair_sets:
    pairs = benchmark.pair_sets[name]
    res = verification.verify(embed_fn, pairs.images, pairs.issame,
                              batch_size=config.eval.batch_size, far_target=config.eval.far_target)
    res['title'] = report.pair_set_title(name, config.data.source == 'synthetic')
    curves[res['title']] = (np.asarray(res['roc_fpr']), np.asarray(res['roc_tpr']))
    results[name] = res
  if write:
    plots.plot_roc(curves, files.join(workdir, 'roc.png'), title=config.algorithm)
  out = {'verification': results, 'plots': ['roc.png']}
  if id_set is not None:
    out['identification'] = identification.identify(embed_fn, id_set,
                                                    batch_size=config.eval.batch_size)
  class_embeddings = algorithm.class_embeddings(state)
  if class_embeddings is not None:
    grouped = grouped_class_embeddings(np.asarray(class_embeddings), fed_view.identity_table)
    within, cross = diagnostics.class_embedding_similarity(grouped, fed_view.class_mask)
    if write:
      plots.plot_similarity_histograms({config.algorithm: (within, cross)},
                                       files.join(workdir, 'class_embedding_similarity.png'))
      arrays = io.BytesIO()
      np.savez_compressed(arrays, within=within, cross=cross)
      files.write_bytes_atomic(files.join(workdir, 'class_embedding_similarity.npz'),
                               arrays.getvalue())
    out['diagnostics'] = {'class_embedding_similarity':
                          diagnostics.similarity_summary(within, cross),
                          'class_embedding_norm':
                          class_embedding_norms(algorithm, state)}
    out['plots'].append('class_embedding_similarity.png')
  return out


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs one experiment end to end; returns the results dict also written to results.json.

  In a multi-process run every process calls this with the same arguments and gets the same
  results; only process 0 writes to `workdir`.
  """
  t_start = time.perf_counter()
  config_lib.validate(config)
  initialize_distributed(config.engine.distributed)
  chief = jax.process_index() == 0
  say = print if chief else (lambda *args, **kwargs: None)
  ckpt = None
  if chief:
    try:
      files.makedirs(workdir)
      ckpt = checkpoint.Checkpointer(workdir, config.to_dict())
    except Exception:   # a refused or unwritable workdir: tell the others, then raise
      _process_zero_value(np.int32(1), chief)
      raise
  if _process_zero_value(np.int32(0), chief):
    raise RuntimeError(f'process 0 refused --workdir={workdir}; its log has the reason.')

  # Data and partition.
  t0 = time.perf_counter()
  benchmark = load_data(config)
  id_set = load_identification_set(config)
  data_s = time.perf_counter() - t0
  say(f'data: {len(benchmark.train_images)} training images of {benchmark.num_identities} '
      f'identities, pair sets {sorted(benchmark.pair_sets)} ({data_s:.1f} s)', flush=True)
  client_ids = client_partition(config, benchmark.num_identities)
  fed_view = federated.build(benchmark.train_images, benchmark.train_labels, client_ids)
  if config.algorithm in algorithms.CENTRALIZED:
    fed = federated.build(benchmark.train_images, benchmark.train_labels,
                          partition.single_client(benchmark.num_identities))
  else:
    fed = fed_view
  if chief:
    synthetic.save_sample_grid(
        benchmark.train_images[::max(1, len(benchmark.train_images) // 96)],
        files.join(workdir, 'samples.png'))

  # Model, algorithm, engine.
  backend, step_mode, loop_threads, conv_gradient = resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  algorithm = algorithms.get(config.algorithm).build(config, model, fed, step_mode=step_mode)
  mesh = None
  if backend != 'loop' or jax.process_count() > 1:   # several processes: the mesh spans them
    mesh = engine_lib.make_mesh(config.engine.num_devices or None)
  eng = engine_lib.RoundEngine(algorithm, backend=backend, map_width=config.engine.map_width,
                               mesh=mesh, loop_threads=loop_threads)
  root_rng = jax.random.PRNGKey(config.seed)
  state = algorithm.init(jax.random.fold_in(root_rng, 0))
  if chief and ckpt.latest_round() is not None:
    state = ckpt.restore(state)
  state = _process_zero_value(state, chief)   # only process 0 reads the workdir
  start_round = int(state.round)
  if start_round:
    say(f'resumed from round {start_round} in {workdir}', flush=True)

  # Rounds.
  fl = config.federated
  num_examples = fed.num_examples.astype(np.float32)
  cohort_size = len(federated.select_clients(fed.num_clients, fl.participation, 0, config.seed))
  plan = eng.plan(state, cohort_size, one_client_data(fed, config),
                  memory_fraction=config.engine.memory_fraction)
  if plan is not None:
    say(f'engine: {plan.describe()}', flush=True)
  cohort_of = lambda r: federated.pad_cohort(
      federated.select_clients(fed.num_clients, fl.participation, r, config.seed),
      eng.cohort_multiple(), fed.num_clients)
  rows = eng.process_rows(len(cohort_of(0)))   # this process loads only these clients' data
  images_per_round = cohort_size * fl.local_steps * fl.batch_size
  say(f'{config.algorithm}: {fed.num_clients} clients, {cohort_size} per round, '
      f'{fl.local_steps} local steps of {fl.batch_size}, backend={backend}, '
      f'steps={step_mode}, {config.num_rounds} rounds, {jax.process_count()} process(es), '
      f'{eng.num_shards} device(s) for clients', flush=True)
  writer = metrics.MetricWriter(files.join(workdir, 'tensorboard')) if chief else None
  progress = metrics.Progress(config.num_rounds, start_round, images_per_round)
  t_train = time.perf_counter()
  # Round r+1's batches are drawn (for real data: read and decoded) in a background thread while
  # round r trains; sample_round is a pure function of (seed, round, client), so prefetching
  # changes only when the data is made, and each process can draw just its own rows.
  round_data = pipeline.Prefetcher(
      lambda r: federated.sample_round(
          fed, cohort_of(r)[rows], round_index=r, seed=config.seed, steps=fl.local_steps,
          batch_size=fl.batch_size, local_epochs=fl.local_epochs),
      range(start_round, config.num_rounds), depth=config.data.prefetch)
  for r in range(start_round, config.num_rounds):
    cohort = cohort_of(r)
    weights = np.where(cohort < fed.num_clients,
                       num_examples[np.minimum(cohort, fed.num_clients - 1)], 0.0)
    data = round_data.get(r)
    state, round_metrics = eng.run_round(state, cohort, weights, data,
                                         jax.random.fold_in(root_rng, r + 1))
    done = r + 1
    if done % config.log_every == 0 or done == config.num_rounds or done == start_round + 1:
      scalars = {k: float(v) for k, v in round_metrics.items()}
      scalars.update(class_embedding_norms(algorithm, state))
      if not np.all(np.isfinite(list(scalars.values()))):
        raise FloatingPointError(f'round {done}: non-finite training metrics {scalars}; the run '
                                 'diverged (lower optimizer.learning_rate or fedgc.reg_lambda).')
      if chief:
        writer.write_scalars(done, {**scalars, **progress.update(done, scalars)})
    if chief and config.checkpoint_every and done % config.checkpoint_every == 0:
      ckpt.save(done, _for_checkpoint(state))
    if config.eval.every_rounds and done % config.eval.every_rounds == 0 and done < config.num_rounds:
      mid = evaluate(config, model, algorithm, state, benchmark, fed_view, workdir, write=chief)
      if chief:
        writer.write_scalars(done, {f'eval/{k}/accuracy': v['accuracy']
                                    for k, v in mid['verification'].items()})
  round_data.close()
  if isinstance(fed.images, stores.DecodedImageStore):
    say(f'input pipeline: waited {round_data.wait_s:.1f} s for round data; '
        f'{len(fed.images.bad)} bad records skipped ({fed.images.num_masked} samples masked)',
        flush=True)
  jax.block_until_ready(state)
  train_s = time.perf_counter() - t_train
  if chief:
    if ckpt.latest_round() != config.num_rounds:
      ckpt.save(config.num_rounds, _for_checkpoint(state))
    ckpt.close()

  # Evaluation and outputs.
  t0 = time.perf_counter()
  out = evaluate(config, model, algorithm, state, benchmark, fed_view, workdir, id_set, write=chief)
  eval_s = time.perf_counter() - t0
  out['plots'].insert(0, 'samples.png')
  results = {
      'algorithm': config.algorithm,
      'config_name': (f'{config_lib.method_name(config)}/{config.head.loss}/'
                      f'{config.federated.partition}'),
      'rounds': config.num_rounds,
      'images_seen': config.num_rounds * images_per_round,
      'engine': {'backend': backend, 'step_mode': step_mode, 'devices': jax.device_count(),
                 'processes': jax.process_count(), 'clients_devices': eng.num_shards,
                 'map_width': eng.width, 'width_plan': plan._asdict() if plan else None,
                 'loop_threads': eng.loop_threads if backend == 'loop' else None,
                 'conv_gradient': conv_gradient,
                 'platform': jax.default_backend()},
      'timing': {'data_s': data_s, 'train_s': train_s, 'eval_s': eval_s,
                 'resumed_from_round': start_round,
                 'total_s': time.perf_counter() - t_start},
      **out,
  }
  for res in results['verification'].values():
    res.pop('roc_fpr', None)
    res.pop('roc_tpr', None)
  if not chief:
    return results
  writer.write_scalars(config.num_rounds, {f'eval/{k}/accuracy': v['accuracy']
                                           for k, v in out['verification'].items()})
  writer.close()
  text = report.write(workdir, results)
  print(text, flush=True)
  logging.info('results written to %s', workdir)
  return results


def _for_checkpoint(state):
  """What process 0 saves: host copies with several processes (orbax then writes from process 0
  alone, see io/checkpoint.py), the arrays themselves with one."""
  if jax.process_count() == 1:
    return state
  return jax.tree.map(np.asarray, state)
