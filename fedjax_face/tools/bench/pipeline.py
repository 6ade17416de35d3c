r"""Measures the host input pipeline: RecordIO read + JPEG decode (+ augment) images/s.

    python -m fedjax_face.tools.bench.pipeline --num_images=2048 --image_size=112 --threads=1,2

Writes `num_images` synthetic faces as an insightface `train.rec` (JPEG, quality 95, like the
public sets) to a temporary directory, then times, for each thread count:

* `decode`: `DecodedImageStore.take` over shuffled batches (each image once): pread + PIL decode;
* `decode+augment`: read, decode and `pipeline.augment` (random flip, `(x / 255 - 0.5) / 0.5` to
  float32: the arcface_torch training transform done on the host), each thread taking a share of
  every batch;
* `rounds`: whole rounds through `federated.sample_round` and the `Prefetcher` (what the training
  loop consumes), with nothing training: the most the host can feed.
"""

import concurrent.futures
import os
import tempfile
import time

from absl import app, flags
import numpy as np

from fedjax_face.core import xla_flags
from fedjax_face.data import federated, partition, pipeline, stores
from fedjax_face.data.sources import files as source_files
from fedjax_face.data.formats import recordio
from fedjax_face.data.synthetic import benchmark



def define_flags():
  """The command's flags, defined only when it runs (importing the module defines none)."""
  flags.DEFINE_integer('num_images', 2048, 'images in the record file')
  flags.DEFINE_integer('image_size', 112, 'stored (and decoded) image size')
  flags.DEFINE_integer('quality', 95, 'JPEG quality')
  flags.DEFINE_list('threads', ['1', '2'], 'decode thread counts to time')
  flags.DEFINE_integer('batch', 512, 'images per take() call')
  flags.DEFINE_integer('epochs', 2, 'passes over the images per measurement')


def _rate(fn, num_images: int) -> str:
  """Wall-clock images/s, and CPU ms per image (all threads; what a busy shared machine skews
  least)."""
  t0, c0 = time.perf_counter(), time.process_time()
  fn()
  wall, cpu = time.perf_counter() - t0, time.process_time() - c0
  return f'{num_images / wall:,.0f} img/s ({1e3 * cpu / num_images:.2f} CPU ms/img)'


def main(argv):
  del argv
  n, size = flags.FLAGS.num_images, flags.FLAGS.image_size
  per_id = 32
  t0 = time.perf_counter()
  bench = benchmark.make_benchmark(seed=0, num_identities=max(1, n // per_id),
                                   images_per_identity=per_id, image_size=size,
                                   num_test_identities=2, num_pairs=2, num_folds=1)
  print(f'load average {os.getloadavg()[0]:.1f}; rendered {len(bench.train_images)} '
        f'{size}x{size} faces in {time.perf_counter() - t0:.1f} s; {os.cpu_count()} CPUs visible, '
        f'{stores.usable_cpus()} usable')
  with tempfile.TemporaryDirectory() as root:
    recordio.write_insightface(root, bench.train_images, bench.train_labels,
                               image_format='jpeg', quality=flags.FLAGS.quality)
    rec_mb = os.path.getsize(os.path.join(root, 'train.rec')) / 2**20
    print(f'train.rec: {rec_mb:.1f} MB ({rec_mb * 2**20 / len(bench.train_labels) / 1024:.1f} '
          'KB per image)')
    for threads in (int(t) for t in flags.FLAGS.threads):
      store, labels = source_files.insightface_store(root, image_size=size, num_threads=threads)
      total = flags.FLAGS.epochs * len(store)
      rng = np.random.default_rng(0)
      batches = [b for _ in range(flags.FLAGS.epochs)
                 for b in np.array_split(rng.permutation(len(store)),
                                         max(1, len(store) // flags.FLAGS.batch))]
      store.take(batches[0])  # starts the pool
      decode = _rate(lambda: [store.take(b) for b in batches], total)
      # Decode and augment together in each worker (one host thread per part of a batch).
      single, _ = source_files.insightface_store(root, image_size=size, num_threads=1)
      rngs = [np.random.default_rng(i) for i in range(threads)]
      with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        augment = _rate(lambda: [list(pool.map(
            lambda part, g: pipeline.augment(single.take(part)[0], g),
            np.array_split(b, threads), rngs)) for b in batches], total)
      clients = partition.identity_exclusive(int(labels.max()) + 1, 8, 'balanced',
                                             np.random.default_rng(0))
      fed = federated.build(store, labels, clients)
      steps, batch = 4, 32
      num_rounds = max(1, total // (fed.num_clients * steps * batch))
      cohort = np.arange(fed.num_clients, dtype=np.int32)

      def consume():
        rounds = pipeline.Prefetcher(
            lambda r: federated.sample_round(fed, cohort, round_index=r, seed=0, steps=steps,
                                             batch_size=batch),
            range(num_rounds), depth=2)
        for r in range(num_rounds):
          rounds.get(r)
        rounds.close()

      fed_rate = _rate(consume, num_rounds * fed.num_clients * steps * batch)
      store.close()
      print(f'threads={threads}: decode {decode} | decode+augment {augment} | rounds through '
            f'the prefetcher {fed_rate}', flush=True)


if __name__ == '__main__':
  define_flags()
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(main)
