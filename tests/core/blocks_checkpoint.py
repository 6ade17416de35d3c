"""The archived checkpoint that tests/core/test_blocks_checkpoint.py restores: one round of FedGC on
the tiny problem (tests/engine_cases.py) with every block that keeps state switched on (FedAdam's
moments, SCAFFOLD's c and c_i, top-k's error-feedback residual), saved by io/checkpoint's
`Checkpointer` as a run saves it: `checkpoints/1` and `checkpoint_digests/1.json` (the SHA-256 of
every array) under tests/core/blocks_checkpoint/.

Written once, by hand, at commit 4689e12 (core/blocks.py's `wrap` still one function, before it
became chained wrappers), so that it holds the state layout of the code before that change:

  python -m tests.core.blocks_checkpoint

Writing it again with later code would only show that the code restores its own checkpoints.
"""

import os
import shutil

import jax
import jax.numpy as jnp

from fedjax_face.io import checkpoint
from tests import engine_cases

ALGORITHM = 'fedgc'   # client class rows (W) and BatchNorm statistics: every kind of leaf
FIELDS = {'server_optimizer__name': 'fedadam', 'optimizer__correction': 'scaffold',
          'compression__codec': 'topk'}   # FedProx and quantize keep no state
COHORTS = ((0, 2, 4), (1, 3, 4))   # round 1 archived; the test runs round 2 from it
DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'blocks_checkpoint')


def write(directory: str = DIRECTORY) -> None:
  """Runs round 1 and saves its state as a run does (device arrays, through `Checkpointer`)."""
  state, _ = engine_cases.run_rounds(ALGORITHM, 'loop', cohorts=COHORTS[:1],
                                     configure=engine_cases.set_fields(**FIELDS))
  shutil.rmtree(directory, ignore_errors=True)
  ckpt = checkpoint.Checkpointer(directory, max_to_keep=1)
  ckpt.save(int(state.round), jax.tree.map(jnp.asarray, state))
  ckpt.close()


if __name__ == '__main__':
  write()
