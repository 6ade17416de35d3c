"""Section `backbone_training`: training images/s of one backbone (IResNet-50 at 112 px by default)
with a linear softmax classifier, SGD with momentum, one batch a step, against PyTorch's own
IResNet-50 (`torch_reference.iresnet`, the same layout) when torch is installed: in this process
on 1 and on all usable threads, and one process per usable core with one thread each (each
training its own replica: the images/s of all of them together).

An engine row per `bench.backbone_training.engines` entry, 'library/gradient': XLA CPU's
convolution library (`core/xla_flags.py`: process-wide, so on CPU each row runs in a fresh
process that sets it before JAX starts) and the convolutions' gradient (`models/conv.py`).
"""

import concurrent.futures
import multiprocessing

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.core import xla_flags
from fedjax_face.core.policy import usable_cpus
from fedjax_face.models import arcface_torch
from fedjax_face.tools.bench import torch_reference
from fedjax_face.tools.bench.common import measured, parse_engines
from fedjax_face.tools.timing import measure


def host_dense_params(rng: np.random.Generator, inputs: int, outputs: int) -> dict:
  """`nn.Dense(outputs)`'s parameters at LeCun-normal scale (variance 1 / inputs, untruncated)
  and a zero bias, drawn with NumPy: Flax's eager init compiled a truncated-normal draw (~1.5 s
  of CPU in each process that trains a row), and what is timed does not depend on the values."""
  kernel = rng.standard_normal((inputs, outputs)) / np.sqrt(inputs)
  return {'params': {'kernel': jnp.asarray(kernel.astype(np.float32)),
                     'bias': jnp.asarray(np.zeros(outputs, np.float32))}}


def backbone(s, conv_gradient: str = 'xla', dtype: str = 'float32') -> nn.Module:
  """The section's backbone (`s.model`, `s.dim`, `s.width`) computing in `dtype`."""
  return models.build_backbone(ml_collections.ConfigDict(dict(
      name=s.model, embedding_dim=s.dim, dtype=dtype, width=s.width)),
                               conv_gradient=conv_gradient)


def initial_variables(s, seed: int) -> dict:
  """The backbone's starting variables as host arrays: drawn once here and handed to each engine
  row's process, which would otherwise compile the init again (~1.5 s of CPU at runlocal size,
  far more for IResNet-50). Neither the conv gradient nor the compute dtype changes them."""
  return jax.device_get(common.init_backbone(backbone(s), jax.random.PRNGKey(seed),
                                             (s.image_size, s.image_size, 3)))


def training_problem(s, seed: int, conv_gradient: str, dtype: str = 'float32',
                     variables: dict | None = None):
  """(params, batch_stats, optimizer, loss_fn(params, stats) -> (loss, updated variables)): the
  backbone in `dtype` with a float32 linear classifier on one fixed batch of random images and
  labels, SGD with momentum; its convolutions' gradients as `conv_gradient` (models/conv.py).
  `variables`: the backbone's starting variables (`initial_variables`), or None to draw them."""
  model = backbone(s, conv_gradient, dtype)
  head = nn.Dense(s.classes)
  size = s.image_size
  if variables is None:
    variables = common.init_backbone(model, jax.random.PRNGKey(seed), (size, size, 3))
  variables = jax.device_put(variables)
  params = {'backbone': variables['params'],
            'head': host_dense_params(np.random.default_rng(seed + 1), s.dim, s.classes)}
  rng = np.random.default_rng(seed)
  images = jnp.asarray(rng.uniform(-1, 1, (s.batch_size, size, size, 3)).astype(np.float32))
  labels = jnp.asarray(rng.integers(0, s.classes, s.batch_size))

  def loss_fn(params, stats):
    emb, updated = model.apply({'params': params['backbone'], 'batch_stats': stats}, images,
                               train=True, mutable=['batch_stats'])
    logits = head.apply(params['head'], emb)
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), updated

  return params, variables['batch_stats'], optax.sgd(0.1, momentum=0.9), loss_fn


def engine_row(s, seed: int, timing: dict, conv_gradient: str,
               variables: dict | None = None) -> dict:
  """The backbone's jitted training step (forward, backward, SGD with momentum), its convolutions'
  gradients as `conv_gradient` (models/conv.py) gives them; `variables` as `training_problem`."""
  params, batch_stats, opt, loss_fn = training_problem(s, seed, conv_gradient,
                                                       variables=variables)

  @jax.jit
  def step(params, stats, opt_state):
    (loss, updated), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), updated['batch_stats'], opt_state, loss

  # One compiled init of the optimizer state, not a compiled zeros per parameter.
  timed = measure(step, params, batch_stats, jax.jit(opt.init)(params), **timing)
  library = xla_flags.cpu_convolutions_in_effect() if jax.default_backend() == 'cpu' else None
  return measured({'name': f'engine (one jitted step), {library or "XLA"} convolutions, '
                           f'{conv_gradient} conv gradient',
                   'cpu_convolutions': library, 'conv_gradient': conv_gradient},
                  s.batch_size, timed)


def engine_row_on(library: str, s, seed: int, timing: dict, conv_gradient: str,
                  variables: dict) -> dict:
  """`engine_row` in a fresh process whose XLA CPU runs convolutions on `library`."""
  with concurrent.futures.ProcessPoolExecutor(
      1, mp_context=multiprocessing.get_context('spawn'),
      initializer=xla_flags.apply_cpu_convolutions, initargs=(library,)) as pool:
    return pool.submit(engine_row, s, seed, timing, conv_gradient, variables).result()


