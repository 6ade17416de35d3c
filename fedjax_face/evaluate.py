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

The attacks (docs/privacy.md) on a finished run, every config carrying their sections off:

    python -m fedjax_face.evaluate --config=configs/fedgc.py:runlocal --workdir=/tmp/gc \
        --config.init_from=/tmp/gc --config.evals.leakage.round=2 \
        --config.evals.inversion.targets=1 --config.evals.membership.samples=16

With the config the run trained with (its --config and overrides; the evaluators' sections, eval.*
and engine.* may differ), the run's own state is evaluated and its rounds replayed from its
config.json and checkpoints (`run/replay.py`, `attacked_run`): a round r needs the checkpoint of
round r-1 (`checkpoint_keep` rounds are kept; 2 by default: the last round can be replayed). A run
the divergence guard stopped is attacked at its last accepted checkpoint and its results say so
(`diverged`, `attacked_round`). A replay asked of a backbone file, of a round not held, or of a run
trained otherwise is refused in one line (exit status 2) before anything is written.
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
