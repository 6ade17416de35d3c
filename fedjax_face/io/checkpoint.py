"""Orbax checkpoints of the round state, with the digests that verify them.

`Checkpointer` saves each round's state under `<workdir>/checkpoints/<round>` and, beside it,
`checkpoint_digests/<round>.json`: the SHA-256 of every saved array (`arrays`, checked on
restore: a checkpoint without them is unverified, and resumed only when the caller trusts it) and
the run's record up to that round (`run`, written by the driver: run/hooks/checkpointing.py).
A save that fails is one `SaveError` naming the checkpoint and the cause. Another run's
checkpoint, or a given round of a run's own (a replay), is read through `read_verified`, checked
as a resume checks (`verify_arrays`).

config.json's provenance record (`run_provenance`): the code, library versions and machine of a
run's first start, and of each resume after it. Which config may open a workdir, and what
config.json holds, is run/resume.py's: this module stores, reads and verifies, and knows no
config field.
"""

import contextlib
import hashlib
import logging as pylogging
import os
import re
import shutil
import time

import jax
from absl import logging
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import serialization

from fedjax_face.core import checks
from fedjax_face.io import files
from fedjax_face.io import provenance


PROVENANCE_KEY = 'provenance'   # config.json's record of where the run came from; no config field
REJECTED_TO_KEEP = 4   # newest entries kept in checkpoints_rejected/ (older ones are deleted)


