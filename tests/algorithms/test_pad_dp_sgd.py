"""Subject-level DP-SGD for FedPAD / FedGPAD (algorithms/pad_dp_sgd.py): the subject draw
(data/federated.py) puts k/2 live and k/2 attack frames of one subject in each slot and masks what
is missing; a step's private gradient is, with no noise, the kept subjects' clipped gradients
(or, per frame, their frames') summed by a Python loop over q·n; the frame unit's noise is σ·k·C;
results.json's ledger is dp-accounting's ε for the config's steps, in one line of unit and
neighbours; every refusal is one line naming the field; the PAD configs without it draw and
train as before."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face import algorithms
from fedjax_face.algorithms import pad_dp_sgd
from fedjax_face.core import checks, dp_sgd
from fedjax_face.data import federated, sources
from tests.config_files import load_config

SUBJECTS, FRAMES = 3, 2


def _hand_fed():
  """Two data centers of 3 subjects, 5 frames each (2 attack, 3 live; center 1's subject 2 has no
  attack frame); each image's first pixel is its index."""
  n = 30
  images = np.zeros((n, 4, 4, 3), np.uint8)
  images[:, 0, 0, 0] = np.arange(n)
  subject = np.concatenate([np.repeat(np.arange(3), 5), 10 + np.repeat(np.arange(3), 5)])
  live = np.tile([0, 0, 1, 1, 1], 6).astype(bool)
  live[25:27] = True   # center 1, subject 12: live frames only
  labels = np.where(np.arange(n) < 15, 0, 2) + live
  fed = federated.build(images, labels, [np.array([0, 1]), np.array([2, 3])],
                        {'depth': np.zeros((n, 2, 2), np.float32), 'subject': subject})
  return dataclasses.replace(fed, subject_frames=FRAMES), subject, live


def test_subject_draw_puts_one_subject_per_slot_half_live_half_attack():
  fed, subject, live = _hand_fed()
  batch = (SUBJECTS + 1) * FRAMES   # one slot more than the centers have subjects
  out = federated.sample_round(fed, np.array([0, 1, 2]), round_index=3, seed=0, steps=2,
                               batch_size=batch, balanced=True)
  index = out['images'][..., 0, 0, 0].astype(int)   # [clients, steps, batch]
  slots = np.arange(batch) // FRAMES
  for row in range(2):
    np.testing.assert_array_equal(out['targets']['subject'][row], np.broadcast_to(slots,
                                                                                  (2, batch)))
    for t in range(2):
      for s in range(SUBJECTS):
        frames = index[row, t, slots == s]
        valid = out['mask'][row, t, slots == s]
        assert len(set(subject[frames[valid]])) == 1               # one subject per slot
        assert sorted(subject[frames[valid]])[0] == 10 * row + s   # the s-th, in order
        # attack first, then live: k/2 of each, masked where the subject has none
        np.testing.assert_array_equal(live[frames[valid]],
                                      [False, True][2 - valid.sum():])
      assert not out['mask'][row, t, slots == SUBJECTS].any()      # the spare slot
  # center 1's subject 12 has no attack frame: its attack position is masked
  assert out['mask'][1, :, 2 * FRAMES].tolist() == [False, False]
  assert not out['mask'][2].any()   # a padding client


def test_private_gradient_without_noise_is_the_loop_over_kept_subjects():
  rng = np.random.default_rng(1)
  params = {'w': jnp.asarray(rng.normal(size=(3,)), jnp.float32)}
  ids = jnp.asarray(np.repeat(np.arange(SUBJECTS), FRAMES)[[4, 0, 2, 5, 1, 3]], jnp.int32)
  batch = {'x': jnp.asarray(rng.normal(size=(len(ids), 3)), jnp.float32)}
  def loss(p, b):
    return jnp.mean(jnp.square(b['x'] @ p['w'] - 1.0)), {'cls': jnp.mean(b['x'][:, 0])}
  grad = jax.jit(jax.grad(loss, has_aux=True))
  key = jax.random.PRNGKey(0)
  kept = np.asarray(dp_sgd.poisson_mask(jax.random.split(key)[0], 0.5, SUBJECTS))
  assert 0 < kept.sum() < SUBJECTS   # this key keeps some subjects and drops others
  clip = 0.3
  for unit, groups in (('subject', [np.flatnonzero(np.asarray(ids) == s) for s in
                                    range(SUBJECTS)]),
                       ('frame', [[f] for f in range(len(ids))])):
    s = dict(unit=unit, clip_norm=clip, sampling_rate=0.5, noise_std=0.0, subjects=SUBJECTS,
             frames=FRAMES, denominator=0.5 * SUBJECTS, chunk=0)
    step = jax.jit(lambda p, b, i, k, s=s: pad_dp_sgd.private_gradient(loss, p, b, i, k, s))
    got, terms, got_kept = step(params, batch, ids, key)
    np.testing.assert_array_equal(got_kept, kept)
    expected = np.zeros(3, np.float32)
    for rows in groups:
      if not kept[int(ids[rows[0]])]:
        continue
      g = np.asarray(grad(params, {'x': batch['x'][np.asarray(rows)]})[0]['w'])
      expected += g * min(1.0, clip / np.linalg.norm(g))
    np.testing.assert_allclose(got['w'], expected / (0.5 * SUBJECTS), rtol=1e-5, atol=1e-6)
    assert terms['cls'].shape == (SUBJECTS,)


