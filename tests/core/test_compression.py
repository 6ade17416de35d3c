"""Compressed updates: quantization unbiased and its bytes exact, top-k with error feedback, and
a compressed round decoded by the server."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.core import blocks, compression, communication
from tests import engine_cases


@pytest.mark.parametrize('bits', compression.BITS)
def test_codes_pack_and_unpack_exactly(bits):
  codes = jax.random.randint(jax.random.PRNGKey(bits), (37,), 0, 1 << bits).astype(jnp.uint8)
  packed = compression._pack(codes, bits)
  assert packed.dtype == jnp.uint8 and packed.size == math.ceil(37 * bits / 8)
  np.testing.assert_array_equal(compression._unpack(packed, bits, 37), codes)


@pytest.mark.parametrize('bits', [8, 4])
def test_quantization_is_unbiased_within_its_stated_spread(bits):
  x = jax.random.normal(jax.random.PRNGKey(0), (6, 5))
  draws = 4000
  decode = jax.jit(jax.vmap(lambda key: compression.dequantize(
      compression.quantize(x, bits, key), bits, x.shape, x.dtype)))
  values = np.asarray(decode(jax.random.split(jax.random.PRNGKey(1), draws)), np.float64)
  step = float(x.max() - x.min()) / ((1 << bits) - 1)
  # One draw is within a step of x (a level on either side); its variance is at most step²/4, so
  # the mean of `draws` lies within 5 standard deviations, 5·step/(2·sqrt(draws)), of x.
  assert np.all(np.abs(values - np.asarray(x)) <= step * (1 + 1e-5))
  np.testing.assert_array_less(np.abs(values.mean(axis=0) - np.asarray(x)),
                               5 * step / (2 * math.sqrt(draws)))
  assert len(np.unique(values[:, 0, 0])) == 2   # two levels, not a deterministic rounding


def test_quantized_bytes_are_the_packed_codes_and_two_floats_per_tensor():
  delta = {'a': jnp.ones((10, 3)), 'b': {'c': jnp.ones((7,))}}
  spec = compression.Spec('quantize', bits=4)
  payload, residual = compression.encode(spec, delta, None, jax.random.PRNGKey(0))
  assert residual is None
  assert communication.by_key(payload) == {'a': math.ceil(30 * 4 / 8) + 8,
                                           'b': math.ceil(7 * 4 / 8) + 8}


def test_topk_sends_the_largest_and_keeps_the_rest_as_error_feedback():
  spec = compression.Spec('topk', fraction=0.25)
  first = {'w': jnp.array([0.1, -3.0, 0.2, 2.0, 0.0, -0.5, 0.05, 1.0])}
  residual = compression.residual_like(first)
  payload, residual = compression.encode(spec, first, residual, jax.random.PRNGKey(0))
  assert sorted(np.asarray(payload['w']['indices']).tolist()) == [1, 3]   # k = ceil(0.25·8)
  assert communication.by_key(payload) == {'w': 2 * 4 + 2 * 4}            # values + indices
  sent = compression.decode(spec, payload, first)
  np.testing.assert_array_equal(sent['w'], [0, -3.0, 0, 2.0, 0, 0, 0, 0])
  np.testing.assert_array_equal(residual['0000'], first['w'] - sent['w'])
  # The next round sends from update + residual: the 1.0 left behind now wins.
  second = {'w': jnp.zeros(8).at[0].set(0.9)}
  payload, residual = compression.encode(spec, second, residual, jax.random.PRNGKey(1))
  assert sorted(np.asarray(payload['w']['indices']).tolist()) == [0, 7]
  total_sent = sent['w'] + compression.decode(spec, payload, second)['w']
  np.testing.assert_allclose(total_sent + residual['0000'], first['w'] + second['w'], rtol=1e-7)


@pytest.mark.parametrize('codec', ['quantize', 'topk'])
def test_running_statistics_pass_as_they_are_with_no_residual(codec):
  spec = compression.Spec(codec, bits=2, fraction=0.25)
  update = {'params': {'w': jnp.array([0.1, -3.0, 0.2, 2.0])},
            'batch_stats': {'bn': {'mean': jnp.array([0.5, -0.25]), 'var': jnp.array([0.3, 1.7])}}}
  residual = compression.residual_like(update) if codec == 'topk' else None
  assert residual is None or list(residual) == ['0000']   # 'w' alone
  payload, residual = compression.encode(spec, update, residual, jax.random.PRNGKey(0))
  # The client's own arrays cross, not a payload of them.
  jax.tree.map(lambda p, x: p is x or pytest.fail(), payload['batch_stats'],
               update['batch_stats'])
  assert communication.by_key(payload)['batch_stats'] == 4 * 4
  decoded = compression.decode(spec, payload, update)
  jax.tree.map(np.testing.assert_array_equal, decoded['batch_stats'], update['batch_stats'])
  assert residual is None or list(residual) == ['0000']


COHORTS = ((0, 1, 2, 3, 4),)


def one_stage(**fields):
  """A `configure` for `engine_cases.run_rounds`: the `compression` fields given, on a one-stage
  small CNN. The codecs act on every parameter leaf alike, whatever the depth (BatchNorm's
  statistics included), and each leaf is coded by its own ops: the coded client programs compile
  in about half the time of the three stages'."""
  return engine_cases.set_fields(model__num_stages=1,
                                 **{f'compression__{key}': value for key, value in fields.items()})


