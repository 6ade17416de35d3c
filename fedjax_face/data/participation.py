"""Who takes part in a round: the sampling of the cohort, and the stragglers that miss the deadline.

Sampling (`federated.sampling`), each a pure function of (seed, round):
  'uniform'       round(C·K) clients without replacement (`federated.select_clients`; today's).
  'weighted'      round(C·K) clients without replacement, each draw with probability ∝ n_k.
  'availability'  client k is online in a round with its own probability p_k, independently of
                  the others and of earlier rounds; the p_k are drawn once per seed from a
                  Dirichlet of concentration α (`federated.availability_alpha`) over the K
                  clients, scaled so that their mean is C (and capped at 1). The server takes
                  round(C·K) of the online clients uniformly, or all of them when fewer are online.
Stragglers (`federated.straggler_drop` = f): every client has a speed s_k, ln s_k ~ N(0, σ²)
(`federated.speed_sigma`), drawn once per seed; its round takes work_k / s_k, where work_k is
the number of samples it trains on that round (its data times the local epochs under
`federated.local_epochs`, else steps × batch for every client). The floor(f·m) slowest of a
cohort of m miss the deadline and are dropped before they train (their result would be
discarded), ties broken by the larger id; they keep their state.

The cohort keeps its size: dropped or missing clients become padding rows (weight 0), so a run
still compiles once.

Differential privacy (core/privacy.py): its amplification by sampling assumes 'uniform' with no
stragglers. 'availability' draws the cohort independently of the data but not as a fixed-size
uniform sample, so ε is composed without amplification (each round as if every client took
part: an upper bound). 'weighted' and stragglers choose clients by their data size, so who takes
part would itself depend on the data: both are refused with DP.
"""

import numpy as np

from fedjax_face.data import federated

SAMPLINGS = ('uniform', 'weighted', 'availability')
_AVAILABILITY_STREAM = 0xa7a11
_SPEED_STREAM = 0x5bee0
_ROUND_STREAM = 0xc0407


def availability(num_clients: int, participation: float, alpha: float, seed: int) -> np.ndarray:
  """[K] per-round online probabilities: C·K·Dirichlet(α·1), capped at 1."""
  shares = np.random.default_rng([seed, _AVAILABILITY_STREAM]).dirichlet(
      np.full(num_clients, float(alpha)))
  return np.minimum(1.0, participation * num_clients * shares)


def speeds(num_clients: int, sigma: float, seed: int) -> np.ndarray:
  """[K] client speeds, ln s ~ N(0, σ²)."""
  return np.exp(sigma * np.random.default_rng([seed, _SPEED_STREAM]).standard_normal(num_clients))


def select(num_clients: int, participation: float, round_index: int, seed: int, *,
           sampling: str = 'uniform', sizes: np.ndarray | None = None,
           online_probability: np.ndarray | None = None) -> np.ndarray:
  """The sorted client ids that a round's sampling draws (at most round(C·K))."""
  m = federated.cohort_size(num_clients, participation)
  if sampling == 'uniform':
    return federated.select_clients(num_clients, participation, round_index, seed)
  rng = np.random.default_rng([seed, round_index, _ROUND_STREAM])
  if sampling == 'weighted':
    p = np.asarray(sizes, np.float64)
    chosen = rng.choice(num_clients, size=m, replace=False, p=p / p.sum())
  elif sampling == 'availability':
    online = np.flatnonzero(rng.random(num_clients) < online_probability)
    chosen = online if len(online) <= m else rng.choice(online, size=m, replace=False)
  else:
    raise ValueError(f'federated.sampling={sampling!r}; expected one of {SAMPLINGS}.')
  return np.sort(chosen).astype(np.int32)


def drop_stragglers(client_ids: np.ndarray, work: np.ndarray, speed: np.ndarray,
                    fraction: float) -> np.ndarray:
  """`client_ids` without the floor(fraction·m) slowest (time work / speed; ties: larger id
  first), sorted."""
  ids = np.asarray(client_ids, np.int32)
  drop = int(np.floor(fraction * len(ids)))
  if not drop:
    return ids
  times = work[ids] / speed[ids]
  slowest_first = np.lexsort((-ids, -times))   # by time descending, then id descending
  return np.sort(np.delete(ids, slowest_first[:drop])).astype(np.int32)


def round_work(num_examples: np.ndarray, *, steps: int, batch_size: int,
               local_epochs: float) -> np.ndarray:
  """[K] samples each client trains on in a round (`federated.sample_round`'s count)."""
  cap = steps * batch_size
  if local_epochs > 0:
    return np.minimum(cap, np.ceil(local_epochs * np.asarray(num_examples, np.float64)))
  return np.full(len(num_examples), float(cap))


class Cohorts:
  """The real client ids of each round under a config's `federated` section."""

  def __init__(self, fl, num_examples: np.ndarray, seed: int):
    k = len(num_examples)
    self.fl, self.seed, self.num_clients = fl, seed, k
    self.sizes = np.asarray(num_examples, np.float64)
    self.online = (availability(k, fl.participation, fl.availability_alpha, seed)
                   if fl.sampling == 'availability' else None)
    self.speed = speeds(k, fl.speed_sigma, seed) if fl.straggler_drop else None
    self.work = round_work(self.sizes, steps=fl.local_steps, batch_size=fl.batch_size,
                           local_epochs=fl.local_epochs)

  @property
  def size(self) -> int:
    """The cohort's fixed size before padding: round(C·K)."""
    return federated.cohort_size(self.num_clients, self.fl.participation)

  def __call__(self, round_index: int) -> np.ndarray:
    ids = select(self.num_clients, self.fl.participation, round_index, self.seed,
                 sampling=self.fl.sampling, sizes=self.sizes, online_probability=self.online)
    if self.speed is not None:
      ids = drop_stragglers(ids, self.work, self.speed, self.fl.straggler_drop)
    return ids

  def padded(self, round_index: int, multiple: int) -> np.ndarray:
    """The round's ids padded with the padding id K to `size`, then to a multiple of
    `multiple`."""
    ids = self(round_index)
    ids = np.concatenate([ids, np.full(self.size - len(ids), self.num_clients, np.int32)])
    return federated.pad_cohort(ids.astype(np.int32), multiple, self.num_clients)
