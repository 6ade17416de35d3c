"""The compute-dtype policy: `config.model.dtype`, the dtype a backbone computes in.

Parameters, optimizer state and BatchNorm statistics stay float32 whatever the compute dtype
(float32 master weights): a backbone casts its float32 parameters to the compute dtype where a
layer uses them, so the gradients reach the parameters as float32. The choices:

  'float32'   everything in float32 (the default: archived configs and their digits unchanged).
  'bfloat16'  convolutions and matmuls in bfloat16. bfloat16 keeps float32's exponent range, so no
              loss scaling is needed.
  'float16'   convolutions and matmuls in float16, which needs dynamic loss scaling
              (`core/loss_scale.py`) so that small gradients do not flush to zero.
  'auto'      per platform (`resolve`):
              - CPU: float32. bfloat16 was measured slower than float32 on XLA CPU (BUILD_NOTES.md).
              - TPU: bfloat16, the TPU's native matmul input type.
              - GPU: bfloat16 where the GPU has bfloat16 tensor cores (compute capability 8.0 and
                up: A100, H100, H200), at the same rate as float16 and without loss scaling;
                float32 on older GPUs (V100, T4), where bfloat16 is emulated. Those GPUs run
                float16 fast, but 'auto' never picks the one choice that needs loss scaling.
"""

import jax
import jax.numpy as jnp

COMPUTE_DTYPES = {'float32': jnp.float32, 'bfloat16': jnp.bfloat16, 'float16': jnp.float16}
CHOICES = tuple(COMPUTE_DTYPES) + ('auto',)
# NVIDIA's first architecture with bfloat16 tensor cores is Ampere (compute capability 8.0).
BF16_MIN_CAPABILITY = (8, 0)


def resolve(name: str, platform: str, gpu_capability: str | None = None) -> str:
  """The compute dtype's name for `name` (one of CHOICES), 'auto' resolved on `platform`
  ('cpu' | 'gpu' | 'cuda' | 'rocm' | 'tpu'); `gpu_capability` is a CUDA device's
  'major.minor' (None: not known, read as a GPU without bfloat16 tensor cores)."""
  if name not in CHOICES:
    raise ValueError(f'Unknown compute dtype {name!r}; valid: {CHOICES}')
  if name != 'auto':
    return name
  if platform == 'tpu':
    return 'bfloat16'
  if platform in ('gpu', 'cuda', 'rocm') and _has_bf16_tensor_cores(gpu_capability):
    return 'bfloat16'
  return 'float32'


def _has_bf16_tensor_cores(capability: str | None) -> bool:
  if not capability:
    return False
  major, _, minor = capability.partition('.')
  return (int(major), int(minor or 0)) >= BF16_MIN_CAPABILITY


def resolve_here(name: str) -> str:
  """`resolve` on this process's default device."""
  device = jax.devices()[0]
  return resolve(name, device.platform, getattr(device, 'compute_capability', None))


def compute_dtype(name: str):
  """The jnp dtype `name` computes in on this process's device ('auto' resolved)."""
  return COMPUTE_DTYPES[resolve_here(name)]


def needs_loss_scaling(name: str) -> bool:
  """Whether training in `name` (resolved) needs dynamic loss scaling: float16 only, whose
  smallest normal number (6.1e-5) is where small gradients underflow."""
  return name == 'float16'


def model_needs_loss_scaling(model) -> bool:
  """Whether a built backbone (a flax module with a `dtype` field, `models.build_backbone`)
  computes in float16, and so trains under dynamic loss scaling (core/loss_scale.py). The local
  steps read it from the model they are given, so no method passes `model.dtype` along."""
  return jnp.dtype(getattr(model, 'dtype', jnp.float32)) == jnp.float16


def computes_in_float16(fn, *args) -> bool:
  """Whether `fn(*args)` computes any value in float16, read from its traced program (`jax.make_jaxpr`,
  the calls and custom-gradient bodies inside it too). For a step handed a loss function and
  no model (`algorithms.partial_sharing.train_part`): the backbone inside the loss decides."""
  return _has_float16(jax.make_jaxpr(fn)(*args).jaxpr)


def _has_float16(jaxpr) -> bool:
  for eqn in jaxpr.eqns:
    if any(getattr(var.aval, 'dtype', None) == jnp.float16 for var in eqn.outvars):
      return True
    for param in eqn.params.values():
      for value in param if isinstance(param, (tuple, list)) else (param,):
        inner = getattr(value, 'jaxpr', value)   # a ClosedJaxpr's Jaxpr
        if hasattr(inner, 'eqns') and _has_float16(inner):
          return True
  return False
