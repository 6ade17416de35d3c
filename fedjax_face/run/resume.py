"""The rules of a workdir: which config may resume its checkpoints, when a stopped run may go on,
what a run may start from (`init_from`), and what config.json records.

A workdir belongs to one experiment: `config.json` records the config that wrote its checkpoints,
and resuming with a different config is refused with the differing fields named. Fields that do
not change the trained model may differ, so a run can be extended (`num_rounds`) or moved to
another backend: the run's own (`RUN_FIELDS`), and those each data source and method declares in
its `RESUMABLE_FIELDS` (relative to its section; `resumable_fields`).

A field the old config.json lacks is no difference when the new config holds it at the shared
base config's default (it was added to the package since, and the old run trained with that
behaviour), nor when neither the new config nor the base config has it (the package no longer
reads it, so it cannot change what the resumed rounds train).

A run the divergence guard stopped leaves `stopped.json`; its rerun is refused until a field that
could fix it changes (`STOP_FIX_FIELDS`). io/checkpoint.py stores and verifies; it knows none of
these fields.
"""

import json
from typing import NamedTuple

from fedjax_face import algorithms
from fedjax_face.core import checks, precision
from fedjax_face.data import sources
from fedjax_face.io import checkpoint, files, provenance

# The run's own fields that do not change the trained model ('x.' is a whole section).
RUN_FIELDS = ('num_rounds', 'checkpoint_every', 'checkpoint_every_seconds', 'log_every',
              'eval.', 'evals.', 'engine.', 'data.prefetch', 'data.decode_threads',
              'checkpoint_keep', 'trust_unverified_checkpoints',
              # The checkpoints record the noise each round ran at, so a new target is accounted
              # over the real history (core/privacy.py:target_noise).
              'dp.target_epsilon', 'dp.allow_sigma_increase')
STOPPED_FILE = 'stopped.json'   # written when the divergence guard stops a run (`write_stopped`)
# Fields whose change may cure a divergence: a rerun of a stopped run must change one of them
# (any change counts: the rule cannot know which direction helps; lowering the learning rate is
# the usual one, divergence_factor=0 turns the finite guard off), and with checkpoints these may
# then differ from the config that wrote them. '<method>.' is the method's own section.
STOP_FIX_FIELDS = ('divergence_factor', 'optimizer.')
RESULT_FILES = ('results.json', 'report.md')   # what a finished run writes last
TRUST_FLAG = '--config.trust_unverified_checkpoints=True'   # how a user resumes unverified


class InitFromError(checks.UsageError):
  """The run `config.init_from` names cannot start this one as it stands: main.py prints it as one
  line with exit status 2, like `run.setup.validate`'s."""


def flatten(tree: dict, prefix: str = '') -> dict[str, object]:
  """{'a': {'b': 1}} -> {'a.b': 1} (tuples become lists, as in JSON). A config.json's top-level
  provenance record is left out: it describes the run, not its config, so the resume guard, the
  `init_from` check and readers that rebuild a config from config.json never see it."""
  out = {}
  for key, value in tree.items():
    if not prefix and key == checkpoint.PROVENANCE_KEY:
      continue
    if isinstance(value, dict):
      out.update(flatten(value, f'{prefix}{key}.'))
    else:
      out[f'{prefix}{key}'] = list(value) if isinstance(value, tuple) else value
  return out


def resumable_fields(config_dict: dict) -> tuple[str, ...]:
  """The fields (and 'section.' prefixes) of `config_dict` that may differ on a resume:
  `RUN_FIELDS`, every data source's `RESUMABLE_FIELDS` under its section, and the method's under
  its own."""
  own = []
  for name in sources.SOURCES:
    own += [f'data.{name}.{f}' for f in getattr(sources.get(name), 'RESUMABLE_FIELDS', ())]
  method = config_dict.get('algorithm')
  if method in algorithms.ALGORITHMS:
    own += [f'{method}.{f}' for f in getattr(algorithms.get(method), 'RESUMABLE_FIELDS', ())]
  return RUN_FIELDS + tuple(own)


