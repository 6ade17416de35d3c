"""io/checkpoint.py on small fake round states saved in a temp workdir (no training): what a
restore does with a checkpoint that does not read or verify (the one-line messages, the fallback to
the newest good one, the rejected step directories and their bound, the refusal when none is
left), what `max_to_keep` keeps, digest files written before the run record, a checkpoint trusted
without digests, and `read_verified` on a checkpoint with one bit flipped. Checkpoints are
corrupted on disk as tests/test_faults.py corrupts a real run's (`_corrupt`)."""

import json
import os
import re

import jax
import numpy as np
import pytest

from fedjax_face.io import checkpoint, files
from tests import saved_checkpoints
from tests.test_faults import _corrupt

# What orbax's reader says of a step directory `_corrupt` overwrote: its error's type and first
# line, cut to 200 characters (the words are tensorstore's).
UNREADABLE = r'unreadable \((\w+): ([^\n]{1,200})\)'


def state(r: int) -> dict:
  """Round r's state: a random float array (its data files do not compress away, so `_corrupt`
  and a bit flip land in the array's bytes), a small one and the round."""
  return {'server': {'w': np.random.default_rng(r).standard_normal(512).astype(np.float32),
                     'b': np.full(3, r, np.float32)},
          'round': np.int32(r)}


def save(workdir: str, rounds, max_to_keep: int = 10) -> None:
  """Checkpoints of `rounds`, each with its digests and a run record {'done': r}."""
  ckpt = checkpoint.Checkpointer(workdir, max_to_keep=max_to_keep)
  for r in rounds:
    ckpt.save(r, state(r), {'done': r})
  ckpt.close()


def assert_state(tree, r: int) -> None:
  assert jax.tree.structure(tree) == jax.tree.structure(state(r))
  jax.tree.map(np.testing.assert_array_equal, tree, state(r))


def restore(workdir: str, **kwargs):
  """(the restored state, the run record beside it) of a new Checkpointer's `restore`."""
  ckpt = checkpoint.Checkpointer(workdir, **kwargs)
  try:
    return ckpt.restore(state(0)), ckpt.run_record
  finally:
    ckpt.close()


def step_dir(workdir: str, step: int) -> str:
  return f'{workdir}/checkpoints/{step}'


@pytest.fixture
def workdir(tmp_path) -> str:
  return str(tmp_path / 'run')


# -- a restore past checkpoints that do not read or verify --------------------------------------

def test_a_corrupted_newest_checkpoint_falls_back_to_the_newest_good_one(workdir, capsys):
  save(workdir, (1, 2, 3, 4))
  _corrupt(step_dir(workdir, 4))
  capsys.readouterr()
  restored, record = restore(workdir)
  assert_state(restored, 3)
  assert record == {'done': 3}
  tried, resumed = capsys.readouterr().out.splitlines()
  assert re.fullmatch(rf'checkpoint {re.escape(step_dir(workdir, 4))} {UNREADABLE}; trying the '
                      'one before', tried), tried
  assert resumed == ('checkpoint: resuming from round 3, the newest good checkpoint; rounds 4 '
                     f'moved to {workdir}/checkpoints_rejected')
  # The bad step is moved out of the way of the round that will be saved again; the good ones
  # and every digest file stay.
  [moved] = os.listdir(f'{workdir}/checkpoints_rejected')
  assert re.fullmatch(r'4-\d{8}-\d{6}', moved), moved
  assert saved_checkpoints.steps(workdir) == [1, 2, 3]
  assert sorted(os.listdir(f'{workdir}/checkpoint_digests')) == ['1.json', '2.json', '3.json',
                                                                 '4.json']


def test_every_bad_checkpoint_newer_than_the_good_one_is_named_and_moved(workdir, capsys):
  save(workdir, (1, 2, 3, 4))
  for step in (3, 4):
    _corrupt(step_dir(workdir, step))
  capsys.readouterr()
  restored, _ = restore(workdir)
  assert_state(restored, 2)
  four, three, resumed = capsys.readouterr().out.splitlines()
  assert re.fullmatch(rf'checkpoint {re.escape(step_dir(workdir, 4))} {UNREADABLE}; trying the '
                      'one before', four), four
  assert re.fullmatch(rf'checkpoint {re.escape(step_dir(workdir, 3))} {UNREADABLE}; trying the '
                      'one before', three), three
  assert resumed == ('checkpoint: resuming from round 2, the newest good checkpoint; rounds 4, 3 '
                     f'moved to {workdir}/checkpoints_rejected')
  assert sorted(name.split('-')[0] for name in os.listdir(f'{workdir}/checkpoints_rejected')) == [
      '3', '4']
  assert saved_checkpoints.steps(workdir) == [1, 2]


