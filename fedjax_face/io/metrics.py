"""One writer for metrics (log + TensorBoard) and a progress line over rounds."""

import time

from fedjax_face.io import files


class MetricWriter:
  """Writes scalars to the log and to TensorBoard event files under `<workdir>/tensorboard`."""

  def __init__(self, logdir: str):
    from tensorboardX import SummaryWriter  # imported here: only runs that log need it
    files.register_tensorboard_scheme(logdir)
    self._tb = SummaryWriter(logdir=logdir)

  def write_scalars(self, step: int, scalars: dict[str, float]) -> None:
    for name, value in scalars.items():
      if value == value:   # NaN marks "not measured yet" (e.g. a rate before the second round)
        self._tb.add_scalar(name, float(value), step)
    self._tb.flush()

  def close(self) -> None:
    self._tb.close()


def format_duration(seconds: float) -> str:
  seconds = int(round(seconds))
  minutes, seconds = divmod(seconds, 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m{seconds:02d}s' if hours else f'{minutes}m{seconds:02d}s'


class Progress:
  """Rounds done, rate (rounds/s and training images/s) and ETA, measured after the first round.

  The first round of a run includes compilation, so rates are measured from its end.
  """

  def __init__(self, total_rounds: int, start_round: int, images_per_round: int):
    self.total = total_rounds
    self.images_per_round = images_per_round
    self._first_done = None
    self._start_round = start_round

  def update(self, round_index: int, scalars: dict[str, float]) -> dict[str, float]:
    now = time.perf_counter()
    if self._first_done is None:
      self._first_done = (round_index, now)
      rate = float('nan')
    else:
      done_round, t0 = self._first_done
      rate = (round_index - done_round) / max(now - t0, 1e-9)
    eta = (self.total - round_index) / rate if rate == rate and rate > 0 else float('nan')
    pct = 100.0 * round_index / self.total
    parts = [f'round {round_index}/{self.total} ({pct:.0f}%)']
    parts += [f'{k} {v:.4f}' for k, v in scalars.items()]
    if rate == rate:
      parts += [f'{rate:.2f} rounds/s', f'{rate * self.images_per_round:.0f} img/s',
                f'ETA {format_duration(eta)}']
    print(' | '.join(parts), flush=True)
    return {'rounds_per_s': rate, 'images_per_s': rate * self.images_per_round}