class Checkpointer:
  """Saves and restores `RoundState` under `<workdir>/checkpoints/<round>` (run/resume.py's
  `open_workdir` opens one once the workdir's rules pass). `max_to_keep`: how many checkpoints
  stay. `trust_unverified`: a checkpoint whose digests are missing may be resumed; `trust_hint`:
  how the user says so, named when none verifies.
  """

  def __init__(self, workdir: str, *, max_to_keep: int = 2, trust_unverified: bool = False,
               trust_hint: str = ''):
    self.workdir = workdir
    self.trust_unverified = trust_unverified
    self.trust_hint = trust_hint
    self.run_record = None   # the `run` record of the checkpoint `restore` returned
    check_checkpoint_link(files.join(workdir, 'checkpoints'))
    files.make_workdir(workdir)
    directory = files.absolute(files.join(workdir, 'checkpoints'))
    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    if jax.process_count() > 1:
      # Multi-process runs checkpoint from process 0 alone (host copies of the replicated state):
      # orbax must then not wait for the other processes at its barriers.
      files.makedirs(directory)
      me = jax.process_index()
      options = ocp.CheckpointManagerOptions(
          max_to_keep=max_to_keep, create=False,
          multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=me,
                                                                     active_processes={me}))
    self._manager = ocp.CheckpointManager(directory, options=options)
    self._closed = False
    self._saving = None   # the round of the newest save started (named when a save fails)
    files.makedirs(files.join(workdir, 'checkpoint_digests'))
    self._check_writable(directory)

  def _check_writable(self, directory: str) -> None:
    """Refuses at start a checkpoint directory that cannot be written (rather than at the first
    save, in the background, rounds later)."""
    if files.is_uri(directory):
      return   # object stores: the first save reports it
    probe = files.join(directory, '.write_probe')
    try:
      with open(probe, 'w') as f:
        f.write('ok')
      os.remove(probe)
    except OSError as e:
      raise files.WorkdirError(f'cannot write checkpoints to {directory}: {e.strerror or e}; '
                               'expected a writable directory.') from e

  def last_saved(self) -> int | None:
    """The round of the newest save this run started (None: none yet)."""
    return self._saving

  def latest_round(self) -> int | None:
    return self._manager.latest_step()

  def _digest_path(self, step: int) -> str:
    return digest_path(self.workdir, step)

  def latest_run_record(self) -> dict | None:
    """The `run` record beside the newest checkpoint (None: none, or its digest file is missing,
    unreadable or older than the record)."""
    step = self._manager.latest_step()
    return None if step is None else read_digest_file(self._digest_path(step))[1]

  def restore(self, template):
    """The newest checkpoint that reads and verifies, in the structure of `template` (a
    RoundState); its `run` record is left in `self.run_record`. A checkpoint that cannot be read,
    whose arrays differ from the digests recorded when it was saved, or that has no digests
    (unverified; accepted only with `trust_unverified`), is reported in one line and the next
    older one is tried; the bad ones newer than the one resumed from are moved to
    `<workdir>/checkpoints_rejected/` (the newest `REJECTED_TO_KEEP` kept there for inspection,
    out of the way of the rounds that will be saved again). With none left the run is refused,
    naming the steps to delete."""
    target = jax.tree.map(np.asarray, serialization.to_state_dict(template))
    steps = sorted(self._manager.all_steps(), reverse=True)
    problems, unverified = [], []
    for step in steps:
      run = None
      try:
        restored = self._manager.restore(step, args=ocp.args.StandardRestore(target))
        problem, run = self._verify(step, restored)
      except Exception as e:   # pylint: disable=broad-except  (orbax raises many kinds)
        problem = f'unreadable ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ""})'
      if problem is None:
        if problems:
          self._reject(problems)
          print(f'checkpoint: resuming from round {step}, the newest good checkpoint; rounds '
                f'{", ".join(map(str, problems))} moved to '
                f'{files.join(self.workdir, "checkpoints_rejected")}', flush=True)
        self.run_record = run
        return serialization.from_state_dict(template, restored)
      if problem.startswith(UNVERIFIED):
        unverified.append(step)
      line = f'checkpoint {files.join(self.workdir, "checkpoints", str(step))} {problem}'
      print(line + ('; trying the one before' if step != steps[-1] else ''), flush=True)
      problems.append(step)
    trust = (f'; or {self.trust_hint} to resume from round {unverified[0]} without verifying it'
             if unverified and self.trust_hint else '')
    raise files.WorkdirError(f'no checkpoint under {files.join(self.workdir, "checkpoints")} '
                             'reads and '
                     f'verifies (rounds {", ".join(map(str, problems))}); delete those step '
                     f'directories to start the run afresh, or use a new --workdir{trust}.')

  def _reject(self, steps: list[int]) -> None:
    """Moves the step directories `steps` out of the manager's directory (local workdirs; on an
    object store they are deleted, as a move would be a copy), keeping the newest
    `REJECTED_TO_KEEP` rejected ones."""
    rejected = files.join(self.workdir, 'checkpoints_rejected')
    for step in steps:
      source = files.join(self.workdir, 'checkpoints', str(step))
      if files.is_uri(source):
        self._manager.delete(step)
        continue
      os.makedirs(rejected, exist_ok=True)
      moved = files.join(rejected, f'{step}-{time.strftime("%Y%m%d-%H%M%S")}')
      os.replace(source, moved)
      os.utime(moved)   # its time is the rejection's, which `prune_oldest` orders by
    if os.path.isdir(rejected):
      prune_oldest(rejected, REJECTED_TO_KEEP)
    self._manager.reload()

  def _verify(self, step: int, restored) -> tuple[str | None, dict | None]:
    """`verify_arrays` of the step's checkpoint against its digest file."""
    return verify_arrays(restored, self._digest_path(step), self.trust_unverified,
                         files.join(self.workdir, 'checkpoints', str(step)), self.trust_hint)

  def save(self, round_index: int, state, run: dict | None = None) -> None:
    """Saves `state` as round `round_index`, with its digests and the driver's `run` record
    (what the rounds up to it ran with) beside it."""
    self.check()
    state_dict = serialization.to_state_dict(state)
    # The digests of what is saved, written before the save starts (it completes in the
    # background) and kept only for the steps the manager keeps.
    digest_path = self._digest_path(round_index)
    try:
      files.write_json_atomic(digest_path, {'arrays': array_digests(state_dict), 'run': run})
    except OSError as e:   # a full disk: said as a failed save is, and no half-written file left
      epath.Path(f'{digest_path}.tmp').unlink(missing_ok=True)
      raise SaveError(save_failed_line(
          files.join(self.workdir, 'checkpoints', str(round_index)), save_cause(e))) from None
    with self._save_errors():   # orbax's save first re-raises an earlier save's failure
      self._manager.save(round_index, args=ocp.args.StandardSave(state_dict), force=True)
    self._saving = round_index
    kept = {str(s) for s in self._manager.all_steps()} | {str(round_index)}
    directory = files.join(self.workdir, 'checkpoint_digests')
    for name in os.listdir(directory) if not files.is_uri(directory) else []:
      if name.endswith('.json') and name[:-5] not in kept:
        os.remove(files.join(directory, name))

  def check(self) -> None:
    """Raises at once when an earlier background save failed (a full disk, a directory that
    became unwritable), with the checkpoint directory and the cause; cheap, called every round."""
    with self._save_errors():
      self._manager.check_for_errors()

  @contextlib.contextmanager
  def _save_errors(self):
    """A failed background save as one SaveError naming the checkpoint and the cause. The chain of
    orbax's threads is dropped: it holds nothing the message does not, and buries it."""
    try:
      yield
    except SaveError:
      raise
    except Exception as e:   # pylint: disable=broad-except  (orbax re-raises its thread's error)
      raise SaveError(save_failed_line(self._in_flight_path(), save_cause(e))) from None

  def _in_flight_path(self) -> str:
    """The newest step directory being written or written (the save that failed), or the
    checkpoint directory when none is known."""
    directory = files.join(self.workdir, 'checkpoints')
    step = self._saving if self._saving is not None else self._manager.latest_step()
    return directory if step is None else files.join(directory, str(step))

  def wait(self) -> None:
    """Waits for the saves under way, raising SaveError when one failed (the driver waits after
    each save, so a failed save stops the run before another round trains; host arrays about to
    change in place, `engine.client_state='host'`, must be written first too)."""
    with self._save_errors():
      self._manager.wait_until_finished()
      self._manager.check_for_errors()

  def close(self) -> None:
    """Waits for the saves under way and closes; a second call does nothing."""
    if self._closed:
      return
    self._closed = True
    with self._save_errors():
      self._manager.wait_until_finished()
      self._manager.close()

  def finish(self, failing: bool) -> None:
    """`close` on the way out of a run. When the run is already failing, an error of the close
    itself is logged in one line and the run's own error stays the one raised."""
    try:
      self.close()
    except Exception as e:
      if not failing:
        raise
      if isinstance(e, SaveError):   # the failure the run stops for, said once
        return
      logging.warning('closing the checkpoints after the error below also failed: %s', e)


