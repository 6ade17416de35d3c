"""A checkpoint written by the code before core/blocks.py's `wrap` became chained wrappers (the
fixture of tests/core/blocks_checkpoint.py, written at commit 4689e12) restores into the state
today's `wrap` initializes, whole and unchanged, and a round trains from it."""

import shutil

import jax
import numpy as np
from flax import serialization

from fedjax_face import algorithms, models
from fedjax_face.core import blocks
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated
from fedjax_face.io import checkpoint
from tests import engine_cases
from tests.core import blocks_checkpoint as fixture


def _wrapped(fed):
  config = engine_cases.tiny_config(fixture.ALGORITHM)
  engine_cases.set_fields(**fixture.FIELDS)(config)
  algorithm = algorithms.get(fixture.ALGORITHM).build(
      config, models.build_backbone(config.model), fed, step_mode='scan')
  return blocks.wrap(algorithm, blocks.from_config(config), fed.num_clients)


def _next_round(algorithm, fed, state):
  """Round 2 of the fixture's cohorts from `state`, as engine_cases.run_rounds runs a round."""
  eng = engine_lib.RoundEngine(algorithm, backend='loop')
  ids = federated.pad_cohort(np.asarray(fixture.COHORTS[1], np.int32), eng.cohort_multiple(),
                             fed.num_clients)
  weights = np.where(ids < fed.num_clients,
                     fed.num_examples[np.minimum(ids, fed.num_clients - 1)], 0).astype(np.float32)
  data = federated.sample_round(fed, ids, round_index=1, seed=0, steps=2, batch_size=4)
  state, _ = eng.run_round(state, ids, weights, data, jax.random.PRNGKey(2))
  return jax.tree.map(np.asarray, state)


def test_a_checkpoint_of_the_one_function_wrap_restores_and_trains(tmp_path):
  workdir = tmp_path / 'run'   # a copy: a Checkpointer writes into the workdir it opens
  shutil.copytree(fixture.DIRECTORY, workdir)
  fed = engine_cases.tiny_problem()
  algorithm = _wrapped(fed)
  template = algorithm.init(jax.random.PRNGKey(0))
  ckpt = checkpoint.Checkpointer(str(workdir))
  try:
    restored = ckpt.restore(template)
  finally:
    ckpt.close()

  # The layout: the method's part and the blocks' part, with each block's own keys.
  assert set(restored.server) == set(restored.clients) == {'method', 'blocks'}
  assert set(restored.server['blocks']) == {'optimizer', 'control'}
  assert set(restored.clients['blocks']) == {'control', 'residual'}
  assert jax.tree.structure(restored) == jax.tree.structure(template)
  shape = lambda x: (np.shape(x), np.asarray(x).dtype)
  assert jax.tree.leaves(jax.tree.map(shape, restored)) == jax.tree.leaves(
      jax.tree.map(shape, template))
  # The values: every array's bytes as recorded when the old code saved it.
  saved, _ = checkpoint.read_digest_file(str(workdir / 'checkpoint_digests' / '1.json'),
                                         strict=True)
  assert checkpoint.array_digests(serialization.to_state_dict(restored)) == saved
  assert int(restored.round) == 1

  after = _next_round(algorithm, fed, restored)
  assert int(after.round) == 2
  assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(after)
             if np.issubdtype(x.dtype, np.floating))
  # Each block's state and the model moved on from the archived ones (clients 1 and 3 take part
  # for the first time, so their variates and residuals leave zero).
  parts = (lambda s: s.server['method'], lambda s: s.server['blocks']['optimizer'],
           lambda s: s.server['blocks']['control'], lambda s: s.clients['blocks']['control'],
           lambda s: s.clients['blocks']['residual'])
  for part in parts:
    assert any(not np.array_equal(a, b)
               for a, b in zip(jax.tree.leaves(part(after)), jax.tree.leaves(part(restored))))
