"""A backbone's training images/s per compute dtype (issue 62): float32, bfloat16 and float16 with
dynamic loss scaling (core/loss_scale.py), and PyTorch's AMP (autocast float16 + GradScaler,
autocast bfloat16) beside them when torch is installed and sees a CUDA device.

  python -m fedjax_face.tools.bench.precision                       # IResNet-50, 112 px, batch 64
  python -m fedjax_face.tools.bench.precision --batch_size=128 --repeats=5   # arcface_torch's
                                                                            # batch per GPU

The step is bench (j)'s (`backbone_training.engine_row`): the backbone, a linear softmax
classifier, SGD with momentum 0.9, one batch of random images; the parameters stay float32 and
the backbone computes in the row's dtype (`core/precision.py`). The float16 row includes the loss
scaling's own work (scale, unscale, the finiteness test, the skipped-step select), as PyTorch's
GradScaler row does. Prints one markdown table.
"""

import argparse

import jax
import ml_collections
import numpy as np
import optax

from fedjax_face.core import loss_scale
from fedjax_face.core import policy
from fedjax_face.core import precision
from fedjax_face.core import xla_flags
from fedjax_face.tools.bench import backbone_training, torch_reference
from fedjax_face.tools.bench.common import measured
from fedjax_face.tools.timing import measure

DTYPES = ('float32', 'bfloat16', 'float16')


def conv_gradient_here(model: str) -> str:
  """Bench (j)'s fastest gradient: 'chunked' for the IResNets on XLA CPU, XLA's own elsewhere
  (core/policy.py's rule for an unrolled step)."""
  on_cpu = jax.default_backend() == 'cpu'
  return 'chunked' if on_cpu and model.startswith('iresnet') else 'xla'


def training_step(s, dtype: str, seed: int):
  """(jitted step, its arguments): one SGD step of the backbone in `dtype` plus a float32 linear
  classifier; under float16 the loss is scaled and an overflowed step skipped."""
  params, batch_stats, opt, loss_fn = backbone_training.training_problem(
      s, seed, conv_gradient_here(s.model), dtype)
  scaled = loss_scale.value_and_grad(loss_fn, has_aux=True)

  @jax.jit
  def step(params, stats, opt_state, scale_state):
    if precision.needs_loss_scaling(dtype):
      (loss, updated), grads, finite = scaled(scale_state, params, stats)
      params, opt_state, scale_state = loss_scale.apply_if_finite(
          opt, grads, finite, params, opt_state, scale_state)
    else:
      (loss, updated), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, stats)
      updates, opt_state = opt.update(grads, opt_state, params)
      params = optax.apply_updates(params, updates)
    return params, updated['batch_stats'], opt_state, scale_state, loss

  return step, (params, batch_stats, opt.init(params), loss_scale.init())


def engine_rows(s, seed: int, timing: dict) -> list[dict]:
  """One measured row per dtype of `s.dtypes`."""
  rows = []
  for dtype in s.dtypes:
    step, args = training_step(s, dtype, seed)
    timed = measure(step, *args, **timing)
    rows.append(measured({'name': f'engine, {dtype}', 'dtype': dtype,
                          'conv_gradient': conv_gradient_here(s.model)}, s.batch_size, timed))
  return rows


def torch_amp_rows(s, seed: int, timing: dict) -> list[dict]:
  """PyTorch's IResNet in float32, under autocast float16 with a GradScaler (arcface_torch's
  `GradScaler(growth_interval=100)`, train_v2.py) and under autocast bfloat16, on CUDA; a
  skipped row saying why where that cannot run."""
  if (skipped := backbone_training.torch_skipped('pytorch AMP', s.model)) is not None:
    return skipped
  import torch   # pylint: disable=g-import-not-at-top
  if jax.default_backend() != 'gpu' or not torch.cuda.is_available():
    return [{'name': 'pytorch AMP', 'status': 'skipped',
             'reason': 'AMP rows are measured on CUDA only (the engine and torch on one GPU)'}]
  names = backbone_training.TORCH_DEPTHS
  rows = []
  for dtype in s.dtypes:
    train = amp_steps(names[s.model], s.image_size, s.batch_size, s.classes, seed, dtype)
    timed = measure(train, 1, **timing)
    rows.append(measured({'name': f'pytorch {torch.__version__} AMP, {dtype}, cuda '
                                  f'({torch.cuda.get_device_name()})', 'dtype': dtype},
                         s.batch_size, timed))
  return rows