class SaveError(OSError):
  """A checkpoint save that failed (a full disk, a directory that became unwritable): one line
  naming the checkpoint and the cause (main.py prints it alone, exit status 1)."""


def save_failed_line(checkpoint: str, cause: str) -> str:
  """The one line a failed save stops the run with (main.py prints it alone, exit status 1)."""
  return (f'saving checkpoint {checkpoint} failed: {cause}; nothing after it was trained or saved '
          '(free space or fix the directory, then rerun the same command to resume from the '
          'checkpoint before).')


def save_cause(error: Exception) -> str:
  """The cause of a failed save in a few words: the OS error orbax's storage layer reports
  (tensorstore names it only by code: "[os_error_code='28']"), else the error's first line."""
  text = str(error)
  code = re.search(r"os_error_code='?(\d+)", text)
  if code:
    return f'{os.strerror(int(code.group(1)))} (errno {code.group(1)})'
  if isinstance(error, OSError) and error.strerror:
    return f'{error.strerror} (errno {error.errno})'
  first = text.splitlines()[0][:300] if text else ''
  return f'{type(error).__name__}: {first}'


UNVERIFIED = 'is unverified'   # `_verify`'s problem for a checkpoint without digests


def verify_arrays(restored, digest_path: str, trust_unverified: bool, checkpoint_path: str,
                  trust_hint: str = '', use: str = 'resuming from'
                  ) -> tuple[str | None, dict | None]:
  """(None when the arrays `restored` from `checkpoint_path` match the digests recorded at save
  in `digest_path` and are finite, else why not; the step's `run` record). A checkpoint without
  digests (saved before they were recorded, or `checkpoint_digests/` deleted) is unverified:
  refused unless `trust_unverified`, and then checked for finiteness only (`use` says how it is
  then used, `trust_hint` who trusted it). A resume, a warm start and any other reader of a run's
  checkpoint verify through this one function."""
  digests = array_digests(restored)
  if not all(d['finite'] for d in digests.values()):
    return 'holds nan or inf', None
  if not files.exists(digest_path):
    if not trust_unverified:
      return f'{UNVERIFIED}: its digest file {digest_path} is missing', None
    print(f'checkpoint {checkpoint_path} is unverified (no {digest_path}); {use} it as '
          f'{trust_hint or "trusted"} says', flush=True)
    return None, None
  try:
    recorded, run = read_digest_file(digest_path, strict=True)
  except ValueError:
    return f'has an unreadable digest file {digest_path}', None
  changed = sorted(k for k in set(recorded) | set(digests)
                   if recorded.get(k, {}).get('sha256') != digests.get(k, {}).get('sha256'))
  if changed:
    return (f'fails verification: {len(changed)} array(s) differ from what was saved '
            f'({", ".join(changed[:3])})'), None
  return None, run


