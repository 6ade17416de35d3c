"""`train_and_evaluate(config, workdir)`: the driver. Setup, restore, the rounds with their hooks,
the final evaluation, results; each step lives in fedjax_face/run/ (its __init__ lists them).

Everything a run does is reachable from here so tests can call it directly; `main.py` only parses
flags. Outputs in the workdir: config.json, checkpoints/ (resumed automatically; beside each, the
run record: the noise each round ran at, the divergence guard's reference, the learning-rate
decay rounds of the start, the last logged metrics), tensorboard/, results.json, report.md and
the evaluators' plots; stopped.json when the divergence guard stopped the run (its rerun is
refused until something that could fix it changes: run/resume.py). SIGTERM / SIGINT stop the run
after the round in flight, its state saved (run/hooks/preemption.py).

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
from absl import logging as absl_logging

from fedjax_face import algorithms, eval as eval_lib, models
from fedjax_face.core import checks, distributed, policy
from fedjax_face.data import participation, sources, stores
from fedjax_face.io import artifacts, checkpoint, files, metrics, provenance, report
from fedjax_face.models import arcface_torch
from fedjax_face.run import hooks, loop, noise, replay, resume, schedule, simulation
from fedjax_face.run import results as results_lib
from fedjax_face.run import setup as setup_lib
from fedjax_face.run.hooks import checkpointing, divergence, evaluation, logging, preemption


def validate(config, resuming: bool = False, training: bool = False) -> None:
  """What the command lines check before running (`run.setup.validate`), with an `init_from` run
  the divergence guard stopped taken at its last accepted checkpoint, the state
  `python -m fedjax_face.evaluate` evaluates there (`replay.at_last_accepted`). A training run
  started from such a run is still refused, in one line, by `train_and_evaluate`'s own check.
  `training`: also that the run keeps the checkpoints its attacks replay from."""
  setup_lib.validate(replay.at_last_accepted(config), resuming=resuming)
  if training:
    schedule.check_replay_checkpoints(config)


def _silent(*args, **kwargs) -> None:
  del args, kwargs


def _opening(config) -> dict:
  """The arguments of `resume.check_opening` / `open_workdir` a run's config decides."""
  return dict(defaults=setup_lib.defaults(config),
              trust_unverified=config.trust_unverified_checkpoints,
              check_resume=functools.partial(noise.check_budget_left, config))


def _finish(ckpt, kind, error, trace) -> None:
  """On every exit path, finished checkpoints are waited for before an error propagates, so the
  error is the last thing printed and no save is cut off."""
  del kind, trace
  ckpt.finish(failing=error is not None)


def train_and_evaluate(config, workdir: str) -> dict:
  """Runs one experiment end to end; returns the results dict also written to results.json.

  Every input is checked before the first file is written: the config, the workdir's refusals
  (`resume.check_opening`), the run it starts from, the data and evaluators' files (their readers
  raise `checks.UsageError` naming the file and line) and the noise plan. In a multi-process run
  every process calls this with the same arguments and gets the same results; only process 0
  writes to `workdir`.
  """
  t_start = time.perf_counter()
  resumes = resume.resuming(workdir)
  setup_lib.validate(config, resuming=resumes)
  schedule.check_replay_checkpoints(config)   # training's rule alone: `evaluate` reads what is held
  method = algorithms.get(config.algorithm)
  distributed.initialize_distributed(config.engine.distributed)
  chief = jax.process_index() == 0
  opened = None
  with _told_to_the_others(chief):   # read only: nothing is written before the data is read
    if chief:
      opened = resume.check_opening(workdir, config.to_dict(), **_opening(config))
  # What the newest checkpoint records (only process 0 reads the workdir).
  prior, latest = distributed.shared_json(opened and [opened.record, opened.latest], chief) or (
      None, None)
  start = None if resumes else setup_lib.warm_start(config)   # verified before anything is written
  setup = setup_lib.set_up(config, method, prior)
  noise.plan_noise(config, prior, latest or 0, setup.algorithm.client_rows,
                   setup.fed.num_clients, participation.Cohorts(
                       config.federated, setup.fed.num_examples, config.seed).size, epsilons=False)
  with contextlib.ExitStack() as cleanup:
    ckpt = None
    with _told_to_the_others(chief):
      if chief:
        files.make_workdir(workdir)
        cleanup.enter_context(files.workdir_lock(workdir))   # released on every exit path
        ckpt = resume.open_workdir(workdir, config.to_dict(), max_to_keep=config.checkpoint_keep,
                                   **_opening(config))
        cleanup.push(functools.partial(_finish, ckpt))
    signals = cleanup.enter_context(preemption.Preemption())
    return _train_and_evaluate(config, workdir, method, setup, start, ckpt, signals, t_start)


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


