"""`train_and_evaluate(config, workdir)`: data -> partition -> algorithm -> rounds -> evaluation.

Everything a run does lives here so tests can call it directly; `main.py` only parses flags.
Outputs in the workdir: config.json, checkpoints/ (resumed automatically; beside each, the run
record of `run_record`: the noise each round ran at, the divergence guard's reference, the
learning-rate decay rounds of the start), tensorboard/, results.json, report.md and the
evaluators' plots (data samples, ROC curves, class-embedding similarity); stopped.json when the
divergence guard stopped the run (its rerun is refused until something that could fix it
changes: io/checkpoint.py). SIGTERM / SIGINT stop the run after the round in flight, its state
saved. What carries across such stops (preemption, the run record, the guards) is lifecycle.py.

Multi-host (`core/distributed.py`, `launch/tpu_pod.sh`, `launch/slurm_gpu.sh`): every process
runs this same function. Each samples and loads only the cohort rows of its own devices
(`RoundEngine.process_rows`); the round state is replicated, so every process logs and evaluates
the same numbers, but only process 0 touches the workdir (it alone reads a checkpoint to resume,
and broadcasts it).
"""

import contextlib
import functools
import posixpath
import time
from typing import NamedTuple

import jax
import numpy as np
from absl import logging

from fedjax_face import algorithms, config_lib, eval as eval_lib, lifecycle, models
from fedjax_face.core import (checks, communication, distributed, policy, privacy,
                              secure_aggregation, xla_flags)
from fedjax_face.core import blocks as blocks_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated, participation, pipeline, sources, stores
from fedjax_face.eval import diagnostics
from fedjax_face.io import artifacts, checkpoint, files, metrics, provenance, report
from fedjax_face.models import arcface_torch


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
    checkpoint.init_from_round(config.init_from, config.init_from_step)
    checkpoint.check_init_data(
        config.init_from, config.to_dict(), sources.data_fields(config),
        defaults=config_lib.base_config(sources.get(config.data.source).TASK).to_dict())


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


def warm_start(config):
  """What `Algorithm.init` starts from, or None: the final state of the finished run
  `config.init_from` names, or its round `config.init_from_step`, verified against its digests as
  a resume is (checkpoint.InitFromError when it does not verify); or, when it names an
  arcface_torch backbone file (`.pth`), `{'server': {'model': its variables}}`. The one place a
  run reads another run's weights."""
  if not config.init_from:
    return None
  if arcface_torch.is_backbone_file(config.init_from):
    return {'server': {'model': arcface_torch.load_variables(
        config.init_from, config.model, config.data.image_size)}}
  # A run with the federated blocks on keeps the method's state under 'method'.
  return blocks_lib.method_start(checkpoint.load_final_state(
      config.init_from, config.init_from_step, config.trust_unverified_checkpoints))


def build_algorithm(config, method, model, fed, step_mode: str):
  """The method's `Algorithm`, wrapped in the federated blocks its config switches on
  (core/blocks.py: server optimizer, FedProx / SCAFFOLD, compression)."""
  algorithm = method.build(config, model, fed, step_mode=step_mode)
  blocks = blocks_lib.from_config(config)
  return blocks_lib.wrap(algorithm, blocks, fed.num_clients) if blocks.active else algorithm


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


def class_embedding_norms(algorithm, state) -> dict:
  """Mean / max L2 norm of the class embeddings, for the round log (empty when the algorithm
  keeps none)."""
  class_embeddings = algorithm.class_embeddings(engine_lib.local_copy(state))
  if class_embeddings is None:
    return {}
  norms = diagnostics.class_embedding_norms(class_embeddings)
  return {f'class_embeddings/{k}': v for k, v in norms.items()}


def evaluate(evaluators, embed, algorithm, state) -> dict:
  """Every evaluator on the current model: type -> `eval.EvalOutput`."""
  state = engine_lib.local_copy(state)   # evaluation runs in each process alone
  personal = algorithm.personalized(state) if algorithm.personalized else None
  inputs = eval_lib.EvalInputs(embed=embed(algorithm.eval_variables(state.server)),
                               class_embeddings=algorithm.class_embeddings(state),
                               personal_embed=personal)
  return eval_lib.evaluate(evaluators, inputs)


