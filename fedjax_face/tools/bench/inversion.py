"""Section `inversion`: the cost of gradient inversion of one client's update (issue 59 part 2;
`eval/privacy/evaluators.py`), on the bench's model at its image size: per local batch and
local steps (`bench.inversion`), the attack's compile time and seconds per iteration, and from them one target's
time at `iterations` and the time of issue 59's grid (the batches x steps, `targets` each).

The update attacked is the attacker's own model of it at random images (`client_update_model`):
the same program the evaluator runs, so the cost is the attack's whatever the images.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.eval.privacy import evaluators, inversion


def _row(config, model, batch: int, steps: int, iterations: int, seed: int) -> dict:
  c = config.copy_and_resolve_references()
  c.federated.local_steps, c.federated.batch_size = steps, batch
  grad_fn, _ = evaluators.client_update_model(c, 1)
  size = config.data.image_size
  key = jax.random.PRNGKey(seed)
  # One compiled init (the eager one compiled a draw per kernel shape: ~3 s of a runlocal cell);
  # the same parameters to the last bit, and no part of what is timed.
  variables = common.init_backbone(model, key, (size, size, 3))
  classes = 4
  rng = np.random.default_rng(seed)
  # Drawn on the host: an eager jax.random draw compiles a program (~0.5 s) that is not timed.
  w = jnp.asarray((0.01 * rng.standard_normal((classes, config.model.embedding_dim))
                   ).astype(np.float32))
  labels = rng.integers(0, classes, (steps, batch)).astype(np.int32)
  mask = np.ones((steps, batch), bool)
  args = (variables['params'], variables.get('batch_stats', {}), w, labels, mask,
          np.ones(classes, bool))
  true = rng.uniform(-1, 1, (steps, batch, size, size, 3)).astype(np.float32)
  target = jax.jit(grad_fn)(true, *args)
  attack = inversion.make_attack(grad_fn, iterations=iterations, learning_rate=0.1,
                                 tv_weight=1e-4, distance='cosine', signed=True)
  seconds = []
  for _ in range(2):   # the first call compiles its step; the second reuses it
    start = time.perf_counter()
    images, _ = attack(np.zeros_like(true), target, *args)
    jax.block_until_ready(images)
    seconds.append(time.perf_counter() - start)
  return {'batch': batch, 'local_steps': steps, 'images': batch * steps,
          'compile_s': max(seconds[0] - seconds[1], 0.0), 'iteration_s': seconds[1] / iterations}


def bench_inversion(config, log=print) -> dict:
  s = config.bench.inversion
  model = models.build_backbone(config.model)
  rows = []
  for batch in s.batch_sizes:
    for n in s.local_steps:
      row = _row(config, model, batch, n, s.timed_iterations, config.seed)
      row['target_s'] = row['compile_s'] + s.iterations * row['iteration_s']
      rows.append(row)
      log(f"inversion: batch {batch} x {n} steps: compile {row['compile_s']:.2f} s, "
          f"{row['iteration_s'] * 1e3:.2f} ms/iteration")
  # The grid compiles once per cell; each target then runs its iterations.
  grid_s = sum(r['compile_s'] + s.targets * s.iterations * r['iteration_s'] for r in rows)
  return {'iterations': s.iterations, 'targets': s.targets, 'rows': rows, 'grid_s': grid_s}


def markdown_lines(r: dict) -> list[str]:
  lines = [f"## (l) Gradient inversion of one update: {r['iterations']} iterations a target",
           '| batch | local steps | images | compile s | ms / iteration | s / target |',
           '| ---: | ---: | ---: | ---: | ---: | ---: |']
  lines += [f"| {row['batch']} | {row['local_steps']} | {row['images']} | "
            f"{row['compile_s']:.2f} | {row['iteration_s'] * 1e3:.2f} | {row['target_s']:.1f} |"
            for row in r['rows']]
  lines.append(f"the grid above at {r['targets']} targets a cell: {r['grid_s'] / 60:.1f} min "
               'in one process')
  return lines
