"""Sections `leakage` (m) and `membership` (n): the cost of the identity-leakage and the
membership-inference evaluators (issue 59 parts 1 and 3; `eval/privacy/leakage.py`,
`eval/privacy/membership.py`) per attacked identity and per scored sample, at the sizes of
`bench.leakage.cells` and `bench.membership.samples` (the evaluators' defaults, their runlocal
sizes and the privacy tables' `proj/privacy/attacks.py` ATTACKS_*).

What each evaluator spends, and how it is taken here:
  embedding   the global model embeds the probes and the exact templates' training images
              (leakage, with the flip: two forward passes an image) or the members and
              non-members (membership, no flip). Measured as the bench model's rate through
              `verification.compute_embeddings` on `rate_images` random images, and charged at
              that rate to each cell's image count (the time is the rate's, whatever the pixels).
              PAD: the detector's live logits of the members' and non-members' frames, at
              the rate of `bench.membership.pad_model` (PadNet as configs/pad/ trains it).
  scoring     host numpy on the embeddings: leakage's `score` three times a kind (the kind, the
              exact ceiling, random chance), membership's identity, centroid and class cosines
              with their AUCs, PAD's label_loss and its AUC. Timed at each cell's size on random
              unit embeddings (logits).
  decoding    FedFV's curious client (`equivalent_members`, with `broadcast_shared` on top):
              the k members of each of `equivalents` broadcast rows among `classes` rows.
  not timed   the replay of the attacked rounds (leakage's server views): one round of the
              cohort's client programs per replayed round, section (a)'s round time.
"""

import functools
import time

import jax
import numpy as np

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.core import arrays
from fedjax_face.eval.privacy import leakage, membership
from fedjax_face.eval.recognition import verification
from fedjax_face.models import pad as pad_models
from fedjax_face.tools.bench.common import per_second


def _seconds(fn, *args) -> float:
  """One call's wall time (host numpy: no compilation to exclude)."""
  start = time.perf_counter()
  fn(*args)
  return time.perf_counter() - start


def _unit_rows(rng, n: int, dim: int) -> np.ndarray:
  return arrays.l2_normalize(rng.standard_normal((n, dim)))


@functools.lru_cache(maxsize=2)
def _embedder(model, size: int, seed: int):
  """The bench model's jitted eval-mode embedding at random weights, built once for both
  sections (each build is an init and a compilation)."""
  variables = common.init_backbone(model, jax.random.PRNGKey(seed), (size, size, 3))
  apply = jax.jit(lambda v, x: model.apply(v, x, train=False))
  return lambda x: apply(variables, x)


def embedding_rate(config, model, images: int, flip: bool) -> float:
  """Images/s of `verification.compute_embeddings` with the bench model (eval mode), after one
  untimed call that compiles it."""
  size = config.data.image_size
  embed = _embedder(model, size, config.seed)
  batch = config.bench.eval.batch_size
  pixels = np.random.default_rng(config.seed).integers(0, 256, (images, size, size, 3), np.uint8)
  run = lambda: verification.compute_embeddings(embed, pixels, batch_size=batch, flip=flip)
  run()
  return per_second(images, _seconds(run))


def leakage_cell(identities: int, distractors: int, probes: int, dim: int, seed: int) -> dict:
  """One kind's scoring at a size: `leakage.score` of the templates, of the exact ones and of
  random ones (what the evaluator runs per kind), on random unit embeddings."""
  rng = np.random.default_rng(seed)
  labels = np.arange(identities)
  probe_labels = np.repeat(np.arange(identities + distractors), probes)
  probe_emb = _unit_rows(rng, len(probe_labels), dim)
  templates = _unit_rows(rng, identities, dim)
  score = lambda: [leakage.score(t, labels, probe_emb, probe_labels)
                   for t in (templates, templates, rng.standard_normal(templates.shape))]
  return {'score_s': _seconds(score)}


