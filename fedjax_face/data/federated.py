"""A federated view of a labelled image set: per-client indices, padded tables, round sampling.

Every client's classes are numbered locally 0..C_k-1 (its private W_k has C_k rows), padded to
C_max = max_k C_k with a class mask, so all clients share one shape. Per round, each selected
client's local steps are drawn on the host and stacked as `[cohort, steps, batch, ...]` with a
sample mask; the draw is a pure function of (seed, round, client), so resuming a run from a
checkpoint replays exactly the same batches.

The images sit behind a store (`data/stores.py`): the synthetic benchmark's uint8 array itself, or
a `DecodedImageStore` that decodes only the images a round draws (RecordIO records, image files,
TFDS examples), so a multi-million-image training set never has to be in memory. The tables here
hold indices and labels only.
"""

import dataclasses

import numpy as np

from fedjax_face.core import arrays
from fedjax_face.data import stores


@dataclasses.dataclass(frozen=True)
class FederatedData:
  """Training images split over clients.

  Attributes:
    images: the training images as a store (`data/stores.py`): a uint8 `[N, H, W, 3]` array in
      host memory, or a `DecodedImageStore` with that `shape` that decodes on demand.
    client_indices: per client, the indices into `images` of its samples.
    client_local_labels: per client, the local class id (0..C_k-1) of each of its samples.
    identity_table: int32 `[K, C_max]`, global identity of each local class, -1 for padding.
    public_indices: indices into `images` of the public identities' images, the data set every
      client shares (FedFR's D_g, `data.public_identities`), or None.
    public_labels: their identities, 0..K_g-1 (the rows of the public class matrix), or None.
    test_indices: indices into `images` of the clients' identities' held-out images, on which no
      client trains (`data.private_test_fraction`: the personalized evaluation), or None.
    targets: per-sample arrays beside the labels, indexed like `images` (PAD's depth maps
      `{'depth': [N, h, w]}`), drawn with the images by `sample_round`; or None.
    subject_frames: 0, or k > 0: `sample_round` draws by subject (`targets['subject']`, the
      subject of each sample): every step holds k frames of each of the client's subjects, k/2
      of each of its two classes, so that DP-SGD can sample subjects (algorithms/pad_dp_sgd.py).
  """
  images: np.ndarray | stores.DecodedImageStore
  client_indices: list[np.ndarray]
  client_local_labels: list[np.ndarray]
  identity_table: np.ndarray
  public_indices: np.ndarray | None = None
  public_labels: np.ndarray | None = None
  test_indices: np.ndarray | None = None
  targets: dict[str, np.ndarray] | None = None
  subject_frames: int = 0

  @property
  def num_public(self) -> int:
    """K_g: public identities (0 without a public set)."""
    return 0 if self.public_labels is None else int(self.public_labels.max()) + 1

  @property
  def num_clients(self) -> int:
    return len(self.client_indices)

  @property
  def max_classes(self) -> int:
    return self.identity_table.shape[1]

  @property
  def class_mask(self) -> np.ndarray:
    """bool `[K, C_max]`: which local class slots are real."""
    return self.identity_table >= 0

  @property
  def num_examples(self) -> np.ndarray:
    """int64 `[K]`: n_k, the aggregation weights."""
    return np.array([len(i) for i in self.client_indices], np.int64)

  @property
  def num_identities(self) -> int:
    return int(self.identity_table.max()) + 1


def build(images: np.ndarray | stores.DecodedImageStore, labels: np.ndarray,
          client_identities: list[np.ndarray],
          targets: dict[str, np.ndarray] | None = None) -> FederatedData:
  """Groups samples by the identities each client holds (from the labels; no image is read).

  Args:
    images: uint8 `[N, H, W, C]`, or a store of N images.
    labels: int `[N]` global identity ids.
    client_identities: per client, the global identity ids it holds (disjoint across clients for
      an identity-exclusive partition). An identity held by h clients (the general case) has its
      images dealt out between them: the j-th holder (in client order) gets images j, j+h, ...
    targets: per-sample arrays (`FederatedData.targets`), each with N rows.
  """
  if len(images) != len(labels):
    raise ValueError(f'{len(images)} images but {len(labels)} labels.')
  for name, values in (targets or {}).items():
    if len(values) != len(labels):
      raise ValueError(f'targets[{name!r}] has {len(values)} rows for {len(labels)} labels.')
  max_classes = max(len(ids) for ids in client_identities)
  table = np.full((len(client_identities), max_classes), -1, np.int32)
  indices, local_labels = [], []
  by_identity = _indices_by_identity(labels)
  holders = {}
  for k, ids in enumerate(client_identities):
    for i in ids:
      holders.setdefault(int(i), []).append(k)
  def share(i: int, k: int) -> np.ndarray:
    members, group = by_identity.get(i, np.zeros(0, np.int64)), holders[i]
    return members[group.index(k)::len(group)]
  for k, ids in enumerate(client_identities):
    table[k, :len(ids)] = ids
    members = [share(int(i), k) for i in ids]
    empty = [int(i) for i, m in zip(ids, members) if len(m) == 0]
    if empty:
      raise ValueError(f'client {k} holds identities with no images: {empty[:10]}; every '
                       'identity of a partition needs at least one image (a shared identity at '
                       'least one per holder).')
    indices.append(np.concatenate(members))
    local_labels.append(np.repeat(np.arange(len(ids), dtype=np.int32), [len(m) for m in members]))
  return FederatedData(images, indices, local_labels, table, targets=targets)


