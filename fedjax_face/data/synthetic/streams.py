"""The embedded benchmark's random streams: one generator per purpose, seeded as
`SeedSequence([seed, stream])`, so that e.g. the held-out identities and the pair sets do not
change when the training set's size changes. They are numbered in one table so that no two
purposes share a stream; `pad_benchmark` numbers its domains from 100 and `identification_set`
tags its own."""

import numpy as np

TRAIN_IDS = 1
TRAIN_COUNTS = 2
TRAIN_NUISANCE = 3
TEST_IDS = 4
PAIRS = {'lfw': 5, 'cfp_fp': 6, 'agedb_30': 7, 'sllfw': 8, 'cplfw': 9, 'calfw': 10}
FAMILY_MEMBERS = 11
SLLFW_IDS = 12
HELD_OUT_IDS = 13        # identities no run trains on, rendered as the training images are
HELD_OUT_NUISANCE = 14   # (the membership evaluator's non-members: sources/synthetic.py)
IDENTITY_PROBES = 15     # new images of training identities, and
PROBE_DISTRACTORS = 16   # held-out identities beside them (the leakage evaluator's probes)


def rng(seed: int, stream: int) -> np.random.Generator:
  """The generator of `stream` under `seed`."""
  return np.random.default_rng(np.random.SeedSequence([seed, stream]))
