"""The 'membership' evaluator (`config.evals.membership`): membership inference on the released
model (issue 59, part 3).

Threat model: a third party holding only the released model (the backbone a run evaluates; with
`class_embeddings` released, also the class matrix), and images of people it asks about. It never
sees a message. Each attack gives every image a member score (higher: more likely trained on);
the AUC of members against non-members (`pad.metrics.auc`: members positive, ties half) is 0.5
for a model that reveals nothing and 1 for one that gives every member away.

Which attack fits which method:

- Face recognition (every method of FedGC, FedFV, FedFR). A loss-threshold attack (Yeom et al.,
  CSF 2018: the loss of the true label) needs the label's class row, and a non-member identity
  has none: the classifier covers the training identities only. So the attacks here are
  embedding-distance attacks over the released backbone, scoring how tightly the model clusters an
  image with the attacker's other images of the same person:
    'identity_cosine'  mean cosine of the image's embedding to its identity's other images;
    'centroid_cosine'  cosine to the (normalised) centroid of its identity's other images;
    'class_cosine'     cosine to the nearest class embedding, only where the class embeddings are
                       released: `class_embeddings='auto'` takes them from the methods whose
                       server holds the whole class matrix as part of the model it would release
                       (`RELEASES_CLASS_EMBEDDINGS`: FedGC, FedFace, centralized); 'released' uses
                       any method's (FedAwS's and FedFV's server also holds the rows; FedPE's are
                       the clients' private W_k, a leak beyond this threat model), 'withheld'
                       none.
  Members: `samples` training images, `images_per_identity` of each of `samples /
  images_per_identity` training identities, images the clients trained on (`fed_view`'s client
  indices; FedFR's public set and held-out images are not drawn, and `data.centralized_on=
  'public'`, which trains on the public set alone, is refused). Non-members: as many images of
  as many identities no run trains on, drawn and rendered as the training images are (the source
  view `held_out_identities`: the synthetic source only; the pair sets and the 1:N gallery are
  rendered under other nuisance profiles, so they would measure a distribution shift). Every
  attack reports an image-level AUC and an identity-level one (an identity's mean score: "was this
  person in training?"); the identities are independent draws, so under no leakage the latter's
  standard deviation is the Mann-Whitney one, `null_sd(n, n) = sqrt((2n + 1) / (12 n^2))`,
  reported beside it ('identity_null_sd').
- Face anti-spoofing (FedPAD, FedGPAD and their baselines). The detector has a row for every label
  (live, spoof), so the loss-threshold attack fits: 'label_loss', the score is minus the binary
  cross-entropy of the frame's true label under `live_logits`. Members: frames of the data
  centers' training subjects; non-members: frames of the held-out subjects of the SAME data
  centers (`PadSets.validation`), never another domain, whose AUC would measure the domain shift
  (the 'pad' evaluator's 'domains' give its size). Both sides are drawn with the same live and
  spoof counts, since the loss differs by class. Frames of one subject are correlated, so the
  frame-level AUC's spread is not the Mann-Whitney one. `subject_level=True` adds the question
  asked of a person ("was this subject in training?"): a subject's score is the mean 'label_loss'
  over all its frames (live and attack: every subject of a domain has the same videos), members =
  every training subject of the data centers, non-members = every held-out subject of the same
  centers (the source view `pad_subjects`: the embedded benchmark; real lists name no subject),
  with the AUC over subjects and its standard deviation under no leakage (`null_sd`).
  `data.pad.center_attacks` is refused: a held-out subject would carry attacks its data center
  never trained on, an attack shift.

`samples=0` (the default) switches it off, so its section can sit in every config of both tasks.
"""

import math

import jax
import ml_collections
import numpy as np

from fedjax_face.core import arrays, checks
from fedjax_face.data import preprocess, sources, stores
from fedjax_face.eval import EvalOutput, Evaluator
from fedjax_face.eval.pad import metrics
from fedjax_face.eval.recognition import verification

CLASS_EMBEDDINGS = ('auto', 'released', 'withheld')
# Methods whose trained model holds the whole class matrix at the server, released with it by
# `class_embeddings='auto'`.
RELEASES_CLASS_EMBEDDINGS = ('centralized', 'fedgc', 'fedface')
RECOGNITION_ATTACKS = ('identity_cosine', 'centroid_cosine', 'class_cosine')
PAD_ATTACKS = ('label_loss',)
_SAMPLING_TAG = 0x3E3B   # the members' and non-members' draw: rng([seed, _SAMPLING_TAG])