def _indices_by_identity(labels: np.ndarray) -> dict[int, np.ndarray]:
  order = np.argsort(labels, kind='stable')
  ids, starts = np.unique(labels[order], return_index=True)
  return {int(i): s for i, s in zip(ids, np.split(order, starts[1:]))}


def cohort_size(num_clients: int, participation: float) -> int:
  """Clients per round: round(C·K), at least 1 (FedFV Alg. 1 line 2: max(1, eps·C))."""
  if not 0.0 < participation <= 1.0:
    raise ValueError(f'federated.participation={participation}; expected a fraction in (0, 1].')
  return max(1, int(round(participation * num_clients)))


def select_clients(num_clients: int, participation: float, round_index: int, seed: int) -> np.ndarray:
  """The cohort of a round: `cohort_size` clients drawn without replacement, sorted."""
  m = cohort_size(num_clients, participation)
  if m == num_clients:
    return np.arange(num_clients, dtype=np.int32)
  rng = np.random.default_rng([seed, round_index, 0x5e1ec7])
  return np.sort(rng.choice(num_clients, size=m, replace=False)).astype(np.int32)


def pad_cohort(client_ids: np.ndarray, multiple: int, num_clients: int) -> np.ndarray:
  """Pads the cohort to a multiple of `multiple` with the padding id `num_clients`."""
  pad = -len(client_ids) % multiple
  return np.concatenate([client_ids, np.full(pad, num_clients, np.int32)]).astype(np.int32)