def _train_and_evaluate(config, workdir: str, method, setup: setup_lib.Setup, start, ckpt,
                        signals: preemption.Preemption, t_start: float) -> dict:
  """Once the data is read, the algorithm built and the workdir held (process 0: `ckpt`): restore,
  rounds, evaluation, outputs."""
  chief, fed, algorithm = ckpt is not None or jax.process_index() == 0, setup.fed, setup.algorithm
  say = functools.partial(print, flush=True) if chief else _silent
  say(f'data ({config.data.source}): {setup.source.describe(setup.data)}; evaluators '
      f'{[e.type for e in setup.evaluators]} ({setup.data_s:.1f} s)')
  pictures = (setup.source.pictures(config, setup.data, workdir)
              if chief and hasattr(setup.source, 'pictures') else [])
  if setup.kept:
    say(setup.kept)
  state, record = setup_lib.restored_state(config, algorithm, start, ckpt)
  start_round, record = int(state.round), record or {}
  if start_round:
    say(f'resumed from round {start_round} in {workdir}')
  cohort_size = participation.Cohorts(config.federated, fed.num_examples, config.seed).size
  noise_plan = noise.plan_noise(config, record, start_round, algorithm.client_rows,
                                fed.num_clients, cohort_size)
  eng, plan = setup_lib.plan_engine(config, algorithm, state, fed, cohort_size, setup.backend,
                                    setup_lib.make_mesh(config, setup.backend), setup.loop_threads,
                                    noise_plan.dp)
  for line in noise_plan.lines + ((f'engine: {plan.describe()}',) if plan else ()):
    say(line)
  sim = simulation.simulation(config, eng, fed, start_round)
  fl = config.federated
  say(f'{config.algorithm}: {fed.num_clients} clients, {cohort_size} per round, '
      f'{fl.local_steps} local steps of {fl.batch_size}, backend={setup.backend}, '
      f'steps={setup.step_mode}, {config.num_rounds} rounds, {jax.process_count()} process(es), '
      f'{eng.num_shards} device(s) for clients')
  writer = metrics.MetricWriter(files.join(workdir, 'tensorboard')) if chief else None
  progress = metrics.Progress(config.num_rounds, start_round,
                              cohort_size * fl.local_steps * fl.batch_size)
  predict = eval_lib.predictions(setup.model, sources.task_of(config))
  hook_list = (   # in this order after each round (run/hooks/__init__.py)
      divergence.divergence_guard(config, workdir, chief, record.get('guard')),
      logging.logging(config, algorithm, writer, progress, start_round, noise_plan.epsilons,
                      record.get('last_logged')),
      hooks.Hook(record=noise_plan.record),
      hooks.recorded(schedule.lr_record(config, setup.prior, setup.kept)),
      checkpointing.checkpointing(config, ckpt),
      evaluation.mid_run_evaluation(config, setup.evaluators, predict, algorithm, workdir,
                                     writer),
      preemption.preemption(signals, ckpt, workdir, start_round, config.num_rounds,
                            (sim.round_data.close,) + ((writer.close,) if chief else ())))
  trained = loop.run_rounds(functools.partial(simulation.train_round, sim), state, start_round,
                            config.num_rounds, hook_list)
  sim.round_data.close()
  if isinstance(fed.images, stores.DecodedImageStore):
    say(f'input pipeline: waited {sim.round_data.wait_s:.1f} s for round data; '
        f'{len(fed.images.bad)} bad records skipped ({fed.images.num_masked} samples masked)')
  # A signal from here on stops at once: the final checkpoint is saved, and results.json is
  # written whole or not at all (a rerun of the same command evaluates it again).
  signals.abandon(f'the checkpoint of round {config.num_rounds} is saved; rerun the same '
                  'command to evaluate it')
  say(f'evaluating the model of round {config.num_rounds}')
  t0 = time.perf_counter()
  outputs = evaluation.evaluate(setup.evaluators, predict, algorithm, trained.state, replay=(
      replay.replayer(config, workdir, algorithm, sim, start) if chief else None))
  plots = pictures + (artifacts.write_eval_outputs(workdir, outputs) if chief else [])
  results = results_lib.run_results(
      config, method, setup, sim, plan, noise_plan, trained, outputs, plots,
      hooks.run_record(hook_list, config.num_rounds)['last_logged'] or {}, start_round,
      time.perf_counter() - t0, t_start)
  if not chief:
    return results
  writer.write_scalars(config.num_rounds, evaluation.eval_scalars(outputs))
  writer.close()
  print(report.write(workdir, results, [line for out in outputs.values() for line in out.markdown]),
        flush=True)
  absl_logging.info('results written to %s', workdir)
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
  workdir is (`resume.check_opening`, every field compared): an evaluation of another config
  there is refused, a rerun of the same one replaces it.

  Which state is evaluated: when the config trains what the run in `init_from` trained (the
  fields a resume may change aside: `replay.attacked_run`), the run's own round state, restored
  from its final checkpoint (round `init_from_step` when set; a run the divergence guard stopped,
  at its last accepted checkpoint), exactly what its final evaluation saw, with `EvalInputs.replay`
  of its rounds for the attacks that replay one (eval/privacy/); the attacks' results then carry
  `attacked_round` and `diverged`. Otherwise (a backbone file, or a run evaluated under another
  method or setting) the model passes through the method's `init` from that start, as a run's
  would, so every evaluator sees what a run that started there would evaluate before its first
  round, and an attack that needs a replay is refused in one line. Every refusal comes before
  the first file is written."""
  t_start = time.perf_counter()
  if not config.init_from:
    raise checks.UsageError('config.init_from is empty; expected the model to evaluate: a '
                            "finished run's workdir or an arcface_torch backbone file (.pth or "
                            '.onnx).')
  setup_lib.validate(config, resuming=True)   # the config itself; what init_from holds below
  attacked = replay.attacked_run(config)
  if attacked is None:
    setup_lib.validate(config)
  else:   # the evaluators' checks against the run's own rounds
    setup_lib.validate(attacked.config, resuming=True)
  files.check_workdir(workdir)
  name = name or evaluation_name(config)
  if not name or '/' in name or name in ('.', '..'):
    raise checks.UsageError(f'--name={name!r}; expected a folder name for '
                            f'{files.join(workdir, EVALUATIONS)}/<name>, without "/".')
  outdir = files.join(workdir, EVALUATIONS, name)
  method = algorithms.get(config.algorithm)
  distributed.initialize_distributed(config.engine.distributed)
  chief = jax.process_index() == 0
  defaults = setup_lib.defaults(config)
  if chief:
    _check_evaluation_folder(outdir, config, defaults)
  evaluated = (_started_model(config, method) if attacked is None else
               _attacked_model(attacked, method, chief))   # read and verified before any write
  with contextlib.ExitStack() as cleanup:
    if chief:
      files.make_workdir(outdir)
      cleanup.enter_context(files.workdir_lock(outdir))
      _check_evaluation_folder(outdir, config, defaults, lock_held=True)   # again, now held
      resume.remove_results(outdir)   # a rerun replaces them: never left stale
      files.write_json_atomic(files.join(outdir, 'config.json'),
                              {**config.to_dict(), checkpoint.PROVENANCE_KEY: provenance.collect()})
    try:
      return _evaluate_model(config, outdir, chief, evaluated, attacked, t_start)
    finally:
      if evaluated.replay is not None:
        evaluated.replay.sim.round_data.close()


class _Evaluated(NamedTuple):
  """What `_evaluate_model` scores: the model, the method's algorithm on it, the round state, the
  evaluators, and the replay of the run's rounds (None: none asked, or not process 0)."""
  model: object
  algorithm: object
  state: object
  evaluators: list
  replay: replay.Replay | None


