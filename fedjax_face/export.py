r"""Command line: a finished run's trained backbone as a file other tools read.

    python -m fedjax_face.export --workdir=/tmp/r50_run --format=onnx
    python -m fedjax_face.export --workdir=/tmp/r50_run --format=pth --out=/models/r50.pth

writes `<workdir>/export/backbone.onnx` (or `.pth`), or the new file `--out` names, in the layout
of insightface's arcface_torch (models/arcface_torch.py's table, read back by
`config.init_from=<file>`):
- `pth`: the state dict of arcface_torch's `iresnet.py` (its key names, shapes and order), in
  torch.save's zip format (io/torch_state_dict.py), loadable by `torch.load` and by
  `get_model(name).load_state_dict(..., strict=True)`;
- `onnx`: the graph arcface_torch's `torch2onnx.py` exports (models/onnx_export.py): input
  'data' float32 [N, 3, 112, 112] RGB, normalized (x / 255 - 0.5) / 0.5 outside the graph, as
  insightface's MFR challenge takes a model; output the 512-d (embedding_dim) embedding.

Which state: the run's final checkpoint, the one a finished run evaluated (results.json written,
its newest checkpoint at num_rounds), or, for a run the divergence guard stopped, its last
accepted checkpoint; `--step=<round>` names another checkpoint the run holds. The checkpoint is
verified against its digests as `evaluate` verifies it (io/checkpoint.read_verified). Only the
backbone is written (the server's `model`; class embeddings and heads are not arcface_torch's
backbone.pth either).

Refused in one line on stderr, exit status 2, before anything is written (as `fedjax_face.main`
and `evaluate`): a format other than onnx or pth; a workdir without config.json or checkpoints;
an unfinished run without --step, or a --step it does not hold; a checkpoint that does not
verify; a backbone that is not one of arcface_torch's IResNets (iresnet18/34/50/100: small_cnn,
gn_cnn and the PAD networks have no arcface_torch layout, and no ONNX writer is written for
them), or an IResNet trained on other than 112 px images (arcface_torch's fc reads a 7x7 map);
an output file that exists already (nothing is overwritten).
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from fedjax_face import models
from fedjax_face.core import blocks, checks
from fedjax_face.io import checkpoint, files, torch_state_dict, usage
from fedjax_face.models import arcface_torch, onnx_export, starts
from fedjax_face.run import resume

FORMATS = ('onnx', 'pth')
IMAGE_SIZE = 112   # arcface_torch's IResNet: fc reads 512 x 7 x 7 (iresnet.py, fc_scale = 7 * 7)
USAGE_EXIT = usage.USAGE_EXIT
EXPORT_DIR = 'export'   # <workdir>/export/backbone.<format> unless --out names the file

FLAGS = flags.FlagValues()   # its own: `fedjax_face.main`'s --workdir lives in absl's global set
flags.DEFINE_string('workdir', None, "The finished run's directory.", flag_values=FLAGS)
flags.DEFINE_string('format', None, f'One of {", ".join(FORMATS)}.', flag_values=FLAGS)
flags.DEFINE_string('out', '', 'The new file to write (default: <workdir>/export/backbone.'
                    '<format>).', flag_values=FLAGS)
flags.DEFINE_integer('step', 0, 'The round whose checkpoint to export (default: the final one).',
                     flag_values=FLAGS)


def output_path(workdir: str, fmt: str, out: str = '') -> str:
  """Where the export goes: `out`, or `<workdir>/export/backbone.<fmt>`; UsageError when the
  file is there already."""
  path = out or files.join(workdir, EXPORT_DIR, f'backbone.{fmt}')
  if files.exists(path):
    raise checks.UsageError(f'{path} exists; expected a new file (nothing is overwritten): '
                            'move it away, or name another with --out=<new file>.')
  return path


def run_config(workdir: str) -> dict:
  """The run's config.json, as it was saved."""
  path = files.join(workdir, 'config.json')
  if not files.exists(path):
    raise checks.UsageError(f'--workdir={workdir} has no config.json; expected the --workdir of '
                            'a run of fedjax_face.main.')
  try:
    return files.read_json(path)
  except ValueError as e:
    raise checks.UsageError(f'{path} is not valid JSON ({e}); expected the config.json the run '
                            'wrote.') from e


def model_section(config: dict, workdir: str) -> tuple[ml_collections.ConfigDict, int]:
  """(the run's `model` section, its `data.image_size`) when arcface_torch's layout holds it."""
  model = config.get('model', {})
  name, size = model.get('name'), config.get('data', {}).get('image_size')
  iresnets = sorted(set(arcface_torch.DEPTHS.values()))
  if name not in iresnets:
    raise checks.UsageError(
        f"--workdir={workdir} trained config.model.name={name!r}, which has no arcface_torch "
        f"layout; expected one of {', '.join(iresnets)} (other backbones are not exported).")
  if size != IMAGE_SIZE:
    raise checks.UsageError(
        f'--workdir={workdir} trained {name} on data.image_size={size}; expected '
        f"{IMAGE_SIZE}, arcface_torch's (its fc reads a 7x7 map of 112 px faces).")
  return ml_collections.ConfigDict(model), size