def sample_round(fed: FederatedData, client_ids: np.ndarray, *, round_index: int, seed: int,
                 steps: int, batch_size: int, local_epochs: float = 0.0,
                 balanced: bool = False) -> dict[str, np.ndarray]:
  """Stacked local batches of one round.

  Each client walks through its samples in a fresh random order (reshuffled when exhausted).
  With `balanced` every batch holds B / C_k samples of each of the client's C_k classes, each
  class walked through in its own random order (PAD: as many live as attack frames a step).
  With `local_epochs == 0` every client runs `steps` full batches; with `local_epochs = E > 0`
  client k runs ceil(E·n_k / B) steps (at most `steps`, the static cap), the last one partial:
  the unused steps and samples are masked out, so uneven clients share one shape (FedAvg).

  With `fed.subject_frames` = k (PAD under DP-SGD) the batch is B / k slots of k frames: slot s
  holds k / 2 frames of each class of the client's s-th subject (`_subject_order`), and
  `targets['subject']` is that slot number (the client's own numbering of its subjects, as
  `labels` are its own class numbers); a slot without a subject, or without frames of a class,
  is masked. `balanced` is then implied (k / 2 of each class per subject).

  Only the drawn images are read from `fed.images` (each distinct one once); a bad record that
  the store skips (`data.skip_bad_records`) is masked out like a padding sample. A record is bad
  for good, so the round stays a pure function of (seed, round, client).

  Returns:
    dict of `images` uint8 `[m, steps, B, H, W, C]`, `labels` int32 `[m, steps, B]` (local class
    ids), `mask` bool `[m, steps, B]` and `class_mask` bool `[m, C_max]` (the client's real class
    slots), and `targets` (name -> `[m, steps, B, ...]`) when `fed.targets`; padding clients (id
    >= num_clients) are all-masked.
  """
  m = len(client_ids)
  per_round = steps * batch_size
  index = np.zeros((m, per_round), np.int64)
  labels = np.zeros((m, per_round), np.int32)
  mask = np.zeros((m, per_round), bool)
  # Under subject draws: each position's slot (padding clients: slot numbers too, all masked).
  subject_slots = np.tile(np.arange(per_round) % batch_size // max(fed.subject_frames, 1), (m, 1))
  for row, k in enumerate(client_ids):
    if k >= fed.num_clients:
      continue  # padding client
    n = len(fed.client_indices[k])
    rng = np.random.default_rng([seed, round_index, int(k)])
    if fed.subject_frames:
      order, valid, slot = _subject_order(rng, fed.targets['subject'][fed.client_indices[k]],
                                          fed.client_local_labels[k], steps, batch_size,
                                          fed.subject_frames)
      subject_slots[row] = slot
    elif balanced:
      order = _balanced_order(rng, fed.client_local_labels[k], steps, batch_size)
    else:
      order = _walk(rng, np.arange(n), per_round)
    index[row] = fed.client_indices[k][order]
    labels[row] = fed.client_local_labels[k][order]
    if local_epochs > 0:
      mask[row, :min(per_round, int(np.ceil(local_epochs * n)))] = True
    else:
      mask[row] = True
    if fed.subject_frames:
      mask[row] &= valid
  shape = (m, steps, batch_size)
  images, ok = stores.take(fed.images, index.reshape(-1))
  mask &= ok.reshape(mask.shape)
  out = {
      'images': images.reshape(shape + tuple(fed.images.shape[1:])),
      'labels': labels.reshape(shape),
      'mask': mask.reshape(shape),
      'class_mask': fed.class_mask[np.minimum(client_ids, fed.num_clients - 1)],
  }
  if fed.targets:
    out['targets'] = {name: values[index].reshape(shape + values.shape[1:])
                      for name, values in fed.targets.items()}
    if fed.subject_frames:
      out['targets']['subject'] = subject_slots.astype(np.int32).reshape(shape)
  return out


def _walk(rng: np.random.Generator, members: np.ndarray, count: int) -> np.ndarray:
  """`count` of `members` in random orders, reshuffled each time they are used up."""
  rounds = arrays.ceil_div(count, len(members))
  return np.concatenate([members[rng.permutation(len(members))] for _ in range(rounds)])[:count]


def _balanced_order(rng: np.random.Generator, local_labels: np.ndarray, steps: int,
                    batch_size: int) -> np.ndarray:
  """Positions into a client's samples: `steps` batches of B / C_k samples of each class."""
  classes = np.unique(local_labels)
  if batch_size % len(classes):
    raise ValueError(f'federated.batch_size={batch_size} cannot hold as many samples of each of '
                     f"a client's {len(classes)} classes; expected a multiple of {len(classes)}.")
  share = batch_size // len(classes)
  per_class = [_walk(rng, np.flatnonzero(local_labels == c), steps * share).reshape(steps, share)
               for c in classes]
  return np.concatenate(per_class, axis=1).reshape(-1)


def _subject_order(rng: np.random.Generator, subjects: np.ndarray, local_labels: np.ndarray,
                   steps: int, batch_size: int, frames: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(positions into a client's samples, which are real, each position's slot), `steps` x
  `batch_size` of them: slot s of a step holds `frames` / 2 frames of each of the two classes of
  the client's s-th subject (in sorted subject order), drawn without replacement when it has that
  many, else with. Slots past the client's subjects, and a class the subject lacks, are masked.
  Which frames is drawn afresh each step, independently of which subjects DP-SGD keeps."""
  classes = np.unique(local_labels)
  slots, half = batch_size // frames, frames // 2
  if frames % 2 or len(classes) != 2 or batch_size % frames:
    raise ValueError(f'subject draws of {frames} frames per subject into batches of {batch_size} '
                     f'of {len(classes)} classes; expected an even number of frames dividing the '
                     'batch, and two classes (attack, live).')
  ids = np.unique(subjects)
  if len(ids) > slots:
    raise ValueError(f'federated.batch_size={batch_size} holds {slots} subjects of {frames} '
                     f'frames; the client has {len(ids)}: expected at least {len(ids) * frames}.')
  order = np.zeros((steps, slots, frames), np.int64)
  valid = np.zeros((steps, slots, frames), bool)
  for s, subject in enumerate(ids):
    for c, label in enumerate(classes):
      members = np.flatnonzero((subjects == subject) & (local_labels == label))
      if not len(members):
        continue
      for t in range(steps):
        order[t, s, c * half:(c + 1) * half] = rng.choice(members, half,
                                                          replace=len(members) < half)
        valid[t, s, c * half:(c + 1) * half] = True
  slot = np.broadcast_to(np.arange(slots)[None, :, None], order.shape)
  return order.reshape(-1), valid.reshape(-1), slot.reshape(-1)
