"""Subject-level DP-SGD inside each data center, for FedPAD and FedGPAD (`config.fedgpad.dp_sgd`;
issue 59 part 4). The mechanism and its accountant: core/dp_sgd.py (Abadi et al. 2016, Alg. 1).

Why subjects, and why inside the data center. FedPAD and FedGPAD train 3-4 data centers, every
one in every round: client sampling amplifies nothing, and a client-level guarantee (core/
privacy.py) protects a whole data center, not the people in it. A subject has many frames (live
and attack videos, several frames each), so a frame-level guarantee says little about a person.
Here the unit is one subject of one data center with all of its frames.

  Guarantee   (ε, δ)-DP, add or remove one subject (all of their frames) of one data center; for
              everything the data center sends (each round's model parts) and keeps (FedGPAD's
              ES and Dec, its optimizer state), over every step of the run. Each data center's
              subjects are its own, so each center's guarantee is the same ε, independently.

How batches are drawn under DP-SGD (and only then). The balanced walk (`federated.
balanced_classes`: B/2 live and B/2 attack frames a step, each class walked through in a random
order, data/federated.py) is not a subject-level sample of any kind an accountant knows: a
subject's presence depends on the other subjects' frame counts and on the steps before. So under
DP-SGD the data source draws by subject (`data.pad.subject_frames` = k, data/federated.py
`_subject_order`): every step holds k frames of each of the data center's n training subjects,
k/2 live and k/2 attack (balanced, as the paper's batches are), and the step keeps each subject
with probability q = `sampling_rate`, independently (`dp_sgd.poisson_mask`). That is Poisson
sampling of subjects, exactly, which dp-accounting's PoissonSampledDpEvent models under
add-or-remove-one (RDP and PLD both). Which frames of a kept subject enter is drawn apart from the
data, so it changes nothing in the analysis. `federated.batch_size` is then n·k (every subject
has a slot; a subject left out has its slot masked), and the mean divides by q·n, the expected
number of subjects kept, with n = `data.pad.subjects - test_subjects` from the config (public).

Clip units (`clip_unit`):
  'subject' (default): each subject's gradient, of Eq. 8 (or Eq. 1/4-5 for FedPAD) computed on
    that subject's k frames of the step as their own batch, clipped to C. Sensitivity C.
  'frame': each frame's gradient clipped to C. A subject has k frames in a step, so its share of
    the sum is at most k·C: the noise is σ·k·C, and the subject-level ε is the same as the
    'subject' unit's at the same σ (group privacy through the sensitivity, exact for the Gaussian
    mechanism, rather than the generic (kε, k e^{(k-1)ε} δ) bound). FedGPAD's Diff (Eq. 7) of one
    frame is a constant (the outer product of two unit vectors has norm 1), so it trains nothing
    under this unit.

BatchNorm. A per-subject gradient under train-mode BatchNorm depends on the other subjects of
the batch through its statistics, and the running statistics it updates leave the data center
un-noised. So BatchNorm runs frozen (`batch_norm='frozen'`): at its running statistics, never
updated (at initialisation: mean 0, variance 1, so the scale and bias alone train). 'train' is
refused.

What ε does not cover: the training metrics each data center reports for the log (its losses)
are not noised, as under client-level DP; the noise follows config.seed's keys (results.json
says so, as core/privacy.py's ledger does). What the ledger assumes: every step of the run ran
at this config's σ. A run extended (a larger `num_rounds` on resume) with `target_epsilon`
solves σ again for the new total, and its first rounds ran at another σ; that history is not
recorded here (client-level DP's is, run/noise.py), so such an extension's ε is not accounted.
"""

import ml_collections

import jax
import jax.numpy as jnp

from fedjax_face.core import checks, dp_sgd

CLIP_UNITS = ('subject', 'frame')
BATCH_NORMS = ('frozen',)   # 'train' is refused (module docstring)
METHODS = ('fedpad', 'fedgpad')
UNIT = ('subject-level: add or remove one subject (all of their frames) of one data center; '
        "every round's update and the center's own state covered")


def config_section() -> ml_collections.ConfigDict:
  """`config.fedgpad.dp_sgd` (configs/pad/dp_sgd.py adds it, switched on; the other PAD configs
  have none, so their config.json and workdirs are as before)."""
  c = ml_collections.ConfigDict()
  c.enabled = False
  c.clip_unit = 'subject'       # 'subject' | 'frame' (module docstring)
  c.clip_norm = 1.0             # C
  c.noise_multiplier = 1.0      # σ: the noise on the clipped sum has std σ·C (σ·k·C per frame)
  c.target_epsilon = 0.0        # > 0: σ solved for this ε at target_delta (refused if unmeetable)
  c.target_delta = 1e-5
  c.sampling_rate = 0.5         # q: each subject kept in a step with this probability
  c.batch_norm = 'frozen'       # the only one offered: per-subject gradients need it
  c.chunk = 0                   # subjects whose gradients are vmapped at once (0: all); the
                                # same values, a smaller program (XLA CPU compiles a vmap over
                                # every subject of a conv net's gradient very slowly)
  return c


