"""A trained backbone exported in arcface_torch's layout (`python -m fedjax_face.export`,
models/onnx_export.py, `arcface_torch.state_dict_from_variables`, io/torch_state_dict's writer):

- Flax variables -> arcface_torch state dict -> Flax variables is bit for bit, the keys in
  arcface_torch's order; the .pth written reads back bit for bit (and with torch, when installed).
- The ONNX graph: onnxruntime's embeddings equal the Flax model's (tolerance below), the
  project's importer reads the graph back to the same state dict bit for bit, and the file is
  what MFR's checker asks (one input 'data' [None, 3, S, S] float32, one output, opset 11, IR 6).
- The command on a finished workdir the test writes (a checkpoint saved by the run's own
  Checkpointer, no training): both formats; each refusal is one line and exit status 2, before
  anything is written.

Tolerance, onnxruntime vs JAX: both compute in float32, each convolution summed in its own
order, so each of the narrow network's ~12 layers adds a few ulps. On the embeddings of
`_random_state_dict` (magnitudes up to ~20 over 20 seeds) the difference was at most 8e-7 of the
largest magnitude (about 7 float32 ulps); the test allows 4e-6 of it (about 32 ulps). One
BatchNorm's statistics lost (mean 0, variance 1; bn1, a block's bn2 or bn3, bn2, features: tried
one at a time) moves them by 8e-2 to 2e-1 of it.
"""

import json
import os

import jax
import numpy as np
import pytest

from fedjax_face import config_lib, export, models
from fedjax_face.io import checkpoint, torch_state_dict
from fedjax_face.models import arcface_torch, onnx_export
from tests import saved_checkpoints
from tests.models.test_arcface_torch import SIZE, _model, _random_state_dict, _template

TOLERANCE = 4e-6   # of the largest embedding magnitude (module docstring)
PROG = 'python -m fedjax_face.export'


@pytest.fixture(scope='module')
def narrow():
  """(state dict, Flax variables) of test_arcface_torch's narrow IResNet, every tensor random."""
  state_dict = _random_state_dict(0)
  return state_dict, arcface_torch.variables_from_state_dict(state_dict, _template())


def _without_counts(state_dict: dict) -> dict:
  return {k: v for k, v in state_dict.items() if not k.endswith('.num_batches_tracked')}


def assert_same(got: dict, want: dict):
  """Equal keys in equal order, each array bit for bit with its dtype."""
  assert list(got) == list(want)
  for key in want:
    assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
    assert np.array_equal(got[key], want[key]), key


def test_variables_to_state_dict_and_back_is_bit_for_bit(narrow):
  state_dict, variables = narrow
  exported = arcface_torch.state_dict_from_variables(variables)
  # The file's tensors, and arcface_torch's counters at 0 (state_dict_from_variables).
  counts = {k: np.array(0, np.int64) for k in state_dict if k.endswith('.num_batches_tracked')}
  assert_same(exported, {k: counts.get(k, v) for k, v in state_dict.items()})
  back = arcface_torch.variables_from_state_dict(exported, _template())
  for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(variables)):
    assert a.dtype == b.dtype and np.array_equal(a, b)
  # arcface_torch's module order: stem, blocks (a BatchNorm's five tensors together), head.
  assert list(exported)[:8] == [
      'conv1.weight', 'bn1.weight', 'bn1.bias', 'bn1.running_mean', 'bn1.running_var',
      'bn1.num_batches_tracked', 'prelu.weight', 'layer1.0.bn1.weight']
  assert list(exported)[-7:] == [
      'fc.weight', 'fc.bias', 'features.weight', 'features.bias', 'features.running_mean',
      'features.running_var', 'features.num_batches_tracked']
  assert exported['layer1.0.conv1.weight'].flags.c_contiguous


def test_pth_reads_back_bit_for_bit(narrow, tmp_path):
  exported = arcface_torch.state_dict_from_variables(narrow[1])
  path = tmp_path / 'backbone.pth'
  path.write_bytes(torch_state_dict.state_dict_bytes(exported))
  assert_same(torch_state_dict.read_state_dict(path), exported)


def test_pth_loads_in_torch(narrow, tmp_path):
  torch = pytest.importorskip('torch')
  exported = arcface_torch.state_dict_from_variables(narrow[1])
  path = tmp_path / 'backbone.pth'
  path.write_bytes(torch_state_dict.state_dict_bytes(exported))
  loaded = torch.load(path, weights_only=True)
  assert list(loaded) == list(exported)
  for key, value in exported.items():
    assert np.array_equal(loaded[key].numpy(), value) and loaded[key].numpy().dtype == value.dtype


