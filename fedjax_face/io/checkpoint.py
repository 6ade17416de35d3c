"""Resumable runs: orbax checkpoints of the round state, guarded by the run's config.

A workdir belongs to one experiment: `config.json` records the config that wrote its checkpoints,
and resuming with a different config is refused with the differing fields named. Fields that do
not change the trained model (`RESUMABLE_FIELDS`) may differ, so a run can be extended
(`num_rounds`) or moved to another backend.

`config.json` also records where the run came from (`provenance`, beside the config's fields):
the code, library versions and machine of its first start, and of each resume after it, so a
run trained across commits says so. Provenance is never compared: a run resumes on another
machine or at another commit, and its record tells.

Beside each checkpoint, `checkpoint_digests/<round>.json` holds the SHA-256 of every saved array
(`arrays`, checked on restore: a checkpoint without them is unverified and resumed only with
`config.trust_unverified_checkpoints`) and the run's record up to that round (`run`, written by
the driver: the noise multiplier each round ran at, the divergence guard's reference, the
learning-rate decay rounds of the run's start). A run the divergence guard stopped leaves
`stopped.json`; its rerun is refused until a field that could fix it changes (`STOP_FIX_FIELDS`).
A save that fails is one `SaveError` naming the checkpoint and the cause. Another run's checkpoint
(`config.init_from`) is read through `read_verified`, checked as a resume checks (`verify_arrays`).
"""

import contextlib
import hashlib
import json
import logging as pylogging
import os
import re
import shutil
import time
from typing import NamedTuple

import jax
from absl import logging
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from flax import serialization

from fedjax_face.core import checks
from fedjax_face.io import files
from fedjax_face.io import provenance

RESUMABLE_FIELDS = ('num_rounds', 'checkpoint_every', 'checkpoint_every_seconds', 'log_every',
                    'eval.', 'evals.', 'engine.',
                    'data.prefetch', 'data.decode_threads', 'checkpoint_keep',
                    'trust_unverified_checkpoints',
                    # The checkpoints record the noise each round ran at, so a new target is
                    # accounted over the real history (core/privacy.py:target_noise).
                    'dp.target_epsilon', 'dp.allow_sigma_increase')
# Fields of a data source's section that change how records are read, not which: resumable too.
RESUMABLE_SOURCE_FIELDS = ('skip_bad_records', 'check_record_labels')


PROVENANCE_KEY = 'provenance'   # config.json's record of where the run came from; no config field
STOPPED_FILE = 'stopped.json'   # written when the divergence guard stops a run (`write_stopped`)
# Fields whose change may cure a divergence: a rerun of a stopped run must change one of them
# (any change counts: the rule cannot know which direction helps; lowering the learning rate is
# the usual one, divergence_factor=0 turns the finite guard off), and with checkpoints these may
# then differ from the config that wrote them. '<method>.' is the method's own section.
STOP_FIX_FIELDS = ('divergence_factor', 'optimizer.')
REJECTED_TO_KEEP = 4   # newest entries kept in checkpoints_rejected/ (older ones are deleted)


def flatten(tree: dict, prefix: str = '') -> dict[str, object]:
  """{'a': {'b': 1}} -> {'a.b': 1} (tuples become lists, as in JSON). A config.json's top-level
  `provenance` record is left out: it describes the run, not its config, so the resume guard, the
  `init_from` check and readers that rebuild a config from config.json never see it."""
  out = {}
  for key, value in tree.items():
    if not prefix and key == PROVENANCE_KEY:
      continue
    if isinstance(value, dict):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = list(value) if isinstance(value, tuple) else value
  return out


def config_differences(old: dict, new: dict, defaults: dict | None = None,
                       also: tuple[str, ...] = (), resumable: bool = True) -> list[str]:
  """Fields (outside RESUMABLE_FIELDS, unless not `resumable`, and the prefixes `also`) whose
  values differ, as 'field: old -> new'. A field the old config lacks that `defaults` (the shared base config)
  holds at the value the new config has is no difference: it was added to the package since, and
  the old run trained with that behaviour, so a run started before an upgrade still resumes."""
  old_flat, new_flat = flatten(old), flatten(new)
  default_flat = flatten(defaults or {})
  diffs = []
  for key in sorted(set(old_flat) | set(new_flat)):
    if key.startswith(tuple(also)) or resumable and (
        key.startswith(RESUMABLE_FIELDS) or key in RESUMABLE_FIELDS
        or (key.startswith('data.') and key.rsplit('.', 1)[-1] in RESUMABLE_SOURCE_FIELDS)):
      continue
    if (key not in old_flat and key in default_flat and
        new_flat.get(key) == default_flat[key]):
      continue
    if old_flat.get(key, '<absent>') != new_flat.get(key, '<absent>'):
      diffs.append(f'{key}: {old_flat.get(key, "<absent>")!r} -> {new_flat.get(key, "<absent>")!r}')
  return diffs