def amp_steps(stage_sizes, image_size: int, batch_size: int, num_classes: int, seed: int,
              dtype: str):
  """`(steps,) -> final loss` of SGD on PyTorch's IResNet plus a linear classifier on CUDA, the
  forward under `torch.autocast(dtype)` (none for float32) and float16's loss scaled by a
  GradScaler, as arcface_torch trains."""
  import torch   # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  model = torch.nn.Sequential(torch_reference.iresnet(stage_sizes, 512, image_size),
                              torch.nn.Linear(512, num_classes)).to('cuda')
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
  rng = np.random.default_rng(seed)
  images = torch.from_numpy(rng.uniform(-1, 1, (batch_size, 3, image_size, image_size))
                            .astype(np.float32)).to('cuda')
  labels = torch.from_numpy(rng.integers(0, num_classes, batch_size).astype(np.int64)).to('cuda')
  loss_fn = torch.nn.CrossEntropyLoss()
  scaler = torch.amp.GradScaler('cuda', growth_interval=100, enabled=dtype == 'float16')
  autocast = dtype != 'float32'

  def train(steps: int) -> float:
    for _ in range(steps):
      opt.zero_grad()
      with torch.autocast('cuda', dtype=getattr(torch, dtype), enabled=autocast):
        loss = loss_fn(model(images), labels)
      scaler.scale(loss).backward()
      scaler.step(opt)
      scaler.update()
    return float(loss)
  return train


def markdown_lines(s, rows: list[dict]) -> list[str]:
  lines = [f'## backbone training per compute dtype: {s.model} {s.image_size}x{s.image_size} '
           f'd={s.dim}, batch {s.batch_size}, {s.classes} classes, SGD, on {device_name()}'
           + (f', {xla_flags.cpu_convolutions_in_effect()} convolutions'
              if jax.default_backend() == 'cpu' else ''),
           '| how | images/s | compile s |', '| --- | ---: | ---: |']
  for row in rows:
    if row['status'] == 'measured':
      lines.append(f"| {row['name']} | {row['images_per_s']:,.1f} | {row['compile_s']:.1f} |")
    else:
      lines.append(f"| {row['name']}: skipped ({row['reason']}) | | |")
  return lines


def device_name() -> str:
  device = jax.devices()[0]
  return f'{device.platform} ({device.device_kind}, {policy.usable_cpus()} usable CPUs)'


def parse_args(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--model', default='iresnet50')
  parser.add_argument('--image_size', type=int, default=112)
  parser.add_argument('--dim', type=int, default=512)
  parser.add_argument('--width', type=int, default=0, help='small_cnn / gn_cnn only')
  parser.add_argument('--batch_size', type=int, default=64)
  parser.add_argument('--classes', type=int, default=1000)
  parser.add_argument('--dtypes', default=','.join(DTYPES))
  parser.add_argument('--warmup', type=int, default=1)
  parser.add_argument('--repeats', type=int, default=3)
  parser.add_argument('--max_timed_s', type=float, default=60.0)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--torch', type=int, default=1, help='1: the PyTorch AMP rows')
  parser.add_argument('--cpu_convolutions', default='auto',
                      help="XLA CPU's convolution library: auto (core/policy.py: eigen for the "
                           'IResNets), eigen or ynnpack')
  s = parser.parse_args(argv)
  s.dtypes = tuple(filter(None, s.dtypes.split(',')))
  unknown = [d for d in s.dtypes if d not in DTYPES]
  if unknown or not s.dtypes:
    parser.error(f'--dtypes={",".join(s.dtypes)}; expected some of {",".join(DTYPES)}')
  return s


def cpu_convolutions(s) -> str:
  """`--cpu_convolutions`, 'auto' resolved as core/policy.py resolves `engine.cpu_convolutions`."""
  config = ml_collections.ConfigDict({'engine': {'cpu_convolutions': s.cpu_convolutions},
                                      'model': {'name': s.model}})
  return policy.cpu_convolutions_for(config)


def main(argv=None) -> list[dict]:
  """Parses the flags, sets XLA CPU's flags before JAX starts its backend, measures, prints."""
  s = parse_args(argv)
  xla_flags.apply_cpu_defaults()
  xla_flags.apply_cpu_convolutions(cpu_convolutions(s))
  timing = dict(warmup=s.warmup, repeats=s.repeats, budget_s=s.max_timed_s)
  rows = engine_rows(s, s.seed, timing) + (torch_amp_rows(s, s.seed, timing) if s.torch else [])
  print('\n'.join(markdown_lines(s, rows)), flush=True)
  return rows


if __name__ == '__main__':
  main()