@pytest.fixture(scope='module')
def narrow_onnx(narrow, tmp_path_factory):
  """The ONNX file of the narrow network."""
  pytest.importorskip('onnx')
  path = tmp_path_factory.mktemp('onnx') / 'backbone.onnx'
  model = onnx_export.onnx_model(arcface_torch.state_dict_from_variables(narrow[1]), SIZE)
  path.write_bytes(model.SerializeToString())
  return str(path)


def test_onnxruntime_embeds_as_the_flax_model(narrow, narrow_onnx):
  ort = pytest.importorskip('onnxruntime')
  session = ort.InferenceSession(narrow_onnx, providers=['CPUExecutionProvider'])
  images = np.random.default_rng(1).uniform(-1, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
  got = session.run(None, {'data': images.transpose(0, 3, 1, 2)})[0]
  want = np.asarray(_model().apply(narrow[1], images, train=False))
  assert got.dtype == np.float32 and got.shape == want.shape
  np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE * np.abs(want).max())


def test_onnx_imports_back_bit_for_bit(narrow, narrow_onnx):
  exported = _without_counts(arcface_torch.state_dict_from_variables(narrow[1]))
  assert_same(arcface_torch.state_dict_from_onnx(narrow_onnx), exported)


def test_onnx_file_is_what_mfr_takes(narrow_onnx):
  onnx = pytest.importorskip('onnx')
  model = onnx.load(narrow_onnx)
  onnx.checker.check_model(model)
  (given,), (out,) = model.graph.input, model.graph.output
  shape = lambda info: [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]
  assert (given.name, shape(given), given.type.tensor_type.elem_type) == (
      'data', ['None', 3, SIZE, SIZE], onnx.TensorProto.FLOAT)
  assert (out.name, shape(out)) == ('embedding', ['None', 6])
  assert [(o.domain, o.version) for o in model.opset_import] == [('', 11)]
  assert model.ir_version == 6
  # onnx_helper.py takes (x - 127.5) / 127.5 outside a graph with no Sub* / Mul* node first.
  assert not any(n.name.startswith(('Sub', 'Mul', '_minus', '_mul')) for n in model.graph.node)
  assert {t.data_type for t in model.graph.initializer} == {onnx.TensorProto.FLOAT}


# -- The command, on a finished workdir the test writes -----------------------------------------

def _write_config(workdir, model: dict, image_size: int = 112):
  """config.json of a one-round run: the recognition base config with `model` and `image_size`."""
  config = config_lib.base_config('recognition')
  config.num_rounds, config.data.image_size = 1, image_size
  config.model.update(model)
  (workdir / 'config.json').write_text(json.dumps(config.to_dict()))
  return config


def _write_run(workdir, model: dict):
  """A finished run's workdir as training leaves it: config.json (`_write_config`), the round-1
  checkpoint of {'server': {'model', 'W'}, 'round'} saved by the run's Checkpointer with its
  digests, and results.json. The variables are constants of the model's shapes: no training,
  nothing compiled."""
  config = _write_config(workdir, model)
  images = np.zeros((1, 112, 112, 3), np.float32)
  template = jax.eval_shape(lambda: models.build_backbone(config.model).init(
      jax.random.PRNGKey(0), images, train=False))
  leaves, treedef = jax.tree_util.tree_flatten(template)
  variables = jax.tree_util.tree_unflatten(
      treedef, [np.full(leaf.shape, 0.5 + i / 1000, np.float32) for i, leaf in enumerate(leaves)])
  saver = checkpoint.Checkpointer(str(workdir))
  saver.save(1, {'server': {'model': variables, 'W': np.zeros((2, 2), np.float32)},
                 'round': np.array(1, np.int32)})
  saver.close()
  (workdir / 'results.json').write_text('{}')
  return variables


@pytest.fixture(scope='module')
def r18_run(tmp_path_factory):
  """A finished iresnet18 run at 112 px (8-d embeddings: a small fc)."""
  workdir = tmp_path_factory.mktemp('r18_run')
  variables = _write_run(workdir, {'name': 'iresnet18', 'embedding_dim': 8})
  return workdir, variables


def test_the_command_writes_the_pth(r18_run, capsys):
  workdir, variables = r18_run
  assert export.run([PROG, f'--workdir={workdir}', '--format=pth']) == 0
  path = workdir / 'export' / 'backbone.pth'
  assert capsys.readouterr().out == f'{path}\n'
  assert_same(torch_state_dict.read_state_dict(path),
              arcface_torch.state_dict_from_variables(variables))