def read_digest_file(path: str, strict: bool = False) -> tuple[dict | None, dict | None]:
  """(the array digests, the `run` record) of `checkpoint_digests/<round>.json`; a file written
  before the record was kept is the digests alone (record None). A missing or unreadable file
  gives (None, None), or with `strict` raises ValueError."""
  try:
    data = files.read_json(path)
  except (OSError, ValueError) as e:
    if strict:
      raise ValueError(f'{path}: {e}') from e
    return None, None
  if isinstance(data, dict) and set(data) == {'arrays', 'run'}:
    return data['arrays'], data['run']
  return data, None


def check_checkpoint_link(directory: str) -> None:
  """WorkdirError naming `directory` when it is a symbolic link to nothing (orbax would fail
  creating it with a bare FileExistsError)."""
  if not files.is_uri(directory) and os.path.islink(directory) and not os.path.exists(directory):
    raise files.WorkdirError(f'{directory} is a symbolic link to {os.readlink(directory)}, which '
                             'does not exist; expected a checkpoint directory (create the target, '
                             'or remove the link).')


def prune_oldest(directory: str, keep: int) -> None:
  """Deletes all but the `keep` most recently modified entries of a local `directory`."""
  entries = sorted((os.path.join(directory, name) for name in os.listdir(directory)),
                   key=os.path.getmtime, reverse=True)
  for path in entries[keep:]:
    if os.path.isdir(path) and not os.path.islink(path):
      shutil.rmtree(path)
    else:
      os.remove(path)


def run_provenance(record: dict | None, resumed_from: int | None, now: dict) -> dict:
  """config.json's `provenance` after this start: {'start': the first start's
  `provenance.collect()`, 'resumed': [each resume's, with the round it resumed from]}.

  `resumed_from` None is a fresh start (no checkpoint yet: whatever was recorded before is
  replaced, as no round of it survives). A run started before provenance was recorded (`record`
  None) has an unknown start (None), and its resumes are recorded from now on.
  """
  if resumed_from is None:
    return {'start': now, 'resumed': []}
  record = record or {'start': None, 'resumed': []}
  return {'start': record.get('start'),
          'resumed': list(record.get('resumed', [])) + [now | {'from_round': resumed_from}]}


def config_commits(config_json: dict | None) -> list[str]:
  """The commit labels (`provenance.commit_label`) a run was trained at, in order: its start's,
  then each resume's; ['unrecorded'] for a run whose config.json predates provenance."""
  record = (config_json or {}).get(PROVENANCE_KEY) or {'start': None, 'resumed': []}
  return [provenance.commit_label(record.get('start'))] + [
      provenance.commit_label(resume) for resume in record.get('resumed', [])]


