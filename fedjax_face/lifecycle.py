"""What a run carries across its stops: preemption (SIGTERM / SIGINT stop after the round in
flight, its state saved), the run record saved beside each checkpoint (the noise each round ran
at and the epsilon it spent, the divergence guard's reference, the learning-rate decay rounds of
the run's start, the last logged training metrics), and the guards that keep a bad state out of
the checkpoints. `experiment.train_and_evaluate` calls these; io/checkpoint.py stores them."""

import contextlib
import json
import signal
import threading

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.core import checks, distributed, privacy
from fedjax_face.io import checkpoint

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGINT)   # SLURM / TPU-VM preemption, Ctrl-C


class Preempted(Exception):
  """A run stopped by SIGTERM or SIGINT, its state saved: the message is the one line saying so
  (main.py prints it and exits with status `main.PREEMPTED_EXIT`)."""


class Preemption:
  """SIGTERM and SIGINT as a request to stop (the big_vision / orbax preemption pattern): the
  round in flight finishes, its state is saved (`stop_if_preempted` in the driver) and the run
  raises Preempted. A second signal gets the handler there was before (SIGTERM's default ends the
  process at once, Ctrl-C raises KeyboardInterrupt; the last checkpoint is resumed as after kill
  -9). Once `abandon` is called (training is saved: the final evaluation) a signal raises
  Preempted at once. Handlers are installed only from the main thread (Python's rule); elsewhere
  signals keep their handlers."""

  def __init__(self):
    self.signal_name = None
    self._previous = {}
    self._abandon_line = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for sig in PREEMPTION_SIGNALS:
        self._previous[sig] = signal.signal(sig, self._handle)
    return self

  def __exit__(self, *exc_info):
    self._restore()

  def _restore(self):
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
    self._previous = {}

  def _handle(self, signum, frame):
    del frame
    self.signal_name = signal.Signals(signum).name
    self._restore()   # a second signal acts as it would have
    if self._abandon_line is not None:
      raise Preempted(f'{self.signal_name}: stopped during the final evaluation '
                      f'({self._abandon_line}).')

  def abandon(self, line: str) -> None:
    """From now on a signal stops at once (`line`: what is saved and what to do); one that came
    already does so now."""
    self._abandon_line = line
    if self.signal_name is not None:
      raise Preempted(f'{self.signal_name}: stopped before the final evaluation ({line}).')

  def requested(self, chief: bool) -> str | None:
    """The name of the signal received, or None; with several processes, process 0's (every
    process then stops after the same round)."""
    if jax.process_count() == 1:
      return self.signal_name
    names = ('',) + tuple(s.name for s in PREEMPTION_SIGNALS)
    index = names.index(self.signal_name or '') if chief else 0
    index = int(distributed.process_zero_value(np.int32(index), chief))
    return names[index] or None


def check_budget_left(config, record: dict | None) -> None:
  """What the Checkpointer runs on the newest checkpoint's run record before a resume writes
  anything: a `dp.target_epsilon` the rounds already run have spent is refused, naming the ε
  spent (core/privacy.py:check_budget), and a DP run whose checkpoint records no noise history
  is refused unless `trust_unverified_checkpoints` (its ε could not be accounted)."""
  if not config.dp.enabled:
    return
  spent = (record or {}).get('privacy')
  if not spent:
    if not config.trust_unverified_checkpoints:
      raise ValueError(no_history_line(config))
    return
  privacy.check_budget(config.dp.target_epsilon, spent['epsilon'], spent['rounds'],
                       config.dp.target_delta)


def no_history_line(config, start_round: int | None = None) -> str:
  at = f'of round {start_round} ' if start_round else ''
  return (f'dp: the checkpoint {at}records no noise history (saved before it was recorded, or '
          'its checkpoint_digests/ file is missing), so the epsilon of its rounds cannot be '
          'accounted; expected a checkpoint with its digest file, or '
          '--config.trust_unverified_checkpoints=True to assume every round ran at this '
          f'config\'s noise multiplier (config.dp.target_epsilon={config.dp.target_epsilon:g}).')


def noise_history(config, record: dict | None, start_round: int, client_rows, num_clients: int,
                  cohort_size: int, say) -> tuple[list, dict | None]:
  """(the [rounds, noise multiplier] segments that rounds 1..`start_round` ran at, the plan they
  ran under) from the resumed checkpoint's record; ([], None) for a fresh start or without DP.
  A record that is missing is refused (`no_history_line`) unless the config trusts unverified
  checkpoints; then every round is assumed to have run at this config's noise, and it is said."""
  if not config.dp.enabled or not start_round:
    return [], None
  spent = (record or {}).get('privacy')
  if spent and privacy.rounds_of(spent['noise_history']) == start_round:
    return spent['noise_history'], spent.get('plan')
  if not config.trust_unverified_checkpoints:
    raise ValueError(no_history_line(config, start_round))
  sigma = privacy.spec_from_config(config, client_rows, num_clients, cohort_size).noise_multiplier
  say(f'dp: the checkpoint of round {start_round} records no noise history; assuming rounds '
      f'1-{start_round} ran at noise multiplier {sigma:.4g} '
      '(config.trust_unverified_checkpoints=True)', flush=True)
  return privacy.extended([], start_round, sigma), privacy.plan_record(config, sigma)


