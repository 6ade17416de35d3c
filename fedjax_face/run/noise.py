"""The noise a DP run trains at, across its starts: `plan_noise` makes every statement the driver
makes about it, from the config and the run record of the checkpoint it resumes (the noise each
round ran at: io/checkpoint.py keeps it beside each checkpoint). Pure: it reads nothing and says
nothing; the driver prints its lines.

A resumed or extended run composes its ε over the rounds already run, at the noise they ran at
(core/privacy.py). What it refuses, before the run writes anything: a checkpoint that records no
noise history (its ε could not be accounted) unless `trust_unverified_checkpoints`; a
`dp.target_epsilon` the rounds already run have spent (`check_budget_left`); and new rounds that
would run at a higher noise than the last ones did, unless `dp.allow_sigma_increase`.
"""

from typing import NamedTuple

from fedjax_face.core import checks, privacy


class NoisePlan(NamedTuple):
  """What a run's noise is (`plan_noise`): `dp` the DpSpec of this start's rounds (None without
  DP); `history` the [rounds, noise multiplier] segments the rounds before `start_round` ran at;
  `total` those of every round of the run; `epsilons` ε after each round 1..num_rounds (empty when
  not asked for); `lines` what the driver says (the 'dp:' line, an assumption made)."""
  dp: privacy.DpSpec | None
  start_round: int
  history: list
  total: list
  epsilons: list
  lines: tuple[str, ...]
  delta: float = 0.0
  plan: dict | None = None

  def record(self, done: int) -> dict:
    """The run record's 'privacy' part for the checkpoint of round `done` (None without DP): the
    noise each round 1..`done` ran at, the ε they spent and the plan this start runs under."""
    if self.dp is None:
      return {'privacy': None}
    return {'privacy': {
        'noise_history': privacy.extended(self.history, done - self.start_round,
                                          self.dp.noise_multiplier),
        'rounds': done, 'epsilon': self.epsilons[done - 1], 'delta': self.delta,
        'plan': self.plan}}


def plan_noise(config, record: dict | None, start_round: int, client_rows, num_clients: int,
               cohort_size: int, epsilons: bool = True) -> NoisePlan:
  """The noise of a run that starts at `start_round` (0: fresh) from a checkpoint whose run record
  is `record`; `epsilons`: compose the ε curve too (one accountant pass). UsageError for a
  refused plan (module docstring)."""
  if not config.dp.enabled:
    return NoisePlan(None, start_round, [], [], [], ())
  history, planned, lines = _history(config, record, start_round, client_rows, num_clients,
                                     cohort_size)
  dp = privacy.spec_from_config(config, client_rows, num_clients, cohort_size, history, planned)
  _check_no_jump(config, dp, history, num_clients, cohort_size)
  total = privacy.extended(history, config.num_rounds - start_round, dp.noise_multiplier)
  curve = privacy.history_epsilon_curve(num_clients, cohort_size, total, config.dp.target_delta,
                                        privacy.amplified(dp), dp.count_noise) if epsilons else []
  return NoisePlan(dp, start_round, history, total, curve,
                   lines + (describe_noise(dp, history, start_round, config.num_rounds),),
                   config.dp.target_delta, privacy.plan_record(config, dp.noise_multiplier))


def _history(config, record, start_round, client_rows, num_clients, cohort_size):
  """(the segments rounds 1..`start_round` ran at, the plan they ran under, lines said) from the
  resumed checkpoint's record; ([], None, ()) for a fresh start. A record that is missing is
  refused (`no_history_line`) unless the config trusts unverified checkpoints; then every round is
  assumed to have run at this config's noise, and it is said."""
  if not start_round:
    return [], None, ()
  spent = (record or {}).get('privacy')
  if spent and privacy.rounds_of(spent['noise_history']) == start_round:
    return spent['noise_history'], spent.get('plan'), ()
  if not config.trust_unverified_checkpoints:
    raise checks.UsageError(no_history_line(config, start_round))
  sigma = privacy.spec_from_config(config, client_rows, num_clients, cohort_size).noise_multiplier
  line = (f'dp: the checkpoint of round {start_round} records no noise history; assuming rounds '
          f'1-{start_round} ran at noise multiplier {sigma:.4g} '
          '(config.trust_unverified_checkpoints=True)')
  return privacy.extended([], start_round, sigma), privacy.plan_record(config, sigma), (line,)


