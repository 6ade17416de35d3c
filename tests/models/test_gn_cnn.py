"""The GroupNorm backbone of the one-identity-per-client papers (FedUV / FedFV Sec. 4.2)."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_face import models
from fedjax_face.models import gn_cnn


def _build(**fields):
  config = ml_collections.ConfigDict({'name': 'gn_cnn', 'embedding_dim': 512, **fields})
  return models.build_backbone(config)


def test_paper_backbone_layout_and_size():
  # FedFV Sec. 4.2: five Conv-ReLU-MaxPool-GroupNorm blocks, 64..512 channels, a 512-d FC, 64x64.
  model = _build(width=64, num_stages=5)
  # Shapes only (eval_shape: nothing is compiled or run; the eager init took ~5 s).
  variables = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 64, 64, 3)),
                                                train=False))
  params = variables['params']
  assert set(variables) == {'params'}   # GroupNorm: no running statistics to average
  assert [params[f'conv{i}']['kernel'].shape[-1] for i in range(5)] == [64, 128, 256, 512, 512]
  assert [params[f'gn{i}']['scale'].shape for i in range(5)] == [(c,) for c in
                                                                  (64, 128, 256, 512, 512)]
  assert params['fc']['kernel'].shape == (2 * 2 * 512, 512)    # 64 / 2**5 = 2
  convs = 3 * 3 * (3 * 64 + 64 * 128 + 128 * 256 + 256 * 512 + 512 * 512) + (64 + 128 + 256 + 512
                                                                             + 512)
  norms = 2 * (64 + 128 + 256 + 512 + 512)
  fc = 2048 * 512 + 512
  assert sum(x.size for x in jax.tree.leaves(params)) == convs + norms + fc


def test_stage_channels_and_groups():
  assert gn_cnn.stage_channels(64, 5) == [64, 128, 256, 512, 512]
  assert gn_cnn.stage_channels(8, 5) == [8, 16, 32, 64, 64]
  assert [gn_cnn.num_groups(c) for c in (8, 24, 64, 512)] == [8, 24, 32, 32]
  assert gn_cnn.num_groups(48) == 24    # the largest divisor of 48 up to 32


def test_group_norm_makes_each_sample_independent_of_the_batch():
  model = _build(width=8, num_stages=3, embedding_dim=16)
  x = jax.random.uniform(jax.random.PRNGKey(1), (4, 16, 16, 3), minval=-1, maxval=1)
  variables = model.init(jax.random.PRNGKey(0), x[:1], train=False)
  whole = model.apply(variables, x, train=True)
  alone = model.apply(variables, x[2:3], train=True)
  # XLA may convolve a batch of 4 and of 1 with differently ordered float32 sums (seen: 2e-6 on an
  # output of 0.027); a batch statistic leaking in would move outputs by orders more.
  np.testing.assert_allclose(whole[2:3], alone, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(whole, model.apply(variables, x, train=False))


def test_scaling_layer_multiplies_the_embedding_by_its_learned_scalar():
  plain = _build(width=8, num_stages=2, embedding_dim=16)
  scaled = _build(width=8, num_stages=2, embedding_dim=16, scaling=True, scaling_init=3.0)
  x = jax.random.uniform(jax.random.PRNGKey(1), (2, 8, 8, 3))
  variables = scaled.init(jax.random.PRNGKey(0), x, train=False)
  assert variables['params']['scaling']['scale'] == 3.0
  without = {'params': {k: v for k, v in variables['params'].items() if k != 'scaling'}}
  np.testing.assert_allclose(scaled.apply(variables, x, train=False),
                             3.0 * plain.apply(without, x, train=False), rtol=1e-6)


def test_too_small_input_is_refused_by_shape():
  model = _build(width=8, num_stages=5, embedding_dim=16)
  with pytest.raises(ValueError, match=r'needs images of at least 32x32 pixels; got \(16, 16\)'):
    model.init(jax.random.PRNGKey(0), jnp.zeros((1, 16, 16, 3)), train=False)
