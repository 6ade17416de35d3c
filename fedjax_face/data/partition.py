"""Identity -> client partitions.

FedGC splits CASIA-WebFace's identities over 36 clients, identity-exclusive (Y_k ∩ Y_z = ∅), either
balanced or unbalanced with client sizes drawn log-normally (ln X ~ N(0, 1), FedGC Table 3). Sizes
are numbers of identities per client: every identity's images stay together on one client.

The paper's general case ("Extend FedGC to More General Case"): some identities are shared by a
group of clients. `share_identities` gives a chosen fraction of the identities to extra clients;
`federated.build` then splits a shared identity's images between its holders (each holder has
its own photos of the person, none duplicated).

`one_per_client` is the FedFV / FedAwS / FedUV setting: every client is one person (a phone) and
holds only that person's images, so C clients = C identities.
"""

import collections

import numpy as np

PARTITIONS = ('balanced', 'lognormal', 'one_per_client')


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
        'Lower federated.num_clients or raise data.synthetic.num_identities.')
  if kind == 'one_per_client':
    if num_clients != num_identities:
      raise ValueError(
          f'federated.partition=\'one_per_client\' needs one client per training identity: '
          f'federated.num_clients={num_clients} but there are {num_identities} identities. Set '
          'federated.num_clients to data.synthetic.num_identities (real data: the identities kept).')
    return np.ones(num_clients, np.int64)
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


def spread_families(client_identities: list[np.ndarray], family: np.ndarray,
                    rng: np.random.Generator) -> list[np.ndarray]:
  """Swaps identities between clients until no client holds two members of one family.

  Look-alike families (`data.synthetic.lookalike_family_size`) are meant to sit on different clients, the
  case FedGC targets. Each swap moves a surplus member to a client without its family in
  exchange for an identity whose family the first client lacks, so client sizes are kept. A
  partition that needs no swap is returned unchanged, without consuming `rng`.
  """
  clients = [list(ids) for ids in client_identities]
  family = np.asarray(family)
  largest = int(np.bincount(family).max()) if len(family) else 0
  if largest > len(clients):
    raise ValueError(f'a look-alike family of {largest} cannot be spread over '
                     f'{len(clients)} clients; expected data.synthetic.lookalike_family_size <= '
                     'federated.num_clients.')
  held = [collections.Counter(family[ids].tolist()) for ids in clients]
  for k, ids in enumerate(clients):
    for pos in range(len(ids)):
      f = int(family[ids[pos]])
      if held[k][f] < 2:
        continue
      for other in rng.permutation(len(clients)):
        if other == k or held[other][f]:
          continue
        swappable = [q for q, j in enumerate(clients[other]) if not held[k][int(family[j])]]
        if swappable:
          q = swappable[rng.integers(len(swappable))]
          i, j = ids[pos], clients[other][q]
          ids[pos], clients[other][q] = j, i
          held[k][f] -= 1
          held[k][int(family[j])] += 1
          held[other][int(family[j])] -= 1
          held[other][f] += 1
          break
      else:
        raise ValueError(f'could not spread look-alike family {f} over the clients (client '
                         f'{k} holds {held[k][f]} of its members); expected fewer or smaller '
                         'families per client.')
  return [np.sort(np.asarray(ids, np.int64)).astype(np.int32) for ids in clients]


def single_client(num_identities: int) -> list[np.ndarray]:
  """All identities on one client (centralized training)."""
  return [np.arange(num_identities, dtype=np.int32)]


def share_identities(client_identities: list[np.ndarray], fraction: float, group_size: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
  """Makes round(fraction·N) identities shared by `group_size` clients each (the general case).

  Each chosen identity keeps its owner and is added to `group_size - 1` other clients drawn at
  random. Returns each client's sorted identity ids (no longer disjoint).
  """
  num_clients = len(client_identities)
  num_identities = sum(len(ids) for ids in client_identities)
  if not 0.0 <= fraction <= 1.0:
    raise ValueError(f'federated.shared_fraction={fraction}; expected a fraction in [0, 1].')
  if fraction == 0.0:
    return client_identities
  if not 2 <= group_size <= num_clients:
    raise ValueError(f'federated.shared_group_size={group_size}; expected 2 to num_clients '
                     f'({num_clients}): a shared identity is held by a group of clients.')
  owner = np.empty(num_identities, np.int64)
  for k, ids in enumerate(client_identities):
    owner[ids] = k
  chosen = rng.choice(num_identities, size=int(round(fraction * num_identities)), replace=False)
  extra = [[] for _ in range(num_clients)]
  for identity in np.sort(chosen):
    others = np.delete(np.arange(num_clients), owner[identity])
    for k in rng.choice(others, size=group_size - 1, replace=False):
      extra[k].append(identity)
  return [np.sort(np.concatenate([ids, np.asarray(more, ids.dtype)])).astype(np.int32)
          for ids, more in zip(client_identities, extra)]
