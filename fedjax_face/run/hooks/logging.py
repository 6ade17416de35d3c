"""Logging: the training metrics of the rounds `run/schedule.py:logged` picks (with the class
embeddings' norms and, under DP, ε) go to TensorBoard and the progress line; ε goes there every
round. The metrics of the last logged round are kept in the run record, so that a rerun of a
finished or preempted run reports them too (results.json's `last_logged_round`)."""

import numpy as np

from fedjax_face.core import engine as engine_lib
from fedjax_face.eval import diagnostics
from fedjax_face.run import schedule
from fedjax_face.run.hooks import Hook


def class_embedding_norms(algorithm, state) -> dict:
  """Mean / max L2 norm of the class embeddings, for the round log (empty when the algorithm
  keeps none)."""
  class_embeddings = algorithm.class_embeddings(engine_lib.local_copy(state))
  if class_embeddings is None:
    return {}
  norms = diagnostics.class_embedding_norms(class_embeddings)
  return {f'class_embeddings/{k}': v for k, v in norms.items()}


def round_scalars(algorithm, end, epsilons) -> dict[str, float]:
  """A logged round's scalars, or FloatingPointError when one is not finite."""
  scalars = {k: float(v) for k, v in end.metrics.items()}
  scalars.update(class_embedding_norms(algorithm, end.state))
  if not np.all(np.isfinite(list(scalars.values()))):
    raise FloatingPointError(f'round {end.done}: non-finite training metrics {scalars}; the run '
                             'diverged (lower optimizer.learning_rate or fedgc.reg_lambda).')
  if epsilons:   # inf without noise: a value, not a divergence
    scalars['dp/epsilon'] = epsilons[end.done - 1]
  return scalars


def logging(config, algorithm, writer, progress, start_round: int, epsilons,
            last_logged: dict | None) -> Hook:
  """`writer` (a `io.metrics.MetricWriter`) and `progress` (`io.metrics.Progress`) are process
  0's (None elsewhere); `last_logged`: what the resumed checkpoint records."""
  kept = {'last_logged': last_logged or None}

  def after_round(end):
    if not schedule.logged(config, end.done, start_round):
      if writer is not None and epsilons:
        writer.write_scalars(end.done, {'dp/epsilon': epsilons[end.done - 1]})
      return
    scalars = round_scalars(algorithm, end, epsilons)
    kept['last_logged'] = {'round': end.done, **scalars}
    if writer is not None:
      writer.write_scalars(end.done, {**scalars, **progress.update(end.done, scalars)})

  return Hook(after_round=after_round, record=lambda done: dict(kept))
