"""Bytes on the wire: what one client receives and sends in a round, from the pytrees that cross.

Down is `ClientInput` (its `shared` part, which every client of the round receives, and its own
row of `per_client`); up is `ClientResult.update`. Sizes come from the shapes and dtypes of one
client's traced round, as the arrays are: those the round engine recorded when it traced its
client program (`RoundEngine.client_wire`), or else `jax.eval_shape` (nothing runs). Padding is
included (a
client with fewer classes than C_max still sends C_max rows of FedGC's W_k). Keys a client keeps
after its first download (`Algorithm.sent_once`, FedFR's public images) are counted once per
client that takes part, not every round.

Under a codec the update is its payload (`core/compression.py`), so its arrays are what is
counted: the coded parameters at their compressed size, and BatchNorm's running statistics,
which cross uncoded, at 4 bytes a float32 coordinate.
"""

import jax
import numpy as np

from fedjax_face.core import arrays
from fedjax_face.core.algorithm import Algorithm, ClientInput, RoundState


def by_key(tree) -> dict[str, int]:
  """{top-level key: bytes} of a dict pytree ('' for a non-dict one)."""
  if isinstance(tree, dict):
    return {str(k): arrays.tree_bytes(v) for k, v in tree.items()}
  return {'': arrays.tree_bytes(tree)}


def wire_bytes(shared, row, update) -> dict:
  """Per key, the bytes one client receives (`down`: the round's `shared` inputs and its own
  `row` of the per-client ones) and sends (`up`: its `update`); arrays or ShapeDtypeStructs."""
  down = {**by_key(shared), **{f'{k} (own row)': v for k, v in by_key(row).items()}}
  return {'down': {k: v for k, v in down.items() if v}, 'up': by_key(update)}


def one_client_round(algorithm: Algorithm, state: RoundState, client_data) -> dict:
  """Per key, the bytes one client receives (`down`) and sends (`up`) in a round, from the shapes
  of a round of one client traced for the purpose (`wire_bytes`).

  Args:
    algorithm: the method.
    state: a round state (shapes only are read).
    client_data: one client's round data, arrays or ShapeDtypeStructs without the cohort axis.
  """
  ids = np.zeros((1,), np.int32)
  key = jax.random.PRNGKey(0)

  def round_of_one(state, data):
    client_input = algorithm.broadcast(state.server, ids, state.round, key)
    row = jax.tree.map(lambda x: x[0], client_input.per_client)
    private = jax.tree.map(lambda x: x[0], state.clients)
    result = algorithm.client_update(ClientInput(client_input.shared, row), private, data, key)
    return client_input.shared, row, result.update

  return wire_bytes(*jax.eval_shape(round_of_one, state, client_data))


def ledger(algorithm: Algorithm, state: RoundState, client_data, cohorts: list[np.ndarray],
           num_clients: int, wire: tuple | None = None) -> dict:
  """results.json['communication']: bytes per client per round (by key and in total), and the
  run's totals over `cohorts` (each round's real client ids).

  `wire`: (shared, row, update) of one client as the engine traced them
  (`RoundEngine.client_wire`); None (no round ran in this process) traces one for the purpose.
  """
  per_key = (wire_bytes(*wire) if wire is not None
             else one_client_round(algorithm, state, client_data))
  once = {k: v for k, v in per_key['down'].items() if k in algorithm.sent_once}
  down_round = sum(v for k, v in per_key['down'].items() if k not in once)
  up_round = sum(per_key['up'].values())
  participations = sum(len(c) for c in cohorts)
  participants = len(set(np.concatenate(cohorts).tolist())) if cohorts else 0
  participants = min(participants, num_clients)
  total_down = participations * down_round + participants * sum(once.values())
  return {
      'bytes_per_client_round': {'down': down_round, 'up': up_round,
                                 'down_by_key': per_key['down'], 'up_by_key': per_key['up'],
                                 'down_once': once},
      'rounds': len(cohorts), 'client_rounds': participations, 'clients_reached': participants,
      'total_bytes': {'down': int(total_down), 'up': int(participations * up_round)},
  }