RESULT_FILES = ('results.json', 'report.md')   # what a finished run writes last


def config_digest(config_dict: dict) -> str:
  """The SHA-256 of a config as config.json records it (its provenance record left out):
  results.json carries it, so a reader can tell that the two describe the same run."""
  config_dict = {k: v for k, v in config_dict.items() if k != PROVENANCE_KEY}
  return hashlib.sha256(json.dumps(_as_json(config_dict), sort_keys=True).encode()).hexdigest()


def stale_results(workdir: str, results: dict) -> str | None:
  """Why `results` (the workdir's results.json) is not the result of the run its config.json
  describes, or None when it is (or when no readable config.json can tell): its `config_sha256`
  differs from config.json's, or, for results written before the digest was recorded, its
  algorithm or rounds. A run that starts in a workdir writes config.json first, so a results.json
  left from an earlier run never matches it."""
  path = files.join(workdir, 'config.json')
  try:
    config_dict = files.read_json(path)
  except (OSError, ValueError):
    return None
  if 'config_sha256' in results:
    if results['config_sha256'] != config_digest(config_dict):
      return f'its config_sha256 is not that of {path}'
    return None
  for field, key in (('algorithm', 'algorithm'), ('rounds', 'num_rounds')):
    if field in results and key in config_dict and results[field] != config_dict[key]:
      return f'its {field} {results[field]!r} is not {path}\'s {config_dict[key]!r}'
  return None


def remove_results(workdir: str) -> None:
  """Deletes `workdir`'s results.json and report.md (`RESULT_FILES`): a run or evaluation that
  will write them anew starts without them, so none is left beside another config."""
  for name in RESULT_FILES:
    files.remove(files.join(workdir, name))


class Opening(NamedTuple):
  """What `check_opening` read of a workdir: its newest checkpoint's round (None: none), its
  config.json (None: none), the divergence guard's stop record (None: none), and the run record
  beside the newest checkpoint (None: none, or unreadable)."""
  latest: int | None
  old: dict | None
  stopped: dict | None
  record: dict | None = None


def _as_json(tree: dict) -> dict:
  return json.loads(json.dumps(tree, default=files.jsonable))