def config_membership() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.samples = 0                  # member images (frames) scored, and as many non-members; 0 = off
  c.images_per_identity = 4      # recognition: images of each identity (>= 2: the others are
                                 # what an image is compared with)
  c.class_embeddings = 'auto'    # recognition: 'auto' (RELEASES_CLASS_EMBEDDINGS), 'released',
                                 # 'withheld'
  c.subject_level = False        # anti-spoofing: also the AUC over subjects (every training
                                 # subject against every held-out one of the same centers)
  return c


def check_membership(config, section) -> None:
  checks.check_int('evals.membership.samples', section.samples, allow_zero=True)
  checks.check_int('evals.membership.images_per_identity', section.images_per_identity)
  checks.check_choice('evals.membership.class_embeddings', section.class_embeddings,
                      CLASS_EMBEDDINGS)
  if section.images_per_identity < 2:
    raise ValueError(f'config.evals.membership.images_per_identity='
                     f'{section.images_per_identity}; expected at least 2 (an image is scored '
                     'against its identity\'s other images).')
  subject_level = section.get('subject_level', False)   # absent from older sections: off
  checks.check_bool('evals.membership.subject_level', subject_level)
  if not section.samples:
    return
  if subject_level and sources.task_of(config) != 'anti_spoofing':
    raise ValueError('config.evals.membership.subject_level=True with a recognition source; '
                     'expected False (recognition always reports the identity-level AUC).')
  if sources.task_of(config) == 'anti_spoofing':
    sources.require(config, 'pad_sets', 'config.evals.membership')
    if subject_level:
      sources.require(config, 'pad_subjects', 'config.evals.membership.subject_level=True')
    attacks = sources.section(config).get('center_attacks', ())
    if attacks:
      raise ValueError(f'config.evals.membership with data.{config.data.source}.center_attacks='
                       f'{tuple(attacks)}: the held-out subjects carry attacks their data center '
                       'never trained on (the AUC would measure that shift); expected ().')
    if section.samples < 2:
      raise ValueError(f'config.evals.membership.samples={section.samples}; expected 0 (off) or '
                       'at least 2 frames.')
    return
  sources.require(config, 'held_out_identities', 'config.evals.membership')
  if config.data.get('centralized_on', 'all') != 'all':
    raise ValueError(f'config.evals.membership with data.centralized_on='
                     f'{config.data.centralized_on!r}: a centralized run then trains on the '
                     "public identities alone, not on the clients' images the members are drawn "
                     "from; expected 'all'.")
  per = section.images_per_identity
  if section.samples % per or section.samples // per < 2:
    raise ValueError(f'config.evals.membership.samples={section.samples}; expected 0 (off) or a '
                     f'multiple of images_per_identity={per} covering at least 2 identities.')


# -- the attacks: pure functions of embeddings or logits ---------------------------------------

def identity_scores(embeddings: np.ndarray, identities: np.ndarray) -> dict[str, np.ndarray]:
  """'identity_cosine' and 'centroid_cosine' of every image (module docstring), float64 `[N]`.

  Args:
    embeddings: `[N, d]` (normalised here).
    identities: int `[N]`; every identity has at least 2 images.
  """
  unit = arrays.l2_normalize(np.asarray(embeddings, np.float64))
  identities = np.asarray(identities)
  names, inverse, counts = np.unique(identities, return_inverse=True, return_counts=True)
  if counts.min() < 2:
    raise ValueError(f'identity {names[np.argmin(counts)]} has one image; every identity needs '
                     'at least 2 (an image is scored against the others).')
  sums = np.zeros((len(names), unit.shape[1]))
  np.add.at(sums, inverse, unit)
  others = sums[inverse] - unit                   # the sum of the identity's other images
  dot = np.sum(unit * others, axis=1)
  return {'identity_cosine': dot / (counts[inverse] - 1),
          'centroid_cosine': dot / np.maximum(np.linalg.norm(others, axis=1), 1e-300)}


def class_scores(embeddings: np.ndarray, class_embeddings: np.ndarray) -> np.ndarray:
  """'class_cosine': each image's cosine to its nearest class embedding, float64 `[N]`."""
  unit = arrays.l2_normalize(np.asarray(embeddings, np.float64))
  rows = arrays.l2_normalize(np.asarray(class_embeddings, np.float64))
  return np.max(unit @ rows.T, axis=1)


