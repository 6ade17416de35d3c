"""Class-embedding tables in their two layouts, and the moves between them.

Per client: `[K, C_max, d]`, row (k, i) the i-th local class of client k, padding slots zero
(what clients train and the engine gathers). Per identity: `[N, d]`, one row per global identity
(what server steps, diagnostics and evaluation read). `identity_table [K, C_max]` (from
`data.federated`) names the identity of every slot, -1 for padding.
"""

import jax.numpy as jnp
import numpy as np


def to_client_slots(rows, identity_table: np.ndarray):
  """`[N, d]` identity rows -> `[K, C_max, d]` per-client copies (padding slots zero)."""
  slots = rows[np.maximum(identity_table, 0)]
  return slots * jnp.asarray(identity_table >= 0, slots.dtype)[..., None]


def to_identity_rows(slots, identity_table: np.ndarray, num_identities: int):
  """`[K, C_max, d]` per-client copies -> `[N, d]`: each identity's mean over the clients holding
  it (its one copy when identities are exclusive; zero for an identity nobody holds)."""
  ids = identity_table.reshape(-1)
  slot_valid = ids >= 0
  flat = slots.reshape((-1, slots.shape[-1])) * jnp.asarray(slot_valid, slots.dtype)[:, None]
  safe_ids = np.maximum(ids, 0)
  sums = jnp.zeros((num_identities, slots.shape[-1]), slots.dtype).at[safe_ids].add(flat)
  counts = np.bincount(safe_ids[slot_valid], minlength=num_identities).astype(np.float32)
  return sums / jnp.asarray(np.maximum(counts, 1.0))[:, None]


def identity_holders(identity_table: np.ndarray, num_identities: int):
  """(valid [N] bool, holders) of the identity rows: holders is the owner client id `[N]` when no
  identity is shared (no N x K matrix), else the `[N, K]` bool holder matrix."""
  num_clients = identity_table.shape[0]
  matrix = np.zeros((num_identities, num_clients), bool)
  for k in range(num_clients):
    ids = identity_table[k][identity_table[k] >= 0]
    matrix[ids, k] = True
  valid = matrix.any(axis=1)
  if (matrix.sum(axis=1) <= 1).all():
    return valid, np.where(valid, matrix.argmax(axis=1), -1).astype(np.int32)
  return valid, matrix