def enabled(config) -> bool:
  return bool(config.get('fedgpad', {}).get('dp_sgd', {}).get('enabled', False))


def train_subjects(config) -> int:
  """n: the training subjects of each data center (the embedded benchmark's), public."""
  return config.data.pad.subjects - config.data.pad.test_subjects


def steps(config) -> int:
  """T: the DP-SGD steps of the run (every data center trains every round)."""
  return config.num_rounds * config.federated.local_steps


def noise_multiplier(config) -> float:
  """σ: the config's, or the one `target_epsilon` needs (UsageError when none can)."""
  d = config.fedgpad.dp_sgd
  if not d.target_epsilon:
    return float(d.noise_multiplier)
  return dp_sgd.noise_for_epsilon(float(d.target_epsilon), float(d.sampling_rate), steps(config),
                                  float(d.target_delta), 'fedgpad.dp_sgd.target_epsilon')


def check_config(config) -> None:
  """The `fedgpad.dp_sgd` section and what it requires elsewhere; one line each."""
  d = config.fedgpad.dp_sgd
  checks.check_bool('fedgpad.dp_sgd.enabled', d.enabled)
  if not d.enabled:
    return
  if config.algorithm not in METHODS:
    raise ValueError(refusal_line(config))
  checks.check_choice('fedgpad.dp_sgd.clip_unit', d.clip_unit, CLIP_UNITS)
  if config.model.get('dtype', 'float32') == 'float16':
    # Loss scaling skips a step whose gradients overflow. One subject's gradient can decide that,
    # unclipped and unnoised, so the skip would release what Alg. 1's accountant does not count.
    raise checks.UsageError(
        "config.model.dtype='float16' with fedgpad.dp_sgd.enabled: a step skipped for one "
        "subject's overflowed gradient is outside the accountant's epsilon; expected 'float32' "
        "or 'bfloat16' (no loss scaling).")
  if d.batch_norm not in BATCH_NORMS:
    raise ValueError(f'config.fedgpad.dp_sgd.batch_norm={d.batch_norm!r}: per-subject gradients '
                     'are ill-defined under train-mode BatchNorm (its statistics mix subjects, '
                     'its running statistics leave un-noised); expected one of '
                     f'{BATCH_NORMS}.')
  checks.check_number('fedgpad.dp_sgd.clip_norm', d.clip_norm)
  checks.check_int('fedgpad.dp_sgd.chunk', d.chunk, allow_zero=True)
  checks.check_number('fedgpad.dp_sgd.noise_multiplier', d.noise_multiplier, allow_zero=True)
  checks.check_number('fedgpad.dp_sgd.target_epsilon', d.target_epsilon, allow_zero=True)
  if not 0.0 < d.target_delta < 1.0:
    raise ValueError(f'config.fedgpad.dp_sgd.target_delta={d.target_delta}; expected a '
                     'probability in (0, 1).')
  if not 0.0 < d.sampling_rate <= 1.0:
    raise ValueError(f'config.fedgpad.dp_sgd.sampling_rate={d.sampling_rate}; expected a '
                     'probability in (0, 1].')
  if config.data.source != 'pad':
    raise ValueError(f'config.data.source={config.data.source!r} with fedgpad.dp_sgd.enabled: '
                     "subject-level DP-SGD needs each frame's subject; expected 'pad' (the "
                     "lists of 'pad_lists' name none).")
  p = config.data.pad
  if p.pooled:
    raise ValueError('config.data.pad.pooled=True with fedgpad.dp_sgd.enabled: DP-SGD runs '
                     'inside each data center; expected pooled=False.')
  k = p.get('subject_frames', 0)
  if not k:
    raise ValueError('config.data.pad.subject_frames=0 with fedgpad.dp_sgd.enabled: DP-SGD '
                     'samples subjects, so batches are drawn by subject; expected an even '
                     'number of frames per subject, e.g. 2.')
  n = train_subjects(config)
  if config.federated.batch_size != n * k:
    raise ValueError(f'config.federated.batch_size={config.federated.batch_size} with '
                     f'fedgpad.dp_sgd.enabled: every step offers each of the {n} training '
                     f'subjects {k} frames (data.pad.subject_frames); expected {n * k}.')
  if config.federated.local_epochs:
    raise ValueError(f'config.federated.local_epochs={config.federated.local_epochs} with '
                     'fedgpad.dp_sgd.enabled: the accountant counts local_steps steps a round; '
                     'expected 0.')
  if config.dp.enabled:
    raise ValueError('config.dp.enabled=True with fedgpad.dp_sgd.enabled: one guarantee per '
                     'run (client-level or subject-level); expected dp.enabled=False.')
  if config.model.get('batch_norm_groups', 1) != 1:
    raise ValueError(f'config.model.batch_norm_groups={config.model.batch_norm_groups} with '
                     'fedgpad.dp_sgd.enabled: BatchNorm runs frozen; expected 1.')
  noise_multiplier(config)   # refuses an unmeetable target_epsilon here, before any file