def label_loss_scores(logits: np.ndarray, live: np.ndarray) -> np.ndarray:
  """'label_loss': minus the binary cross-entropy of the true label (live: 1) under the live
  logit, float64 `[N]`, in a form exact for any logit (no sigmoid rounded to 1 first)."""
  z = np.asarray(logits, np.float64)
  return -np.logaddexp(0.0, np.where(np.asarray(live, bool), -z, z))


def null_sd(num_members: int, num_non_members: int) -> float:
  """The standard deviation of the AUC of two independent samples of one continuous
  distribution (Mann-Whitney U / (m n)): sqrt((m + n + 1) / (12 m n))."""
  m, n = num_members, num_non_members
  return math.sqrt((m + n + 1) / (12 * m * n))


def _group_means(scores: np.ndarray, groups: np.ndarray) -> np.ndarray:
  _, inverse = np.unique(groups, return_inverse=True)
  return np.bincount(inverse, weights=scores) / np.bincount(inverse)


def attack_auc(member: np.ndarray, non_member: np.ndarray, member_groups=None,
               non_member_groups=None) -> dict[str, float]:
  """{'auc'} of member against non-member scores; with the groups (identities), also
  {'identity_auc', 'identity_null_sd'} of the groups' mean scores."""
  scores = np.concatenate([member, non_member])
  labels = np.r_[np.ones(len(member), np.int64), np.zeros(len(non_member), np.int64)]
  out = {'auc': metrics.auc(scores, labels)}
  if member_groups is not None:
    by_member = _group_means(member, member_groups)
    by_non_member = _group_means(non_member, non_member_groups)
    out['identity_auc'] = metrics.auc(
        np.concatenate([by_member, by_non_member]),
        np.r_[np.ones(len(by_member), np.int64), np.zeros(len(by_non_member), np.int64)])
    out['identity_null_sd'] = null_sd(len(by_member), len(by_non_member))
  return out


def recognition_membership(embed, members, non_members, class_embeddings, batch_size: int):
  """The recognition attacks' results: `members` and `non_members` are (uint8 images, int
  identity of each); `class_embeddings` `[C, d]` when released, else a string saying why not."""
  embedded = [verification.compute_embeddings(embed, images, batch_size=batch_size, flip=False)
              for images, _ in (members, non_members)]
  scores = [identity_scores(e, ids) for e, (_, ids) in zip(embedded, (members, non_members))]
  not_run = {}
  if isinstance(class_embeddings, str):
    not_run['class_cosine'] = class_embeddings
  else:
    for e, s in zip(embedded, scores):
      s['class_cosine'] = class_scores(e, class_embeddings)
  attacks = {name: attack_auc(scores[0][name], scores[1][name], members[1], non_members[1])
             for name in RECOGNITION_ATTACKS if name in scores[0]}
  return {'attacks': attacks, 'not_run': not_run,
          'num_members': len(members[1]), 'num_non_members': len(non_members[1]),
          'member_identities': int(np.unique(members[1]).size),
          'non_member_identities': int(np.unique(non_members[1]).size)}


_rgb_hsv = jax.jit(preprocess.rgb_hsv)


def _logits(live_logits, images: np.ndarray, batch_size: int) -> np.ndarray:
  """float64 `[N]` live logits, in batches of exactly `batch_size` (the last one zero-padded, so
  a jitted detector compiles once)."""
  out = []
  for start in range(0, len(images), batch_size):
    batch = images[start:start + batch_size]
    padded = np.concatenate([batch, np.zeros((batch_size - len(batch),) + batch.shape[1:],
                                              batch.dtype)])
    out.append(np.asarray(live_logits(_rgb_hsv(padded)), np.float64)[:len(batch)])
  return np.concatenate(out)


def pad_membership(live_logits, members, non_members, batch_size: int):
  """The anti-spoofing attack's results: `members` and `non_members` are (uint8 frames, bool
  live of each)."""
  scores = [label_loss_scores(_logits(live_logits, images, batch_size), live)
            for images, live in (members, non_members)]
  return {'attacks': {'label_loss': attack_auc(*scores)}, 'not_run': {},
          'num_members': len(members[1]), 'num_non_members': len(non_members[1]),
          'num_live': int(np.sum(members[1]))}