def export_round(workdir: str, num_rounds, step: int = 0) -> int:
  """The round to export (module docstring): `step` when the run holds it, else the final
  checkpoint of a finished run or the last accepted one of a stopped run."""
  directory = files.join(workdir, 'checkpoints')
  held = checkpoint.checkpoint_steps(directory) if files.exists(directory) else []
  if not held:
    raise checks.UsageError(f'--workdir={workdir} holds no checkpoint ({directory}); expected a '
                            'run that saved one.')
  rounds = ', '.join(map(str, held))
  if step:
    if step not in held:
      raise checks.UsageError(f'--step={step}, but --workdir={workdir} holds the checkpoints of '
                              f'rounds {rounds}; expected one of them.')
    return step
  results = files.exists(files.join(workdir, 'results.json'))
  if (results and held[-1] == num_rounds) or resume.read_stopped(workdir) is not None:
    return held[-1]
  why = (f'its newest checkpoint is round {held[-1]} of num_rounds={num_rounds}'
         if held[-1] != num_rounds else 'it has no results.json')
  raise checks.UsageError(f'--workdir={workdir} is an unfinished run ({why}); expected a '
                          f'finished run, or --step=<round> (rounds held: {rounds}).')


def backbone_variables(workdir: str, step: int, model_config, image_size: int) -> dict:
  """The backbone's variables in checkpoint `step`, verified, in the model's structure: the
  server's `model` (under the federated blocks, the method's), as every recognition method
  keeps it (its `eval_variables`)."""
  what = f'--workdir={workdir}'
  restored = blocks.method_start(checkpoint.read_verified(
      workdir, step, what, other='rerun the run, or name another round with --step'))
  server = restored.get('server', {})
  if not isinstance(server, dict) or 'model' not in server:
    held = sorted(server) if isinstance(server, dict) else type(server).__name__
    raise checks.UsageError(f'{what}: checkpoint {step} has no server model (its server holds '
                            f'{held}); expected a recognition run.')
  images = jnp.zeros((1, image_size, image_size, 3), jnp.float32)
  template = jax.eval_shape(lambda: models.build_backbone(model_config).init(
      jax.random.PRNGKey(0), images, train=False))
  variables = starts.matching_tree(f'{what} checkpoint {step} server.model', template,
                                   server['model'])
  return jax.tree.map(np.asarray, variables)


def backbone_bytes(variables, fmt: str) -> bytes:
  """The file's bytes: arcface_torch's state dict as a .pth, or its ONNX graph."""
  state_dict = arcface_torch.state_dict_from_variables(variables)
  if fmt == 'pth':
    return torch_state_dict.state_dict_bytes(state_dict)
  return onnx_export.onnx_model(state_dict, IMAGE_SIZE).SerializeToString()


def export(workdir: str, fmt: str, out: str = '', step: int = 0) -> str:
  """Writes the backbone of the run in `workdir` as `fmt` (module docstring); returns the path.
  Every refusal (checks.UsageError) comes before the file is written."""
  if fmt not in FORMATS:
    raise checks.UsageError(f'--format={fmt!r}; expected one of {", ".join(FORMATS)}.')
  if not files.exists(workdir):
    raise checks.UsageError(f'--workdir={workdir} does not exist; expected a run\'s directory.')
  path = output_path(workdir, fmt, out)
  config = run_config(workdir)
  model_config, image_size = model_section(config, workdir)
  step = export_round(workdir, config.get('num_rounds'), step)
  data = backbone_bytes(backbone_variables(workdir, step, model_config, image_size), fmt)
  files.write_bytes_atomic(path, data)
  return path


def run(argv: list[str]) -> int:
  """The command: its exit status, a refusal as one line on stderr (`fedjax_face.main`'s
  form, `<argv[0]>: <line>`); `--help` prints this module's docstring and the flags."""
  if any(arg in ('-h', '--help', '-help') for arg in argv[1:]):
    print(f'{__doc__}\n{FLAGS.get_help()}')
    return 0
  try:
    rest = FLAGS(argv)
    if len(rest) > 1:
      raise checks.UsageError(f'unexpected arguments {rest[1:]}; expected only flags, e.g. '
                              '--workdir=/tmp/run --format=onnx.')
    if FLAGS.workdir is None or FLAGS.format is None:
      raise checks.UsageError('--workdir and --format are required; expected e.g. '
                              f'--workdir=/tmp/run --format=onnx (formats: {", ".join(FORMATS)}).')
    path = export(FLAGS.workdir, FLAGS.format, FLAGS.out, FLAGS.step)
  except (checks.UsageError, flags.Error) as error:
    usage.print_refusal(str(error), argv[0])
    return USAGE_EXIT
  finally:
    FLAGS.unparse_flags()
  print(path)
  return 0


if __name__ == '__main__':
  sys.exit(run(sys.argv))
