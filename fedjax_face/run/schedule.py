"""When a run does what: which rounds are logged, checkpointed and evaluated mid-run, and which
rounds its learning rate decays at across an extension. Pure functions of the config."""


def logged(config, done: int, start_round: int) -> bool:
  """Round `done` is logged: every `log_every` (0: none between), the last round, and the first
  of this start."""
  every = config.log_every
  return bool(every and done % every == 0) or done in (config.num_rounds, start_round + 1)


def checkpoint_due(config, done: int, seconds_since_save: float) -> bool:
  """Round `done` is saved: every `checkpoint_every` rounds, or once `checkpoint_every_seconds`
  have passed since the last save (either 0: off), or when an attack of the final evaluation
  replays the round after it (`replay_checkpoints`). The last round is saved anyway."""
  every, seconds = config.checkpoint_every, config.checkpoint_every_seconds
  return (bool(every and done % every == 0) or bool(seconds and seconds_since_save >= seconds)
          or done in replay_checkpoints(config))


def _leakage_rounds(section) -> tuple[int, ...]:
  """The rounds 'leakage' replays: the `rounds` consecutive ones ending at `round` (none when
  off, or when it reads the released model alone)."""
  if not section.round or tuple(section.kinds) == ('released',):
    return ()
  return tuple(range(section.round - section.get('rounds', 1) + 1, section.round + 1))


# The attacks among `config.evals` (eval/privacy/), and for those that replay rounds: the field
# that switches one on, its value when off, and the rounds it replays from its section.
ATTACKS = ('leakage', 'membership', 'inversion')
REPLAYED = {
    'leakage': ('round', 0, _leakage_rounds),
    'inversion': ('targets', 0, lambda s: (s.round,) if s.targets else ()),
}


def replayed_rounds(config) -> dict[str, tuple[str, tuple[int, ...]]]:
  """{evaluator type: (its 'config.evals.<type>.<field>=<value>' that switches it on, the rounds
  it replays)} of the sections of `config.evals` that replay rounds."""
  out, evals = {}, config.get('evals') or {}
  for kind, (field, _, rounds_of) in REPLAYED.items():
    if kind in evals and rounds_of(evals[kind]):
      section = evals[kind]
      out[kind] = (f'config.evals.{kind}.{field}={section[field]!r}',
                   tuple(int(r) for r in rounds_of(section)))
  return out


def replay_checkpoints(config) -> frozenset[int]:
  """The checkpoints the config's attacks replay from: round r-1 of each round r > 1 they
  replay (round 1 starts from the initial state, which is not saved)."""
  return frozenset(r - 1 for _, rounds in replayed_rounds(config).values() for r in rounds
                   if r > 1)


def check_replay_checkpoints(config) -> None:
  """ValueError, before training, when `checkpoint_keep` would delete a checkpoint an attack
  replays from before the final evaluation reads it: the saves due by rounds from the first of
  them to the last round (`checkpoint_due` without the seconds, which a run cannot foresee)
  must all be kept."""
  needed = replay_checkpoints(config)
  if not needed:
    return
  saves = [d for d in range(min(needed), config.num_rounds + 1)
           if d == config.num_rounds or checkpoint_due(config, d, 0.0)]
  if config.checkpoint_keep < len(saves):
    field = next(field for field, _ in replayed_rounds(config).values())
    raise ValueError(
        f'config.checkpoint_keep={config.checkpoint_keep} with {field}: the run saves '
        f'{len(saves)} checkpoints from round {min(needed)} (which the attacks replay from) to '
        f'round {config.num_rounds}, so the oldest would be deleted before the final '
        f'evaluation reads it; expected checkpoint_keep >= {len(saves)}.')


def evaluation_due(config, done: int) -> bool:
  """Round `done` is evaluated mid-run: every `eval.every_rounds` (0: off), before the last (the
  final evaluation covers it)."""
  every = config.eval.every_rounds
  return bool(every) and done % every == 0 and done < config.num_rounds


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
  (and raise the rate 10x mid-run); the decay rounds its start recorded (`prior`: the newest
  checkpoint's run record) are kept instead, by refitting decay_at to them for the build, and
  said. Not when decay_at itself changed (a stopped run may change optimizer fields:
  run/resume.py)."""
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


def lr_record(config, prior: dict | None, kept: str) -> dict:
  """The run record's 'lr_schedule' part: the decay of the run's start when an extension kept it
  (`kept`), else this config's."""
  return {'lr_schedule': (prior or {}).get('lr_schedule') if kept else decay_record(config)}