def test_with_every_checkpoint_bad_the_restore_is_refused_naming_their_rounds(workdir, capsys):
  save(workdir, (1, 2))
  for step in (1, 2):
    _corrupt(step_dir(workdir, step))
  capsys.readouterr()
  with pytest.raises(files.WorkdirError) as refused:
    restore(workdir)
  assert str(refused.value) == (
      f'no checkpoint under {workdir}/checkpoints reads and verifies (rounds 2, 1); delete those '
      'step directories to start the run afresh, or use a new --workdir.')
  two, one = capsys.readouterr().out.splitlines()
  assert re.fullmatch(rf'checkpoint {re.escape(step_dir(workdir, 2))} {UNREADABLE}; trying the '
                      'one before', two), two
  assert re.fullmatch(rf'checkpoint {re.escape(step_dir(workdir, 1))} {UNREADABLE}', one), one
  # Nothing is moved when nothing is resumed.
  assert not os.path.exists(f'{workdir}/checkpoints_rejected')
  assert saved_checkpoints.steps(workdir) == [1, 2]


def test_with_none_good_an_unverified_one_is_offered_when_the_user_can_trust_it(workdir, capsys):
  save(workdir, (1, 2))
  os.remove(checkpoint.digest_path(workdir, 2))
  _corrupt(step_dir(workdir, 1))
  capsys.readouterr()
  with pytest.raises(files.WorkdirError) as refused:
    restore(workdir, trust_hint='--trust=yes')
  assert str(refused.value) == (
      f'no checkpoint under {workdir}/checkpoints reads and verifies (rounds 2, 1); delete those '
      'step directories to start the run afresh, or use a new --workdir; or --trust=yes to resume '
      'from round 2 without verifying it.')
  assert capsys.readouterr().out.splitlines()[0] == (
      f'checkpoint {step_dir(workdir, 2)} is unverified: its digest file '
      f'{workdir}/checkpoint_digests/2.json is missing; trying the one before')


def test_rejected_checkpoints_are_bounded_to_the_newest_rejections(workdir):
  save(workdir, (1, 2, 3, 4))
  rejected = f'{workdir}/checkpoints_rejected'   # six older rejections already there
  for i in range(6):
    os.makedirs(f'{rejected}/old-{i}')
    os.utime(f'{rejected}/old-{i}', (1e9 + i, 1e9 + i))
  _corrupt(step_dir(workdir, 4))
  assert_state(restore(workdir)[0], 3)
  names = sorted(os.listdir(rejected))
  assert len(names) == checkpoint.REJECTED_TO_KEEP == 4
  assert re.fullmatch(r'4-\d{8}-\d{6}', names[0]) and names[1:] == ['old-3', 'old-4', 'old-5']


# -- what is kept, and what verifies ------------------------------------------------------------

def test_max_to_keep_keeps_the_newest_steps_and_only_their_digests(workdir):
  save(workdir, (1, 2, 3, 4), max_to_keep=3)
  assert saved_checkpoints.steps(workdir) == [2, 3, 4]
  assert sorted(os.listdir(f'{workdir}/checkpoint_digests')) == ['2.json', '3.json', '4.json']
  for r in (2, 3, 4):
    assert checkpoint.read_digest_file(checkpoint.digest_path(workdir, r)) == (
        checkpoint.array_digests(state(r)), {'done': r})
    assert_state(saved_checkpoints.restore(workdir, r), r)


def test_digest_files_written_before_the_run_record_still_verify(workdir, capsys):
  save(workdir, (1, 2))
  for r in (1, 2):   # the format before the record: the array digests alone
    path = checkpoint.digest_path(workdir, r)
    files.write_json_atomic(path, json.loads(open(path).read())['arrays'])
    assert checkpoint.read_digest_file(path) == (checkpoint.array_digests(state(r)), None)
  capsys.readouterr()
  restored, record = restore(workdir)
  assert_state(restored, 2)
  assert record is None
  assert capsys.readouterr().out == ''
  ckpt = checkpoint.Checkpointer(workdir)
  assert ckpt.latest_run_record() is None
  ckpt.close()
  # They are checked, not merely read: an array that differs from its old-format digest fails.
  path = checkpoint.digest_path(workdir, 2)
  digests = json.loads(open(path).read())
  digests["['server']['w']"]['sha256'] = '0' * 64
  files.write_json_atomic(path, digests)
  assert_state(restore(workdir)[0], 1)
  assert capsys.readouterr().out.splitlines()[0] == (
      f"checkpoint {step_dir(workdir, 2)} fails verification: 1 array(s) differ from what was "
      "saved (['server']['w']); trying the one before")


