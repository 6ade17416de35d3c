"""DP-SGD with a group unit (core/dp_sgd.py, Abadi et al. 2016 Alg. 1): each group's gradient
from the vmapped grouping equals jax.grad of that group's own loss in a Python loop over the
groups, and the clipped, kept sum equals the loop's; for a loss that is a sum over examples,
per-example gradients summed by group (segment_sum) give the same; with no noise, every group
kept and a clip no gradient reaches, the step is the non-private gradient; the noise has std
σΔ/L; ε is dp-accounting's RDP (and PLD) accountant called directly on the Poisson-subsampled
Gaussian events; a target ε is met by the σ solved for it and not by 0.2 % less, and one no σ
meets is refused in one line."""

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import pld, rdp

from fedjax_face.core import checks, dp_sgd

ADD_REMOVE = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
NUM_GROUPS, SIZE, DIM = 5, 3, 4


def _loss(params, batch):
  """A loss that is not a sum over examples (a mean, and the square of the group's mean feature),
  masked, with aux terms: a group's gradient depends on its examples together."""
  h = jnp.tanh(batch['x'] @ params['w'] + params['b'])
  m = batch['mask'].astype(jnp.float32)
  mean = jnp.sum(h * m[:, None], axis=0) / jnp.maximum(m.sum(), 1.0)
  per = jnp.sum(jnp.square(h - batch['y'][:, None]), axis=1)
  fit = jnp.sum(per * m) / jnp.maximum(m.sum(), 1.0)
  spread = jnp.sum(jnp.square(mean))
  return fit + spread, {'fit': fit, 'spread': spread}


@pytest.fixture(scope='module')
def problem():
  rng = np.random.default_rng(0)
  params = {'w': jnp.asarray(rng.normal(size=(DIM, 2)), jnp.float32),
            'b': jnp.asarray(rng.normal(size=2), jnp.float32)}
  # Frames of 5 subjects, shuffled, one of subject 3's masked.
  ids = rng.permutation(np.repeat(np.arange(NUM_GROUPS), SIZE))
  mask = np.ones(len(ids), bool)
  mask[np.flatnonzero(ids == 3)[0]] = False
  batch = {'x': jnp.asarray(rng.normal(size=(len(ids), DIM)), jnp.float32),
           'y': jnp.asarray(rng.normal(size=len(ids)), jnp.float32), 'mask': jnp.asarray(mask)}
  return params, batch, jnp.asarray(ids, jnp.int32)


_GRAD = jax.jit(jax.grad(_loss, has_aux=True))
# The grouping jitted, as a training step runs it: one program per loss, not each op on its own.
_GROUP_GRADS = jax.jit(dp_sgd.group_grads, static_argnames=('loss_fn', 'chunk'))


def _loop_grads(params, batch, ids):
  """Each subject's gradient by a Python loop: the subject's own frames (in batch order) as a
  batch of their own."""
  out = []
  for s in range(NUM_GROUPS):
    rows = np.flatnonzero(np.asarray(ids) == s)
    out.append(_GRAD(params, jax.tree.map(lambda x: x[rows], batch)))
  return out


@pytest.fixture(scope='module')
def grouped(problem):
  """(each subject's gradient and terms by the grouping, the same by the loop), computed once."""
  params, batch, ids = problem
  groups = dp_sgd.group_indices(ids, NUM_GROUPS)
  return _GROUP_GRADS(_loss, params, batch, groups), _loop_grads(params, batch, ids)


