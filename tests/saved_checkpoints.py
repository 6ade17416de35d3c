"""A run's orbax checkpoints read back in tests: one way to open them, and each manager closed
after use, so none of its threads outlives the test that opened it; and a workdir's files, to
show that a refused command left them as they were."""

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


def workdir_files(workdir) -> dict[str, bytes]:
  """Every file under `workdir` and its bytes (the lock file, rewritten by each holder, aside)."""
  out = {}
  for root, _, names in os.walk(workdir):
    for name in names:
      if name != '.lock':
        path = os.path.join(root, name)
        with open(path, 'rb') as f:
          out[os.path.relpath(path, workdir)] = f.read()
  return out
