"""models/initializers.py: Flax's variance-scaling initializers, value for value, drawn flat."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from fedjax_face import models
from fedjax_face.models import initializers, iresnet

# Kernels of convs (3x3, 4x4 transposed, 1x1), of a dense layer and a 3-D one; small, as XLA's CPU
# compiler is slow over Flax's own draws of these shapes.
SHAPES = [(3, 3, 2, 3), (4, 4, 3, 2), (1, 1, 2, 3), (6, 4), (3, 2, 5)]


# JAX's default RNG (partitionable threefry, which the library never changes) in the suite; the
# older implementation is the same equality on other bits (the full tier).
@pytest.mark.parametrize('partitionable', [True, pytest.param(False, marks=pytest.mark.full)])
@pytest.mark.parametrize('scale,mode,distribution', [(2.0, 'fan_out', 'normal'),
                                                     (0.5, 'fan_in', 'truncated_normal')])
def test_variance_scaling_is_flax_s_to_the_last_bit(scale, mode, distribution, partitionable):
  ours = initializers.variance_scaling(scale, mode, distribution)
  flax_s = nn.initializers.variance_scaling(scale, mode, distribution)
  with jax.threefry_partitionable(partitionable):
    for i, shape in enumerate(SHAPES):
      key = jax.random.PRNGKey(i)
      want, got = flax_s(key, shape), ours(key, shape)
      assert got.dtype == want.dtype and got.shape == shape
      np.testing.assert_array_equal(got, want)


def test_the_named_initializers_are_the_ones_the_models_used():
  # A shape the value tests above drew: the draws' compiled programs serve these too.
  key, shape = jax.random.PRNGKey(3), SHAPES[0]
  np.testing.assert_array_equal(initializers.he_normal_fan_out(key, shape),
                                nn.initializers.variance_scaling(2.0, 'fan_out', 'normal')(
                                    key, shape))
  np.testing.assert_array_equal(initializers.lecun_normal(key, shape),
                                nn.initializers.lecun_normal()(key, shape))


def test_an_unknown_mode_or_distribution_is_named():
  with pytest.raises(ValueError, match=r"'fan_avg'.*expected mode fan_in or fan_out"):
    initializers.variance_scaling(1.0, 'fan_avg', 'normal')
  with pytest.raises(ValueError, match=r"'uniform'.*distribution normal or truncated_normal"):
    initializers.variance_scaling(1.0, 'fan_in', 'uniform')


def _model(name: str, disentangle: bool = True) -> tuple[nn.Module, tuple[int, ...]]:
  if name == 'iresnet':
    # IResNet-18's every layer kind (the stem, basic blocks, the stride-2 projection, the fc) at
    # widths that compile in seconds; IResNet-18 itself differs in depth and width only (the
    # registry builds it at full width whatever `width` says: its init took ~10 s of each test).
    return iresnet.IResNet(stage_sizes=(2, 1), stage_widths=(8, 16), stem_width=8,
                           embedding_dim=8), (2, 16, 16, 3)
  c = ml_collections.ConfigDict(dict(name=name, embedding_dim=8, width=4, num_stages=2))
  if name in ('pad_net', 'pad_resnet18'):
    c.update(width=2, image_size=16, disentangle=disentangle)
    return models.build_backbone(c), (2, 16, 16, 6)
  return models.build_backbone(c), (2, 16, 16, 3)


@pytest.mark.full
def test_the_small_cnn_initializes_as_with_flax_s_initializers(monkeypatch):
  """The parameters of the compiled init are those Flax's own initializers give eagerly, leaf for
  leaf. The other networks follow from the tests below and the value tests above, and so does
  this one (the full tier): the compiled init is the eager one (small_cnn's case below), whose
  every draw is Flax's (the value tests above)."""
  from fedjax_face.algorithms import common  # pylint: disable=g-import-not-at-top
  model, shape = _model('small_cnn')
  ours = common.init_backbone(model, jax.random.PRNGKey(0), shape[1:])
  monkeypatch.setattr(initializers, 'he_normal_fan_out',
                      nn.initializers.variance_scaling(2.0, 'fan_out', 'normal'))
  monkeypatch.setattr(initializers, 'lecun_normal', nn.initializers.lecun_normal())
  flax_s = model.init(jax.random.PRNGKey(0), jnp.zeros((1,) + shape[1:]), train=False)
  jax.tree.map(np.testing.assert_array_equal, ours, dict(flax_s))


HE, LECUN = 1.0, 2.0


@pytest.mark.parametrize('name', ['small_cnn', 'gn_cnn', 'iresnet', 'pad_net', 'pad_resnet18'])
def test_every_kernel_takes_the_initializer_it_always_had(name, monkeypatch):
  """Each initializer fills with a tag: every kernel is tagged (none is left to Flax's implicit
  default), He normal on the convs that BatchNorm / GroupNorm / ReLU follow, Flax's default LeCun
  normal on the dense layers, the depth head's output conv and the decoder's transposed convs, as
  before the initializers were restated."""
  monkeypatch.setattr(initializers, 'he_normal_fan_out',
                      lambda key, shape, dtype=jnp.float32: jnp.full(shape, HE, dtype))
  monkeypatch.setattr(initializers, 'lecun_normal',
                      lambda key, shape, dtype=jnp.float32: jnp.full(shape, LECUN, dtype))
  model, shape = _model(name)
  params = jax.jit(lambda r: model.init(r, jnp.zeros(shape), train=True))(
      jax.random.PRNGKey(0))['params']
  lecun_layers = ('Dense', "['fc']", "['classifier']['kernel']", "['depth']['Conv_0']",
                  'ConvTranspose')
  kernels = [(jax.tree_util.keystr(path), leaf) for path, leaf in
             jax.tree_util.tree_flatten_with_path(params)[0]
             if jax.tree_util.keystr(path).endswith("['kernel']")]
  assert kernels
  for path, leaf in kernels:
    want = LECUN if any(layer in path for layer in lecun_layers) else HE
    np.testing.assert_array_equal(leaf, want, err_msg=path)


# PadResNet18's trunk repeats layer kinds the others have (IResNet's basic blocks and stride-2
# projection, PadNet's training-mode BatchNorm): it runs in the full tier. So does the whole
# disentangled PadNet (its eager init, op by op, was the file's longest test): the suite's
# 'pad_net/shared' is PadNet without the domain-specific half, whose extractor is a second
# `Extractor` and whose decoder's transposed-conv kernels are the LeCun draws the dense layers
# take (test_every_kernel_takes_the_initializer_it_always_had[pad_net] tags them).
@pytest.mark.parametrize('name', ['small_cnn', 'gn_cnn', 'iresnet', 'pad_net/shared',
                                  pytest.param('pad_net', marks=pytest.mark.full),
                                  pytest.param('pad_resnet18', marks=pytest.mark.full)])
def test_the_compiled_init_gives_the_eager_parameters_bit_for_bit(name):
  """`common.init_backbone` compiles `init` as one program; every variable equals the eager
  init's to the last bit, in the BatchNorm mode each network is initialized in (FedGPAD's
  in training mode). Without the initializers' optimization barrier, XLA moved the last bits
  of thousands of weights in each of these networks at their default sizes."""
  from fedjax_face.algorithms import common  # pylint: disable=g-import-not-at-top
  model, shape = _model(name.split('/')[0], disentangle=not name.endswith('/shared'))
  train = name.startswith('pad_')
  eager = model.init(jax.random.PRNGKey(5), jnp.zeros((1,) + shape[1:]), train=train)
  compiled = common.init_backbone(model, jax.random.PRNGKey(5), shape[1:], train=train)
  assert jax.tree.structure(compiled) == jax.tree.structure(dict(eager))
  jax.tree.map(np.testing.assert_array_equal, compiled, dict(eager))