def equivalents_decode(equivalents: int, classes: int, group_size: int, dim: int,
                       threshold: float, seed: int) -> float:
  """Seconds of FedFV's decode: `equivalent_members` of `equivalents` rows (Eq. 5, each the
  normalised mean of `group_size` of `classes` random unit rows), then `broadcast_shared`."""
  rng = np.random.default_rng(seed)
  rows = _unit_rows(rng, classes, dim)
  groups = [rng.choice(classes, group_size, replace=False) for _ in range(equivalents)]
  eq = arrays.l2_normalize(np.stack([rows[g].mean(axis=0) for g in groups]))
  start = time.perf_counter()
  members = leakage.equivalent_members(eq, rows, group_size)
  leakage.broadcast_shared(eq, members, threshold)
  return time.perf_counter() - start


def bench_leakage(config, model, log=print) -> dict:
  s = config.bench.leakage
  dim = config.model.embedding_dim
  rate = embedding_rate(config, model, s.rate_images, flip=True)
  rows = []
  for identities, distractors in s.cells:
    images = (identities + distractors) * s.probes_per_identity + identities * s.exact_images
    row = {'identities': identities, 'distractors': distractors, 'embedded_images': images,
           'embed_s': images / rate,
           **leakage_cell(identities, distractors, s.probes_per_identity, dim, config.seed)}
    row['per_identity_s'] = (row['embed_s'] + row['score_s']) / identities
    rows.append(row)
    log(f"leakage: {identities} identities + {distractors} distractors: embed "
        f"{row['embed_s']:.2f} s, one kind's scores {row['score_s']:.3f} s, "
        f"{row['per_identity_s'] * 1e3:.2f} ms / identity")
  decode_s = equivalents_decode(s.equivalents, s.classes, s.group_size, dim, s.share_threshold,
                                config.seed)
  log(f'leakage: FedFV decode of {s.equivalents} equivalents (k={s.group_size}) among '
      f'{s.classes} rows: {decode_s:.3f} s')
  return {'embeddings_per_s': rate, 'probes_per_identity': s.probes_per_identity,
          'exact_images': s.exact_images, 'rows': rows,
          'decode': {'equivalents': s.equivalents, 'classes': s.classes,
                     'group_size': s.group_size, 'seconds': decode_s},
          'not_timed': "replay: one round of the cohort's clients per replayed round "
                       "(section (a)'s round time)"}


def membership_cell(samples: int, images_per_identity: int, classes: int, dim: int,
                    seed: int) -> float:
  """Seconds of the recognition attacks' scoring of `samples` members and as many non-members:
  the identity and centroid cosines, the class cosine against `classes` rows, and each attack's
  image- and identity-level AUCs (`membership.recognition_membership` after its embedding)."""
  rng = np.random.default_rng(seed)
  ids = np.repeat(np.arange(samples // images_per_identity), images_per_identity)
  sides = [_unit_rows(rng, samples, dim) for _ in range(2)]
  rows = _unit_rows(rng, classes, dim)

  def attacks():
    scores = [membership.identity_scores(e, ids) for e in sides]
    for e, found in zip(sides, scores):
      found['class_cosine'] = membership.class_scores(e, rows)
    return [membership.attack_auc(scores[0][n], scores[1][n], ids, ids)
            for n in membership.RECOGNITION_ATTACKS]
  return _seconds(attacks)


def detector_rate(config, images: int) -> float:
  """Frames/s of the anti-spoofing attack's forward pass: `membership._logits` (RGB + HSV, the
  live logit in batches of `bench.eval.batch_size`) with the detector of
  `bench.membership.pad_model` at random weights, after one untimed call that compiles it."""
  spec = config.bench.membership.pad_model
  model = models.build_backbone(spec)
  size = spec.image_size
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed),
                                   (size, size, pad_models.PAD_CHANNELS))
  apply = jax.jit(lambda v, x: model.apply(v, x, train=False)['logit'])
  frames = np.random.default_rng(config.seed).integers(0, 256, (images, size, size, 3), np.uint8)
  run = lambda: membership._logits(lambda x: apply(variables, x), frames,   # pylint: disable=protected-access
                                   config.bench.eval.batch_size)
  run()
  return per_second(images, _seconds(run))


