"""Simulated secure aggregation: masks cancel bit for bit, the server sees only masked vectors,
the decoded mean is the plain one within the stated precision, and DP's noise comes from the
clients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.core import privacy, secure_aggregation as sa
from tests import engine_cases
from tests.core import test_privacy


@pytest.mark.parametrize('cohort, neighbors', [(5, 0), (6, 0), (6, 1), (9, 2)])
def test_pairwise_masks_cancel_bit_for_bit(cohort, neighbors):
  secret = jax.random.PRNGKey(7)
  values = jax.random.randint(jax.random.PRNGKey(1), (cohort, 11), 0, 2**31 - 1).astype(jnp.uint32)
  masked = jnp.stack([values[p] + sa.pair_mask(secret, jnp.int32(p), cohort, neighbors, 11)
                      for p in range(cohort)])
  np.testing.assert_array_equal(jnp.sum(masked, axis=0, dtype=jnp.uint32),
                                jnp.sum(values, axis=0, dtype=jnp.uint32))
  # Each masked vector differs from what it hides in (nearly) every coordinate.
  assert np.mean(np.asarray(masked) != np.asarray(values)) > 0.99


def test_pairs_every_pair_or_k_neighbours_each_side():
  assert sa.offsets(6, 0) == (1, 2, 3) and sa.offsets(7, 0) == (1, 2, 3)
  assert sa.offsets(9, 2) == (1, 2) and sa.offsets(3, 5) == (1,)
  # every unordered pair of 7 positions is masked at least once with offsets 1..3
  pairs = {frozenset((p, (p + j) % 7)) for p in range(7) for j in sa.offsets(7, 0)}
  assert len(pairs) == 7 * 6 // 2


def test_fixed_point_keeps_two_to_the_minus_f_and_counts_what_it_clamps():
  f = 24
  x = jnp.array([0.1234567, -3.5, 127.9, -128.0, 200.0, -1e9])
  ring, clamped = sa.encode(x, f)
  assert ring.dtype == jnp.uint32 and float(clamped) == 2.0
  back = np.asarray(sa.decode(ring, f))
  np.testing.assert_allclose(back[:4], np.asarray(x[:4]), atol=2.0**-(f + 1) + 1e-12,
                             rtol=2**-23)


# [vmap] in the full tier: the same masked round and its decoding on the other backend; [loop]
# keeps the property in the suite (the masks and their unmasking are the same functions on both,
# core/engine.py's _one_client and _unmask, and test_engine's test_backends_agree[vmap-0-*] keeps
# vmap's rounds equal to the loop's).
@pytest.mark.parametrize('backend', ['loop', pytest.param('vmap', marks=pytest.mark.full)])
def test_the_server_sees_ring_vectors_and_decodes_the_plain_mean(backend):
  cohorts = ((0, 1, 2, 3, 4),)
  spec = sa.Spec(fraction_bits=24, neighbors=0)
  plain, _ = engine_cases.run_rounds('fedgc', backend, cohorts=cohorts)
  secure, eng = engine_cases.run_rounds('fedgc', backend, cohorts=cohorts, secure=spec)
  # 5 clients' rounding (5·2^-25 per coordinate) and float32 rounding of the mean.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=5 * 2.0**-25, rtol=1e-5),
               secure.server, plain.server)
  _, _, update = eng.client_wire
  # The averaged model crosses masked, in the ring; FedGC's own class rows are written per
  # client, so they cross as they are.
  assert {x.dtype for x in jax.tree.leaves(update['model'])} == {jnp.dtype('uint32')}
  assert update['W'].dtype == jnp.float32


def test_with_dp_each_client_adds_its_share_of_the_sums_noise():
  m, sigma_s = 8, 0.5
  shares = [privacy.noise_share({'x': jnp.zeros(200_000)}, sigma_s * np.sqrt(1 / m),
                                jax.random.PRNGKey(i))['x'] for i in range(m)]
  total = np.sum(np.asarray(shares, np.float64), axis=0)
  assert np.std(total) == pytest.approx(sigma_s, rel=0.01)   # N(0, (σS)²) on the sum


def test_secure_aggregation_with_dp_moves_the_mean_by_the_clients_noise_alone():
  # A method with no training (test_privacy.mean_of_shifts): the clients' noise shares are the
  # engine's, whatever the method, and only the engine's steps compile.
  algorithm = test_privacy.mean_of_shifts(256)
  spec = privacy.DpSpec(clip_norm=0.5, noise_std=0.0, client_rows=(), class_rows='private',
                        noise_multiplier=0.0, secure=True)
  central = test_privacy.one_round(algorithm, 256, dp=spec).server['w']
  noisy = test_privacy.one_round(
      algorithm, 256, secure=sa.Spec(),
      dp=spec._replace(noise_std=0.5, noise_multiplier=1.0)).server['w']
  delta = noisy - central
  # The mean's noise: N(0, (σS / m)²) per coordinate, m = 5 (256 coordinates; the decoded mean's
  # fixed point adds at most 5·2^-25).
  assert np.std(delta) == pytest.approx(0.5 / 5, rel=0.25)