def test_the_command_writes_the_onnx(r18_run, capsys):
  pytest.importorskip('onnx')
  workdir, variables = r18_run
  out = workdir / 'r18.onnx'
  assert export.run([PROG, f'--workdir={workdir}', '--format=onnx', f'--out={out}']) == 0
  assert capsys.readouterr().out == f'{out}\n'
  state_dict, name, dim = arcface_torch.read_backbone(str(out))
  assert (name, dim) == ('iresnet18', 8)
  assert_same(state_dict, _without_counts(arcface_torch.state_dict_from_variables(variables)))


@pytest.mark.parametrize('case', ['format', 'no_workdir', 'no_checkpoint', 'unfinished',
                                  'step', 'small_cnn', 'image_size', 'exists', 'flag'])
def test_refusals_are_one_line_and_write_nothing(case, r18_run, tmp_path, capsys):
  workdir = r18_run[0]
  run = tmp_path / 'run'
  run.mkdir()
  args = [f'--workdir={workdir}', '--format=pth', f'--out={run}/out.pth']
  if case == 'format':
    args, want = [f'--workdir={workdir}', '--format=torchscript'], (
        "--format='torchscript'; expected one of onnx, pth.")
  elif case == 'no_workdir':
    args, want = [f'--workdir={run}/none', '--format=pth'], (
        f"--workdir={run}/none does not exist; expected a run's directory.")
  elif case == 'no_checkpoint':
    _write_config(run, {'name': 'iresnet18'})
    args, want = [f'--workdir={run}', '--format=pth'], (
        f'--workdir={run} holds no checkpoint ({run}/checkpoints); expected a run that saved '
        'one.')
  elif case == 'unfinished':
    (run / 'checkpoints').symlink_to(workdir / 'checkpoints')
    (run / 'checkpoint_digests').symlink_to(workdir / 'checkpoint_digests')
    _write_config(run, {'name': 'iresnet18', 'embedding_dim': 8})
    args, want = [f'--workdir={run}', '--format=pth'], (
        f'--workdir={run} is an unfinished run (it has no results.json); expected a finished '
        'run, or --step=<round> (rounds held: 1).')
  elif case == 'step':
    args, want = args + ['--step=3'], (
        f'--step=3, but --workdir={workdir} holds the checkpoints of rounds 1; expected one of '
        'them.')
  elif case == 'small_cnn':
    _write_config(run, {'name': 'small_cnn'})
    args, want = [f'--workdir={run}', '--format=onnx'], (
        f"--workdir={run} trained config.model.name='small_cnn', which has no arcface_torch "
        'layout; expected one of iresnet100, iresnet18, iresnet34, iresnet50 (other backbones '
        'are not exported).')
  elif case == 'image_size':
    _write_config(run, {'name': 'iresnet18'}, image_size=32)
    args, want = [f'--workdir={run}', '--format=pth'], (
        f'--workdir={run} trained iresnet18 on data.image_size=32; expected 112, '
        "arcface_torch's (its fc reads a 7x7 map of 112 px faces).")
  elif case == 'exists':
    taken = run / 'taken.onnx'
    taken.write_bytes(b'x')
    args, want = args + [f'--out={taken}'], (
        f'{taken} exists; expected a new file (nothing is overwritten): move it away, or name '
        'another with --out=<new file>.')
  else:
    args, want = args + ['--outfile=x'], None
  before = saved_checkpoints.workdir_files(workdir), saved_checkpoints.workdir_files(run)
  assert export.run([PROG, *args]) == export.USAGE_EXIT
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 1 and err[0].startswith(f'{PROG}: ')
  if want is not None:
    assert err[0] == f'{PROG}: {want}'
  else:   # absl's own message for an unknown flag, on the one line
    assert 'outfile' in err[0]
  assert (saved_checkpoints.workdir_files(workdir), saved_checkpoints.workdir_files(run)) == before


def test_a_checkpoint_that_does_not_verify_is_refused(r18_run, tmp_path, capsys):
  workdir = r18_run[0]
  run = tmp_path / 'run'
  run.mkdir()
  _write_config(run, {'name': 'iresnet18', 'embedding_dim': 8})
  (run / 'results.json').write_text('{}')
  (run / 'checkpoints').symlink_to(workdir / 'checkpoints')
  (run / 'checkpoint_digests').mkdir()
  digests = json.loads((workdir / 'checkpoint_digests' / '1.json').read_text())
  first = next(k for k in digests['arrays'] if 'conv1' in k)
  digests['arrays'][first]['sha256'] = '0' * 64
  (run / 'checkpoint_digests' / '1.json').write_text(json.dumps(digests))
  assert export.run([PROG, f'--workdir={run}', '--format=pth']) == export.USAGE_EXIT
  (line,) = capsys.readouterr().err.splitlines()
  assert line.startswith(f'{PROG}: --workdir={run}: checkpoint {run}/checkpoints/1 ')
  assert not os.path.exists(run / 'export')
