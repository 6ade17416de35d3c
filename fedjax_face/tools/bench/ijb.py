"""Section `ijb`: what an IJB evaluation (`eval/recognition/ijb.py`) costs on this machine.

  host    loose crops (rendered faces, JPEG files) read, decoded and aligned by their five
          landmarks as the evaluator loads them (`ijb.aligned_chunks`), images/s in this process
          and on one worker process per usable CPU (after the first chunk: the workers' start is
          reported apart);
  embed   the backbone (`bench.ijb.model`, IResNet-50 by default) in eval mode on aligned
          `image_size` crops, images/s at `batch_size` (a flip-test image costs two);
  pairs   template pair scores and the ROC with TAR at every FAR over `num_pairs` random pairs of
          `templates` random unit templates.

From these, the time one IJB-C evaluation (469,375 images, 15.6 M pairs) takes here: the images
at the slower of host and embedding, the pairs scaled from `num_pairs`.
"""

import os
import tempfile
import time

import jax
import ml_collections
import numpy as np

from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.core import arrays
from fedjax_face.core.policy import usable_cpus
from fedjax_face.data import preprocess
from fedjax_face.data.formats import ijb as ijb_format
from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import identities, nuisance, render
from fedjax_face.eval.recognition import ijb
from fedjax_face.tools.bench.common import per_second
from fedjax_face.tools.timing import measure

IJBC_IMAGES, IJBC_PAIRS = 469_375, 15_600_000   # docs/references.md, ijb-protocol


def _crop_files(directory: str, num: int, distinct: int, size: int, seed: int
                ) -> ijb_format.Protocol:
  """`num` loose-crop JPEG files under `directory`/loose_crop (`distinct` rendered faces, each
  written num / distinct times) and a protocol naming them with their landmarks."""
  rng = np.random.default_rng(seed)
  ip = identities.sample_identities(rng, distinct)
  nz = nuisance.sample_nuisance(rng, distinct, 'cfp_frontal', 1.0)
  nz['yaw'][:] = nz['pitch'][:] = 0.0
  encoded = [recordio.encode_image(image, 'jpeg') for image in render.render_faces(ip, nz, size)]
  os.makedirs(os.path.join(directory, 'loose_crop'))
  names = np.asarray([f'{i}.jpg' for i in range(num)])
  for i, name in enumerate(names):
    with open(os.path.join(directory, 'loose_crop', name), 'wb') as f:
      f.write(encoded[i % distinct])
  landmarks = render.face_landmarks(ip, nz, size)[np.arange(num) % distinct]
  none = np.zeros(0, np.int64)
  return ijb_format.Protocol(directory, names, none, none, landmarks, none, none, none, {}, None)


def _host_rate(protocol: ijb_format.Protocol, size: int, chunk: int, workers: int) -> dict:
  """Images/s loading the protocol's images, counted after the first chunk arrives (with
  workers, that chunk's wait includes their start: `first_chunk_s`)."""
  start = time.perf_counter()
  chunks = ijb.aligned_chunks(protocol, size, chunk=chunk, workers=workers)
  first = len(next(chunks))
  after_first = time.perf_counter()
  rest = sum(map(len, chunks))
  return {'images_per_s': per_second(rest, time.perf_counter() - after_first),
          'first_chunk_s': after_first - start, 'images': first + rest}


def bench_ijb(config, log=print) -> dict:
  """The three rates and the IJB-C estimate."""
  s, b = config.bench.ijb, config.bench
  with tempfile.TemporaryDirectory() as directory:
    protocol = _crop_files(directory, s.crops, s.distinct_crops, s.crop_size, config.seed)
    chunk = ijb.CHUNK_BATCHES * s.batch_size   # the evaluator's chunks, so as many tasks queue
    host = {w: _host_rate(protocol, s.image_size, chunk, w)
            for w in sorted({1, usable_cpus()})}
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
  host_rates = {w: h['images_per_s'] for w, h in host.items()}
  images_rate = min(max(host_rates.values()), embed_rate / 2)   # insightface's default flips
  out = {'model': f'{s.model} {s.image_size}x{s.image_size} d={s.dim}', 'batch_size': s.batch_size,
         'crops_per_chunk': chunk,
         'host_workers': {str(w): h for w, h in host.items()},
         'embed_images_per_s': embed_rate, 'embed': timed,
         'num_pairs': s.num_pairs, 'pairs_s': pairs_s,
         'ijbc_estimate_s': IJBC_IMAGES / images_rate + pairs_s * IJBC_PAIRS / s.num_pairs}
  log(f"ijb: host {', '.join(f'{r:,.0f}' for r in host_rates.values())} images/s (workers "
      f"{', '.join(map(str, host))}); {out['model']} {embed_rate:,.0f} images/s; "
      f"{s.num_pairs:,} pairs {pairs_s:.2f} s")
  return out


def markdown_lines(r: dict) -> list[str]:
  where = lambda w: 'this process' if w == '1' else f'{w} worker processes'
  host = [f"| read, decode, align a loose crop, {where(w)} | {h['images_per_s']:,.0f} images/s "
          f"(first chunk of {r['crops_per_chunk']}: {h['first_chunk_s']:.2f} s) |"
          for w, h in r['host_workers'].items()]
  return ['## (i) IJB evaluation', '| what | figure |', '| --- | ---: |', *host,
          f"| embed, {r['model']}, batch {r['batch_size']} | {r['embed_images_per_s']:,.0f} "
          'images/s (flip test: half) |',
          f"| score {r['num_pairs']:,} pairs + ROC | {r['pairs_s']:.2f} s |",
          f"| one IJB-C evaluation (469,375 images with flip, 15.6 M pairs) | "
          f"{r['ijbc_estimate_s'] / 3600:.1f} h |"]
