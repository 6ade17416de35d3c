"""The data types shared across the package: what a data source loads (`FaceBenchmark`) and a
verification pair set (`PairSet`), whatever source or benchmark made them."""

import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class PairSet:
  """A verification pair set in insightface `.bin` order.

  Attributes:
    name: one of ALL_PAIR_SET_NAMES, or a file stem for real data.
    images: uint8 `[2P, H, W, 3]`; pair p is `images[2p]`, `images[2p + 1]`.
    issame: bool `[P]`, True for genuine pairs.
    identities: int32 `[P, 2]` test-identity ids of the two sides (indices into
      `FaceBenchmark.test_identity_params`; sllfw's look-alikes follow the common held-out
      identities there); None for pair sets loaded from real data.
    nuisance: the nuisance draws of the `2P` images (same order as `images`); None for real data.
  """
  name: str
  images: np.ndarray
  issame: np.ndarray
  identities: np.ndarray | None = None
  nuisance: dict[str, np.ndarray] | None = None

  @property
  def num_pairs(self) -> int:
    return int(self.issame.shape[0])


@dataclasses.dataclass(frozen=True)
class FaceBenchmark:
  """A synthetic training set plus the three verification pair sets.

  Attributes:
    train_images: uint8 `[N, H, W, 3]`.
    train_labels: int32 `[N]` identity ids in 0..num_identities-1, sorted by identity.
    num_identities: number of training identities.
    pair_sets: name -> PairSet, all built from held-out identities.
    train_identity_params: parameters of the training identities (row i = label i).
    test_identity_params: parameters of the held-out identities (row j = PairSet id j).
    train_families: int32 `[num_identities]` look-alike family of each training identity
      (`label // lookalike_family_size`); None for real data.
    client_identities: the data's own clients, as the identities each holds (PAD: one client per
      data center holding its attack and live classes); None: the config's partition deals them.
    train_targets: per-sample arrays beside the labels (PAD's depth maps), or None.
    eval_sets: a task's evaluation data by name (PAD: the target domain's 'test' frames and the
      data centers' 'validation' frames), or None.
  """
  train_images: np.ndarray
  train_labels: np.ndarray
  num_identities: int
  pair_sets: dict[str, PairSet]
  train_identity_params: dict[str, np.ndarray] | None = None
  test_identity_params: dict[str, np.ndarray] | None = None
  train_families: np.ndarray | None = None
  client_identities: list[np.ndarray] | None = None
  train_targets: dict[str, np.ndarray] | None = None
  eval_sets: dict | None = None