def config_differences(old: dict, new: dict, defaults: dict | None = None,
                       skip: tuple[str, ...] = ()) -> list[str]:
  """Fields whose values differ, as 'field: old -> new', leaving out the fields and
  'section.' prefixes `skip` names, a field the old config lacks that `defaults` (the shared base
  config) holds at the value the new config has, and a field that neither the new config nor
  `defaults` has (module docstring)."""
  old_flat, new_flat = flatten(old), flatten(new)
  default_flat = flatten(defaults or {})
  diffs = []
  for key in sorted(set(old_flat) | set(new_flat)):
    if key in skip or key.startswith(tuple(s for s in skip if s.endswith('.'))):
      continue
    if key not in old_flat and key in default_flat and new_flat.get(key) == default_flat[key]:
      continue
    if key not in new_flat and key not in default_flat and defaults is not None:
      continue
    if old_flat.get(key, '<absent>') != new_flat.get(key, '<absent>'):
      diffs.append(f'{key}: {old_flat.get(key, "<absent>")!r} -> {new_flat.get(key, "<absent>")!r}')
  return diffs


class Opening(NamedTuple):
  """What `check_opening` read of a workdir: its newest checkpoint's round (None: none), its
  config.json (None: none), the divergence guard's stop record (None: none), and the run record
  beside the newest checkpoint (None: none, or unreadable)."""
  latest: int | None
  old: dict | None
  stopped: dict | None
  record: dict | None = None


def as_json(tree: dict) -> dict:
  """`tree` as config.json holds it (tuples as lists, numpy scalars as numbers)."""
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
  `check_resume(run record of the newest checkpoint)` raises as ValueError (the privacy budget:
  run/noise.py). The driver calls it before it loads data, and `open_workdir` again under the
  workdir's lock (`lock_held`: the caller holds `files.workdir_lock`, so it is not probed).
  `every_field`: no field is resumable (an evaluation's folder: its config is all it is). A
  config handed back with its provenance record (a tool reopening a finished run) is checked
  only for being that run's."""
  files.check_workdir(workdir)
  if not lock_held:
    files.check_unlocked(workdir)
  directory = files.join(workdir, 'checkpoints')
  checkpoint.check_checkpoint_link(directory)
  config_dict = dict(config_dict)
  reopened = config_dict.pop(checkpoint.PROVENANCE_KEY, None) is not None
  path = files.join(workdir, 'config.json')
  steps = checkpoint.checkpoint_steps(directory) if files.exists(directory) else []
  latest = steps[-1] if steps else None
  new, defaults = as_json(config_dict), defaults and as_json(defaults)
  stopped, fixes = None, ()
  if not reopened:
    stopped = read_stopped(workdir)
    if stopped is not None:
      if not config_differences(stopped.get('config', {}), new, defaults,
                                resumable_fields(config_dict)):
        raise files.WorkdirError(stopped_line(workdir, stopped, config_dict.get('algorithm', '')))
      fixes = stop_fix_fields(config_dict)
  old = None
  if files.exists(path):
    try:
      old = json.loads(files.read_text(path))
    except json.JSONDecodeError as e:
      raise files.WorkdirError(f'{path} is not valid JSON ({e}); it should record the config of '
                               'the run in this workdir. Use a new --workdir.') from e
  skip = fixes + (() if every_field else resumable_fields(config_dict))
  diffs = [] if old is None else config_differences(old, new, defaults, skip)
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
        files.exists(checkpoint.digest_path(workdir, step)) for step in steps):
      raise files.WorkdirError(
          f'no checkpoint under {directory} can be verified (rounds '
          f'{", ".join(map(str, reversed(steps)))} have no digest file in '
          f'{files.join(workdir, "checkpoint_digests")}); delete those step directories to start '
          f'the run afresh, use a new --workdir, or {TRUST_FLAG} to resume from round {latest} '
          'without verifying it.')
  record = None if latest is None else checkpoint.read_digest_file(
      checkpoint.digest_path(workdir, latest))[1]
  if not reopened and latest is not None and check_resume is not None:
    try:
      check_resume(record)
    except ValueError as error:
      raise files.WorkdirError(str(error)) from error
  return Opening(latest, old, stopped, record)