def refusal_line(config) -> str:
  """Why `fedgpad.dp_sgd.enabled` does not apply to `config.algorithm` (algorithms/__init__.py)."""
  return (f'config.fedgpad.dp_sgd.enabled=True with {config.algorithm}: subject-level DP-SGD '
          f'trains inside the data centers of {METHODS}; expected one of them, or '
          'enabled=False.')


def spec(config) -> dict:
  """What a step needs: q, σ, C, the noise std, the subjects n, k and the denominator q·n."""
  d = config.fedgpad.dp_sgd
  k = config.data.pad.subject_frames
  n = train_subjects(config)
  sigma = noise_multiplier(config)
  sensitivity = d.clip_norm * (k if d.clip_unit == 'frame' else 1)
  return dict(unit=d.clip_unit, clip_norm=float(d.clip_norm), sampling_rate=float(d.sampling_rate),
              noise_multiplier=sigma, noise_std=sigma * sensitivity, subjects=n, frames=k,
              denominator=float(d.sampling_rate) * n, chunk=int(d.chunk))


def private_gradient(loss_fn, params, batch: dict, subjects: jax.Array, rng: jax.Array,
                     s: dict):
  """(g̃, each subject's loss terms `{name: [n]}`, the kept mask `[n]`): one step of Alg. 1 on a
  subject-drawn batch (`subjects` `[B]`: each frame's slot 0..n-1, k frames each).
  `loss_fn(params, frames) -> (loss, terms)` on any number of frames."""
  sample_rng, noise_rng = jax.random.split(rng)
  kept = dp_sgd.poisson_mask(sample_rng, s['sampling_rate'], s['subjects'])
  by_subject = dp_sgd.group_indices(subjects, s['subjects'])
  if s['unit'] == 'subject':
    grads, terms = dp_sgd.group_grads(loss_fn, params, batch, by_subject, s['chunk'])
    clipped, _ = dp_sgd.clip_each(grads, s['clip_norm'])
    total = dp_sgd.masked_sum(clipped, kept)
  else:   # 'frame': each frame its own group, kept with its subject
    frames = jnp.arange(subjects.shape[0]).reshape(-1, 1)
    grads, frame_terms = dp_sgd.group_grads(loss_fn, params, batch, frames, s['chunk'])
    clipped, _ = dp_sgd.clip_each(grads, s['clip_norm'])
    total = dp_sgd.masked_sum(clipped, kept[subjects])
    terms = jax.tree.map(lambda t: jnp.mean(t[by_subject], axis=1), frame_terms)
  noised = dp_sgd.noised_mean(total, s['noise_std'], s['denominator'], noise_rng)
  return noised, terms, kept


def step_terms(terms: dict, kept: jax.Array, frame_mask: jax.Array, subjects: jax.Array,
               num_subjects: int) -> dict:
  """The step's loss terms for the log: each term's mean over the kept subjects with frames."""
  has_frames = jax.ops.segment_max(frame_mask.astype(jnp.int32), subjects, num_subjects) > 0
  w = (kept & has_frames).astype(jnp.float32)
  return {k: jnp.sum(w * v) / jnp.maximum(w.sum(), 1.0) for k, v in terms.items()}


def ledger(config) -> dict:
  """results.json's 'dp_sgd': ε (RDP and PLD), δ, the unit and neighbouring relation in one line,
  the sampling and what it assumes."""
  d, s = config.fedgpad.dp_sgd, spec(config)
  t = steps(config)
  return {
      'guarantee': UNIT,
      'epsilon': dp_sgd.epsilon(s['sampling_rate'], s['noise_multiplier'], t, d.target_delta),
      'epsilon_pld': dp_sgd.epsilon_pld(s['sampling_rate'], s['noise_multiplier'], t,
                                        d.target_delta),
      'delta': float(d.target_delta),
      'accountant': 'RDP (dp-accounting), add-or-remove-one, Poisson-subsampled Gaussian',
      'accountant_pld': (f'PLD (dp-accounting), add-or-remove-one, pessimistic, discretization '
                         f'{dp_sgd.PLD_DISCRETIZATION:g}'),
      'steps': t, 'sampling_rate': s['sampling_rate'],
      'sampling': (f"Poisson: each of a data center's {s['subjects']} training subjects kept in "
                   f"a step with probability {s['sampling_rate']:g}, independently; "
                   f"{s['frames']} frames of each kept subject ({s['frames'] // 2} live, "
                   f"{s['frames'] // 2} attack); every center trains every round (no client "
                   'sampling, no amplification from it)'),
      'clip_unit': s['unit'], 'clip_norm': s['clip_norm'],
      'noise_multiplier': s['noise_multiplier'], 'noise_std': s['noise_std'],
      'target_epsilon': float(d.target_epsilon) or None,
      'mean_over': f"q n = {s['denominator']:g} (the expected number of subjects kept)",
      'batch_norm': d.batch_norm,
      'assumes': ('every step ran at noise_multiplier (a resumed run extended with '
                  'target_epsilon re-solves it; its earlier steps are not re-accounted)'),
      'not_covered': 'the training losses each data center logs (not noised)',
      'noise_seed': ('drawn from config.seed (recorded in config.json): epsilon holds only while '
                     'the seed is kept secret'),
  }
