r"""Command line: a model alone on a config's evaluators, no training.

    python -m fedjax_face.evaluate --config=configs/fedgc.py --workdir=/tmp/eval_r50 \
        --config.init_from=/models/ms1mv3_arcface_r50/backbone.pth \
        --config.model.name=iresnet50 --config.data.image_size=112 \
        --config.evals.ijb.root=/data/IJB_release/IJBC

`config.init_from` names the model: a finished run's workdir, or an arcface_torch backbone file
(`models/arcface_torch.py`). The flags, `--config.` overrides and exit statuses are those of
`fedjax_face.main`. results.json, report.md, config.json and the figures go to
`<workdir>/evaluations/<name>/` and nowhere else (`experiment.evaluate_model`), so `--workdir`
may be the evaluated run's own: its files stay as they were. `--name` (default: the model's file
or run folder name) tells evaluations of one model apart, e.g. on IJB-B and on IJB-C.
"""

import functools

from absl import app, flags

from fedjax_face import experiment, main
from fedjax_face.core import xla_flags

_NAME = flags.DEFINE_string('name', '', "The evaluation's folder under <workdir>/evaluations/ "
                            "(default: the model's file or run folder name).")


def evaluate_model(config, workdir: str) -> dict:
  return experiment.evaluate_model(config, workdir, name=_NAME.value)


if __name__ == '__main__':
  xla_flags.apply_cpu_defaults()   # before JAX starts its CPU backend
  app.run(functools.partial(main.main, action=evaluate_model), flags_parser=main.parse_flags)