def test_group_gradients_equal_a_loop_over_subjects(problem, grouped):
  params, _, _ = problem
  (grads, terms), loop = grouped
  for s, (g, t) in enumerate(loop):
    for name in params:
      np.testing.assert_allclose(grads[name][s], g[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(terms['fit'][s], t['fit'], rtol=1e-6)


def test_clipped_kept_sum_equals_the_loop(problem, grouped):
  params, _, _ = problem
  (grads, _), loop = grouped
  loop_norms = [np.sqrt(sum(np.sum(np.square(np.asarray(v))) for v in g.values()))
                for g, _ in loop]
  clip = float(np.median(loop_norms))   # some subjects clipped, some not
  kept = jnp.array([True, False, True, True, True])
  clipped, norms = dp_sgd.clip_each(grads, clip)
  total = dp_sgd.masked_sum(clipped, kept)
  expected = {name: np.zeros(v.shape, np.float32) for name, v in params.items()}
  np.testing.assert_allclose(norms, loop_norms, rtol=1e-5)
  assert min(loop_norms) < clip < max(loop_norms)
  for s, ((g, _), norm) in enumerate(zip(loop, loop_norms)):
    if kept[s]:
      for name in params:
        expected[name] += np.asarray(g[name]) * min(1.0, clip / norm)
  for name in params:
    np.testing.assert_allclose(total[name], expected[name], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(dp_sgd.global_norms(clipped), np.minimum(loop_norms, clip),
                             rtol=1e-5)


def test_per_example_gradients_summed_by_segment_equal_group_gradients(problem):
  """For a loss that is a sum over frames the subject's gradient is the sum of its frames'
  (per-frame vmap + segment_sum, the usual DP-SGD grouping); the grouping gives the same."""
  params, batch, ids = problem
  def summed(p, b):
    h = jnp.tanh(b['x'] @ p['w'] + p['b'])
    return jnp.sum(jnp.sum(jnp.square(h - b['y'][:, None]), axis=1) * b['mask']), {}
  frames = jnp.arange(ids.shape[0]).reshape(-1, 1)
  per_frame, _ = _GROUP_GRADS(summed, params, batch, frames)
  by_segment = jax.tree.map(lambda g: jax.ops.segment_sum(g, ids, NUM_GROUPS), per_frame)
  # chunk=2: the lax.map of vmaps over 2 subjects at a time gives the same values.
  by_group, _ = _GROUP_GRADS(summed, params, batch, dp_sgd.group_indices(ids, NUM_GROUPS),
                             chunk=2)
  for name in params:
    np.testing.assert_allclose(by_segment[name], by_group[name], rtol=1e-5, atol=1e-6)


def test_without_noise_or_clipping_the_step_is_the_plain_gradient(problem, grouped):
  """σ = 0, q = 1, C beyond every norm: g̃ = Σ_s g_s / n, the gradient of the mean of the
  subjects' losses."""
  params, batch, ids = problem
  (grads, _), _ = grouped
  clipped, _ = dp_sgd.clip_each(grads, 1e9)
  kept = dp_sgd.poisson_mask(jax.random.PRNGKey(0), 1.0, NUM_GROUPS)
  assert bool(jnp.all(kept))
  step = dp_sgd.noised_mean(dp_sgd.masked_sum(clipped, kept), 0.0, float(NUM_GROUPS),
                            jax.random.PRNGKey(1))
  def mean_loss(p):
    return sum(_loss(p, jax.tree.map(lambda x: x[np.flatnonzero(np.asarray(ids) == s)],
                                     batch))[0] for s in range(NUM_GROUPS)) / NUM_GROUPS
  plain = jax.jit(jax.grad(mean_loss))(params)
  for name in params:
    np.testing.assert_allclose(step[name], plain[name], rtol=1e-5, atol=1e-6)


def test_noise_has_the_stated_std():
  zeros = {'a': jnp.zeros((200, 500)), 'b': jnp.zeros(1000)}
  std, denominator = 3.0, 6.0
  noised = dp_sgd.noised_mean(zeros, std, denominator, jax.random.PRNGKey(0))
  values = np.concatenate([np.ravel(v) for v in jax.tree.leaves(noised)])
  # 101,000 draws: the sample std is within 1 % of std / L (its own std is ~0.2 %).
  assert abs(values.std() / (std / denominator) - 1) < 0.01
  assert abs(values.mean()) < 0.01 * std / denominator
  # The two leaves draw apart.
  assert not np.allclose(np.asarray(noised['a']).ravel()[:1000], np.asarray(noised['b']))


def test_poisson_mask_keeps_each_group_at_its_rate():
  kept = dp_sgd.poisson_mask(jax.random.PRNGKey(3), 0.3, 100_000)
  assert abs(float(kept.mean()) - 0.3) < 0.005


@pytest.mark.parametrize('q,sigma,steps', [(0.5, 1.2, 40), (1.0, 3.0, 10)])
def test_epsilon_is_the_accountant_called_directly(q, sigma, steps):
  delta = 1e-5
  event = dp_accounting.GaussianDpEvent(sigma)
  if q < 1:
    event = dp_accounting.PoissonSampledDpEvent(q, event)
  accountant = rdp.RdpAccountant(neighboring_relation=ADD_REMOVE)
  accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
  assert dp_sgd.epsilon(q, sigma, steps, delta) == accountant.get_epsilon(delta)
  accountant = pld.PLDAccountant(neighboring_relation=ADD_REMOVE,
                                 value_discretization_interval=dp_sgd.PLD_DISCRETIZATION)
  accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
  assert dp_sgd.epsilon_pld(q, sigma, steps, delta) == accountant.get_epsilon(delta)
  assert dp_sgd.epsilon(q, 0.0, steps, delta) == float('inf')
  assert dp_sgd.epsilon(q, sigma, 0, delta) == 0.0


def test_target_epsilon_is_met_and_an_unmeetable_one_refused():
  # q = 1 keeps the bisection's ~15 accountant calls cheap (the subsampled Gaussian's RDP costs
  # ~0.3 s a call on 2 cores); the search is the same.
  q, steps, delta, target = 1.0, 40, 1e-5, 4.0
  sigma = dp_sgd.noise_for_epsilon(target, q, steps, delta)
  assert dp_sgd.epsilon(q, sigma, steps, delta) <= target
  assert dp_sgd.epsilon(q, sigma * 0.998, steps, delta) > target
  with pytest.raises(checks.UsageError,
                     match=r'^config\.fedgpad\.dp_sgd\.target_epsilon=1e-05 cannot be met: '
                           r'40 steps at sampling rate 1 .* noise multiplier 100;[^\n]*$'):
    dp_sgd.noise_for_epsilon(1e-5, q, steps, delta, 'fedgpad.dp_sgd.target_epsilon')
