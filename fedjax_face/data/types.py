"""The data types shared across the package: what a data source loads (`SourceData`, viewed per
task: `FaceBenchmark` for face recognition, `AntiSpoofingData`) and a verification pair set
(`PairSet`), whatever source or benchmark made them."""

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
class SourceData:
  """What a data source loads, whatever its task (`data/sources/`): the training set, and the
  evaluation data its own views read back. Each task's sources load its subclass.

  Attributes:
    train_images: uint8 `[N, H, W, 3]` (or a store that decodes them on demand: `stores.py`).
    train_labels: int32 `[N]` class ids in 0..num_identities-1 (identities; anti-spoofing: a
      data center's attack and live classes).
    num_identities: number of training classes.
    client_identities: the data's own clients, as the classes each holds (anti-spoofing: one
      client per data center); None: the config's partition deals them.
    train_targets: per-sample arrays beside the labels (anti-spoofing's depth maps), or None.
    eval_sets: the source's evaluation data by name, as its views read it back (anti-spoofing:
      the target domain's 'test' frames, the data centers' 'validation' frames; FedFR's split:
      which records are public, the clients' and held out), or None.
  """
  train_images: np.ndarray
  train_labels: np.ndarray
  num_identities: int
  client_identities: list[np.ndarray] | None = None
  train_targets: dict[str, np.ndarray] | None = None
  eval_sets: dict | None = None


@dataclasses.dataclass(frozen=True)
class FaceBenchmark(SourceData):
  """A face recognition source's data: the training identities, and what the embedded synthetic
  benchmark also knows of its faces (None or empty for real data).

  Attributes:
    pair_sets: name -> PairSet, rendered with the training set (the evaluators ask the source
      for theirs: `sources.pair_sets`).
    train_identity_params: parameters of the training identities (row i = label i).
    test_identity_params: parameters of the held-out identities (row j = PairSet id j).
    train_families: int32 `[num_identities]` look-alike family of each training identity
      (`label // lookalike_family_size`).
  """
  pair_sets: dict[str, PairSet] = dataclasses.field(default_factory=dict)
  train_identity_params: dict[str, np.ndarray] | None = None
  test_identity_params: dict[str, np.ndarray] | None = None
  train_families: np.ndarray | None = None


@dataclasses.dataclass(frozen=True)
class AntiSpoofingData(SourceData):
  """An anti-spoofing source's data: each data center's attack (class 2k) and live (2k + 1)
  training frames, their depth maps in `train_targets['depth']`, and `eval_sets` of
  `sources.pad.PadSet`s: 'test' (the unseen target), 'test:<domain>' (more unseen domains) and
  'validation' (the data centers' held-out subjects).

  Attributes:
    train_subjects: int32 `[N]` each training frame's subject, one id per (data center, subject)
      as the validation frames' (`sources/pad.py:unique_subjects`), -1 where unknown; None: not
      given.
  """
  train_subjects: np.ndarray | None = None