def pad_subject_membership(live_logits, members, non_members, batch_size: int) -> dict:
  """'label_loss' over subjects: `members` and `non_members` are (uint8 frames, bool live, int
  subject of each), every frame of each subject; a subject's score is its frames' mean score.
  {'auc', 'null_sd', 'member_subjects', 'non_member_subjects', 'member_frames',
  'non_member_frames'}."""
  scores = [label_loss_scores(_logits(live_logits, images, batch_size), live)
            for images, live, _ in (members, non_members)]
  by_subject = [_group_means(score, subjects)
                for score, (_, _, subjects) in zip(scores, (members, non_members))]
  m, n = len(by_subject[0]), len(by_subject[1])
  auc = metrics.auc(np.concatenate(by_subject),
                    np.r_[np.ones(m, np.int64), np.zeros(n, np.int64)])
  return {'auc': auc, 'null_sd': null_sd(m, n), 'member_subjects': m, 'non_member_subjects': n,
          'member_frames': len(members[1]), 'non_member_frames': len(non_members[1])}


# -- drawing the members and non-members --------------------------------------------------------

def _images(store, indices: np.ndarray) -> np.ndarray:
  images, ok = stores.take(store, indices)
  if not ok.all():
    raise ValueError(f'evals.membership: {int((~ok).sum())} member images could not be read.')
  return images


def recognition_sets(config, section, setup, rng):
  """((member images, identities), (non-member images, identities)), as the module docstring
  says."""
  fed, per = setup.fed_view, section.images_per_identity
  count = section.samples // per
  index = np.concatenate([np.asarray(i) for i in fed.client_indices])
  identity = np.concatenate([np.asarray(t)[np.asarray(l)] for t, l in
                             zip(fed.identity_table, fed.client_local_labels)])
  names, counts = np.unique(identity, return_counts=True)
  eligible = names[counts >= per]
  if len(eligible) < count:
    raise ValueError(f'config.evals.membership.samples={section.samples}: {count} member '
                     f'identities of {per} images each; the clients hold {len(eligible)} with '
                     f'{per} or more images: expected at most {len(eligible) * per}.')
  chosen = np.sort(rng.choice(eligible, count, replace=False))
  picked = np.concatenate([np.sort(rng.choice(index[identity == i], per, replace=False))
                           for i in chosen])
  members = (_images(fed.images, picked), np.repeat(chosen, per))
  source = sources.get(config.data.source)
  return members, source.held_out_identities(config, count, per)


def pad_sets(config, section, setup, rng):
  """((member frames, live), (non-member frames, live)): the data centers' training frames and
  their held-out subjects' frames, the same number of each class on both sides."""
  data = setup.benchmark
  validation = sources.get(config.data.source).pad_sets(config, data).validation
  member_live = np.asarray(data.train_labels) % 2 == 1
  non_member_live = np.asarray(validation.live, bool)
  available = {c: min(np.sum(member_live == c), np.sum(non_member_live == c)) for c in (0, 1)}
  scale = min(1.0, section.samples / max(1, sum(available.values())))
  take = {c: int(available[c] * scale) for c in (0, 1)}
  if min(take.values()) < 1:
    raise ValueError(f'config.evals.membership.samples={section.samples} leaves a class empty '
                     f'(live / spoof frames on both sides: {available[1]} / {available[0]}); '
                     'expected more samples.')
  pick = lambda live: np.sort(np.concatenate([
      rng.choice(np.flatnonzero(live == c), take[c], replace=False) for c in (0, 1)]))
  members, non_members = pick(member_live), pick(non_member_live)
  return ((_images(data.train_images, members), member_live[members]),
          (np.asarray(validation.images)[non_members], non_member_live[non_members]))


def pad_subject_sets(config, setup):
  """((member frames, live, subject), (non-member frames, live, subject)): every training frame
  of the data centers and every frame of their held-out subjects (`pad_subjects`), subjects
  numbered so that the two sides share none."""
  data = setup.benchmark
  source = sources.get(config.data.source)
  validation = source.pad_sets(config, data).validation
  train_subject, validation_subject = source.pad_subjects(config, data)
  unknown = int(np.sum(train_subject < 0) + np.sum(validation_subject < 0))
  if unknown:
    raise ValueError(f'config.evals.membership.subject_level=True: {unknown} frames of '
                     f'data.source={config.data.source!r} name no subject; expected False.')
  member_live = np.asarray(data.train_labels) % 2 == 1
  return ((_images(data.train_images, np.arange(len(member_live))), member_live, train_subject),
          (np.asarray(validation.images), np.asarray(validation.live, bool), validation_subject))


