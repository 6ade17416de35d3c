"""The compute-dtype policy (core/precision.py, `model.dtype`) on every backbone, without training:
'auto' per platform; the config's refusals in one line (an unknown dtype; float16 with
subject-level DP-SGD); whether a loss computes in float16, read from its program; parameters,
BatchNorm statistics and
outputs float32 under bfloat16 and float16 (shapes and dtypes by `jax.eval_shape`); the lowered
program of the backbone's gradient (StableHLO of `jax.jit(jax.grad(loss)).lower`) with every
convolution in the compute dtype and float32 matmuls only in the named float32 output layers;
DP-SGD's and client-level DP's clipping and noise in float32 on a bfloat16 backbone's gradients,
FedGC's regularizer in float32 on the class embeddings;
and a few SGD steps in bfloat16 whose losses stay within 2 % of float32's. The IResNets, the PAD
models and the second dtype of each backbone are the full tier (the same layers as the suite's
cases, more of them)."""

import collections
import re

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from fedjax_face import config_lib
from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.algorithms import pad_dp_sgd
from fedjax_face.algorithms.fedgc import regularizer
from fedjax_face.core import checks
from fedjax_face.core import dp_sgd
from fedjax_face.core import precision
from fedjax_face.core import privacy
from tests import config_files

_TINY = {
    'small_cnn': (dict(width=4, embedding_dim=8, num_stages=2), (2, 8, 8, 3)),
    'gn_cnn': (dict(width=4, embedding_dim=8, num_stages=2), (2, 8, 8, 3)),
    'iresnet18': (dict(embedding_dim=8), (2, 16, 16, 3)),
    'iresnet50': (dict(embedding_dim=8), (2, 16, 16, 3)),
    'pad_net': (dict(width=4, image_size=16, disentangle=True), (2, 16, 16, 6)),
    'pad_resnet18': (dict(width=4, image_size=32), (2, 32, 32, 6)),
}
# Dense layers that run in float32 whatever the compute dtype: the layer producing the model's
# output (the embedding layer, arcface_torch's fc outside autocast; PAD's live-logit classifier).
_FLOAT32_DENSE_LAYERS = {'small_cnn': 1, 'gn_cnn': 1, 'iresnet18': 1, 'iresnet50': 1,
                         'pad_net': 2, 'pad_resnet18': 1}
_HLO_TYPE = {'bfloat16': 'bf16', 'float16': 'f16'}

# The suite: BatchNorm (small_cnn) in both dtypes and GroupNorm; the IResNets (the same conv,
# BatchNorm and float32 embedding layer in more blocks) and the PAD models are the full tier.
_SUITE = [('small_cnn', 'bfloat16'), ('small_cnn', 'float16'), ('gn_cnn', 'bfloat16')]
_FULL = [(name, dtype) for name in _TINY for dtype in _HLO_TYPE if (name, dtype) not in _SUITE]
_CASES = _SUITE + [pytest.param(*case, marks=pytest.mark.full) for case in _FULL]


@pytest.mark.parametrize('name,platform,capability,expected', [
    ('auto', 'cpu', None, 'float32'),
    ('auto', 'tpu', None, 'bfloat16'),
    ('auto', 'gpu', '9.0', 'bfloat16'),     # H100 / H200
    ('auto', 'cuda', '8.0', 'bfloat16'),    # A100
    ('auto', 'gpu', '7.0', 'float32'),      # V100: no bfloat16 tensor cores
    ('auto', 'gpu', None, 'float32'),
    ('float16', 'cpu', None, 'float16'),
    ('bfloat16', 'cpu', None, 'bfloat16'),
])
def test_auto_resolves_per_platform(name, platform, capability, expected):
  assert precision.resolve(name, platform, capability) == expected


def test_auto_is_float32_on_this_cpu():
  assert jax.default_backend() != 'cpu' or precision.compute_dtype('auto') == jnp.float32


def test_the_config_refuses_an_unknown_dtype_in_one_line():
  with pytest.raises(ValueError) as error:
    config_lib.check_compute_dtype('half')
  assert str(error.value) == ("config.model.dtype='half'; expected one of ('float32', 'bfloat16', "
                              "'float16', 'auto').")


