"""Public and private identities, and the private identities' held-out images (FedFR's setting).

FedFR (Liu et al., AAAI 2022) starts from a model pre-trained on K_g public identities (paper:
6,000 of MS-Celeb-1M) and improves it with clients holding private ones (paper: 4,000, 40 clients
x 100), each private identity's images split into local training and personalized evaluation
(paper: 60 / 40 of 100). Here the first `num_public` training identities are the public ones:
the benchmark's identities are independent draws, so which ones is immaterial, and a real
training set's identity order is its own.
"""

import dataclasses

import ml_collections
import numpy as np

from fedjax_face.core.checks import check_choice, check_int

CENTRALIZED_ON = ('all', 'public')


def add_fields(data: ml_collections.ConfigDict) -> None:
  """Adds the split's fields to `config.data` (the face recognition task's configs: a data
  center of the anti-spoofing task holds its own data, none of it public)."""
  data.public_identities = 0         # K_g; 0 = every identity is a client's
  data.private_test_fraction = 0.0   # of each private identity's images, held out for the
                                     # personalized evaluation (FedFR: 40 of 100)
  data.centralized_on = 'all'        # a centralized run with public identities: 'public' (the
                                     # pre-training) | 'all' (public + private training images)


def check_config(config) -> None:
  """The split's fields of `config.data` (ValueError naming the first wrong one)."""
  d = config.data
  check_int('data.public_identities', d.public_identities, allow_zero=True)
  fraction = d.private_test_fraction
  if not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
          and 0.0 <= fraction < 1.0):
    raise ValueError(f'config.data.private_test_fraction={fraction!r}; expected a fraction in '
                     '[0, 1).')
  check_choice('data.centralized_on', d.centralized_on, CENTRALIZED_ON)
  if not d.public_identities and d.centralized_on != 'all':
    raise ValueError(f'config.data.centralized_on={d.centralized_on!r} needs public identities '
                     '(data.public_identities > 0).')


@dataclasses.dataclass(frozen=True)
class IdentitySplit:
  """Image indices into the training set, by role.

  Attributes:
    num_public: K_g; the public identities are 0..K_g-1.
    public: indices of the public identities' images (the pre-training set D_g, shared with
      every client).
    private_train: the private identities' images the clients train on.
    private_test: the private identities' held-out images (personalized evaluation).
  """
  num_public: int
  public: np.ndarray
  private_train: np.ndarray
  private_test: np.ndarray

  def training_labels(self, labels: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """`labels` with every image outside the index set `keep` set to -1 (held by no client)."""
    out = np.full_like(labels, -1)
    out[keep] = labels[keep]
    return out


def split_identities(labels: np.ndarray, num_public: int, test_fraction: float,
                     seed: int) -> IdentitySplit:
  """Identities 0..num_public-1 public, the rest private with floor(test_fraction·n_i) of each
  private identity's n_i images held out (drawn at random, seeded).

  Raises ValueError when no identity is left private, or the fraction is outside [0, 1).
  """
  labels = np.asarray(labels)
  num_identities = int(labels.max()) + 1 if len(labels) else 0
  if not 0 <= num_public < num_identities:
    raise ValueError(f'data.public_identities={num_public} of {num_identities} training '
                     'identities; expected fewer than all of them, so that clients hold some.')
  if not 0.0 <= test_fraction < 1.0:
    raise ValueError(f'data.private_test_fraction={test_fraction!r}; expected a fraction in '
                     '[0, 1).')
  public = np.flatnonzero(labels < num_public)
  rng = np.random.default_rng([seed, 0x5917])
  train, test = [], []
  for identity in range(num_public, num_identities):
    members = np.flatnonzero(labels == identity)
    held_out = int(np.floor(test_fraction * len(members)))   # < len(members): one stays
    chosen = rng.permutation(len(members))
    test.append(members[np.sort(chosen[:held_out])])
    train.append(members[np.sort(chosen[held_out:])])
  return IdentitySplit(num_public=num_public, public=public,
                       private_train=np.sort(np.concatenate(train)),
                       private_test=np.sort(np.concatenate(test)))