def eval_scalars(outputs: dict) -> dict[str, float]:
  """TensorBoard scalars of an evaluation: eval/<type>/<name>."""
  return {f'eval/{kind}/{name}': value for kind, out in outputs.items()
          for name, value in out.scalars.items()}


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


def resuming(workdir: str) -> bool:
  """True when `workdir` holds checkpoints (a rerun resumes the newest: `checkpoint.Checkpointer`).
  Reads only; False for a workdir `files.check_workdir` refuses (it says why)."""
  try:
    files.check_workdir(workdir)
  except files.WorkdirError:
    return False
  directory = files.join(workdir, 'checkpoints')
  return files.exists(directory) and bool(checkpoint.checkpoint_steps(directory))


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs one experiment end to end; returns the results dict also written to results.json.

  Every input is checked before the first file is written: the config, the workdir's refusals
  (`checkpoint.check_opening`), the run it starts from, and the data and evaluators' files, whose
  readers raise `checks.UsageError` naming the file and line. In a multi-process run every
  process calls this with the same arguments and gets the same results; only process 0 writes to
  `workdir`.
  """
  t_start = time.perf_counter()
  resumes = resuming(workdir)
  validate(config, resuming=resumes)
  method = algorithms.get(config.algorithm)
  distributed.initialize_distributed(config.engine.distributed)
  chief = jax.process_index() == 0
  opening = dict(defaults=config_lib.base_config(sources.get(config.data.source).TASK).to_dict(),
                 trust_unverified=config.trust_unverified_checkpoints,
                 check_resume=functools.partial(lifecycle.check_budget_left, config))
  opened = None
  with _told_to_the_others(chief):   # read only: nothing is written before the data is read
    if chief:
      opened = checkpoint.check_opening(workdir, config.to_dict(), **opening)
  # The run record of the newest checkpoint (only process 0 reads the workdir): what the rounds
  # already run recorded of their noise and learning-rate decays.
  prior = lifecycle.shared_json(opened.record if opened else None, chief)
  start = None if resumes else warm_start(config)   # verified before this run writes anything
  setup = set_up(config, method, prior)
  lifecycle.check_noise_plan(config, prior, setup.algorithm.client_rows, setup.fed.num_clients,
                             participation.Cohorts(config.federated, setup.fed.num_examples,
                                                   config.seed).size)
  with contextlib.ExitStack() as cleanup:
    ckpt = None
    with _told_to_the_others(chief):
      if chief:
        files.make_workdir(workdir)
        cleanup.enter_context(files.workdir_lock(workdir))   # released on every exit path
        ckpt = checkpoint.Checkpointer(workdir, config.to_dict(),
                                       max_to_keep=config.checkpoint_keep, **opening)
        # On every exit path, finished checkpoints are waited for before an error propagates,
        # so the error is the last thing printed and no save is cut off.
        cleanup.push(lambda kind, error, trace: ckpt.finish(failing=error is not None))
    preemption = cleanup.enter_context(lifecycle.Preemption())
    return _train_and_evaluate(config, workdir, method, chief, ckpt, t_start, start, preemption,
                               setup)


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
  keeps (`lifecycle.with_start_decay_rounds`). A reader's error here is a usage error naming the
  file and line, raised before the workdir is touched."""
  t0 = time.perf_counter()
  source, data, fed, evaluators = load_data(config, method)
  data_s = time.perf_counter() - t0
  backend, step_mode, loop_threads, conv_gradient = policy.resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  build_config, kept = lifecycle.with_start_decay_rounds(config, prior)
  algorithm = build_algorithm(build_config, method, model, fed, step_mode)
  return Setup(source, data, fed, evaluators, data_s, backend, step_mode, loop_threads,
               conv_gradient, model, algorithm, prior, kept)


@contextlib.contextmanager
def _told_to_the_others(chief: bool):
  """Process 0 checks or opens the workdir inside; the other processes wait for its verdict, so
  that a refusal stops every process, not process 0 alone."""
  try:
    yield
  except Exception:   # a refused or unwritable workdir: tell the others, then raise
    distributed.process_zero_value(np.int32(1), chief)
    raise
  if distributed.process_zero_value(np.int32(0), chief):
    raise RuntimeError('process 0 refused the workdir; its log has the reason.')