@pytest.mark.parametrize('dtype', ['float32', 'bfloat16', 'float16', 'auto'])
def test_the_config_accepts(dtype):
  config_lib.check_compute_dtype(dtype)


def test_float16_with_subject_level_dp_sgd_is_refused_in_one_line():
  config = config_files.load_config('pad/dp_sgd')
  config.model.dtype = 'float16'
  with pytest.raises(checks.UsageError) as error:
    pad_dp_sgd.check_config(config)
  assert str(error.value) == (
      "config.model.dtype='float16' with fedgpad.dp_sgd.enabled: a step skipped for one "
      "subject's overflowed gradient is outside the accountant's epsilon; expected 'float32' "
      "or 'bfloat16' (no loss scaling).")
  config.model.dtype = 'bfloat16'
  pad_dp_sgd.check_config(config)


@pytest.mark.parametrize('dtype,expected', [('float32', False), ('bfloat16', False),
                                            ('float16', True)])
def test_a_loss_is_read_as_float16_from_its_program(dtype, expected):
  # partial_sharing.train_part is handed a loss, not a model: the program decides.
  model, shape = _model('small_cnn', dtype)
  x = jax.ShapeDtypeStruct(shape, jnp.float32)
  variables = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=True), x)
  assert precision.model_needs_loss_scaling(model) is expected
  assert precision.computes_in_float16(_loss(model), variables['params'],
                                       variables['batch_stats'], x) is expected


def _model(name: str, dtype: str):
  fields, shape = _TINY[name]
  model = models.build_backbone(ml_collections.ConfigDict(dict(fields, name=name, dtype=dtype)))
  return model, shape


def _loss(model):
  def loss(params, batch_stats, x):
    out, _ = model.apply({'params': params, 'batch_stats': batch_stats}, x, train=True,
                         mutable=['batch_stats'])
    return sum(jnp.sum(jnp.square(leaf)) for leaf in jax.tree.leaves(out))
  return loss


def _dtypes(tree) -> set:
  return {np.dtype(leaf.dtype) for leaf in jax.tree.leaves(tree)}


_OP = re.compile(r'stablehlo\.(convolution|dot_general)\b.*:\s*\((.*)\)\s*->\s*(tensor<[^>]*>)')


def _element_type(tensor_type: str) -> str:
  return tensor_type.rstrip('>').split('x')[-1]


def hlo_ops(text: str) -> collections.Counter:
  """(op, operand element types, result element type) -> count, for every convolution and
  dot_general of a StableHLO module's text."""
  ops = collections.Counter()
  for line in text.splitlines():
    match = _OP.search(line)
    if match:
      operands = tuple(_element_type(t) for t in re.findall(r'tensor<[^>]*>', match.group(2)))
      ops[match.group(1), operands, _element_type(match.group(3))] += 1
  return ops


@pytest.mark.parametrize('name,dtype', _CASES)
def test_float32_master_weights_and_the_lowered_gradient_in_the_compute_dtype(name, dtype):
  model, shape = _model(name, dtype)
  x = jax.ShapeDtypeStruct(shape, jnp.float32)
  variables = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=True), x)
  out, updated = jax.eval_shape(
      lambda v, x: model.apply(v, x, train=True, mutable=['batch_stats']), variables, x)
  float32 = {np.dtype(np.float32)}
  assert _dtypes(variables['params']) == float32 and _dtypes(out) == float32
  if name != 'gn_cnn':   # GroupNorm keeps no statistics
    assert _dtypes(variables['batch_stats']) == _dtypes(updated['batch_stats']) == float32

  lowered = jax.jit(jax.grad(_loss(model))).lower(
      variables['params'], variables.get('batch_stats', {}), x)
  assert _dtypes(lowered.out_info) == float32   # gradients, so the optimizer state, float32
  ops = hlo_ops(lowered.as_text())
  low = _HLO_TYPE[dtype]
  convolutions = {key: n for key, n in ops.items() if key[0] == 'convolution'}
  assert convolutions and set(convolutions) == {('convolution', (low, low), low)}
  float32_matmuls = ops.pop(('dot_general', ('f32', 'f32'), 'f32'), 0)
  # Each float32 Dense layer: its forward product and the two of its gradient.
  assert float32_matmuls == 3 * _FLOAT32_DENSE_LAYERS[name]
  assert {key for key in ops if key[0] == 'dot_general'} <= {('dot_general', (low, low), low)}