def test_a_checkpoint_without_digests_is_resumed_with_one_line_when_trusted(workdir, capsys):
  save(workdir, (1, 2))
  os.remove(checkpoint.digest_path(workdir, 1))
  os.remove(checkpoint.digest_path(workdir, 2))
  capsys.readouterr()
  restored, record = restore(workdir, trust_unverified=True, trust_hint='--trust=yes')
  assert_state(restored, 2)
  assert record is None
  assert capsys.readouterr().out == (
      f'checkpoint {step_dir(workdir, 2)} is unverified (no {workdir}/checkpoint_digests/2.json); '
      'resuming from it as --trust=yes says\n')
  assert not os.path.exists(f'{workdir}/checkpoints_rejected')


# -- another run's checkpoint, read and verified -----------------------------------------------

def flip_a_bit(workdir: str, step: int) -> dict:
  """Flips one bit in the middle of a data file of checkpoint `step`: the first, largest first,
  that orbax then reads without an error and with an array changed (its b-tree files carry
  checksums, its data files do not). Returns what it then reads."""
  final = step_dir(workdir, step)
  reference = saved_checkpoints.restore(workdir, step)
  data_files = sorted((os.path.join(root, name) for root, _, names in os.walk(final)
                       for name in names if '/d/' in os.path.join(root, name) + '/'),
                      key=os.path.getsize, reverse=True)
  for path in data_files:
    with open(path, 'rb') as f:
      original = f.read()
    flipped = bytearray(original)
    flipped[len(flipped) // 2] ^= 0x01
    with open(path, 'wb') as f:
      f.write(flipped)
    try:
      read = saved_checkpoints.restore(workdir, step)
      if not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(reference),
                                                       jax.tree.leaves(read))):
        return read
    except Exception:   # pylint: disable=broad-except  (orbax raises many kinds)
      pass
    with open(path, 'wb') as f:
      f.write(original)
  pytest.fail(f'no data file of {final} reads with one bit flipped')


def changed_arrays(a, b) -> list[str]:
  return [jax.tree_util.keystr(path) for (path, x), y in zip(
      jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)) if not np.array_equal(x, y)]


def test_read_verified_refuses_a_checkpoint_with_a_bit_flipped_naming_it(workdir):
  save(workdir, (1, 2))
  jax.tree.map(np.testing.assert_array_equal,
               checkpoint.read_verified(workdir, 2, 'the reader'), state(2))
  read = flip_a_bit(workdir, 2)
  # The flip lands in the random array's bytes, and one bit there leaves it finite.
  assert changed_arrays(state(2), read) == ["['server']['w']"]
  assert np.all(np.isfinite(read['server']['w']))
  with pytest.raises(checkpoint.CheckpointReadError) as refused:
    checkpoint.read_verified(workdir, 2, 'the reader', other='read another')
  assert str(refused.value) == (
      f"the reader: checkpoint {step_dir(workdir, 2)} fails verification: 1 array(s) differ from "
      "what was saved (['server']['w']); expected a checkpoint as it was saved (read another).")
  # Trusting unverified checkpoints does not make a checkpoint whose digests disagree good.
  with pytest.raises(checkpoint.CheckpointReadError, match='fails verification'):
    checkpoint.read_verified(workdir, 2, 'the reader', trust_unverified=True)
  # The round before is untouched and still verifies.
  jax.tree.map(np.testing.assert_array_equal,
               checkpoint.read_verified(workdir, 1, 'the reader'), state(1))


def test_read_verified_names_a_checkpoint_that_does_not_read(workdir):
  save(workdir, (1, 2))
  _corrupt(step_dir(workdir, 2))
  with pytest.raises(checkpoint.CheckpointReadError) as refused:
    checkpoint.read_verified(workdir, 2, 'the reader')
  assert re.fullmatch(
      rf'the reader: checkpoint {re.escape(step_dir(workdir, 2))} is {UNREADABLE}; expected a '
      r'checkpoint as it was saved\.', str(refused.value)), str(refused.value)