def open_workdir(workdir: str, config_dict: dict, *, max_to_keep: int = 2,
                 defaults: dict | None = None, trust_unverified: bool = False,
                 check_resume=None) -> checkpoint.Checkpointer:
  """The workdir's Checkpointer once `check_opening` passes again (the caller holds the lock), and
  config.json written (`write_config`). `max_to_keep`: `config.checkpoint_keep`."""
  opening = check_opening(workdir, config_dict, defaults=defaults, lock_held=True,
                          trust_unverified=trust_unverified, check_resume=check_resume)
  ckpt = checkpoint.Checkpointer(workdir, max_to_keep=max_to_keep,
                                 trust_unverified=trust_unverified, trust_hint=TRUST_FLAG)
  write_config(workdir, config_dict, defaults, opening)
  return ckpt


def write_config(workdir: str, config_dict: dict, defaults: dict | None, opening: Opening
                 ) -> None:
  """Writes config.json with the run's provenance record (`checkpoint.run_provenance`) once
  `check_opening` has passed; a results.json this run will replace goes first, so that no workdir
  shows one run's config beside another's results (`tools/tables/run.py` reads both). A stopped run
  that goes on records what changed, and its stopped.json goes."""
  path = files.join(workdir, 'config.json')
  config_dict = dict(config_dict)
  # A caller handing back a saved config.json (a tool reopening a finished run to read it) does
  # not resume training: its record is kept as it is.
  reopened = config_dict.pop(checkpoint.PROVENANCE_KEY, None)
  if reopened is not None:
    record = (opening.old or {}).get(checkpoint.PROVENANCE_KEY, reopened)
  else:
    remove_results(workdir)
    record = checkpoint.run_provenance(
        None if opening.old is None else opening.old.get(checkpoint.PROVENANCE_KEY),
        opening.latest, provenance.collect() | {'compute_dtype': compute_dtype(config_dict)})
    stopped = opening.stopped
    if stopped is not None and opening.latest is not None:   # the stopped run, changed
      record['resumed'][-1]['after_stop'] = {
          'round': stopped.get('round'), 'reason': stopped.get('reason'),
          'changed': config_differences(stopped.get('config', {}), as_json(config_dict),
                                        defaults and as_json(defaults),
                                        resumable_fields(config_dict))}
  files.write_json_atomic(path, config_dict | {checkpoint.PROVENANCE_KEY: record})
  if opening.stopped is not None and reopened is None:
    files.remove(files.join(workdir, STOPPED_FILE))


def compute_dtype(config_dict: dict) -> str:
  """The dtype this start computes in: `model.dtype` with 'auto' resolved on this process's
  device (core/precision.py), so that each start and resume in config.json's provenance says what
  it computed in (a config from before `model.dtype`: float32)."""
  return precision.resolve_here(config_dict.get('model', {}).get('dtype', 'float32'))


def remove_results(workdir: str) -> None:
  """Deletes `workdir`'s results.json and report.md (`RESULT_FILES`): a run or evaluation that
  will write them anew starts without them, so none is left beside another config."""
  for name in RESULT_FILES:
    files.remove(files.join(workdir, name))


def resuming(workdir: str) -> bool:
  """True when `workdir` holds checkpoints (a rerun resumes the newest). Reads only; False for a
  workdir `files.check_workdir` refuses (it says why)."""
  try:
    files.check_workdir(workdir)
  except files.WorkdirError:
    return False
  directory = files.join(workdir, 'checkpoints')
  return files.exists(directory) and bool(checkpoint.checkpoint_steps(directory))


def check_rounds(latest: int | None, num_rounds, workdir: str) -> None:
  """WorkdirError when the checkpoints hold a later round than `num_rounds`: the run cannot be cut
  short. Refused rather than evaluating the checkpoint of round `num_rounds`: with the default
  `checkpoint_keep` that one is usually rotated away, and keeping it would leave one workdir
  claiming two lengths (config.json and results.json at `num_rounds`, checkpoints beyond it)."""
  if latest is not None and isinstance(num_rounds, int) and latest > num_rounds:
    raise files.WorkdirError(
        f'config.num_rounds={num_rounds} but {workdir} holds round {latest}; a run cannot be '
        f'shortened. Expected config.num_rounds >= {latest} (={latest} re-evaluates it), or a '
        f'new --workdir for a {num_rounds}-round run.')


def stop_fix_fields(config_dict: dict) -> tuple[str, ...]:
  """The fields a stopped run's rerun may change (`STOP_FIX_FIELDS` and the method's section)."""
  method = config_dict.get('algorithm') or ''
  return STOP_FIX_FIELDS + ((f'{method}.',) if method else ())


