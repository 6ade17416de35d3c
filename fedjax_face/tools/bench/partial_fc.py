"""Section `partial_fc` (p): memory and images/s of a huge classification head with and without
Partial FC (models/partial_fc.py), issue 62: the experiment's backbone (the small CNN by default),
one jitted local step (`algorithms.common.local_step`: forward, backward, SGD with momentum and
weight decay) of a `classes`-row head at each `sample_rate`.

Memory is what XLA's `compiled.memory_analysis()` reports for that step, compiled with the state
donated as a run's step is (`run/simulation.py`): `argument_bytes` (the backbone, W and their
optimizer state, the batch), `temp_bytes` (the step's live buffers: logits, gradients, the
sampled rows), `peak_bytes` = arguments + outputs − donated aliases + temporaries (what the step
needs at once, an upper bound: XLA may free arguments early). `head_state_bytes` is W and its
optimizer state alone (the same at every rate: Partial FC keeps every center). Timing is
`timing.measure` on steps chained through their donated state; `compile_s` is the ahead-of-time
compile the memory analysis needs.

Sharded rows: where more than one device is visible (several accelerators, or forced CPU
devices: `XLA_FLAGS=--xla_force_host_platform_device_count=4`), each head size and rate again
with W and its optimizer state split into one shard a device (algorithms/sharded_classes.py, the
step of `centralized.class_shards`: the backbone replicated on every device, each device's
sampled logits, the softmax's sums all-reduced). Their memory is per device (XLA's analysis of
the partitioned step, which every device runs); `head_state_bytes` is one device's share.

Not among the default sections: a 100k-class step takes seconds on a 2-core CPU; name it in
`bench.sections`. The 1M-class rows are opt-in (`bench.partial_fc.classes`); see configs/bench.py.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from fedjax_face import models
from fedjax_face.algorithms import common, sharded_classes
from fedjax_face.models import heads, partial_fc
from fedjax_face.tools.bench.common import measured
from fedjax_face.tools.timing import measure


def _head_state_bytes(params, opt_state) -> int:
  """Bytes of W and of every optimizer-state leaf that mirrors it (momentum)."""
  total = 0
  for path, leaf in jax.tree_util.tree_flatten_with_path((params, opt_state))[0]:
    if path and path[-1] == jax.tree_util.DictKey(partial_fc.CLASS_LEAF):
      total += leaf.size * leaf.dtype.itemsize
  return int(total)


def bench_row(config, num_classes: int, sample_rate: float, timing: dict) -> dict:
  """One row: the compiled step's memory and its steady images/s at `num_classes` and
  `sample_rate`."""
  s = config.bench.partial_fc
  model = models.build_backbone(config.model)
  size = config.data.image_size
  optimizer = common.make_optimizer(config.optimizer)
  head = heads.head_kwargs_from_config({'loss': s.loss})
  step = common.local_step(model, head_kwargs=head, optimizer=optimizer, sample_rate=sample_rate)
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed), (size, size, 3))
  w = heads.init_class_embeddings(jax.random.PRNGKey(config.seed + 1), num_classes,
                                  config.model.embedding_dim, s.loss)
  params = {'backbone': variables['params'], 'W': w}
  opt_state = optimizer.init(params)
  rng = np.random.default_rng(config.seed)
  batch = {'images': jnp.asarray(rng.integers(0, 256, (s.batch_size, size, size, 3), np.uint8)),
           'labels': jnp.asarray(rng.integers(0, num_classes, s.batch_size)),
           'mask': jnp.ones(s.batch_size, bool), 'rng': jax.random.PRNGKey(config.seed + 2)}
  class_mask = jnp.ones(num_classes, bool)
  carry = (params, variables.get('batch_stats', {}), opt_state)
  start = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=0).lower(carry, batch, class_mask).compile()
  compile_s = time.perf_counter() - start
  memory = compiled.memory_analysis()
  head_bytes = _head_state_bytes(params, opt_state)
  state = {'carry': carry}

  def one_step():
    state['carry'], loss = compiled(state['carry'], batch, class_mask)
    return loss

  timed = measure(one_step, **timing)
  sampled = (sum(partial_fc.sample_sizes(num_classes, sample_rate, s.batch_size))
             if partial_fc.samples(num_classes, sample_rate, s.batch_size) else num_classes)
  row = {'name': f'{num_classes:,} classes, sample_rate {sample_rate:g}',
         'classes': num_classes, 'sample_rate': sample_rate, 'sampled_centers': sampled,
         'head_state_bytes': head_bytes}
  row.update(_memory_fields(memory))
  # Compiled ahead of the timed calls (for its memory analysis): the compile time is that one.
  return {**measured(row, s.batch_size, timed), 'compile_s': compile_s}


def _memory_fields(memory) -> dict:
  """XLA's figures of a compiled step (module docstring), or none where the backend has none."""
  if memory is None:
    return {}
  return dict(argument_bytes=int(memory.argument_size_in_bytes),
              temp_bytes=int(memory.temp_size_in_bytes),
              peak_bytes=int(memory.argument_size_in_bytes + memory.output_size_in_bytes
                             - memory.alias_size_in_bytes + memory.temp_size_in_bytes))


