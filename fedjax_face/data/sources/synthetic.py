"""`data.source='synthetic'`: the embedded face benchmark, rendered from the seed in memory
(`data/synthetic/benchmark.py`): training identities (optionally in look-alike families), six
verification pair sets of held-out identities, and a 1:N gallery of other held-out identities
(`data/synthetic/identification_set.py`); for membership inference, more held-out identities
rendered exactly as the training images are (`held_out_identities`); for identity leakage, new
images of the training identities beside held-out distractors (`identity_probes`)."""

import ml_collections
import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import views
from fedjax_face.data.synthetic import benchmark, identification_set, identities, pairs
from fedjax_face.data.synthetic import nuisance as nuisance_lib, render, streams
from fedjax_face.io import artifacts, files

TASK = 'recognition'
PAIR_SET_NAMES = pairs.ALL_PAIR_SET_NAMES
PAIR_SET_TITLES = {'lfw': 'LFW-like', 'cfp_fp': 'CFP-FP-like', 'agedb_30': 'AgeDB-30-like',
                   'sllfw': 'SLLFW-like', 'cplfw': 'CPLFW-like', 'calfw': 'CALFW-like'}
# The fields that decide the training identities and their images (`init_from` must agree);
# the held-out sets' sizes do not.
DATA_FIELDS = ('num_identities', 'images_per_identity', 'images_per_identity_sigma',
               'difficulty', 'lookalike_family_size', 'lookalike_spread')


def config_section() -> ml_collections.ConfigDict:
  """`config.data.synthetic`: the benchmark's sizes (the defaults run in a minute on 2 cores)."""
  c = ml_collections.ConfigDict()
  c.num_identities = 360          # training identities (CASIA-WebFace has ~10,575)
  c.images_per_identity = 40
  c.images_per_identity_sigma = 0.0   # > 0: lognormal images per identity
  c.num_test_identities = 300     # held out: the pair sets are open-set
  c.num_pairs = 6000              # per pair set, 10 folds
  c.difficulty = 1.0              # scales every nuisance
  c.lookalike_family_size = 1     # g: training identities in look-alike families of g
                                  # (1 = independent identities)
  c.lookalike_spread = identities.LOOKALIKE_SPREAD   # in (0, 1]: a member's distance from its
                                                     # family centre (training families, sllfw's)
  return c


def check_config(config) -> None:
  d, fl = config.data.synthetic, config.federated
  for name in ('num_identities', 'images_per_identity', 'num_test_identities', 'num_pairs'):
    checks.check_int(f'data.synthetic.{name}', d[name])
  checks.check_number('data.synthetic.images_per_identity_sigma', d.images_per_identity_sigma,
                      allow_zero=True)
  checks.check_number('data.synthetic.difficulty', d.difficulty, allow_zero=True)
  checks.check_int('data.synthetic.lookalike_family_size', d.lookalike_family_size)
  spread = d.lookalike_spread
  if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0 < spread <= 1:
    raise ValueError(f'config.data.synthetic.lookalike_spread={spread!r}; expected a number in '
                     '(0, 1] (1 = independent identities; 0 would make clones).')
  if d.images_per_identity < 2:
    raise ValueError('config.data.synthetic.images_per_identity must be at least 2 (pairs need '
                     'two images).')
  if d.num_pairs % (2 * 10):
    raise ValueError(f'config.data.synthetic.num_pairs={d.num_pairs}; expected a multiple of 20 '
                     '(10 folds, half genuine).')
  num_public = config.data.public_identities
  if num_public and num_public >= d.num_identities:
    raise ValueError(f'config.data.public_identities={num_public} of '
                     f'data.synthetic.num_identities={d.num_identities}; expected fewer, so that '
                     'clients hold some identities.')
  if num_public and d.lookalike_family_size > 1:
    raise ValueError('config.data.public_identities > 0 with data.synthetic.lookalike_family_size '
                     '> 1: look-alike families would straddle the public / private boundary; use '
                     'one or the other.')
  if d.lookalike_family_size > fl.num_clients and fl.partition != 'one_per_client':
    raise ValueError(f'config.data.synthetic.lookalike_family_size={d.lookalike_family_size} '
                     f'cannot be spread over federated.num_clients={fl.num_clients}: expected a '
                     'family size of at most the number of clients.')
  private = d.num_identities - num_public
  if fl.num_clients > private:
    raise ValueError(f'config.federated.num_clients={fl.num_clients} but there are only '
                     f'{private} client identities (data.synthetic.num_identities - '
                     'data.public_identities): every client needs one. Expected at most '
                     f'{private}.')
  if fl.partition == 'one_per_client' and fl.num_clients != private:
    raise ValueError(f"config.federated.partition='one_per_client' with "
                     f'federated.num_clients={fl.num_clients}: expected one client per client '
                     f'identity, {private}.')


def data_fields(config) -> tuple[str, ...]:
  del config
  return ('data.public_identities',) + tuple(f'data.synthetic.{f}' for f in DATA_FIELDS)


def load(config):
  """The training set (no pair set: the verification evaluator asks for those)."""
  d = config.data.synthetic
  return benchmark.make_benchmark(
      seed=config.seed, num_identities=d.num_identities,
      images_per_identity=d.images_per_identity, image_size=config.data.image_size,
      num_test_identities=d.num_test_identities, num_pairs=d.num_pairs,
      difficulty=d.difficulty, images_per_identity_sigma=d.images_per_identity_sigma,
      pair_sets=(), lookalike_family_size=d.lookalike_family_size,
      lookalike_spread=d.lookalike_spread)