def check_noise_plan(config, record: dict | None, client_rows, num_clients: int,
                     cohort_size: int) -> None:
  """UsageError when the rounds a resumed or extended DP run has left would run at a higher
  noise multiplier than its last rounds ran at (`record`: the run record of its newest
  checkpoint), unless `dp.allow_sigma_increase`: extending a run whose `dp.target_epsilon` is
  nearly spent would otherwise train the new rounds at a noise that drowns them, and the guard
  would then stop it blaming the learning rate. The line says how many more rounds the budget
  affords at the old noise multiplier. Checked before the run writes anything."""
  dp = config.dp
  spent = (record or {}).get('privacy')
  if not (dp.enabled and dp.target_epsilon and spent) or dp.allow_sigma_increase:
    return
  history = spent['noise_history']
  done = privacy.rounds_of(history)
  if config.num_rounds <= done or not history:
    return
  spec = privacy.spec_from_config(config, client_rows, num_clients, cohort_size, history,
                                  spent.get('plan'))
  old = float(history[-1][1])
  if spec.noise_multiplier <= old * (1 + 1e-9):
    return
  epsilon = lambda rounds: privacy.history_epsilon(
      num_clients, cohort_size, privacy.extended(history, rounds, old), dp.target_delta,
      privacy.amplified(spec))
  affordable = _most(lambda rounds: epsilon(rounds) <= dp.target_epsilon,
                     config.num_rounds - done)
  raise checks.UsageError(
      f'config.num_rounds={config.num_rounds} with dp.target_epsilon={dp.target_epsilon:g}: '
      f'rounds {done + 1}-{config.num_rounds} would run at noise multiplier '
      f'{spec.noise_multiplier:.4g}, up from the {old:.4g} of the rounds before; the budget '
      f'affords {affordable} more round(s) at {old:.4g}. Expected config.num_rounds <= '
      f'{done + affordable}, a higher dp.target_epsilon, or dp.allow_sigma_increase=True for the '
      'jump.')


def _most(fits, upper: int) -> int:
  """The largest n in [0, upper) with fits(n) (fits monotone: true up to some n, false after)."""
  low, high = 0, upper   # fits(low) holds (no rounds spend nothing more); fits(high) is not known
  while high - low > 1:
    mid = (low + high) // 2
    low, high = (mid, high) if fits(mid) else (low, mid)
  return low


def describe_noise(dp: privacy.DpSpec, history, start_round: int, num_rounds: int) -> str:
  """The run's 'dp:' line: the clip and noise, and the noise of the rounds already run when it
  differs."""
  line = f'dp: clip {dp.clip_norm:g}, noise multiplier {dp.noise_multiplier:.4g}'
  if history and history != privacy.extended([], start_round, dp.noise_multiplier):
    ran = ', '.join(f'{n} at {s:.4g}' for n, s in history)
    line += f' for rounds {start_round + 1}-{num_rounds} (rounds 1-{start_round} ran: {ran})'
  return line


def run_record(config, dp: privacy.DpSpec | None, history, start_round: int, epsilons,
               lr_schedule: dict | None, done: int, guard: dict | None,
               last_logged: dict | None = None) -> dict:
  """What the checkpoint of round `done` records beside it (io/checkpoint.py): the noise each
  round 1..`done` ran at, the ε they spent and the plan this start runs under (a resume or an
  extension accounts them: core/privacy.py); the divergence guard's reference (round and loss);
  the learning-rate decay of the run's start (`with_start_decay_rounds`); the training metrics of
  the last round logged (results.json's `last_logged_round`, kept when a finished run is rerun)."""
  spent = None
  if dp is not None:
    spent = {'noise_history': privacy.extended(history, done - start_round, dp.noise_multiplier),
             'rounds': done, 'epsilon': epsilons[done - 1], 'delta': config.dp.target_delta,
             'plan': privacy.plan_record(config, dp.noise_multiplier)}
  return {'privacy': spent, 'guard': guard, 'lr_schedule': lr_schedule,
          'last_logged': last_logged or None}