def _started_model(config, method) -> _Evaluated:
  """The model of `config.init_from` through the method's `init`, as a run starting there."""
  start = setup_lib.warm_start(config)
  _, _, fed, evaluators = setup_lib.load_data(config, method)
  _, step_mode, _, conv_gradient = policy.resolve_engine(config)
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  algorithm = method.build(config, model, fed, step_mode=step_mode)
  state = algorithm.init(jax.random.fold_in(jax.random.PRNGKey(config.seed), 0), start)
  return _Evaluated(model, algorithm, state, evaluators, None)


def _attacked_model(attacked: replay.AttackedRun, method, chief: bool) -> _Evaluated:
  """The run's own state at `attacked.round`, built as the run built it (its config and the run
  record of that checkpoint: the learning-rate decay rounds it kept), with the replay of its
  rounds when an attack asks one (process 0 only, as after training)."""
  setup = setup_lib.set_up(attacked.config, method, attacked.record)
  reader = replay.Replay(attacked.config, attacked.workdir, setup.algorithm, None, None)
  state = reader.state_after(attacked.round, f'config.init_from={attacked.workdir!r}',
                             'rerun the run it comes from, or name another round with '
                             'config.init_from_step')
  rerun = (replay.attacked_replay(attacked, setup, state)
           if attacked.replayed and chief else None)
  return _Evaluated(setup.model, setup.algorithm, state, setup.evaluators, rerun)