def _released(config, section, inputs, fed) -> np.ndarray | str:
  """The class embeddings the attacker holds, or why there are none."""
  if section.class_embeddings == 'withheld':
    return "withheld (evals.membership.class_embeddings='withheld')"
  if section.class_embeddings == 'auto' and config.algorithm not in RELEASES_CLASS_EMBEDDINGS:
    return (f'{config.algorithm} releases no class embeddings (released by '
            f"{', '.join(RELEASES_CLASS_EMBEDDINGS)}; 'released' attacks any method's)")
  if inputs.class_embeddings is None:
    return f'{config.algorithm} keeps no class embeddings'
  rows = np.asarray(inputs.class_embeddings)
  if rows.shape[0] <= np.asarray(fed.identity_table).max():
    return (f'the class embeddings cover {rows.shape[0]} identities, not every client '
            'identity')
  return rows


def make_membership(config, section, setup) -> Evaluator | None:
  """Membership inference on the released model (module docstring); None when `samples` is 0."""
  if not section.samples:
    return None
  rng = np.random.default_rng([config.seed, _SAMPLING_TAG])
  batch = config.eval.batch_size
  task = sources.task_of(config)
  subjects = None
  if task == 'anti_spoofing':
    members, non_members = pad_sets(config, section, setup, rng)
    if section.get('subject_level', False):
      subjects = pad_subject_sets(config, setup)
  else:
    members, non_members = recognition_sets(config, section, setup, rng)

  def evaluate(inputs) -> EvalOutput:
    if task == 'anti_spoofing':
      res = pad_membership(inputs.live_logits, members, non_members, batch)
      res['non_members_from'] = "held-out subjects of the same data centers ('validation')"
      if subjects is not None:
        res['subject_level'] = {'label_loss': pad_subject_membership(inputs.live_logits,
                                                                     *subjects, batch)}
    else:
      res = recognition_membership(
          inputs.embed, members, non_members,
          _released(config, section, inputs, setup.fed_view), batch)
      res['non_members_from'] = 'held-out identities rendered as the training images'
    res['threat_model'] = 'a third party holding the released model'
    scalars = {f'{name}/{key}': value for name, attack in res['attacks'].items()
               for key, value in attack.items() if key.endswith('auc')}
    scalars.update({f'{name}/subject_auc': a['auc']
                    for name, a in res.get('subject_level', {}).items()})
    return EvalOutput(results=res, scalars=scalars, figures={}, arrays={},
                      markdown=markdown(res))

  return Evaluator('membership', evaluate)


def markdown(res: dict) -> list[str]:
  """The report's section: each attack's AUC, the counts, and the attacks not run and why."""
  identity = 'member_identities' in res
  counts = (f"{res['num_members']} member images of {res['member_identities']} identities, "
            f"{res['num_non_members']} non-member images of {res['non_member_identities']}"
            if identity else
            f"{res['num_members']} member frames ({res['num_live']} live), "
            f"{res['num_non_members']} non-member frames")
  lines = [f"Membership inference ({res['threat_model']}; {counts}; non-members: "
           f"{res['non_members_from']}). AUC 0.5: nothing revealed; 1: every member found.", '']
  if identity:
    lines += ['| attack | AUC (images) | AUC (identities) | its sd under no leakage |',
              '| --- | --- | --- | --- |']
    lines += [f"| {name} | {a['auc']:.4f} | {a['identity_auc']:.4f} | "
              f"{a['identity_null_sd']:.4f} |" for name, a in res['attacks'].items()]
  else:
    lines += ['| attack | AUC (frames) |', '| --- | --- |']
    lines += [f"| {name} | {a['auc']:.4f} |" for name, a in res['attacks'].items()]
  lines += [f'| {name} | not run: {why} |' + (' | |' if identity else '')
            for name, why in res['not_run'].items()]
  for name, a in res.get('subject_level', {}).items():
    lines += ['', f"Over subjects ({name}: a subject's mean over all its frames; "
              f"{a['member_subjects']} training subjects ({a['member_frames']} frames) against "
              f"{a['non_member_subjects']} held-out subjects ({a['non_member_frames']} frames)): "
              f"AUC {a['auc']:.4f}, its sd under no leakage {a['null_sd']:.4f}."]
  return lines + ['']