def decay_record(config) -> dict | None:
  """The learning-rate decay of `config` as a checkpoint records it: the fractions and the rounds
  they fall on (`algorithms/common.py:lr_scale_schedule`), or None for a constant rate."""
  opt = config.optimizer
  if opt.schedule != 'step':
    return None
  return {'decay_at': [float(f) for f in opt.decay_at],
          'decay_rounds': [int(round(f * config.num_rounds)) for f in opt.decay_at]}


def with_start_decay_rounds(config, prior: dict | None):
  """(the config the method is built with, a line saying what was kept, or ''). `decay_at` is a
  fraction of num_rounds, so extending a `optimizer.schedule='step'` run would move its decays
  (and raise the rate 10x mid-run); the decay rounds its start recorded are kept instead, by
  refitting decay_at to them for the build, and said. Not when decay_at itself changed (a
  stopped run may change optimizer fields: io/checkpoint.py)."""
  now, start = decay_record(config), (prior or {}).get('lr_schedule')
  if (now is None or not start or start['decay_at'] != now['decay_at']
      or start['decay_rounds'] == now['decay_rounds']):
    return config, ''
  build = config.copy_and_resolve_references()
  # round(r / N * N) == r: lr_scale_schedule puts the decays back on exactly these rounds.
  build.optimizer.decay_at = tuple(r / config.num_rounds for r in start['decay_rounds'])
  kept = ', '.join(map(str, start['decay_rounds']))
  moved = ', '.join(map(str, now['decay_rounds']))
  return build, (f'optimizer.schedule=step: keeping the decay rounds of the run\'s start ({kept}); '
                 f'decay_at of num_rounds={config.num_rounds} would move them to ({moved}).')


def shared_json(value, chief: bool):
  """Process 0's JSON-able `value` on every process (the run record only process 0 reads): its
  length, then its bytes (identity with one process)."""
  if jax.process_count() == 1:
    return value
  data = np.frombuffer(json.dumps(value).encode(), np.uint8) if chief else None
  size = int(distributed.process_zero_value(np.int32(len(data) if chief else 0), chief))
  data = distributed.process_zero_value(data if chief else np.zeros(size, np.uint8), chief)
  return json.loads(bytes(np.asarray(data, np.uint8)).decode())


@contextlib.contextmanager
def stop_recorded(workdir: str, config, chief: bool, round_now):
  """Records a run the divergence guard (or a non-finite state) stops in `<workdir>/stopped.json`
  (`checkpoint.write_stopped`), so that rerunning it says so instead of repeating it."""
  try:
    yield
  except FloatingPointError as e:
    if chief:
      checkpoint.write_stopped(workdir, round_now(), str(e), config.to_dict())
    raise


def check_divergence(config, done: int, round_metrics: dict, first_loss):
  """The divergence guard, every round: stops the run when the training loss is not finite, or
  exceeds `config.divergence_factor` times the first round's (a finite blow-up, e.g. FedGC at a
  huge lambda). Returns the reference loss (the first round's)."""
  if 'train_loss' not in round_metrics:
    return first_loss
  loss = float(round_metrics['train_loss'])
  if not np.isfinite(loss):
    raise FloatingPointError(f'round {done}: training loss {loss}; the run diverged (lower '
                             'optimizer.learning_rate, or the method\'s step such as '
                             'fedgc.reg_lambda). No checkpoint of this state was written.')
  if first_loss is None:
    return loss
  factor = config.divergence_factor
  if factor and loss > factor * max(abs(first_loss), 1e-6):
    raise FloatingPointError(f'round {done}: training loss {loss:.4g} is more than '
                             f'divergence_factor={factor:g} times the first round\'s '
                             f'({first_loss:.4g}); the run diverged (lower optimizer.learning_rate '
                             'or the method\'s step, or raise --config.divergence_factor).')
  return first_loss


def checked_finite(state, done: int):
  """`state`, or FloatingPointError when any of it is nan or inf: a non-finite state is never
  checkpointed (it would replace the good checkpoints as they rotate out). Checked on the host,
  where the checkpoint goes anyway: one device program over every leaf of a large state compiles
  for seconds, once per run (BUILD_NOTES, "The test suite")."""
  finite = all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(state)
               if jnp.issubdtype(jnp.result_type(x), jnp.inexact))
  if not finite:
    raise FloatingPointError(f'round {done}: the state holds nan or inf; it is not checkpointed '
                             '(the last finite checkpoint stays). Lower optimizer.learning_rate '
                             "or the method's step.")
  return state


def for_checkpoint(state):
  """What process 0 saves: host copies with several processes (orbax then writes from process 0
  alone, see io/checkpoint.py), the arrays themselves with one."""
  if jax.process_count() == 1:
    return state
  return jax.tree.map(np.asarray, state)