def training_views(config, data, one_client: bool):
  return views.identity_views(config, data, one_client)


def describe(data) -> str:
  families = np.bincount(data.train_families).max() if data.train_families is not None else 1
  return (f'{len(data.train_images)} training images of {data.num_identities} identities'
          + (f' in look-alike families of {families}' if families > 1 else ''))


def pair_sets(config, data, names):
  """The named pair sets, rendered from the seed (each from its own streams: the same whichever
  others are asked for)."""
  del data
  d = config.data.synthetic
  rendered, _ = pairs.make_pair_sets(
      seed=config.seed, names=tuple(names), num_test_identities=d.num_test_identities,
      num_pairs=d.num_pairs, num_folds=10, image_size=config.data.image_size,
      difficulty=d.difficulty, lookalike_spread=d.lookalike_spread)
  return rendered


def pair_set_title(name: str) -> str:
  """'LFW-like': the benchmark's sets are analogues, not the real ones."""
  return PAIR_SET_TITLES.get(name, name)


def identification_gallery(config, section):
  """The 1:N gallery (enrolled + distractors) and probes of other held-out identities."""
  return identification_set.make_identification_set(
      config.seed, image_size=config.data.image_size, num_enrolled=section.num_enrolled,
      num_distractors=section.num_distractors, num_non_mated=section.num_non_mated,
      probes_per_identity=section.probes_per_identity, difficulty=config.data.synthetic.difficulty)


def held_out_identities(config, num_identities: int,
                        per_identity: int) -> tuple[np.ndarray, np.ndarray]:
  """(uint8 images `[num_identities * per_identity, H, W, 3]`, int32 identity 0.. of each,
  identity-major): identities no run trains on, drawn from the training identities' prior (in
  look-alike families of `data.synthetic.lookalike_family_size` when the training ones are) and
  rendered as the training images are (the 'train' nuisance profile at `difficulty`), from
  streams of their own (`streams.HELD_OUT_*`): the membership evaluator's non-members, from the
  members' distribution but for their identity."""
  d = config.data.synthetic
  rng = streams.rng(config.seed, streams.HELD_OUT_IDS)
  if d.lookalike_family_size > 1:
    params, _ = identities.sample_families(rng, num_identities, d.lookalike_family_size,
                                           d.lookalike_spread)
  else:
    params = identities.sample_identities(rng, num_identities)
  labels = np.repeat(np.arange(num_identities, dtype=np.int32), per_identity)
  nuisance = nuisance_lib.sample_nuisance(streams.rng(config.seed, streams.HELD_OUT_NUISANCE),
                                          labels.shape[0], 'train', d.difficulty)
  images = render.render_faces(identities.take(params, labels), nuisance, config.data.image_size)
  return images, labels


def identity_probes(config, data, identity_ids, per_identity: int, num_distractors: int):
  """`(images, labels)`: `per_identity` NEW images of each training identity of `identity_ids`
  (rendered from `data.train_identity_params` with fresh 'lfw'-profile nuisance, never a training
  image), then `per_identity` images of each of `num_distractors` held-out identities. Labels:
  the training identity, or `data.num_identities + j` for distractor j. Both on streams of their
  own (`streams.IDENTITY_PROBES`, `PROBE_DISTRACTORS`): an identity's images depend on the seed,
  its id and `per_identity` alone, not on which other identities are asked for."""
  ids = np.asarray(identity_ids, np.int64)
  if ids.size and (ids.min() < 0 or ids.max() >= data.num_identities):
    raise ValueError(f'identity_probes: identities must be in 0..{data.num_identities - 1}, got '
                     f'{ids.min()}..{ids.max()}.')
  d, size = config.data.synthetic, config.data.image_size
  draws = nuisance_lib.sample_nuisance(streams.rng(config.seed, streams.IDENTITY_PROBES),
                                       data.num_identities * per_identity, 'lfw', d.difficulty)
  rows = (ids[:, None] * per_identity + np.arange(per_identity)).reshape(-1)
  labels = np.repeat(ids, per_identity)
  images = [render.render_faces(identities.take(data.train_identity_params, labels),
                                {k: v[rows] for k, v in draws.items()}, size)] if ids.size else []
  out_labels = [labels]
  if num_distractors:
    rng = streams.rng(config.seed, streams.PROBE_DISTRACTORS)
    params = identities.sample_identities(rng, num_distractors)
    local = np.repeat(np.arange(num_distractors), per_identity)
    images.append(render.render_faces(
        identities.take(params, local),
        nuisance_lib.sample_nuisance(rng, local.size, 'lfw', d.difficulty), size))
    out_labels.append(data.num_identities + local)
  return np.concatenate(images), np.concatenate(out_labels).astype(np.int64)


def pictures(config, data, workdir: str) -> list[str]:
  """Writes samples.png (a grid of training faces) and, with look-alike families, lookalikes.png
  into `workdir`; returns their names."""
  del config
  written = ['samples.png']
  artifacts.write_image_grid(files.join(workdir, 'samples.png'),
                             data.train_images[::max(1, len(data.train_images) // 96)])
  if views.has_families(data.train_families):
    written.append('lookalikes.png')
    artifacts.write_family_grid(files.join(workdir, 'lookalikes.png'), data.train_images,
                                data.train_labels, data.train_families)
  return written
