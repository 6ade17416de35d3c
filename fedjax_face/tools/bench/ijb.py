"""Section `ijb`: what an IJB evaluation (`eval/recognition/ijb.py`) costs on this machine.

  host    loose crops (rendered faces, JPEG) read from memory, decoded and aligned by their five
          landmarks (`ijb.load_aligned`'s work), images/s on one thread and on the usable CPUs;
  embed   the backbone (`bench.ijb.model`, IResNet-50 by default) in eval mode on aligned
          `image_size` crops, images/s at `batch_size` (a flip-test image costs two);
  pairs   template pair scores and the ROC with TAR at every FAR over `num_pairs` random pairs of
          `templates` random unit templates.

From these, the time one IJB-C evaluation (469,375 images, 15.6 M pairs) takes here: the images
at the slower of host and embedding, the pairs scaled from `num_pairs`.
"""

import concurrent.futures
import time

import jax
import ml_collections
import numpy as np

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.core import arrays
from fedjax_face.core.policy import usable_cpus
from fedjax_face.data import align, preprocess
from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import faces
from fedjax_face.eval.recognition import ijb
from fedjax_face.tools.bench.common import per_second
from fedjax_face.tools.timing import measure

IJBC_IMAGES, IJBC_PAIRS = 469_375, 15_600_000   # REFERENCE_NOTES §10: 469,375 images, 15.6 M pairs


def _crops(num: int, size: int, seed: int) -> tuple[list[bytes], np.ndarray]:
  rng = np.random.default_rng(seed)
  ip = faces.sample_identities(rng, num)
  nz = faces.sample_nuisance(rng, num, 'cfp_frontal', 1.0)
  nz['yaw'][:] = nz['pitch'][:] = 0.0
  images = faces.render_faces(ip, nz, size)
  return ([recordio.encode_image(image, 'jpeg') for image in images],
          faces.face_landmarks(ip, nz, size))


def _host_rate(encoded: list[bytes], landmarks: np.ndarray, size: int, threads: int) -> float:
  work = lambda i: align.align_face(recordio.decode_image(encoded[i]), landmarks[i], size)
  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(threads) as pool:
    list(pool.map(work, range(len(encoded))))
  return len(encoded) / (time.perf_counter() - start)


def bench_ijb(config, log=print) -> dict:
  """The three rates and the IJB-C estimate."""
  s, b = config.bench.ijb, config.bench
  encoded, landmarks = _crops(s.crops, s.crop_size, config.seed)
  host = {t: _host_rate(encoded, landmarks, s.image_size, t) for t in sorted({1, usable_cpus()})}
  model_config = ml_collections.ConfigDict(dict(
      name=s.model, embedding_dim=s.dim, dtype='float32', width=config.model.width))
  model = models.build_backbone(model_config)
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed),
                                   (s.image_size, s.image_size, 3))
  embed = jax.jit(lambda v, x: model.apply(v, x, train=False))
  rng = np.random.default_rng(config.seed)
  x = jax.device_put(preprocess.normalize(rng.integers(
      0, 256, (s.batch_size, s.image_size, s.image_size, 3), dtype=np.uint8)))
  timed = measure(embed, variables, x, warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  embed_rate = per_second(s.batch_size, timed['median_s'])
  feats = arrays.l2_normalize(rng.normal(size=(s.templates, s.dim)))
  ids = np.arange(s.templates)
  pairs = rng.integers(0, s.templates, (s.num_pairs, 2))
  genuine = rng.random(s.num_pairs) < 0.01
  start = time.perf_counter()
  scores = ijb.pair_scores(ids, feats, pairs)
  ijb.tar_at_far(scores, genuine)
  pairs_s = time.perf_counter() - start
  images_rate = min(max(host.values()), embed_rate / 2)   # insightface's default flips
  out = {'model': f'{s.model} {s.image_size}x{s.image_size} d={s.dim}', 'batch_size': s.batch_size,
         'host_images_per_s': {str(t): r for t, r in host.items()},
         'embed_images_per_s': embed_rate, 'embed': timed,
         'num_pairs': s.num_pairs, 'pairs_s': pairs_s,
         'ijbc_estimate_s': IJBC_IMAGES / images_rate + pairs_s * IJBC_PAIRS / s.num_pairs}
  log(f"ijb: host {', '.join(f'{r:,.0f}' for r in host.values())} images/s (threads "
      f"{', '.join(map(str, host))}); {out['model']} {embed_rate:,.0f} images/s; "
      f"{s.num_pairs:,} pairs {pairs_s:.2f} s")
  return out


def markdown_lines(r: dict) -> list[str]:
  host = ', '.join(f'{rate:,.0f} ({t} thread{"s" if t != "1" else ""})'
                   for t, rate in r['host_images_per_s'].items())
  return ['## (i) IJB evaluation', '| what | figure |', '| --- | ---: |',
          f'| read, decode, align a loose crop | {host} images/s |',
          f"| embed, {r['model']}, batch {r['batch_size']} | {r['embed_images_per_s']:,.0f} "
          'images/s (flip test: half) |',
          f"| score {r['num_pairs']:,} pairs + ROC | {r['pairs_s']:.2f} s |",
          f"| one IJB-C evaluation (469,375 images with flip, 15.6 M pairs) | "
          f"{r['ijbc_estimate_s'] / 3600:.1f} h |"]