def write_stopped(workdir: str, round_index: int, reason: str, config_dict: dict) -> None:
  """`<workdir>/stopped.json`: the round the divergence guard stopped the run at, why, and the
  config it ran with (`check_opening` refuses a rerun that changes none of `stop_fix_fields`)."""
  files.write_json_atomic(files.join(workdir, STOPPED_FILE), {
      'round': int(round_index), 'reason': ' '.join(str(reason).split()),
      'config': as_json(config_dict)})


def read_stopped(workdir: str) -> dict | None:
  """The record `write_stopped` left in `workdir`, or None."""
  path = files.join(workdir, STOPPED_FILE)
  if not files.exists(path):
    return None
  try:
    return files.read_json(path)
  except ValueError as e:
    raise files.WorkdirError(f'{path} is not valid JSON ({e}); it records why the run in this '
                             'workdir stopped. Delete it to rerun anyway.') from e


def stopped_line(workdir: str, stopped: dict, method: str) -> str:
  """The one line refusing to rerun a stopped run unchanged."""
  reason = str(stopped.get('reason', '')).split('; ')[0]
  section = f', the {method} section' if method else ''
  return (f'--workdir={workdir} stopped at round {stopped.get("round")} ({reason}; '
          f'{files.join(workdir, STOPPED_FILE)}), and the same config would stop there again; '
          f'change optimizer.* (e.g. a lower learning_rate){section} or divergence_factor (0 = '
          'off) to go on from its last checkpoint, or use a new --workdir.')


def _init_run_file(workdir: str, name: str) -> str:
  """`<workdir>/<name>`, or FileNotFoundError when the run `config.init_from` names lacks it."""
  path = files.join(workdir, name)
  if not files.exists(path):
    raise FileNotFoundError(f'config.init_from={workdir!r} has no {name}; expected the --workdir '
                            'of a finished run.')
  return path


def init_from_round(workdir: str, step: int = 0) -> int:
  """The round of the run in `workdir` that `config.init_from` starts from: its final checkpoint
  when the run finished (results.json written and its newest checkpoint at its config.json's
  num_rounds), else `step` (`config.init_from_step`), which must name a checkpoint it holds.
  FileNotFoundError when `workdir` holds no run; InitFromError, one line naming `workdir` and
  what was expected, for an unfinished run without `step`, or a `step` it does not hold. Checked
  before anything is written."""
  directory = _init_run_file(workdir, 'checkpoints')
  num_rounds = files.read_json(_init_run_file(workdir, 'config.json')).get('num_rounds')
  steps = checkpoint.checkpoint_steps(directory)
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
                        'finished run, or --config.init_from_step=<round> to start from one of '
                        f'its checkpoints (rounds {held}).')
  return steps[-1]


def load_final_state(workdir: str, step: int = 0, trust_unverified: bool = False) -> dict:
  """The checkpoint a run starts from (`config.init_from`): the final one of the finished run in
  `workdir`, or round `step` (`config.init_from_step`) of any run there (`init_from_round`), as
  nested dicts of arrays (`{'server': ..., 'clients': ..., 'round': ...}`), verified as a resume
  verifies (`checkpoint.read_verified`; `trust_unverified`: `config.trust_unverified_checkpoints`)."""
  step = init_from_round(workdir, step)
  return checkpoint.read_verified(
      workdir, step, f'config.init_from={workdir!r}', trust_unverified, trust_hint=TRUST_FLAG,
      other='rerun the run it comes from, or name another round with config.init_from_step')


def check_init_data(workdir: str, config_dict: dict, fields: tuple[str, ...],
                    defaults: dict | None = None) -> None:
  """InitFromError when the run in `workdir` (`config.init_from`) was trained on other data than
  `config_dict` describes, naming the `fields` that differ (the data source's `data_fields`: what
  decides the training identities and their images; the synthetic benchmark draws different
  identities for another seed or training-set size, and an inherited class matrix would then name
  other people), and FileNotFoundError when it is no finished run. A field that run's
  config.json lacks counts at its value in `defaults` (the task's base config with the source's
  section). Checked before anything is written."""
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
                        f'({"; ".join(diffs)}): its identities are not this run\'s. Expected the '
                        "same seed and data fields (pre-train with this run's data section).")