def array_digests(tree) -> dict[str, dict]:
  """Per array of a state tree (keyed by its path): the SHA-256 of its bytes, dtype, shape and
  whether it is finite. Recorded beside each checkpoint and checked on restore."""
  out = {}
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    x = np.asarray(leaf)
    finite = bool(np.all(np.isfinite(x))) if np.issubdtype(x.dtype, np.inexact) else True
    out[jax.tree_util.keystr(path)] = {
        'sha256': hashlib.sha256(np.ascontiguousarray(x).tobytes()).hexdigest(),
        'dtype': str(x.dtype), 'shape': list(x.shape), 'finite': finite}
  return out


def checkpoint_steps(directory: str) -> list[int]:
  """The finished checkpoints under a checkpoint `directory`, oldest first (read only)."""
  with reading_manager(directory) as manager:
    return sorted(manager.all_steps())


class _ReadOnlyNotice(pylogging.Filter):
  """Drops orbax's warnings that a read-only manager is read only: said on every read of another
  run's checkpoints (a warm start, an evaluation), they tell the user nothing."""

  def filter(self, record):
    return not record.getMessage().startswith(('Given directory is read only',
                                               'CheckpointManagerOptions.read_only=True'))


@contextlib.contextmanager
def reading_manager(directory: str):
  """An orbax CheckpointManager that only reads `directory` (never creates, cleans or deletes
  anything there), closed on exit."""
  notice = _ReadOnlyNotice()
  logger = pylogging.getLogger('absl')
  logger.addFilter(notice)
  try:
    options = ocp.CheckpointManagerOptions(create=False, read_only=True, save_interval_steps=0,
                                           max_to_keep=None)
    manager = ocp.CheckpointManager(files.absolute(directory), options=options)
  finally:
    logger.removeFilter(notice)
  try:
    yield manager
  finally:
    manager.close()


class CheckpointReadError(checks.UsageError):
  """Another run's checkpoint that cannot be read or does not verify (`read_verified`): main.py
  prints it as one line with exit status 2."""


def digest_path(workdir: str, step: int) -> str:
  """`<workdir>/checkpoint_digests/<step>.json`: the digests and run record of one checkpoint."""
  return files.join(workdir, 'checkpoint_digests', f'{step}.json')


def read_verified(workdir: str, step: int, what: str, trust_unverified: bool = False, *,
                  trust_hint: str = '', other: str = 'rerun the run it comes from',
                  template=None):
  """Checkpoint `step` of the run in `workdir` as nested dicts of arrays, or in the structure of
  `template` (a RoundState, restored as `Checkpointer.restore` restores it), verified against the
  digests recorded when it was saved (`verify_arrays`, as a resume verifies): CheckpointReadError
  naming `what` (who reads it), the checkpoint and the arrays that differ when it does not verify,
  and `other` (what to do instead). The one way a run reads another run's checkpoint (a warm
  start, a tool), or a given round of its own (a replay of that round's clients)."""
  path = files.join(workdir, 'checkpoints', str(step))
  target = (None if template is None else
            jax.tree.map(np.asarray, serialization.to_state_dict(template)))
  with reading_manager(files.join(workdir, 'checkpoints')) as manager:
    try:
      restored = manager.restore(step, args=ocp.args.StandardRestore(target))
    except Exception as e:   # pylint: disable=broad-except  (orbax raises many kinds)
      first = str(e).splitlines()[0][:200] if str(e) else ''
      raise CheckpointReadError(f'{what}: checkpoint {path} is unreadable ({type(e).__name__}: '
                                f'{first}); expected a checkpoint as it was saved.') from None
  problem, _ = verify_arrays(restored, digest_path(workdir, step), trust_unverified, path,
                             trust_hint, use='starting from')
  if problem is not None:
    raise CheckpointReadError(f'{what}: checkpoint {path} {problem}; expected a checkpoint as it '
                              f'was saved ({other}).')
  return restored if template is None else serialization.from_state_dict(template, restored)