def sharded_row(config, num_classes: int, sample_rate: float, num_devices: int,
                timing: dict) -> dict:
  """One sharded row: `num_classes` rows of W in `num_devices` shards, one a device (the
  `centralized.class_shards` step over one batch), its per-device memory and images/s."""
  s = config.bench.partial_fc
  name = f'{num_classes:,} classes, sample_rate {sample_rate:g}, {num_devices} shards'
  if num_classes % num_devices:
    return {'name': name, 'classes': num_classes, 'sample_rate': sample_rate,
            'devices': num_devices, 'status': 'skipped',
            'reason': f'{num_classes} classes do not split into {num_devices} equal shards'}
  mesh = Mesh(np.asarray(jax.local_devices()[:num_devices]), (sharded_classes.CLASSES_AXIS,))
  model = models.build_backbone(config.model)
  size = config.data.image_size
  optimizer = common.make_optimizer(config.optimizer)
  train = sharded_classes.sharded_trainer(
      model, head_kwargs=heads.head_kwargs_from_config({'loss': s.loss}), optimizer=optimizer,
      step_mode='unroll', mesh=mesh, num_classes=num_classes, num_shards=num_devices,
      sample_rate=sample_rate, batch_size=s.batch_size)
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed), (size, size, 3))
  w = heads.init_class_embeddings(jax.random.PRNGKey(config.seed + 1), num_classes,
                                  config.model.embedding_dim, s.loss)
  state = sharded_classes.place(
      {'model': variables, 'W': w, 'opt_state': train.init_opt_state(variables, w)}, mesh)
  rng = np.random.default_rng(config.seed)
  data = {'images': rng.integers(0, 256, (1, s.batch_size, size, size, 3), np.uint8),
          'labels': rng.integers(0, num_classes, (1, s.batch_size)).astype(np.int32),
          'mask': np.ones((1, s.batch_size), bool), 'class_mask': np.ones(num_classes, bool)}
  key = jax.random.PRNGKey(config.seed + 2)

  def step(state, data, key):
    model_vars, w, opt_state, metrics = train(state['model'], state['W'], data, key,
                                              state['opt_state'])
    return {'model': model_vars, 'W': w, 'opt_state': opt_state}, metrics['train_loss']

  start = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=0).lower(state, data, key).compile()
  compile_s = time.perf_counter() - start
  head_bytes = _head_state_bytes({'W': state['W']}, state['opt_state']) // num_devices
  held = {'state': state}

  def one_step():
    held['state'], loss = compiled(held['state'], data, key)
    return loss

  timed = measure(one_step, **timing)
  sampled = sum(partial_fc.sample_sizes(num_classes, sample_rate, s.batch_size, num_devices))
  row = {'name': name, 'classes': num_classes, 'sample_rate': sample_rate,
         'devices': num_devices, 'sampled_centers': sampled, 'head_state_bytes': head_bytes,
         **_memory_fields(compiled.memory_analysis())}
  return {**measured(row, s.batch_size, timed), 'compile_s': compile_s}


def bench_partial_fc(config, log=print) -> dict:
  s = config.bench.partial_fc
  timing = dict(warmup=config.bench.warmup, repeats=config.bench.repeats,
                budget_s=config.bench.max_timed_s)
  rows = []
  for num_classes in s.classes:
    for rate in s.sample_rates:
      row = bench_row(config, num_classes, rate, timing)
      rows.append(row)
      log(f"partial_fc: {row['name']}: {row['images_per_s']:,.1f} images/s, peak "
          f"{row.get('peak_bytes', 0) / 2**20:,.0f} MiB")
  devices = jax.local_device_count()
  sharded = []
  for num_classes in s.classes if devices > 1 else ():
    for rate in s.sample_rates:
      row = sharded_row(config, num_classes, rate, devices, timing)
      sharded.append(row)
      log(f"partial_fc: {row['name']}: " + (
          f"{row['images_per_s']:,.1f} images/s, peak {row.get('peak_bytes', 0) / 2**20:,.0f} "
          'MiB a device' if row['status'] == 'measured' else f"skipped: {row['reason']}"))
  return {'model': (f'{config.model.name} w={config.model.width} d={config.model.embedding_dim} '
                    f'{config.data.image_size}x{config.data.image_size}'),
          'batch_size': s.batch_size, 'loss': s.loss, 'rows': rows, 'sharded_rows': sharded}


def _mib(x) -> str:
  return '—' if x is None else f'{x / 2**20:,.1f}'


def markdown_lines(r: dict) -> list[str]:
  lines = [f"## (p) Partial FC: {r['model']}, batch {r['batch_size']}, {r['loss']}, SGD with "
           'momentum and weight decay',
           '| classes | sample_rate | centers a step | images/s | compile s | W + its optimizer '
           'state MiB | arguments MiB | temporaries MiB | peak MiB |',
           '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
  for row in r['rows']:
    lines.append(f"| {row['classes']:,} | {row['sample_rate']:g} | {row['sampled_centers']:,} | "
                 f"{row['images_per_s']:,.1f} | {row['compile_s']:.1f} | "
                 f"{_mib(row['head_state_bytes'])} | {_mib(row.get('argument_bytes'))} | "
                 f"{_mib(row.get('temp_bytes'))} | {_mib(row.get('peak_bytes'))} |")
  sharded = [row for row in r.get('sharded_rows', ()) if row['status'] == 'measured']
  if sharded:
    lines += ['', f"W and its optimizer state split over {sharded[0]['devices']} devices, one "
              'shard each (algorithms/sharded_classes.py); memory per device:',
              '| classes | sample_rate | centers a step (all shards) | images/s | compile s | '
              'W + its optimizer state MiB a device | arguments MiB | temporaries MiB | '
              'peak MiB |',
              '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    for row in sharded:
      lines.append(f"| {row['classes']:,} | {row['sample_rate']:g} | "
                   f"{row['sampled_centers']:,} | {row['images_per_s']:,.1f} | "
                   f"{row['compile_s']:.1f} | {_mib(row['head_state_bytes'])} | "
                   f"{_mib(row.get('argument_bytes'))} | {_mib(row.get('temp_bytes'))} | "
                   f"{_mib(row.get('peak_bytes'))} |")
  return lines
