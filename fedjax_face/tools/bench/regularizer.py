r"""Memory and time of FedGC's gradient correction (Alg. 1 line 14, Eq. 5): dense vs blockwise.

`python -m fedjax_face.tools.bench.regularizer --classes=1000,10000,100000 --dim=512 --block=4096`

For each number of classes R (split over clients of `--classes_per_client` classes, the
`[K, C_max, d]` layout fedgc uses) prints one markdown row: the compiled temporary memory of one
`correction.gradient_correction` step, dense and blockwise (XLA's
`compiled.memory_analysis().temp_size_in_bytes`: compile only, nothing is allocated; per device
with `--devices`), and the median wall time of a blockwise step after one warm-up run.
`--json=path` also writes the rows; `--devices` shards the rows over every local device
(`streamed.py`'s sharded variant). The functions are importable (`bench_row`, `markdown_table`).
"""

import functools
import json

from absl import app, flags
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from fedjax_face.core import arrays, xla_flags
from fedjax_face.tools import timing
from fedjax_face.algorithms.fedgc import correction, regularizer

def problem_shapes(num_classes: int, dim: int, classes_per_client: int):
  """`[K, C_max, d]` and `[K, C_max]` shapes holding `num_classes` rows (last client partial)."""
  num_clients = arrays.ceil_div(num_classes, classes_per_client)
  return (num_clients, classes_per_client, dim), (num_clients, classes_per_client)


def make_problem(num_classes: int, dim: int, classes_per_client: int, seed: int = 0):
  """Random class embeddings and the class mask of the first `num_classes` slots."""
  w_shape, mask_shape = problem_shapes(num_classes, dim, classes_per_client)
  mask = (np.arange(np.prod(mask_shape)) < num_classes).reshape(mask_shape)
  w = np.random.default_rng(seed).normal(size=w_shape).astype(np.float32) / np.sqrt(dim)
  return jnp.asarray(w * mask[..., None]), jnp.asarray(mask)


def correction_step(implementation: str, *, block_size: int, mesh=None, **form_kwargs):
  """The jitted `gradient_correction(W, mask)` step (step size 1; it does not change the cost)."""
  return jax.jit(functools.partial(correction.gradient_correction, step_size=1.0,
                                   implementation=implementation, block_size=block_size,
                                   mesh=mesh, **form_kwargs))


def temp_bytes(step, num_classes: int, dim: int, classes_per_client: int) -> int:
  """Compiled temporary memory of `step` (XLA's memory analysis; compile only, no run)."""
  w_shape, mask_shape = problem_shapes(num_classes, dim, classes_per_client)
  compiled = step.lower(jax.ShapeDtypeStruct(w_shape, jnp.float32),
                        jax.ShapeDtypeStruct(mask_shape, jnp.bool_)).compile()
  return int(compiled.memory_analysis().temp_size_in_bytes)


def median_seconds(step, args, repeats: int) -> float:
  """Median wall time of `step(*args)` over `repeats` runs after one warm-up (compile) run."""
  return timing.measure(step, *args, repeats=repeats)['median_s']


def bench_row(num_classes: int, dim: int, block: int, *, classes_per_client: int = 100,
              repeats: int = 3, time_max_classes: int = 50_000,
              dense_max_classes: int = 100_000, time_dense: bool = False, mesh=None,
              **form_kwargs) -> dict:
  """One row of the table; None where a figure was skipped."""
  shape_args = (num_classes, dim, classes_per_client)
  blockwise = correction_step('blockwise', block_size=block, mesh=mesh, **form_kwargs)
  row = {'R': num_classes, 'd': dim, 'block': block,
         'devices': 1 if mesh is None else mesh.size,
         'dense_temp_bytes': None, 'blockwise_temp_bytes': temp_bytes(blockwise, *shape_args),
         'blockwise_seconds': None, 'dense_seconds': None}
  dense = None
  if num_classes <= dense_max_classes and mesh is None:
    dense = correction_step('dense', block_size=block, **form_kwargs)
    row['dense_temp_bytes'] = temp_bytes(dense, *shape_args)
  if num_classes <= time_max_classes:
    args = make_problem(*shape_args)
    row['blockwise_seconds'] = median_seconds(blockwise, args, repeats)
    if time_dense and dense is not None:
      row['dense_seconds'] = median_seconds(dense, args, repeats)
  return row


def _bytes(n) -> str:
  if n is None:
    return 'skipped'
  for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):
    if n < 1024 or unit == 'TiB':
      return f'{n:.0f} {unit}' if unit == 'B' else f'{n:.1f} {unit}'
    n /= 1024


def _seconds(s) -> str:
  return 'skipped' if s is None else f'{s:.3f}'


def markdown_table(rows: list[dict]) -> str:
  lines = ['| R | d | block | devices | R^2 float32 | dense temp | blockwise temp | '
           'blockwise s/step | dense s/step |',
           '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
  for r in rows:
    lines.append(f"| {r['R']} | {r['d']} | {r['block']} | {r['devices']} | "
                 f"{_bytes(4 * r['R'] ** 2)} | {_bytes(r['dense_temp_bytes'])} | "
                 f"{_bytes(r['blockwise_temp_bytes'])} | {_seconds(r['blockwise_seconds'])} | "
                 f"{_seconds(r['dense_seconds'])} |")
  return '\n'.join(lines)


def define_flags():
  """The command's flags, defined only when run as a program: the bench package imports this
  module (section (d)), and absl refuses a flag defined twice in one process."""
  flags.DEFINE_list('classes', ['1000', '10000'], 'Numbers of classes R to measure.')
  flags.DEFINE_integer('dim', 512, 'Embedding dimension d.')
  flags.DEFINE_integer('block', 4096, 'Blockwise tile size.')
  flags.DEFINE_integer('classes_per_client', 100, 'C_max of the layout.')
  flags.DEFINE_enum('form', 'softmax', list(regularizer.FORMS), 'Regularizer form.')
  flags.DEFINE_enum('kind', 'softmax', list(regularizer.KINDS), 'Regularizer kind.')
  flags.DEFINE_integer('repeats', 3, 'Timed runs per R (after one warm-up).')
  flags.DEFINE_integer('time_max_classes', 50_000, 'Above this R only compile (no timed runs).')
  flags.DEFINE_integer('dense_max_classes', 100_000,
                       'Above this R the dense version is not even compiled.')
  flags.DEFINE_boolean('time_dense', False, 'Also time the dense step (small R).')
  flags.DEFINE_boolean('devices', False, 'Shard the rows over all local devices.')
  flags.DEFINE_string('json', None, 'Also write the rows to this JSON file.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'unexpected arguments: {argv[1:]}')
  f = flags.FLAGS
  mesh = Mesh(np.asarray(jax.devices()), ('clients',)) if f.devices else None
  rows = []
  for num_classes in (int(c) for c in f.classes):
    rows.append(bench_row(num_classes, f.dim, f.block, classes_per_client=f.classes_per_client,
                          repeats=f.repeats, time_max_classes=f.time_max_classes,
                          dense_max_classes=f.dense_max_classes, time_dense=f.time_dense,
                          mesh=mesh, kind=f.kind, form=f.form))
    print(f'R={num_classes} done', flush=True)
  table = markdown_table(rows)
  print(table)
  if f.json:
    with open(f.json, 'w') as out:
      json.dump(rows, out, indent=2)


if __name__ == '__main__':
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  define_flags()
  app.run(main)