def check_opening(workdir: str, config_dict: dict, *, defaults: dict | None = None,
                  trust_unverified: bool = False, check_resume=None,
                  lock_held: bool = False, every_field: bool = False) -> Opening:
  """Every refusal of opening `workdir` for the run `config_dict` describes, reading only, each a
  WorkdirError in one line: a workdir another process holds (`files.check_unlocked`); a
  `checkpoints` link to nothing; a rerun of a run the divergence guard stopped, with nothing
  changed that could fix it; checkpoints of another config, or without config.json; a
  `num_rounds` below the round they hold (`check_rounds`); checkpoints none of which has its
  digests (unless `trust_unverified`); the results of another run (results.json beside another
  config.json, or none, with no checkpoint: another run's files); and whatever
  `check_resume(run record of the newest checkpoint)` raises (the driver's privacy budget). The
  driver calls it before it loads data, and `Checkpointer` again under the workdir's lock
  (`lock_held`: the caller holds `files.workdir_lock`, so it is not probed). `every_field`: no
  field is resumable (an evaluation's folder: its config is all it is). A
  config handed back with its provenance record (a tool reopening a finished run) is checked
  only for being that run's."""
  files.check_workdir(workdir)
  if not lock_held:
    files.check_unlocked(workdir)
  directory = files.join(workdir, 'checkpoints')
  check_checkpoint_link(directory)
  config_dict = dict(config_dict)
  reopened = config_dict.pop(PROVENANCE_KEY, None) is not None
  path = files.join(workdir, 'config.json')
  steps = checkpoint_steps(directory) if files.exists(directory) else []
  latest = steps[-1] if steps else None
  stopped, fixes = None, ()
  if not reopened:
    stopped = read_stopped(workdir)
    if stopped is not None:
      changed = config_differences(stopped.get('config', {}), _as_json(config_dict),
                                   defaults and _as_json(defaults))
      if not changed:
        raise files.WorkdirError(stopped_line(workdir, stopped, config_dict.get('algorithm', '')))
      fixes = stop_fix_fields(config_dict)
  old = None
  if files.exists(path):
    try:
      old = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
      raise files.WorkdirError(f'{path} is not valid JSON ({e}); it should record the config of '
                               'the run in this workdir. Use a new --workdir.') from e
  diffs = [] if old is None else config_differences(
      old, _as_json(config_dict), defaults and _as_json(defaults), fixes,
      resumable=not every_field)
  if latest is not None and old is None:
    raise files.WorkdirError(f'--workdir={workdir} has checkpoints but no config.json, so it is '
                             'unknown which config wrote them. Use a new --workdir.')
  if latest is not None and diffs:
    raise files.WorkdirError(
        f'--workdir={workdir} holds checkpoints of a different config; refusing to resume. '
        f'Differences (checkpoint -> now): {"; ".join(diffs)}. Use a new --workdir, or the same '
        'config to resume.')
  results = files.join(workdir, 'results.json')
  if latest is None and not reopened and files.exists(results) and (old is None or diffs):
    what = f'differences (results -> now): {"; ".join(diffs)}' if diffs else 'no config.json'
    raise files.WorkdirError(
        f'--workdir={workdir} holds the results of another run ({results}; {what}); a new run '
        'would mix its files with them. Use a new --workdir, or the same config to rerun it.')
  if not reopened:
    check_rounds(latest, config_dict.get('num_rounds'), workdir)
    if latest is not None and not trust_unverified and not any(
        files.exists(files.join(workdir, 'checkpoint_digests', f'{step}.json')) for step in steps):
      raise files.WorkdirError(
          f'no checkpoint under {directory} can be verified (rounds '
          f'{", ".join(map(str, reversed(steps)))} have no digest file in '
          f'{files.join(workdir, "checkpoint_digests")}); delete those step directories to start '
          'the run afresh, use a new --workdir, or --config.trust_unverified_checkpoints=True to '
          f'resume from round {latest} without verifying it.')
  record = None if latest is None else read_digest_file(
      files.join(workdir, 'checkpoint_digests', f'{latest}.json'))[1]
  if not reopened and latest is not None and check_resume is not None:
    try:
      check_resume(record)
    except ValueError as error:
      raise files.WorkdirError(str(error)) from error
  return Opening(latest, old, stopped, record)