def _train_and_evaluate(config, workdir: str, method, chief: bool, ckpt, t_start: float,
                        start, preemption: lifecycle.Preemption, setup: Setup) -> dict:
  """`train_and_evaluate` once the data is read, the algorithm built and the workdir held:
  rounds, evaluation, outputs."""
  say = print if chief else (lambda *args, **kwargs: None)
  source, data, fed, evaluators, data_s = (setup.source, setup.data, setup.fed, setup.evaluators,
                                           setup.data_s)
  say(f'data ({config.data.source}): {source.describe(data)}; evaluators '
      f'{[e.type for e in evaluators]} ({data_s:.1f} s)', flush=True)
  pictures = []
  if chief and hasattr(source, 'pictures'):
    pictures = source.pictures(config, data, workdir)

  # Model, algorithm (built by `set_up`; the learning-rate decay rounds of the run's start kept
  # when it is extended), engine.
  backend, step_mode, loop_threads, conv_gradient = (setup.backend, setup.step_mode,
                                                     setup.loop_threads, setup.conv_gradient)
  model, algorithm = setup.model, setup.algorithm
  if setup.kept:
    say(setup.kept, flush=True)
  embed = eval_lib.make_embed(model)
  mesh = None
  if backend != 'loop' or jax.process_count() > 1:   # several processes: the mesh spans them
    mesh = engine_lib.make_mesh(config.engine.num_devices or None)
  root_rng = jax.random.PRNGKey(config.seed)
  on_host = config.engine.client_state == 'host'
  if on_host and jax.process_count() > 1:
    raise ValueError(f"engine.client_state='host' runs in one process ({jax.process_count()} "
                     "here): each process would need every client's rows; use 'device'.")
  # 'host': the per-client state is made in host memory (the CPU device), never whole on an
  # accelerator, and kept as numpy arrays the engine updates in place.
  with jax.default_device(jax.local_devices(backend='cpu')[0]) if on_host else (
      contextlib.nullcontext()):
    state = algorithm.init(jax.random.fold_in(root_rng, 0), start)
  record = None   # what the checkpoint resumed from records of the rounds before it
  if chief and ckpt.latest_round() is not None:
    state = ckpt.restore(state)
    record = ckpt.run_record
  state = distributed.process_zero_value(state, chief)   # only process 0 reads the workdir
  record = lifecycle.shared_json(record, chief)
  if on_host:
    state = state.replace(clients=engine_lib.host_clients(state.clients))
  start_round = int(state.round)
  if start_round:
    say(f'resumed from round {start_round} in {workdir}', flush=True)

  # Rounds.
  fl = config.federated
  num_examples = fed.num_examples.astype(np.float32)
  cohorts = participation.Cohorts(fl, fed.num_examples, config.seed)
  cohort_size = cohorts.size
  history, planned = lifecycle.noise_history(config, record, start_round, algorithm.client_rows,
                                   fed.num_clients, cohort_size, say)
  dp = privacy.spec_from_config(config, algorithm.client_rows, fed.num_clients, cohort_size,
                                history, planned)
  eng, plan = plan_engine(config, algorithm, state, fed, cohort_size, backend, mesh, loop_threads,
                          dp)
  # The noise of every round of the run: those already run, then this start's.
  total_history = [] if dp is None else privacy.extended(
      history, config.num_rounds - start_round, dp.noise_multiplier)
  if dp is not None:
    say(lifecycle.describe_noise(dp, history, start_round, config.num_rounds), flush=True)
  # ε after each round, for TensorBoard's dp/epsilon curve (one accountant pass for the run),
  # composed over the noise each round ran at.
  epsilons = [] if dp is None else privacy.history_epsilon_curve(
      fed.num_clients, cohort_size, total_history, config.dp.target_delta, privacy.amplified(dp))
  # What each checkpoint records beside it (`run_record`).
  guard = (record or {}).get('guard')
  recorded = functools.partial(
      lifecycle.run_record, config, dp, history, start_round, epsilons,
      (setup.prior or {}).get('lr_schedule') if setup.kept else lifecycle.decay_record(config))
  if plan is not None:
    say(f'engine: {plan.describe()}', flush=True)
  cohort_of = lambda r: cohorts.padded(r, eng.cohort_multiple())
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
          batch_size=fl.batch_size, local_epochs=fl.local_epochs, balanced=fl.balanced_classes),
      range(start_round, config.num_rounds), depth=config.data.prefetch)
  # Wall time inside `run_round` (training, and on the loop backend waiting for it) and outside it
  # (the host's work between rounds: cohort, prefetched data, logging, checkpoints, evaluation).
  in_rounds_s = first_round_s = 0.0
  # The training metrics of the last logged round (results.json), kept in the checkpoints so a
  # rerun of a finished (or preempted) run reports them too.
  last_logged = (record or {}).get('last_logged') or {}
  # The divergence guard's reference (`check_divergence`): the run's first round, recorded in
  # its checkpoints so that a rerun does not take a blown-up loss as its reference.
  first_loss = guard['loss'] if guard else None
  done = start_round
  saved_at = time.monotonic()   # the last save (`checkpoint_every_seconds`)

  def save(at: int):
    """Process 0 saves round `at`'s state (never a non-finite one) with its run record."""
    ckpt.save(at, lifecycle.checked_finite(lifecycle.for_checkpoint(state), at),
              recorded(at, guard, last_logged))

  def stop_if_preempted():
    """After a round (or before the first): on SIGTERM / SIGINT, saves the state of the rounds
    done unless saved, waits for the save, and raises Preempted with the one line saying so."""
    signal_name = preemption.requested(chief)
    if signal_name is None:
      return
    round_data.close()
    if chief:
      writer.close()   # the logged rounds' events reach the disk
    where = 'no round trained since the start'
    if chief and done > start_round:
      if ckpt.last_saved() != done:
        save(done)
      ckpt.wait()
    if done > start_round:
      where = f'checkpoint {files.join(workdir, "checkpoints", str(done))} saved'
    raise lifecycle.Preempted(f'{signal_name}: stopped after round {done} of {config.num_rounds} '
                              f'({where}); rerun the same command to resume.')

  with lifecycle.stop_recorded(workdir, config, chief, lambda: done):
    stop_if_preempted()
    for r in range(start_round, config.num_rounds):
      cohort = cohort_of(r)
      weights = np.where(cohort < fed.num_clients,
                         num_examples[np.minimum(cohort, fed.num_clients - 1)], 0.0)
      data = round_data.get(r)
      t_round = time.perf_counter()
      state, round_metrics = eng.run_round(state, cohort, weights, data,
                                           jax.random.fold_in(root_rng, r + 1))
      in_rounds_s += time.perf_counter() - t_round
      done = r + 1
      if r == start_round:
        first_round_s = time.perf_counter() - t_train   # compiles: steady state is the rest
      first_loss = lifecycle.check_divergence(config, done, round_metrics, first_loss)
      if guard is None and first_loss is not None:
        guard = {'round': done, 'loss': first_loss}
      if chief:
        ckpt.check()   # a failed background save stops the run now, not at the next save
      logged = (done % config.log_every == 0 or done == config.num_rounds
                or done == start_round + 1)
      if chief and epsilons and not logged:
        writer.write_scalars(done, {'dp/epsilon': epsilons[r]})
      if logged:
        scalars = {k: float(v) for k, v in round_metrics.items()}
        scalars.update(class_embedding_norms(algorithm, state))
        if not np.all(np.isfinite(list(scalars.values()))):
          raise FloatingPointError(f'round {done}: non-finite training metrics {scalars}; the '
                                   'run diverged (lower optimizer.learning_rate or '
                                   'fedgc.reg_lambda).')
        if dp is not None:   # inf without noise: a value, not a divergence
          scalars['dp/epsilon'] = epsilons[r]
        last_logged = {'round': done, **scalars}
        if chief:
          writer.write_scalars(done, {**scalars, **progress.update(done, scalars)})
      every_seconds = config.checkpoint_every_seconds
      if chief and ((config.checkpoint_every and done % config.checkpoint_every == 0) or (
          every_seconds and time.monotonic() - saved_at >= every_seconds)):
        save(done)
        # Waited for: a failed save (a full disk) stops the run before another round trains,
        # and the host arrays (client_state='host') are written before the next round changes them.
        ckpt.wait()
        saved_at = time.monotonic()
      if (config.eval.every_rounds and done % config.eval.every_rounds == 0
          and done < config.num_rounds):
        mid = evaluate(evaluators, embed, algorithm, state)
        if chief:
          artifacts.write_eval_outputs(workdir, mid)
          writer.write_scalars(done, eval_scalars(mid))
      stop_if_preempted()
    round_data.close()
    if isinstance(fed.images, stores.DecodedImageStore):
      say(f'input pipeline: waited {round_data.wait_s:.1f} s for round data; '
          f'{len(fed.images.bad)} bad records skipped ({fed.images.num_masked} samples masked)',
          flush=True)
    jax.block_until_ready(state)
    train_s = time.perf_counter() - t_train
    if chief:
      if ckpt.latest_round() != config.num_rounds:
        save(config.num_rounds)
      ckpt.close()
  # A signal from here on stops at once: the final checkpoint is saved, and results.json is
  # written whole or not at all (a rerun of the same command evaluates it again).
  preemption.abandon(f'the checkpoint of round {config.num_rounds} is saved; rerun the same '
                     'command to evaluate it')
  say(f'evaluating the model of round {config.num_rounds}', flush=True)

  # Evaluation and outputs.
  t0 = time.perf_counter()
  outputs = evaluate(evaluators, embed, algorithm, state)
  plots = pictures + (artifacts.write_eval_outputs(workdir, outputs) if chief else [])
  eval_s = time.perf_counter() - t0
  results = {
      'algorithm': config.algorithm,
      'config_name': (f'{method.variant_name(config)}/{config.head.loss}/'
                      f'{config.federated.partition}'),
      'config_sha256': checkpoint.config_digest(config.to_dict()),
      'rounds': config.num_rounds,
      'images_seen': config.num_rounds * images_per_round,
      'blocks': blocks_in_effect(config, method),
      'engine': {'backend': backend, 'step_mode': step_mode, 'devices': jax.device_count(),
                 'processes': jax.process_count(), 'clients_devices': eng.num_shards,
                 'map_width': eng.width, 'width_plan': plan._asdict() if plan else None,
                 'loop_threads': eng.loop_threads if backend == 'loop' else None,
                 'conv_gradient': conv_gradient,
                 'cpu_convolutions': (xla_flags.cpu_convolutions_in_effect()
                                      if jax.default_backend() == 'cpu' else None),
                 'platform': jax.default_backend()},
      'timing': {'data_s': data_s, 'train_s': train_s, 'eval_s': eval_s,
                 'first_round_s': first_round_s, 'in_rounds_s': in_rounds_s,
                 'between_rounds_s': train_s - in_rounds_s,
                 'resumed_from_round': start_round,
                 'total_s': time.perf_counter() - t_start},
      'last_logged_round': last_logged,
      'privacy': (privacy.ledger(config, dp, fed.num_clients, cohort_size, config.num_rounds,
                                 total_history)
                  if dp is not None else {'enabled': False}),
      'communication': None if method.ONE_CLIENT else communication.ledger(
          algorithm, state, one_client_data(fed, config),
          [cohorts(r) for r in range(config.num_rounds)], fed.num_clients,
          wire=eng.client_wire),
      **{kind: out.results for kind, out in outputs.items()},
      **({'method_state': algorithm.summary(state)} if algorithm.summary else {}),
      'plots': plots,
      'provenance': provenance.collect(),
  }
  if not chief:
    return results
  writer.write_scalars(config.num_rounds, eval_scalars(outputs))
  writer.close()
  text = report.write(workdir, results,
                      [line for out in outputs.values() for line in out.markdown])
  print(text, flush=True)
  logging.info('results written to %s', workdir)
  return results


