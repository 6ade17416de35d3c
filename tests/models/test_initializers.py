"""models/initializers.py: Flax's variance-scaling initializers, value for value, drawn flat."""

import threading

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
BACKBONES = ['small_cnn', 'gn_cnn', 'iresnet', 'pad_net/shared',
             pytest.param('pad_net', marks=pytest.mark.full),
             pytest.param('pad_resnet18', marks=pytest.mark.full)]


def _init(name: str):
  """`init(key)` as `common.init_backbone` runs it, with the eager parameters (key 5)."""
  model, shape = _model(name.split('/')[0], disentangle=not name.endswith('/shared'))
  train = name.startswith('pad_')
  zeros = jnp.zeros((1,) + shape[1:])
  return lambda key: dict(model.init(key, zeros, train=train))


@pytest.mark.parametrize('name', BACKBONES)
def test_the_compiled_init_gives_the_eager_parameters_bit_for_bit(name):
  """`initializers.batched_init` compiled, as `common.init_backbone` runs it: every variable
  equals the eager init's to the last bit, in the BatchNorm mode each network is initialized in
  (FedGPAD's in training mode). So did the per-draw program before it (below): without the
  initializers' optimization barrier, XLA moved the last bits of thousands of weights in each of
  these networks at their default sizes."""
  init = _init(name)
  eager = init(jax.random.PRNGKey(5))
  compiled = jax.jit(initializers.batched_init(init))(jax.random.PRNGKey(5))
  assert jax.tree.structure(compiled) == jax.tree.structure(eager)
  jax.tree.map(np.testing.assert_array_equal, compiled, eager)


# The per-draw program is what `batched_init` runs under the non-partitionable threefry (below),
# which the library never sets: a repeat of the equality above, in the full tier.
@pytest.mark.full
@pytest.mark.parametrize('name', BACKBONES)
def test_the_per_draw_compiled_init_gives_the_batched_parameters_bit_for_bit(name):
  """Today's program (one draw at a time, each behind its barrier) and the batched one."""
  init = _init(name)
  per_draw = jax.jit(init)(jax.random.PRNGKey(5))
  batched = jax.jit(initializers.batched_init(init))(jax.random.PRNGKey(5))
  jax.tree.map(np.testing.assert_array_equal, batched, per_draw)


def _three_kernels(key):
  keys = jax.random.split(key, 3)
  return (initializers.he_normal_fan_out(keys[0], (3, 3, 2, 4)),
          initializers.he_normal_fan_out(keys[1], (3, 3, 4, 4)),
          initializers.lecun_normal(keys[2], (5, 3)))


def _random_bits(init) -> int:
  """How many draws of random bits the traced `init` makes."""
  return str(jax.make_jaxpr(init)(jax.random.PRNGKey(0))).count('random_bits[')


def test_batched_init_draws_once_per_kind_and_per_draw_without_partitionable_threefry():
  """The two He-normal kernels (72 and 144 elements, padded to 288 <= 2 x 216) are one vmapped
  draw. Under the older threefry a draw's bits depend on its length, so no prefix is shared:
  `batched_init` then traces `init` as it is, the same program."""
  assert _random_bits(_three_kernels) == 3
  assert _random_bits(initializers.batched_init(_three_kernels)) == 2
  with jax.threefry_partitionable(False):
    assert str(jax.make_jaxpr(initializers.batched_init(_three_kernels))(
        jax.random.PRNGKey(0))) == str(jax.make_jaxpr(_three_kernels)(jax.random.PRNGKey(0)))


def test_padded_groups_split_a_kind_where_padding_would_pass_the_cap():
  # Kind 'a', longest first: 100, 100, 10, 10 pad to 400 <= 2 x 220; a third 10 would pad 500
  # elements for 230, so the next group starts at it. Kind 'b' is a group of its own.
  draws = [('a', 10), ('a', 100), ('b', 7), ('a', 10), ('a', 100), ('a', 10)]
  assert initializers.padded_groups(draws, 2.0) == [[1, 4, 0, 3], [5], [2]]
  assert initializers.padded_groups(draws, float('inf')) == [[1, 4, 0, 3, 5], [2]]
  assert initializers.padded_groups(draws, 1.0) == [[1, 4], [0, 3, 5], [2]]
  # At most 250 elements: 100 + 100 padded, then the 10s.
  assert initializers.padded_groups(draws, float('inf'), 250) == [[1, 4], [0, 3, 5], [2]]


def test_an_init_that_draws_differently_the_second_time_is_refused():
  calls = []

  def init(key):
    calls.append(key)
    return initializers.lecun_normal(key, (2, len(calls) + 1))

  with pytest.raises(RuntimeError) as error:
    jax.make_jaxpr(initializers.batched_init(init))(jax.random.PRNGKey(0))
  # The first line is ours (JAX appends a note on its filtered traceback).
  assert str(error.value).splitlines()[0] == (
      'batched_init: draw 0 of shape (2, 3) differs from the first pass: the init must draw the '
      'same parameters each time it runs.')

  def fewer_the_second_time(key):
    calls.append(key)
    return [initializers.lecun_normal(key, (2, 2)) for _ in range(2 if len(calls) % 2 else 1)]

  calls.clear()
  with pytest.raises(RuntimeError) as error:
    jax.make_jaxpr(initializers.batched_init(fewer_the_second_time))(jax.random.PRNGKey(0))
  assert str(error.value).splitlines()[0] == (
      "batched_init: the second pass drew 1 of the first pass's 2 parameters: the init must draw "
      'the same parameters each time it runs.')


def test_another_thread_draws_as_it_would_during_a_batched_init():
  """The record / replay state is the calling thread's (a context variable): a draw on another
  thread while `init` is traced is its own value, and is neither recorded nor replayed."""
  seen = []

  def init(key):
    thread = threading.Thread(target=lambda: seen.append(
        initializers.lecun_normal(jax.random.PRNGKey(1), (2, 2))))
    thread.start()
    thread.join()
    return initializers.lecun_normal(key, (2, 2))

  jax.make_jaxpr(initializers.batched_init(init))(jax.random.PRNGKey(0))
  assert len(seen) == 2   # one per pass
  for value in seen:
    np.testing.assert_array_equal(value, nn.initializers.lecun_normal()(jax.random.PRNGKey(1),
                                                                        (2, 2)))
