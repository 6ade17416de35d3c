"""core/class_tables.py: class tables per client <-> per identity, and who holds what."""

import jax.numpy as jnp
import numpy as np

from fedjax_face.core import class_tables

# Client 0 holds identities 2, 0; client 1 holds 1; client 2 holds 3, 4 (a padding slot at [1, 1]).
TABLE = np.array([[2, 0], [1, -1], [3, 4]], np.int32)


def test_round_trip_with_exclusive_identities():
  rows = jnp.arange(5 * 3, dtype=jnp.float32).reshape(5, 3) + 1.0
  slots = class_tables.to_client_slots(rows, TABLE)
  assert slots.shape == (3, 2, 3)
  np.testing.assert_array_equal(slots[0, 0], rows[2])
  np.testing.assert_array_equal(slots[1, 1], [0.0, 0.0, 0.0])       # padding slot
  np.testing.assert_array_equal(class_tables.to_identity_rows(slots, TABLE, 5), rows)


def test_shared_identity_is_the_mean_of_its_holders_and_unheld_rows_are_zero():
  table = np.array([[0, 1], [0, -1]], np.int32)   # identity 0 on both clients; 2 on none
  slots = jnp.array([[[1.0, 2.0], [5.0, 5.0]], [[3.0, 6.0], [9.0, 9.0]]])
  rows = class_tables.to_identity_rows(slots, table, 3)
  np.testing.assert_array_equal(rows, [[2.0, 4.0], [5.0, 5.0], [0.0, 0.0]])


def test_holders_are_owner_ids_when_exclusive_and_a_matrix_when_shared():
  valid, owners = class_tables.identity_holders(TABLE, 6)
  np.testing.assert_array_equal(valid, [True, True, True, True, True, False])
  np.testing.assert_array_equal(owners, [0, 1, 0, 2, 2, -1])
  assert owners.dtype == np.int32
  valid, matrix = class_tables.identity_holders(np.array([[0, 1], [0, -1]], np.int32), 2)
  np.testing.assert_array_equal(matrix, [[True, True], [True, False]])