EVALUATIONS = 'evaluations'   # `evaluate_model` writes under <workdir>/evaluations/<name>/


def evaluation_name(config) -> str:
  """The folder name of an evaluation of `config.init_from`: the backbone file's name without its
  extension, or the run's folder name (with `_round<N>` for `init_from_step`)."""
  path = config.init_from.rstrip('/')
  if arcface_torch.is_backbone_file(path):
    return posixpath.splitext(posixpath.basename(path))[0]
  name = posixpath.basename(path) or 'run'
  return f'{name}_round{config.init_from_step}' if config.init_from_step else name


def evaluate_model(config, workdir: str, name: str = '') -> dict:
  """Scores the model `config.init_from` names, a finished run (its workdir) or an arcface_torch
  backbone file, on the config's evaluators without training, and writes results.json, report.md,
  config.json and the figures into `<workdir>/evaluations/<name>/` alone (`name`: the `--name`
  flag of `python -m fedjax_face.evaluate`, else `evaluation_name`), so that evaluating a run into
  its own workdir leaves its files as they were. That folder is locked and checked as a run's
  workdir is (`checkpoint.check_opening`, every field compared): an evaluation of another config
  there is refused, a rerun of the same one replaces it. The model passes through the method's
  `init` from that start, as a run's would, so every evaluator sees what a run that started there
  would evaluate before its first round."""
  t_start = time.perf_counter()
  if not config.init_from:
    raise checks.UsageError('config.init_from is empty; expected the model to evaluate: a '
                            "finished run's workdir or an arcface_torch backbone file (.pth or "
                            '.onnx).')
  validate(config)
  files.check_workdir(workdir)
  name = name or evaluation_name(config)
  if not name or '/' in name or name in ('.', '..'):
    raise checks.UsageError(f'--name={name!r}; expected a folder name for '
                            f'{files.join(workdir, EVALUATIONS)}/<name>, without "/".')
  outdir = files.join(workdir, EVALUATIONS, name)
  method = algorithms.get(config.algorithm)
  distributed.initialize_distributed(config.engine.distributed)
  chief = jax.process_index() == 0
  defaults = config_lib.base_config(sources.get(config.data.source).TASK).to_dict()
  if chief:
    _check_evaluation_folder(outdir, config, defaults)
  start = warm_start(config)
  _, _, fed, evaluators = load_data(config, method)
  with contextlib.ExitStack() as cleanup:
    if chief:
      files.make_workdir(outdir)
      cleanup.enter_context(files.workdir_lock(outdir))
      _check_evaluation_folder(outdir, config, defaults, lock_held=True)   # again, now held
      checkpoint.remove_results(outdir)   # a rerun replaces them: never left stale
      files.write_json_atomic(files.join(outdir, 'config.json'),
                              {**config.to_dict(), checkpoint.PROVENANCE_KEY: provenance.collect()})
    return _evaluate_model(config, outdir, chief, method, fed, evaluators, start, t_start)