def _check_evaluation_folder(outdir: str, config, defaults: dict, lock_held: bool = False
                             ) -> None:
  """`resume.check_opening` of an evaluation's folder, its refusal naming `--name`."""
  try:
    resume.check_opening(outdir, config.to_dict(), defaults=defaults, lock_held=lock_held,
                             every_field=True)
  except files.WorkdirError as error:
    raise files.WorkdirError(f'{error} (python -m fedjax_face.evaluate: --name=<another folder '
                             f'under {posixpath.dirname(outdir)}>)') from error


def _marked(outputs: dict, attacked: replay.AttackedRun | None) -> dict:
  """The evaluators' results, each attack's with the state it attacked (`AttackedRun.marks`)."""
  results = {kind: out.results for kind, out in outputs.items()}
  if attacked is not None:
    for kind in schedule.ATTACKS:
      if kind in results:
        results[kind] = {**results[kind], **attacked.marks()}
  return results


def _attacked_line(attacked: replay.AttackedRun) -> list[str]:
  """report.md's first lines: which state of the run was evaluated."""
  line = f"Evaluated: the run's own state after round {attacked.round}"
  if attacked.diverged:
    line += (f'; the run DIVERGED (the divergence guard stopped it at round '
             f'{attacked.stopped_round}), so this is its last accepted checkpoint')
  return [line + '.', '']


def _evaluate_model(config, outdir: str, chief: bool, evaluated: _Evaluated,
                    attacked: replay.AttackedRun | None, t_start: float) -> dict:
  """`evaluate_model` once its folder is held: the evaluation, the outputs."""
  print(f'evaluating {config.init_from} ({config.model.name}'
        f'{"" if attacked is None else f", its round {attacked.round} state"}) on '
        f'{[e.type for e in evaluated.evaluators]} into {outdir}', flush=True)
  outputs = evaluation.evaluate(
      evaluated.evaluators, eval_lib.predictions(evaluated.model, sources.task_of(config)),
      evaluated.algorithm, evaluated.state, replay=evaluated.replay)
  sections = _marked(outputs, attacked)
  if not chief:
    return sections
  plots = artifacts.write_eval_outputs(outdir, outputs)
  algorithm, state = evaluated.algorithm, evaluated.state
  results = {
      'algorithm': config.algorithm, 'config_name': f'evaluation of {config.init_from}',
      'config_sha256': results_lib.config_digest(config.to_dict()),
      'evaluated': config.init_from, 'rounds': 0, 'images_seen': 0,
      **({} if attacked is None else {'evaluated_round': attacked.round,
                                      'diverged': attacked.diverged}),
      'timing': {'total_s': time.perf_counter() - t_start},
      **sections,
      **({'method_state': algorithm.summary(state)} if algorithm.summary else {}),
      'plots': plots, 'provenance': provenance.collect(),
  }
  lines = ([] if attacked is None else _attacked_line(attacked)) + [
      line for out in outputs.values() for line in out.markdown]
  text = report.write(outdir, results, lines)
  print(text, flush=True)
  return results