class Checkpointer:
  """Saves and restores `RoundState` under `<workdir>/checkpoints/<round>`.

  Opening refuses, before config.json is written: a `checkpoints` link that points nowhere; a
  `num_rounds` below the round the checkpoints hold (`check_rounds`); a rerun of a run the
  divergence guard stopped with nothing changed that could fix it (`stopped.json`); another
  config; and whatever `check_resume(run record of the newest checkpoint)` raises (the driver's
  privacy budget). `max_to_keep`: `config.checkpoint_keep`. `trust_unverified`:
  `config.trust_unverified_checkpoints`, resuming from a checkpoint whose digests are missing.
  """

  def __init__(self, workdir: str, config_dict: dict, *, max_to_keep: int = 2,
               defaults: dict | None = None, trust_unverified: bool = False,
               check_resume=None):
    self.workdir = workdir
    self.trust_unverified = trust_unverified
    self.run_record = None   # the `run` record of the checkpoint `restore` returned
    opening = check_opening(workdir, config_dict, defaults=defaults, lock_held=True,
                            trust_unverified=trust_unverified, check_resume=check_resume)
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
    self._write_config(config_dict, defaults, opening)

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

  def _write_config(self, config_dict: dict, defaults: dict | None, opening: 'Opening'
                    ) -> None:
    """Writes config.json with the run's provenance record (`run_provenance`) once
    `check_opening` has passed; a results.json this run will replace goes first, so that no
    workdir shows one run's config beside another's results (`tools/tables.py` reads both)."""
    path = files.join(self.workdir, 'config.json')
    config_dict = dict(config_dict)
    # A caller handing back a saved config.json (a tool reopening a finished run to read it) does
    # not resume training: its record is kept as it is.
    reopened = config_dict.pop(PROVENANCE_KEY, None)
    if reopened is not None:
      record = (opening.old or {}).get(PROVENANCE_KEY, reopened)
    else:
      remove_results(self.workdir)
      record = run_provenance(None if opening.old is None else opening.old.get(PROVENANCE_KEY),
                              opening.latest, provenance.collect())
      stopped = opening.stopped
      if stopped is not None and opening.latest is not None:   # the stopped run, changed
        record['resumed'][-1]['after_stop'] = {
            'round': stopped.get('round'), 'reason': stopped.get('reason'),
            'changed': config_differences(stopped.get('config', {}), _as_json(config_dict),
                                          defaults and _as_json(defaults))}
    files.write_json_atomic(path, config_dict | {PROVENANCE_KEY: record})
    if opening.stopped is not None and reopened is None:
      epath.Path(files.join(self.workdir, STOPPED_FILE)).unlink(missing_ok=True)

  def last_saved(self) -> int | None:
    """The round of the newest save this run started (None: none yet)."""
    return self._saving

  def latest_round(self) -> int | None:
    return self._manager.latest_step()

  def _digest_path(self, step: int) -> str:
    return files.join(self.workdir, 'checkpoint_digests', f'{step}.json')

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
    trust = (f'; or --config.trust_unverified_checkpoints=True to resume from round '
             f'{unverified[0]} without verifying it' if unverified else '')
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
                         files.join(self.workdir, 'checkpoints', str(step)))

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
                  use: str = 'resuming from') -> tuple[str | None, dict | None]:
  """(None when the arrays `restored` from `checkpoint_path` match the digests recorded at save
  in `digest_path` and are finite, else why not; the step's `run` record). A checkpoint without
  digests (saved before they were recorded, or `checkpoint_digests/` deleted) is unverified:
  refused unless `trust_unverified`, and then checked for finiteness only (`use` says how it
  is then used). Resume, `init_from`
  and any other reader of a run's checkpoint verify through this one function."""
  digests = array_digests(restored)
  if not all(d['finite'] for d in digests.values()):
    return 'holds nan or inf', None
  if not files.exists(digest_path):
    if not trust_unverified:
      return f'{UNVERIFIED}: its digest file {digest_path} is missing', None
    print(f'checkpoint {checkpoint_path} is unverified (no {digest_path}); {use} it as '
          'config.trust_unverified_checkpoints=True says', flush=True)
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


def check_rounds(latest: int | None, num_rounds, workdir: str) -> None:
  """ValueError when the checkpoints hold a later round than `num_rounds`: the run cannot be cut
  short. Refused rather than evaluating the checkpoint of round `num_rounds`: with the default
  `checkpoint_keep` that one is usually rotated away, and keeping it would leave one workdir
  claiming two lengths (config.json and results.json at `num_rounds`, checkpoints beyond it)."""
  if latest is not None and isinstance(num_rounds, int) and latest > num_rounds:
    raise files.WorkdirError(f'config.num_rounds={num_rounds} but {workdir} holds round {latest}; '
                             'a run '
                     f'cannot be shortened. Expected config.num_rounds >= {latest} (={latest} '
                     f're-evaluates it), or a new --workdir for a {num_rounds}-round run.')


def stop_fix_fields(config_dict: dict) -> tuple[str, ...]:
  """The fields a stopped run's rerun may change (`STOP_FIX_FIELDS` and the method's section)."""
  method = config_dict.get('algorithm') or ''
  return STOP_FIX_FIELDS + ((f'{method}.',) if method else ())


def write_stopped(workdir: str, round_index: int, reason: str, config_dict: dict) -> None:
  """`<workdir>/stopped.json`: the round the divergence guard stopped the run at, why, and the
  config it ran with (`Checkpointer` refuses a rerun that changes none of `stop_fix_fields`)."""
  files.write_json_atomic(files.join(workdir, STOPPED_FILE), {
      'round': int(round_index), 'reason': ' '.join(str(reason).split()),
      'config': json.loads(json.dumps(config_dict, default=files.jsonable))})


