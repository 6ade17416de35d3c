r"""How alike the benchmark's look-alike families are, per spread: the calibration of
`data.synthetic.lookalike_spread`.

    python -m fedjax_face.proj.fedgc.lookalikes --out=docs/lookalike_families.png

For each spread it renders held-out look-alike families of two (as the `sllfw` pair set does) and
prints the mean pixel-space cosine (images centred per image) of three kinds of pairs: two images
of one identity, two members of one family, two random identities, once with the benchmark's
nuisance and once at difficulty 0 (canonical pose and light, so only the identity and the
background differ). A spread is calibrated when look-alikes sit clearly between strangers and the
same person: alike, still distinct. The picture shows families at each spread at difficulty 0,
one row per family (the spread in each tile's corner), two images per member.
"""

import numpy as np
from absl import app, flags

from fedjax_face.data.synthetic import benchmark, identities, nuisance as nuisance_lib, render
from fedjax_face.data import types
from fedjax_face.io import artifacts, files


def pixel_cosines(pair_set: types.PairSet) -> np.ndarray:
  """Cosine of each pair's two images, each image centred on its own mean."""
  x = pair_set.images.reshape(pair_set.images.shape[0], -1).astype(np.float64)
  x -= x.mean(axis=1, keepdims=True)
  x /= np.linalg.norm(x, axis=1, keepdims=True)
  return np.sum(x[0::2] * x[1::2], axis=1)


def calibration_row(seed: int, spread: float, difficulty: float, num_pairs: int) -> dict:
  """Mean pixel cosines of genuine, look-alike and random pairs at one spread."""
  bench = benchmark.make_benchmark(
      seed=seed, num_identities=2, images_per_identity=2, num_test_identities=300,
      num_pairs=num_pairs, pair_sets=('lfw', 'sllfw'), lookalike_spread=spread,
      difficulty=difficulty)
  lfw, sllfw = bench.pair_sets['lfw'], bench.pair_sets['sllfw']
  lfw_cos, sllfw_cos = pixel_cosines(lfw), pixel_cosines(sllfw)
  return {'same identity': float(lfw_cos[lfw.issame].mean()),
          'look-alikes': float(sllfw_cos[~sllfw.issame].mean()),
          'strangers': float(lfw_cos[~lfw.issame].mean())}


def family_picture(seed: int, spreads: list[float], path: str, families: int = 3,
                   members: int = 3, images: int = 2) -> None:
  """Families at each spread at difficulty 0: rows of `members` x `images` tiles."""
  rng = np.random.default_rng([seed, 0x1a1])
  tiles, labels = [], []
  for spread in spreads:
    params, family = identities.sample_families(rng, families * members, members, spread)
    index = np.repeat(np.arange(families * members), images)
    nuisance = nuisance_lib.sample_nuisance(rng, len(index), 'lfw', 0.0)
    tiles.append(render.render_faces({k: v[index] for k, v in params.items()}, nuisance, 32))
    labels += [f'{spread:g}'] * len(index)
  artifacts.write_image_grid(path, np.concatenate(tiles), rows=families * len(spreads),
                             cols=members * images, labels=labels)


def main(argv):
  del argv
  spreads = [float(s) for s in flags.FLAGS.spreads]
  if not spreads or not all(0 < s <= 1 for s in spreads):
    raise app.UsageError(f'--spreads={flags.FLAGS.spreads}; expected numbers in (0, 1].')
  lines = ['| spread | difficulty | same identity | look-alikes | strangers |',
           '| --- | --- | --- | --- | --- |']
  for difficulty in (1.0, 0.0):
    for spread in spreads:
      row = calibration_row(flags.FLAGS.seed, spread, difficulty, flags.FLAGS.pairs)
      lines.append(f'| {spread:g} | {difficulty:g} | {row["same identity"]:.3f} | '
                   f'{row["look-alikes"]:.3f} | {row["strangers"]:.3f} |')
  table = '\n'.join(['Mean pixel cosine of image pairs (images centred):', ''] + lines)
  print(table)
  if flags.FLAGS.out:
    family_picture(flags.FLAGS.seed, spreads, flags.FLAGS.out)
    files.write_text_atomic(flags.FLAGS.out.rsplit('.', 1)[0] + '.md', table + '\n')
    print(f'wrote {flags.FLAGS.out}')


def define_flags():
  flags.DEFINE_list('spreads', ['0.2', '0.35', '0.5', '1.0'], 'lookalike_spread values.')
  flags.DEFINE_integer('seed', 0, 'Benchmark seed.')
  flags.DEFINE_integer('pairs', 2000, 'Pairs per kind (a multiple of 20).')
  flags.DEFINE_string('out', '', 'PNG of families per spread (and a .md of the table beside it).')


if __name__ == '__main__':
  define_flags()
  app.run(main)
