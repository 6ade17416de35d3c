"""Section `regularizer`: FedGC's server step vs the number of classes
(`tools/bench/regularizer.py`).
"""

from fedjax_face.algorithms import fedgc
from fedjax_face.tools.bench import regularizer as bench_regularizer


def bench_regularizer_section(config, log=print) -> list[dict]:
  """`bench_regularizer.bench_row` per class count, dense timed too, in the config's form."""
  r = config.bench.regularizer
  rows = []
  for num_classes in r.classes:
    rows.append(bench_regularizer.bench_row(
        int(num_classes), r.dim, r.block, classes_per_client=r.classes_per_client,
        repeats=r.repeats, time_max_classes=r.time_max_classes,
        dense_max_classes=r.dense_max_classes, time_dense=True,
        **fedgc.regularizer_kwargs(config)))
    log(f'regularizer R={num_classes} done')
  return rows