def read_stopped(workdir: str) -> dict | None:
  """The record `write_stopped` left in `workdir`, or None."""
  path = files.join(workdir, STOPPED_FILE)
  if not files.exists(path):
    return None
  try:
    return files.read_json(path)
  except ValueError as e:
    raise files.WorkdirError(f'{path} is not valid JSON ({e}); it records why the run in this '
                             'workdir '
                     'stopped. Delete it to rerun anyway.') from e


def stopped_line(workdir: str, stopped: dict, method: str) -> str:
  """The one line refusing to rerun a stopped run unchanged."""
  reason = str(stopped.get('reason', '')).split('; ')[0]
  section = f', the {method} section' if method else ''
  return (f'--workdir={workdir} stopped at round {stopped.get("round")} ({reason}; '
          f'{files.join(workdir, STOPPED_FILE)}), and the same config would stop there again; '
          f'change optimizer.* (e.g. a lower learning_rate){section} or divergence_factor (0 = '
          'off) to go on from its last checkpoint, or use a new --workdir.')


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


def _init_run_file(workdir: str, name: str) -> str:
  """`<workdir>/<name>`, or FileNotFoundError when the run `config.init_from` names lacks it."""
  path = files.join(workdir, name)
  if not files.exists(path):
    raise FileNotFoundError(f'config.init_from={workdir!r} has no {name}; expected the --workdir '
                            'of a finished run.')
  return path


class InitFromError(checks.UsageError):
  """The run `config.init_from` names cannot start this one as it stands (a checkpoint that does
  not verify): main.py prints it as one line with exit status 2, like `experiment.validate`'s."""


def init_from_round(workdir: str, step: int = 0) -> int:
  """The round of the run in `workdir` that `config.init_from` starts from: its final checkpoint
  when the run finished (results.json written and its newest checkpoint at its config.json's
  num_rounds), else `step` (`config.init_from_step`), which must name a checkpoint it holds.
  FileNotFoundError when `workdir` holds no run; ValueError, one line naming `workdir` and what
  was expected, for an unfinished run without `step`, or a `step` it does not hold.
  `experiment.validate` calls it, before anything is written."""
  directory = _init_run_file(workdir, 'checkpoints')
  num_rounds = files.read_json(_init_run_file(workdir, 'config.json')).get('num_rounds')
  steps = checkpoint_steps(directory)
  if not steps:
    raise FileNotFoundError(f'config.init_from={workdir!r}: {directory} holds no checkpoint; '
                            'expected the --workdir of a finished run.')
  held = ', '.join(map(str, steps))
  if step:
    if step not in steps:
      raise InitFromError(f'config.init_from_step={step}, but config.init_from={workdir!r} holds '
                       f'the checkpoints of rounds {held}; expected one of them.')
    return step
  if not files.exists(files.join(workdir, 'results.json')) or steps[-1] != num_rounds:
    why = (f'its newest checkpoint is round {steps[-1]} of num_rounds={num_rounds}'
           if steps[-1] != num_rounds else 'it has no results.json')
    raise InitFromError(f'config.init_from={workdir!r} is an unfinished run ({why}); expected a '
                     'finished run, or --config.init_from_step=<round> to start from one of its '
                     f'checkpoints (rounds {held}).')
  return steps[-1]


def checkpoint_steps(directory: str) -> list[int]:
  """The finished checkpoints under a checkpoint `directory`, oldest first (read only)."""
  with reading_manager(directory) as manager:
    return sorted(manager.all_steps())


class _ReadOnlyNotice(pylogging.Filter):
  """Drops orbax's warnings that a read-only manager is read only: said on every read of another
  run's checkpoints (`config.init_from`, `evaluate`), they tell the user nothing."""

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


