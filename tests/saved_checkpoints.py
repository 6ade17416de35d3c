"""A run's orbax checkpoints read back in tests: one way to open them, and each manager closed
after use, so none of its threads outlives the test that opened it."""

import os

import orbax.checkpoint as ocp


def _manager(workdir) -> ocp.CheckpointManager:
  return ocp.CheckpointManager(os.path.join(str(workdir), 'checkpoints'))


def steps(workdir) -> list[int]:
  """The rounds checkpointed under workdir/checkpoints, oldest first."""
  with _manager(workdir) as manager:
    return sorted(manager.all_steps())


def restore(workdir, step: int):
  """The state saved at round `step` under workdir/checkpoints, as nested dicts of arrays."""
  with _manager(workdir) as manager:
    return manager.restore(step)
