"""A data holder: its own images from a local folder, the method's `client_update` on them, and
its private state in its own folder, one file per round. No Flower here (federation/apps.py wraps
it), so a test can call it directly.

The holder's data are read by the project's own readers (federation/own_data.py: every layout
a `data.source` reads, RecordIO, image folders, FedFR's split, the anti-spoofing lists), so they
are the very pixels the simulator of the same files decodes. Its round data are drawn by
`federated.sample_round` at its place in the federation (`roster.placed`): a pure function of
(seed, round, client) and its own samples.

Private state (`ClientResult.private`): after training round r the holder writes
`<state_dir>/private_<r+1>.npz` before it replies. It enters round r with the newest file up to
r (not sampled since, it kept its state, as the simulator keeps its row), or, holding none, with
its own row of the method's `init` (the config's seed: every party can draw it; the server never
keeps it). It keeps the file it entered with, so a round whose reply was lost can be run again;
older files are removed.
"""

import hashlib
import os
import re

import jax
import numpy as np

from fedjax_face.core import checks
from fedjax_face.core.algorithm import ClientResult
from fedjax_face.data import federated
from fedjax_face.federation import protocol, roster, wire
from fedjax_face.federation.own_data import read_own_data

PRIVATE = re.compile(r'private_(\d{6})\.npz$')


def private_path(state_dir: str, r: int) -> str:
  return os.path.join(state_dir, f'private_{r:06d}.npz')


def read_mask_secret(path: str) -> np.ndarray:
  """The holders' shared secret of secure aggregation's masks, from a file only they hold (any
  bytes, e.g. `openssl rand -hex 32`): its SHA-256, first 8 bytes, as a uint32 [2] key."""
  if not os.path.isfile(path):
    raise checks.UsageError(f'mask-secret-path={path!r} is no file; expected the secret the data '
                            'holders share (and the server does not).')
  with open(path, 'rb') as f:
    digest = hashlib.sha256(f.read()).digest()
  return np.frombuffer(digest[:8], np.uint32).copy()


def held_rounds(state_dir: str) -> list[int]:
  """The rounds whose private state `state_dir` holds, in order."""
  if not os.path.isdir(state_dir):
    return []
  return sorted(int(m.group(1)) for m in map(PRIVATE.match, os.listdir(state_dir)) if m)


class Holder:
  """One data holder of a federation: `describe()` before the first round, then `train(...)` for
  each round it is sampled in."""

  def __init__(self, config, client: int, data_dir: str, state_dir: str,
               mask_secret: np.ndarray | None = None):
    """`mask_secret`: under secure aggregation the uint32 [2] secret the holders share and the
    server does not hold (`read_mask_secret`), XORed into the masks' pair secrets."""
    protocol.check_federable(config)
    if config.secure_aggregation.enabled and mask_secret is None:
      raise checks.UsageError(f'data holder of client {client}: secure_aggregation.enabled=True '
                              'but no mask secret; expected the file the holders share and the '
                              "server does not (node config 'mask-secret-path').")
    self.mask_secret = None if mask_secret is None else np.asarray(mask_secret, np.uint32)
    self.config, self.client, self.state_dir = config, int(client), state_dir
    self.own = read_own_data(config, data_dir, self.client)
    self.code = roster.code_label()
    self.agreement = None

  def describe(self) -> roster.Description:
    return roster.describe(self.own, self.client, self.code)

  def join(self, descriptions: list[roster.Description],
           agreement: protocol.Agreement | None = None) -> None:
    """Builds the method on the federation's roster (what the server sent back: every holder's
    description, which fixes the class tables' shape and `init`'s draw), or takes `agreement`,
    the same method built once for holders that share a process. Idempotent."""
    if self.agreement is not None:
      return
    descriptions = roster.check_roster(self.config, descriptions)
    if descriptions[self.client] != self.describe():
      raise checks.UsageError(f'data holder of client {self.client}: the roster says '
                              f'{descriptions[self.client]}, its folder holds {self.describe()}; '
                              'expected its own description.')
    self.agreement = agreement or protocol.agree(self.config, descriptions)
    self.view = roster.placed(self.agreement.fed, self.own, self.client)
    self.program = protocol.client_program(self.agreement)

  def initial_private(self):
    """Round 0's private state: this holder's row of the method's `init` (the config's seed)."""
    state = self.agreement.algorithm.init(protocol.init_key(self.config))
    return jax.tree.map(lambda x: np.asarray(x[self.client]), state.clients)

  def entering_round(self, r: int) -> int | None:
    """The round whose saved state this holder enters round r with: the newest it holds up to r
    (a holder not sampled in the rounds since keeps its state, as the simulator keeps its row),
    or None for the initial state (it holds none: it never trained)."""
    held = held_rounds(self.state_dir)
    before = [h for h in held if h <= r]
    if before:
      return before[-1]
    if not held:
      return None
    raise checks.UsageError(f'data holder of client {self.client}: no private state for round '
                            f'{r} in {self.state_dir} (it holds rounds {held}); expected the '
                            'server to resume at a round this holder ran.')

  def private_at(self, r: int):
    """The private state this holder enters round r with (`entering_round`)."""
    entering = self.entering_round(r)
    if entering is None:
      return self.initial_private()
    return wire.load(private_path(self.state_dir, entering), self.agreement.private)

  def round_data(self, r: int) -> dict:
    """This holder's round-r batches, the simulator's draw for its client (no cohort axis)."""
    fl = self.config.federated
    data = federated.sample_round(
        self.view, np.array([self.client], np.int32), round_index=r, seed=self.config.seed,
        steps=fl.local_steps, batch_size=fl.batch_size, local_epochs=fl.local_epochs,
        balanced=fl.balanced_classes)
    return jax.tree.map(lambda x: x[0], data)

  def train(self, r: int, shared, per_client, key, clip=None, position: int = 0, share=None,
            cohort: int = 0) -> ClientResult:
    """Round r: the method's `client_update` on this holder's data from what the server sent
    (`clip`: the round's adaptive C_t; `position`, `share`, `cohort`: its row, its share of the
    mean and the cohort's size, under secure aggregation). Its private state for round r+1 is
    saved before the result is returned; the result's `update` (clipped under DP, masked under
    secure aggregation) and `metrics` are what the reply carries."""
    entering = self.entering_round(r)
    private = self.private_at(r)
    rows = (shared, protocol.stacked(per_client), protocol.stacked(private), self.round_data(r))
    if self.agreement.secure is None:
      result = self.program(*rows, np.int32(0), np.int32(self.client), key, clip=clip)
    else:
      program = protocol.masked_program(self.agreement.algorithm, self.agreement.dp,
                                        self.agreement.secure, int(cohort))
      result = program(*rows, np.int32(self.client), key, np.int32(position),
                       np.float32(share), self.mask_secret, clip)
    kept = jax.tree.map(np.asarray, result.private)
    wire.save(private_path(self.state_dir, r + 1), kept)
    for old in held_rounds(self.state_dir):   # kept: the state it entered with, and the new one
      if entering is not None and old < entering:
        os.remove(private_path(self.state_dir, old))
    return ClientResult(update=jax.tree.map(np.asarray, result.update), private=kept,
                        metrics=jax.tree.map(np.asarray, result.metrics))