def read_verified(workdir: str, step: int, what: str, trust_unverified: bool = False) -> dict:
  """Checkpoint `step` of the run in `workdir` as nested dicts of arrays, verified against the
  digests recorded when it was saved (`verify_arrays`): InitFromError naming `what` (e.g.
  'config.init_from=...'), the checkpoint and the arrays that differ when it does not verify. The
  one way a run reads another run's checkpoint (a warm start, an imported backbone)."""
  path = files.join(workdir, 'checkpoints', str(step))
  with reading_manager(files.join(workdir, 'checkpoints')) as manager:
    try:
      restored = manager.restore(step, args=ocp.args.StandardRestore())
    except Exception as e:   # pylint: disable=broad-except  (orbax raises many kinds)
      first = str(e).splitlines()[0][:200] if str(e) else ''
      raise InitFromError(f'{what}: checkpoint {path} is unreadable ({type(e).__name__}: '
                          f'{first}); expected a checkpoint as it was saved.') from None
  problem, _ = verify_arrays(restored, files.join(workdir, 'checkpoint_digests', f'{step}.json'),
                             trust_unverified, path, use='starting from')
  if problem is not None:
    raise InitFromError(f'{what}: checkpoint {path} {problem}; expected a checkpoint as it was '
                        'saved (rerun the run it comes from, or name another round with '
                        'config.init_from_step).')
  return restored


def load_final_state(workdir: str, step: int = 0, trust_unverified: bool = False) -> dict:
  """The checkpoint a run starts from (`config.init_from`): the final one of the finished run in
  `workdir`, or round `step` (`config.init_from_step`) of any run there (`init_from_round`), as
  nested dicts of arrays (`{'server': ..., 'clients': ..., 'round': ...}`), verified as a resume
  verifies (`read_verified`; `trust_unverified`: `config.trust_unverified_checkpoints`)."""
  step = init_from_round(workdir, step)
  return read_verified(workdir, step, f'config.init_from={workdir!r}', trust_unverified)


def check_init_data(workdir: str, config_dict: dict, fields: tuple[str, ...],
                    defaults: dict | None = None) -> None:
  """Raises ValueError when the run in `workdir` (`config.init_from`) was trained on other data
  than `config_dict` describes, naming the `fields` that differ (the data source's
  `data_fields`: what decides the training identities and their images; the synthetic benchmark
  draws different identities for another seed or training-set size, and an inherited class
  matrix would then name other people), and FileNotFoundError when it is no finished run. A
  field that run's config.json lacks counts at its value in `defaults` (the task's base config
  with the source's section). `experiment.validate` calls it, before anything is written."""
  _init_run_file(workdir, 'checkpoints')
  old = flatten(files.read_json(_init_run_file(workdir, 'config.json')))
  new, default = flatten(config_dict), flatten(defaults or {})
  # A field added to the package since that run, at its default here, is no difference (as for a
  # resume: `config_differences`).
  old |= {key: default[key] for key in fields if key not in old and key in default}
  diffs = [f'{key}: {old.get(key, "<absent>")!r} there, {new.get(key, "<absent>")!r} here'
           for key in fields if old.get(key, '<absent>') != new.get(key, '<absent>')]
  if diffs:
    raise InitFromError(f'config.init_from={workdir!r} was trained on other data '
                        f'({"; ".join(diffs)}): '
                     'its identities are not this run\'s. Expected the same seed and data '
                     'fields (pre-train with this run\'s data section).')


def matching_tree(name: str, template, restored):
  """`restored` cast to `template`'s structure, shapes and dtypes, or a ValueError naming the
  first leaf that differs (`name` says what was restored, e.g. 'init_from=... server.model')."""
  flat_t = dict(jax.tree_util.tree_flatten_with_path(template)[0])
  flat_r = dict(jax.tree_util.tree_flatten_with_path(restored)[0])
  keys = lambda d: {jax.tree_util.keystr(k) for k in d}
  if keys(flat_t) != keys(flat_r):
    missing = sorted(keys(flat_t) - keys(flat_r))[:3]
    extra = sorted(keys(flat_r) - keys(flat_t))[:3]
    raise InitFromError(f'{name} does not have this run\'s structure: missing {missing}, '
                     f'unexpected {extra} (was it trained with the same config.model?).')
  for path, want in flat_t.items():
    got = flat_r[path]
    if tuple(np.shape(got)) != tuple(np.shape(want)):
      raise InitFromError(f'{name}{jax.tree_util.keystr(path)} has shape {tuple(np.shape(got))}; '
                       f'this run expects {tuple(np.shape(want))} (same config.model and '
                       'data.image_size as the run it starts from?).')
  return jax.tree.map(lambda t, r: jax.numpy.asarray(r, dtype=jax.numpy.result_type(t)),
                      template, restored)
