"""Streamed / sharded FedGC regularizers (fedgc/streamed.py) against the dense reference."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.algorithms import pairwise
from fedjax_face.algorithms.fedgc import correction, regularizer, streamed
from tests import forced_devices
from tests.algorithms.fedgc import test_regularizer

# (form, self_gradient, scale, margin): every form of Eq. 5, at the paper's scales / margins.
_SOFTMAX_FORMS = {
    'softmax': ('softmax', True, 64.0, 0.0),
    'softmax-eq12': ('softmax', False, 64.0, 0.0),
    'cosface': ('cosface', True, 64.0, 0.35),
    'arcface': ('arcface', True, 64.0, 0.5),
}


def _clients_case(seed=0, sizes=(7, 1, 4, 0, 6), dim=8):
  """Uneven clients (one empty) in the `[K, C_max]` layout, flattened: w, valid, owners."""
  rng = np.random.default_rng(seed)
  mask = np.arange(max(sizes))[None, :] < np.asarray(sizes)[:, None]
  w = rng.normal(size=mask.shape + (dim,)) / np.sqrt(dim) * 2.0 * mask[..., None]
  owner = np.repeat(np.arange(len(sizes)), max(sizes))
  return w.reshape(-1, dim).astype(np.float32), mask.reshape(-1), owner


def _general_case(seed=1, n=37, num_clients=4, dim=8):
  """Shared identities (several pairs share two clients), padding rows, a row held by nobody."""
  rng = np.random.default_rng(seed)
  holders = rng.random((n, num_clients)) < 0.3
  holders[np.arange(n), rng.integers(0, num_clients, n)] = True
  holders[5] = False
  valid = rng.random(n) > 0.15
  w = rng.normal(size=(n, dim)) / np.sqrt(dim) * 2.0 * valid[:, None]
  return w.astype(np.float32), valid, holders


_CASES = {'clients': _clients_case, 'general': _general_case}


def _value_and_grad(fn, case, **kwargs):
  w, valid, holders = (jnp.asarray(a) for a in case)
  return jax.jit(jax.value_and_grad(functools.partial(fn, **kwargs)))(w, valid, holders)


def _assert_same(got, want):
  np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


def _softmax_cases():
  """Every form on both layouts; each form and each layout under both reductions: 8 of the
  4 x 2 x 2 combinations in the suite, the other 8 in the full tier. The reduction is the last
  step of both implementations (`regularizer.reduce_rows` over the valid rows' terms), the same
  code whatever the form: what it meets is the layout's valid rows, and both layouts meet both."""
  cases = []
  for i, name in enumerate(sorted(_SOFTMAX_FORMS)):
    for j, layout in enumerate(sorted(_CASES)):
      for k, reduction in enumerate(regularizer.REDUCTIONS):
        marks = () if (i + j) % 2 == k else pytest.mark.full
        cases.append(pytest.param(name, reduction, layout, marks=marks))
  return cases


@pytest.mark.parametrize('name,reduction,layout', _softmax_cases())
def test_softmax_regularizer_matches_dense(name, reduction, layout):
  form, self_gradient, scale, margin = _SOFTMAX_FORMS[name]
  case = _CASES[layout]()
  kwargs = dict(form=form, self_gradient=self_gradient, scale=scale, margin=margin,
                reduction=reduction)
  dense = _value_and_grad(regularizer.flat_regularizer, case, **kwargs)
  got = _value_and_grad(streamed.streamed_regularizer, case, block_size=6, **kwargs)
  _assert_same(got, dense)                      # R = 35 / 37: padded to 36 / 42
  np.testing.assert_array_equal(got[1][~case[1]], 0.0)     # padding rows: no gradient


def test_tiling_pads_less_than_one_row_per_block():
  assert pairwise.tiling(5000, 4096) == (2500, 5000)
  assert pairwise.tiling(37, 16) == (13, 39)
  assert pairwise.tiling(37, 3, shards=8) == (3, 48)      # 5 rows per device: 2 blocks of 3


@pytest.mark.parametrize('block_size', [5, 16, 64])
def test_block_sizes_that_do_not_divide_the_rows(block_size):
  case = _general_case(seed=2)
  kwargs = dict(form='softmax', self_gradient=True, reduction='sum')
  _assert_same(_value_and_grad(streamed.streamed_regularizer, case, block_size=block_size,
                               **kwargs),
               _value_and_grad(regularizer.flat_regularizer, case, **kwargs))


@pytest.mark.parametrize('layout', sorted(_CASES))
@pytest.mark.parametrize('form', ['softmax', 'cosface'])
@pytest.mark.parametrize('reduction', regularizer.REDUCTIONS)
def test_cosine_regularizer_matches_dense(reduction, form, layout):
  case = _CASES[layout]()
  kwargs = dict(kind='cosine', form=form, reduction=reduction)
  dense = _value_and_grad(regularizer.flat_regularizer, case, **kwargs)
  # block 4: the rows held by two or more clients span several tiles of the overcount pass.
  _assert_same(_value_and_grad(streamed.streamed_regularizer, case, block_size=4, **kwargs),
               dense)


@pytest.mark.parametrize('reduction', regularizer.REDUCTIONS)
def test_cosine_gradient_is_the_closed_form_sum_of_allowed_anchors(reduction):
  w, valid, holders = test_regularizer._shared_case()   # pylint: disable=protected-access
  value, grad = test_regularizer.cosine_closed_form(w, valid, holders, reduction)
  with jax.enable_x64(True):
    got = jax.value_and_grad(streamed.streamed_regularizer)(
        jnp.asarray(w), jnp.asarray(valid), jnp.asarray(holders), kind='cosine',
        reduction=reduction, block_size=2)
  np.testing.assert_allclose(got[0], value, rtol=1e-10)
  np.testing.assert_allclose(got[1], grad, rtol=1e-10, atol=1e-12)


def test_gradient_correction_implementations_agree_and_keep_padding_zero():
  sizes = (7, 1, 4, 0, 6)
  w, valid, _ = _clients_case(seed=3, sizes=sizes)
  w = jnp.asarray(w.reshape(len(sizes), 7, -1))
  mask = jnp.asarray(valid.reshape(len(sizes), 7))
  kwargs = dict(step_size=0.7, form='cosface', scale=64.0, margin=0.35, reduction='mean')
  dense = jax.jit(functools.partial(correction.gradient_correction, **kwargs))(w, mask)
  got = jax.jit(functools.partial(correction.gradient_correction, **kwargs,
                                  implementation='blockwise', block_size=8))(w, mask)
  np.testing.assert_allclose(got, dense, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(got[~np.asarray(mask)], 0.0)
  assert not np.allclose(dense, w)              # the step did move the real rows


def test_auto_picks_blockwise_above_the_threshold(monkeypatch):
  calls = []
  original = streamed.streamed_regularizer
  monkeypatch.setattr(streamed, 'streamed_regularizer',
                      lambda *a, **k: calls.append(a[0].shape) or original(*a, **k))
  w, mask = jnp.ones((2, 3, 4)), jnp.ones((2, 3), bool)
  # The choice is made while tracing, from the shapes: traced only (run op by op, the two
  # regularizers compiled ~3 s of small programs). A new function each time, as eval_shape keeps
  # a function's trace for its shapes.
  trace = lambda: jax.eval_shape(lambda w, mask: correction.gradient_correction(
      w, mask, step_size=1.0, implementation='auto'), w, mask)
  trace()
  assert not calls                                                  # 6 rows: dense
  monkeypatch.setattr(pairwise, 'AUTO_STREAMED_ROWS', 5)
  trace()
  assert calls == [(6, 4)]                                          # 6 rows > 5: blockwise


def test_bad_implementation_and_dense_mesh_are_refused():
  w, mask = jnp.ones((2, 3, 4)), jnp.ones((2, 3), bool)
  with pytest.raises(ValueError, match=r"implementation 'fast'; expected one of "
                                       r"\('dense', 'blockwise', 'auto'\)"):
    correction.gradient_correction(w, mask, step_size=1.0, implementation='fast')
  with pytest.raises(ValueError, match='a mesh needs the blockwise implementation'):
    correction.gradient_correction(w, mask, step_size=1.0, mesh=object())


def test_compiled_temporary_memory_is_far_below_r_squared():
  """XLA's compiled memory analysis (works on CPU in jax 0.10): blockwise << R^2 <= dense."""
  num_clients, max_classes, dim = 64, 128, 64            # R = 8192
  shapes = (jax.ShapeDtypeStruct((num_clients, max_classes, dim), jnp.float32),
            jax.ShapeDtypeStruct((num_clients, max_classes), jnp.bool_))
  r_squared_bytes = (num_clients * max_classes) ** 2 * 4

  def temp_bytes(implementation):
    step = jax.jit(functools.partial(correction.gradient_correction, step_size=1.0,
                                     implementation=implementation, block_size=1024))
    return step.lower(*shapes).compile().memory_analysis().temp_size_in_bytes

  assert temp_bytes('blockwise') < r_squared_bytes / 8
  assert temp_bytes('dense') > r_squared_bytes


_EIGHT_DEVICES = """
import functools
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh
assert jax.device_count() == 8, jax.devices()
from fedjax_face.algorithms.fedgc import streamed
from tests.algorithms.fedgc import test_streamed as t
mesh = Mesh(np.asarray(jax.devices()), ('rows',))
for layout, name in (('general', 'softmax'), ('general', 'softmax-eq12'), ('clients', 'arcface')):
  form, self_gradient, scale, margin = t._SOFTMAX_FORMS[name]
  case = t._CASES[layout]()
  kwargs = dict(form=form, self_gradient=self_gradient, scale=scale, margin=margin,
                reduction='sum', block_size=3)
  single = t._value_and_grad(streamed.streamed_regularizer, case, **kwargs)
  # The sharded value and gradient, from the one compiled program whose HLO is checked.
  args = [jnp.asarray(a) for a in case]
  compiled = jax.jit(jax.value_and_grad(functools.partial(
      streamed.streamed_regularizer, mesh=mesh, axis_name='rows', **kwargs))).lower(*args).compile()
  t._assert_same(compiled(*args), single)
  hlo = compiled.as_text()
  assert 'all-gather' in hlo and 'reduce-scatter' in hlo, 'not sharded'
print('OK 8 devices')
"""


def test_sharded_over_eight_forced_cpu_devices_equals_single_device():
  assert 'OK 8 devices' in forced_devices.run(_EIGHT_DEVICES)