def test_dp_clipping_and_noise_are_float32_on_a_bfloat16_backbone():
  model, shape = _model('small_cnn', 'bfloat16')
  x = jax.ShapeDtypeStruct((4,) + shape[1:], jnp.float32)
  variables = jax.eval_shape(lambda x: model.init(jax.random.PRNGKey(0), x, train=True), x)

  def dp_sgd_step(params, batch_stats, x):
    def loss(params, examples):
      out, _ = model.apply({'params': params, 'batch_stats': batch_stats}, examples['x'],
                           train=True, mutable=['batch_stats'])
      return jnp.mean(jnp.square(out)), ()

    groups = dp_sgd.group_indices(jnp.asarray([0, 1, 0, 1]), 2)
    grads, _ = dp_sgd.group_grads(loss, params, {'x': x}, groups)
    clipped, norms = dp_sgd.clip_each(grads, 0.01)
    total = dp_sgd.masked_sum(clipped, jnp.asarray([True, True]))
    return norms, dp_sgd.noised_mean(total, 1.0, 2.0, jax.random.PRNGKey(2))

  def client_level(params):
    update = jax.tree.map(lambda p: p * 0.5, params)
    return privacy.global_norm(update), privacy.clip_update(update, params, 0.01)

  float32 = {np.dtype(np.float32)}
  assert _dtypes(jax.eval_shape(dp_sgd_step, variables['params'],
                                        variables['batch_stats'], x)) == float32
  assert _dtypes(jax.eval_shape(client_level, variables['params'])) == float32


def test_fedgcs_regularizer_is_float32_on_the_class_embeddings_of_a_bfloat16_run():
  # W is a parameter (float32 master weight) whatever model.dtype, so Eq. 5 sums in float32.
  class_mask = np.ones((2, 3), bool)
  w = jax.eval_shape(lambda: common.init_client_class_embeddings(
      jax.random.PRNGKey(0), class_mask, 8, 'arcface'))
  value, grad = jax.eval_shape(jax.value_and_grad(
      lambda w: regularizer.softmax_regularizer(w, class_mask, form='arcface')), w)
  assert _dtypes((w, value, grad)) == {np.dtype(np.float32)}


def _sgd_losses(dtype: str, steps: int = 3) -> list[float]:
  """A softmax classifier over a small CNN's embeddings trained by SGD from one seed: the losses."""
  model = models.build_backbone(ml_collections.ConfigDict(
      dict(name='small_cnn', width=4, embedding_dim=16, num_stages=1, dtype=dtype)))
  rng = np.random.default_rng(0)
  labels = jnp.asarray(np.arange(16) % 4)
  x = jnp.asarray(rng.normal(size=(16, 8, 8, 3)) * 0.5 + np.asarray(labels)[:, None, None, None]
                  * 0.25, jnp.float32)
  variables = common.init_backbone(model, jax.random.PRNGKey(0), x.shape[1:], train=True)
  params = {'backbone': variables['params'],
            'classes': jnp.asarray(rng.normal(size=(16, 4)) * 0.1, jnp.float32)}

  def loss(params, batch_stats):
    emb, new = model.apply({'params': params['backbone'], 'batch_stats': batch_stats}, x,
                           train=True, mutable=['batch_stats'])
    logits = emb @ params['classes']
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), new

  optimizer = optax.sgd(0.1, momentum=0.9)
  opt_state, batch_stats, losses = optimizer.init(params), variables['batch_stats'], []

  @jax.jit
  def step(params, opt_state, batch_stats):
    (value, new), grads = jax.value_and_grad(loss, has_aux=True)(params, batch_stats)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, new['batch_stats'], value

  for _ in range(steps):
    params, opt_state, batch_stats, value = step(params, opt_state, batch_stats)
    losses.append(float(value))
  return losses


def test_bfloat16_sgd_losses_stay_within_two_percent_of_float32():
  float32, bfloat16 = _sgd_losses('float32'), _sgd_losses('bfloat16')
  assert float32[-1] < float32[0]   # it trains, so the comparison is of a moving loss
  np.testing.assert_allclose(bfloat16, float32, rtol=0.02)