def _check_no_jump(config, dp: privacy.DpSpec, history, num_clients: int,
                   cohort_size: int) -> None:
  """UsageError when the rounds left would run at a higher noise multiplier than the last rounds
  ran at, unless `dp.allow_sigma_increase`: extending a run whose `dp.target_epsilon` is nearly
  spent would otherwise train the new rounds at a noise that drowns them, and the divergence
  guard would then stop it blaming the learning rate. The line says how many more rounds the
  budget affords at the old noise multiplier."""
  target = config.dp.target_epsilon
  done = privacy.rounds_of(history)
  if not (target and history) or config.dp.allow_sigma_increase or config.num_rounds <= done:
    return
  old = float(history[-1][1])
  if dp.noise_multiplier <= old * (1 + 1e-9):
    return
  epsilon = lambda rounds: privacy.history_epsilon(
      num_clients, cohort_size, privacy.extended(history, rounds, old), config.dp.target_delta,
      privacy.amplified(dp), dp.count_noise)
  affordable = _most(lambda rounds: epsilon(rounds) <= target, config.num_rounds - done)
  if affordable == config.num_rounds - done:
    return   # the old noise meets the target: the planned one is above it by the search's tolerance
  raise checks.UsageError(
      f'config.num_rounds={config.num_rounds} with dp.target_epsilon={target:g}: '
      f'rounds {done + 1}-{config.num_rounds} would run at noise multiplier '
      f'{dp.noise_multiplier:.4g}, up from the {old:.4g} of the rounds before; the budget '
      f'affords {affordable} more round(s) at {old:.4g}. Expected config.num_rounds <= '
      f'{done + affordable}, a higher dp.target_epsilon, or dp.allow_sigma_increase=True for the '
      'jump.')


def _most(fits, upper: int) -> int:
  """The largest n in [0, upper] with fits(n) (fits monotone: true up to some n, false after)."""
  low, high = 0, upper + 1   # fits(low) holds (no rounds spend nothing more); fits(high) unknown
  while high - low > 1:
    mid = (low + high) // 2
    low, high = (mid, high) if fits(mid) else (low, mid)
  return low


def check_budget_left(config, record: dict | None) -> None:
  """What opening a workdir checks of its newest checkpoint's run record (run/resume.py's
  `check_resume`): a `dp.target_epsilon` the rounds already run have spent is refused, naming
  the ε spent (core/privacy.py:check_budget), and a DP run whose checkpoint records no noise
  history is refused unless `trust_unverified_checkpoints` (its ε could not be accounted)."""
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


def describe_noise(dp: privacy.DpSpec, history, start_round: int, num_rounds: int) -> str:
  """The run's 'dp:' line: the clip and noise, and the noise of the rounds already run when it
  differs. Under adaptive clipping: where the clip starts, its quantile, and how the noise
  multiplier splits between the update and the count (core/privacy.py)."""
  line = f'dp: clip {dp.clip_norm:g}, noise multiplier {dp.noise_multiplier:.4g}'
  if dp.adaptive:
    line = (f'dp: adaptive clip from {dp.clip_norm:g} to the {dp.target_quantile:g} quantile '
            f'(learning rate {dp.clip_learning_rate:g}), noise multiplier '
            f'{dp.noise_multiplier:.4g} = update {dp.update_noise_multiplier:.4g} x C_t with '
            f'count {dp.count_noise:.4g}')
  if history and history != privacy.extended([], start_round, dp.noise_multiplier):
    ran = ', '.join(f'{n} at {s:.4g}' for n, s in history)
    line += f' for rounds {start_round + 1}-{num_rounds} (rounds 1-{start_round} ran: {ran})'
  return line