@pytest.fixture(scope='module')
def config():
  return load_config('pad/dp_sgd', 'method=fedpad,runlocal')


def test_frame_unit_noise_is_sigma_k_c_and_the_ledger_is_the_accountant(config):
  c = config.copy_and_resolve_references()
  c.fedgpad.dp_sgd.clip_unit = 'frame'
  c.fedgpad.dp_sgd.noise_multiplier = 1.5
  s = pad_dp_sgd.spec(c)
  assert s['noise_std'] == 1.5 * FRAMES * c.fedgpad.dp_sgd.clip_norm
  assert s['denominator'] == 0.5 * (c.data.pad.subjects - c.data.pad.test_subjects)
  ledger = pad_dp_sgd.ledger(c)
  steps = c.num_rounds * c.federated.local_steps
  assert ledger['epsilon'] == dp_sgd.epsilon(0.5, 1.5, steps, 1e-5)
  assert ledger['epsilon_pld'] == dp_sgd.epsilon_pld(0.5, 1.5, steps, 1e-5)
  assert ledger['guarantee'].startswith('subject-level: add or remove one subject')
  assert '\n' not in ledger['guarantee']


def _refusal(config, **fields):
  c = config.copy_and_resolve_references()
  for path, value in fields.items():
    *parents, leaf = path.split('__')
    node = c
    for p in parents:
      node = node[p]
    node[leaf] = value
  with pytest.raises(ValueError) as raised:
    sources.check_config(c)   # the data section's own checks, then the method's
    algorithms.check_config(c)
  message = str(raised.value)
  assert '\n' not in message
  return message


@pytest.mark.parametrize('fields,expected', [
    ({'fedgpad__dp_sgd__batch_norm': 'train'},
     r"config.fedgpad.dp_sgd.batch_norm='train': per-subject gradients are ill-defined under "
     'train-mode BatchNorm'),
    ({'fedgpad__dp_sgd__clip_unit': 'example'},
     "config.fedgpad.dp_sgd.clip_unit='example'; expected one of ('subject', 'frame')."),
    ({'fedgpad__dp_sgd__target_epsilon': 1e-4},
     'config.fedgpad.dp_sgd.target_epsilon=0.0001 cannot be met: 2 steps at sampling rate 0.5'),
    ({'algorithm': 'centralized'},
     'config.fedgpad.dp_sgd.enabled=True with centralized: subject-level DP-SGD trains inside '
     "the data centers of ('fedpad', 'fedgpad')"),
    ({'federated__batch_size': 8},
     'config.federated.batch_size=8 with fedgpad.dp_sgd.enabled: every step offers each of the 2 '
     'training subjects 2 frames (data.pad.subject_frames); expected 4.'),
    ({'data__pad__subject_frames': 0},
     'config.data.pad.subject_frames=0 with fedgpad.dp_sgd.enabled'),
    ({'data__pad__subject_frames': 3},
     'config.data.pad.subject_frames=3; expected 0 or an even number'),
    ({'dp__enabled': True}, 'config.dp.enabled=True with fedgpad.dp_sgd.enabled'),
])
def test_bad_input_is_named_in_one_line(config, fields, expected):
  assert _refusal(config, **fields).startswith(expected)


def test_pad_configs_without_it_draw_and_train_as_before():
  c = load_config('pad/fedpad', 'runlocal')
  assert 'dp_sgd' not in c.fedgpad and c.data.pad.subject_frames == 0
  assert algorithms.get('fedpad').variant_name(c) == 'fedpad'
  fed, _ = sources.training_views(c, sources.load(c), one_client=False)
  assert fed.subject_frames == 0 and set(fed.targets) == {'depth'}
  dp_config = load_config('pad/dp_sgd', 'method=fedgpad,runlocal')
  assert algorithms.get('fedgpad').variant_name(dp_config) == 'fedgpad+dp_sgd-subject'