@pytest.fixture(scope='module')
def plain_round():
  """FedGC's uncompressed round, trained once for both codecs."""
  return engine_cases.run_rounds('fedgc', 'loop', cohorts=COHORTS, configure=one_stage())[0]


@pytest.mark.parametrize('codec, field, value', [('quantize', 'bits', 8),
                                                 ('topk', 'fraction', 1.0)])
def test_a_compressed_round_is_decoded_against_what_each_client_received(plain_round, codec,
                                                                         field, value):
  """At 8 bits the round is FedAvg within a quantization step; top-k of every coordinate is
  FedAvg to float rounding (o + (u − o) for u)."""
  plain = plain_round
  comp, eng = engine_cases.run_rounds('fedgc', 'loop', cohorts=COHORTS,
                                      configure=one_stage(codec=codec, **{field: value}))
  tolerance = 0.05 if codec == 'quantize' else 1e-5
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=tolerance),
               comp.server['method'], plain.server)
  shared, row, update = eng.client_wire
  # What crosses: payloads for the model's parameters and FedGC's own class rows W_k, and
  # BatchNorm's running statistics whole, float32 (averaged, never coded).
  statistics = update['model']['batch_stats']
  jax.tree.map(lambda x, s: (x.shape, x.dtype) == (s.shape, jnp.float32) or pytest.fail(),
               statistics, plain.server['model']['batch_stats'])
  coded = jax.tree.leaves({'model': update['model']['params'], 'W': update['W']})
  if codec == 'quantize':
    assert {x.dtype for x in coded} == {jnp.dtype('uint8'), jnp.dtype('float32')}
    floats = sum(x.size for x in coded if x.dtype == jnp.float32)
    assert floats == 2 * len([x for x in coded if x.dtype == jnp.uint8])   # low, step per tensor
  else:
    assert set(update) == {'model', 'W'} and set(update['model']) == {'params', 'batch_stats'}
    assert {x.dtype for x in coded} == {jnp.dtype('int32'), jnp.dtype('float32')}
  leaves = jax.tree.leaves(update)
  wire = communication.wire_bytes(shared, row, update)
  assert sum(wire['up'].values()) == sum(x.size * x.dtype.itemsize for x in leaves)


def test_topk_residuals_are_kept_per_client_and_padding_rows_keep_theirs():
  state, _ = engine_cases.run_rounds('fedpe', 'vmap', cohorts=((0, 2),), pad_to=4,
                                     configure=one_stage(codec='topk', fraction=0.1))
  residual = state.clients['blocks']['residual']
  moved = [np.any(r != 0, axis=tuple(range(1, r.ndim))) for r in jax.tree.leaves(residual)]
  assert np.all(np.any(moved, axis=0) == np.array([True, False, True, False, False]))


def test_compression_refuses_dp_and_secure_aggregation():
  config = engine_cases.tiny_config('fedpe')
  config.compression.codec = 'topk'
  config.dp.enabled = True
  with pytest.raises(ValueError, match='compression.codec with dp.enabled'):
    blocks.check(config, 'fedpe', None)
  config.dp.enabled = False
  config.secure_aggregation.enabled = True
  with pytest.raises(ValueError, match='secure_aggregation.enabled with compression'):
    blocks.check(config, 'fedpe', None)
