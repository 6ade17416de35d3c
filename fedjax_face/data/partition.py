"""Identity -> client partitions.

FedGC splits CASIA-WebFace's identities over 36 clients, identity-exclusive (Y_k ∩ Y_z = ∅), either
balanced or unbalanced with client sizes drawn log-normally (ln X ~ N(0, 1), FedGC Table 3). Sizes
are numbers of identities per client: every identity's images stay together on one client.
"""

import numpy as np

PARTITIONS = ('balanced', 'lognormal')


def client_sizes(num_identities: int, num_clients: int, kind: str,
                 rng: np.random.Generator) -> np.ndarray:
  """Number of identities of each client; sums to `num_identities`, each at least 1."""
  if kind not in PARTITIONS:
    raise ValueError(f'federated.partition={kind!r}; expected one of {PARTITIONS}.')
  if num_clients < 1:
    raise ValueError(f'federated.num_clients={num_clients}; expected at least 1.')
  if num_clients > num_identities:
    raise ValueError(
        f'federated.num_clients={num_clients} but there are only {num_identities} training '
        'identities: an identity-exclusive partition needs at least one identity per client. '
        'Lower federated.num_clients or raise data.num_identities.')
  if kind == 'balanced':
    shares = np.ones(num_clients)
  else:
    shares = rng.lognormal(mean=0.0, sigma=1.0, size=num_clients)  # ln X ~ N(0, 1)
  # Every client gets one identity; the rest go by largest remainder of the shares.
  spare = num_identities - num_clients
  exact = spare * shares / shares.sum()
  sizes = np.floor(exact).astype(np.int64)
  leftover = spare - sizes.sum()
  sizes[np.argsort(-(exact - sizes), kind='stable')[:leftover]] += 1
  return sizes + 1


def identity_exclusive(num_identities: int, num_clients: int, kind: str,
                       rng: np.random.Generator) -> list[np.ndarray]:
  """Shuffles the identities and deals them out; returns each client's sorted identity ids."""
  sizes = client_sizes(num_identities, num_clients, kind, rng)
  order = rng.permutation(num_identities)
  bounds = np.concatenate([[0], np.cumsum(sizes)])
  return [np.sort(order[a:b]).astype(np.int32) for a, b in zip(bounds[:-1], bounds[1:])]


def single_client(num_identities: int) -> list[np.ndarray]:
  """All identities on one client (centralized training)."""
  return [np.arange(num_identities, dtype=np.int32)]