def _check_evaluation_folder(outdir: str, config, defaults: dict, lock_held: bool = False
                             ) -> None:
  """`checkpoint.check_opening` of an evaluation's folder, its refusal naming `--name`."""
  try:
    checkpoint.check_opening(outdir, config.to_dict(), defaults=defaults, lock_held=lock_held,
                             every_field=True)
  except files.WorkdirError as error:
    raise files.WorkdirError(f'{error} (python -m fedjax_face.evaluate: --name=<another folder '
                             f'under {posixpath.dirname(outdir)}>)') from error


def _evaluate_model(config, outdir: str, chief: bool, method, fed, evaluators, start,
                    t_start: float) -> dict:
  """`evaluate_model` once its folder is held: the model, its evaluation, the outputs."""
  _, step_mode, _, conv_gradient = policy.resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  algorithm = method.build(config, model, fed, step_mode=step_mode)
  state = algorithm.init(jax.random.fold_in(jax.random.PRNGKey(config.seed), 0), start)
  print(f'evaluating {config.init_from} ({config.model.name}) on '
        f'{[e.type for e in evaluators]} into {outdir}', flush=True)
  outputs = evaluate(evaluators, eval_lib.make_embed(model), algorithm, state)
  if not chief:
    return {kind: out.results for kind, out in outputs.items()}
  plots = artifacts.write_eval_outputs(outdir, outputs)
  results = {
      'algorithm': config.algorithm, 'config_name': f'evaluation of {config.init_from}',
      'config_sha256': checkpoint.config_digest(config.to_dict()),
      'evaluated': config.init_from, 'rounds': 0, 'images_seen': 0,
      'timing': {'total_s': time.perf_counter() - t_start},
      **{kind: out.results for kind, out in outputs.items()},
      **({'method_state': algorithm.summary(state)} if algorithm.summary else {}),
      'plots': plots, 'provenance': provenance.collect(),
  }
  text = report.write(outdir, results, [line for out in outputs.values() for line in out.markdown])
  print(text, flush=True)
  return results