def pad_cell(frames: int, seed: int) -> float:
  """Seconds of the anti-spoofing attack's host part on `frames` frames a side: 'label_loss'
  from the live logits and its AUC."""
  rng = np.random.default_rng(seed)
  logits = [rng.standard_normal(frames) for _ in range(2)]
  live = rng.random(frames) < 0.5
  return _seconds(lambda: membership.attack_auc(
      *[membership.label_loss_scores(z, live) for z in logits]))


def bench_membership(config, model, log=print) -> dict:
  s = config.bench.membership
  dim = config.model.embedding_dim
  rate = embedding_rate(config, model, s.rate_images, flip=False)
  rows = []
  for samples in s.samples:
    row = {'samples': samples, 'embedded_images': 2 * samples, 'embed_s': 2 * samples / rate,
           'score_s': membership_cell(samples, s.images_per_identity, s.classes, dim,
                                      config.seed)}
    row['per_sample_s'] = (row['embed_s'] + row['score_s']) / samples
    rows.append(row)
    log(f"membership: {samples} members + as many non-members: embed {row['embed_s']:.2f} s, "
        f"scores {row['score_s']:.3f} s, {row['per_sample_s'] * 1e3:.3f} ms / sample")
  # No PAD rows asked (pad_frames=()): the detector is not built (its compilation is seconds).
  frames_rate = detector_rate(config, s.rate_images) if s.pad_frames else None
  pad = []
  for n in s.pad_frames:
    row = {'frames': n, 'logits_s': 2 * n / frames_rate, 'score_s': pad_cell(n, config.seed)}
    row['per_frame_s'] = (row['logits_s'] + row['score_s']) / n
    pad.append(row)
    log(f"membership (PAD): {n} frames a side: the detector {row['logits_s']:.2f} s, label_loss "
        f"and AUC {row['score_s']:.3f} s, {row['per_frame_s'] * 1e3:.3f} ms / frame")
  m = s.pad_model
  return {'embeddings_per_s': rate, 'images_per_identity': s.images_per_identity,
          'classes': s.classes, 'rows': rows, 'pad': pad, 'pad_frames_per_s': frames_rate,
          'pad_model': f'{m.name} w={m.width} {m.image_size}x{m.image_size}'}


def leakage_markdown_lines(r: dict) -> list[str]:
  lines = [f"## (m) Identity leakage: cost per attacked identity ({r['probes_per_identity']} "
           f"probes each, {r['exact_images']} exact-template images; embeddings at "
           f"{r['embeddings_per_s']:,.0f} images/s)",
           '| identities | distractors | images embedded | embed s | one kind\'s scores s | '
           'ms / identity |', '| ---: | ---: | ---: | ---: | ---: | ---: |']
  lines += [f"| {row['identities']} | {row['distractors']} | {row['embedded_images']} | "
            f"{row['embed_s']:.2f} | {row['score_s']:.3f} | {row['per_identity_s'] * 1e3:.2f} |"
            for row in r['rows']]
  d = r['decode']
  lines.append(f"FedFV's broadcast decoded ({d['equivalents']} equivalents of k="
               f"{d['group_size']} among {d['classes']} rows): {d['seconds']:.3f} s; not timed: "
               f"{r['not_timed']}")
  return lines


def membership_markdown_lines(r: dict) -> list[str]:
  lines = [f"## (n) Membership inference: cost per scored sample ({r['images_per_identity']} "
           f"images an identity, {r['classes']} class rows; embeddings at "
           f"{r['embeddings_per_s']:,.0f} images/s)",
           '| members | images embedded | embed s | scores s | ms / sample |',
           '| ---: | ---: | ---: | ---: | ---: |']
  lines += [f"| {row['samples']} | {row['embedded_images']} | {row['embed_s']:.2f} | "
            f"{row['score_s']:.3f} | {row['per_sample_s'] * 1e3:.3f} |" for row in r['rows']]
  lines += [f"PAD ({r['pad_model']} at {r['pad_frames_per_s']:,.0f} frames/s), {row['frames']} "
            f"frames a side: the detector {row['logits_s']:.2f} s, label_loss and its AUC "
            f"{row['score_s']:.3f} s, {row['per_frame_s'] * 1e3:.3f} ms / frame"
            for row in r['pad']]
  return lines
