"""Section `eval`: backbone embeddings/s in eval mode and the 10-fold verification protocol's time.
"""

import functools

import jax
import numpy as np

from fedjax_face.algorithms import common
from fedjax_face.core import arrays
from fedjax_face.data import preprocess
from fedjax_face.eval.recognition import verification
from fedjax_face.tools.bench.common import per_second
from fedjax_face.tools.timing import measure


def bench_eval(config, model, log=print) -> dict:
  """Embeddings/s of the backbone in eval mode, and the verification protocol's time."""
  b, size = config.bench, config.data.image_size
  variables = common.init_backbone(model, jax.random.PRNGKey(config.seed), (size, size, 3))
  embed = jax.jit(lambda v, x: model.apply(v, x, train=False))
  rng = np.random.default_rng(config.seed)
  images = rng.integers(0, 256, size=(b.eval.batch_size, size, size, 3), dtype=np.uint8)
  x = jax.device_put(preprocess.normalize(images))
  timed = measure(embed, variables, x, warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  # The protocol is host numpy over pair distances: its time depends on the pair count only.
  num_pairs = b.eval.num_pairs
  embeddings = arrays.l2_normalize(
      rng.normal(size=(2 * num_pairs, config.model.embedding_dim)).astype(np.float32))
  issame = np.arange(num_pairs) % 2 == 0
  protocol = measure(functools.partial(verification.evaluate_pairs, num_folds=b.eval.num_folds),
                     embeddings, issame, warmup=b.warmup, repeats=b.repeats,
                     budget_s=b.max_timed_s)
  out = {'batch_size': b.eval.batch_size,
         'embeddings_per_s': per_second(b.eval.batch_size, timed['median_s']),
         'embed': timed,
         'verification': {'num_pairs': num_pairs, 'num_folds': b.eval.num_folds,
                          'seconds': protocol['median_s'], **protocol}}
  log(f"eval: {out['embeddings_per_s']:,.0f} embeddings/s; protocol on {num_pairs} pairs "
      f"{protocol['median_s']:.3f} s")
  return out