def engine_rows(s, seed: int, timing: dict) -> list[dict]:
  """One row per engine: on CPU each in its own process (the library is process-wide); off CPU
  in this one, once per gradient (the CPU library changes nothing there)."""
  engines = parse_engines(s.engines)
  variables = initial_variables(s, seed)
  if jax.default_backend() != 'cpu':
    gradients = dict.fromkeys(gradient for _, gradient in engines)
    return [engine_row(s, seed, timing, gradient, variables) for gradient in gradients]
  return [engine_row_on(library, s, seed, timing, gradient, variables)
          for library, gradient in engines]


# arcface_torch's IResNet name -> its stage depths.
TORCH_DEPTHS = {name: sizes for sizes, name in arcface_torch.DEPTHS.items()}


def torch_skipped(name: str, model: str) -> list[dict] | None:
  """The skipped row `name` saying why PyTorch cannot run `model` here (torch not installed, or
  no arcface_torch IResNet), or None when it can."""
  if not torch_reference.available():
    return [{'name': name, 'status': 'skipped',
             'reason': 'torch is not installed (optional: pip install torch)'}]
  if model not in TORCH_DEPTHS:
    return [{'name': name, 'status': 'skipped', 'reason': f'{model} is no arcface_torch IResNet'}]
  return None



def torch_rows(s, seed: int, timing: dict) -> list[dict]:
  """PyTorch's IResNet on the hardware the engine ran on: on CUDA when JAX runs on a GPU and
  torch sees one; on CPU, 1 and all usable threads here, then one process per core."""
  if (skipped := torch_skipped('pytorch', s.model)) is not None:
    return skipped
  names = TORCH_DEPTHS
  import torch   # pylint: disable=g-import-not-at-top
  args = (names[s.model], s.image_size, s.batch_size, s.classes, seed)
  if jax.default_backend() == 'gpu':
    if not torch.cuda.is_available():
      return [{'name': 'pytorch', 'status': 'skipped', 'reason': 'torch sees no CUDA device'}]
    timed = measure(torch_reference.backbone_steps(*args, device='cuda'), 1, **timing)
    return [measured({'name': f'pytorch {torch.__version__}, cuda '
                              f'({torch.cuda.get_device_name()})', 'threads': None},
                     s.batch_size, timed)]
  train = torch_reference.backbone_steps(*args)
  rows, before = [], torch.get_num_threads()
  for threads in dict.fromkeys((1, usable_cpus())):
    torch.set_num_threads(threads)
    timed = measure(train, 1, **timing)
    rows.append(measured({'name': f'pytorch {torch.__version__}, {threads} thread(s)',
                          'threads': threads}, s.batch_size, timed))
  torch.set_num_threads(before)
  processes = usable_cpus()
  pool = torch_reference.PerCore(processes, torch_reference.backbone_steps, args)
  try:
    timed = measure(lambda: pool.map([(1,)] * processes), **timing)
  finally:
    pool.close()
  rows.append(measured({'name': f'pytorch {torch.__version__}, {processes} process(es) x 1 '
                                'thread', 'threads': 1, 'processes': processes},
                       s.batch_size * processes, timed))
  return rows


def bench_backbone_training(config, log=print) -> dict:
  s = config.bench.backbone_training
  timing = dict(warmup=config.bench.warmup, repeats=config.bench.repeats,
                budget_s=config.bench.max_timed_s)
  engines = engine_rows(s, config.seed, timing)
  for row in engines:
    log(f"backbone_training: {s.model} {s.image_size}px batch {s.batch_size}: engine, "
        f"{row['cpu_convolutions'] or 'XLA'} convolutions, {row['conv_gradient']} conv "
        f"gradient, {row['images_per_s']:,.1f} images/s")
  engine = max(engines, key=lambda row: row['images_per_s'])
  reference = torch_rows(s, config.seed, timing) if s.torch else []
  for row in reference:
    if row['status'] == 'measured':
      log(f"backbone_training/{row['name']}: {row['images_per_s']:,.1f} images/s")
  best = max((r['images_per_s'] for r in reference if r['status'] == 'measured'), default=None)
  return {'model': f'{s.model} {s.image_size}x{s.image_size} d={s.dim}',
          'batch_size': s.batch_size, 'classes': s.classes, 'engines': engines, 'engine': engine,
          'pytorch': reference,
          'engine_over_best_pytorch': engine['images_per_s'] / best if best else None}


def markdown_lines(r: dict) -> list[str]:
  lines = [f"## (j) backbone training: {r['model']}, batch {r['batch_size']}, "
           f"{r['classes']} classes, SGD", '| how | images/s | compile s |', '| --- | ---: | ---: |']
  lines += [f"| {row['name']} | {row['images_per_s']:,.1f} | {row['compile_s']:.1f} |"
            for row in r['engines']]
  for row in r['pytorch']:
    if row['status'] == 'measured':
      lines.append(f"| {row['name']} | {row['images_per_s']:,.1f} | |")
    else:
      lines.append(f"| {row['name']}: skipped ({row['reason']}) | | |")
  if r['engine_over_best_pytorch'] is not None:
    engine = r['engine']
    lines.append(f"engine ({engine['cpu_convolutions'] or 'XLA'} convolutions, "
                 f"{engine['conv_gradient']} conv gradient) / best PyTorch: "
                 f"{r['engine_over_best_pytorch']:.2f}")
  return lines
