"""The divergence guard: a run whose training loss is not finite, or grows past
`divergence_factor` times its first round's, stops; so does a state holding nan or inf before it
is checkpointed. The stop is recorded in `<workdir>/stopped.json` (run/resume.py refuses to rerun
it unchanged). The guard's reference (the first round's loss) is kept in the run record, so that
a rerun does not take a blown-up loss as its reference."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face.run import resume
from fedjax_face.run.hooks import Hook


def check_divergence(config, done: int, round_metrics: dict, first_loss):
  """The guard, every round: FloatingPointError when the training loss is not finite, or exceeds
  `config.divergence_factor` times the first round's (a finite blow-up, e.g. FedGC at a huge
  lambda). Returns the reference loss (the first round's)."""
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


def divergence_guard(config, workdir: str, chief: bool, guard: dict | None) -> Hook:
  """The guard as a hook: `guard` is the reference the resumed checkpoint records ({'round',
  'loss'}, or None); process 0 writes stopped.json when the run stops for a non-finite or
  diverging value (any FloatingPointError of a round or a hook)."""
  kept = {'guard': guard}

  def after_round(end):
    first = kept['guard']['loss'] if kept['guard'] else None
    first = check_divergence(config, end.done, end.metrics, first)
    if kept['guard'] is None and first is not None:
      kept['guard'] = {'round': end.done, 'loss': first}

  def failed(done, error):
    if chief and isinstance(error, FloatingPointError):
      resume.write_stopped(workdir, done, str(error), config.to_dict())

  return Hook(after_round=after_round, failed=failed, record=lambda done: dict(kept))
