"""ONNX exports as PyTorch's exporters write them read as the IResNet they hold: the loaded Flax
model embeds as onnxruntime runs the file, for every graph shape in `onnx_fixtures/`.

The fixtures are one narrow arcface_torch IResNet of random weights (stages (1, 2), widths
(4, 8), stem 4, 6-d embeddings, 12 px images; every BatchNorm statistic and PReLU slope random),
written once by `onnx_fixtures/make_fixtures.py` with torch 2.13.0+cpu, onnx 1.23.2, onnxscript
0.7.2 and onnxsim 0.8.1 in a venv of their own; the tests need no torch. Node metadata (stack
traces) and doc strings were dropped from each file to keep it small; graphs and weights are as
exported.

Tolerance: onnxruntime and XLA both compute in float32 but sum each convolution in their own
order, and where the file folded a BatchNorm into a convolution or the fc the Flax model applies
it as an identity BatchNorm after the folded weights (arcface_torch.`_identity_bn`), which rounds
once more. Each of the network's ~12 layers so adds a few float32 ulps (6e-8 relative); the
embeddings here are of size ~0.5, and 1e-6 absolute (about 16 ulps at that size, measured: at
most 2e-7) allows that and nothing more: a BatchNorm lost or misread moves them by ~1e-2.
"""

import os
import shutil

import jax
import numpy as np
import pytest

from fedjax_face.core import checks
from fedjax_face.models import arcface_torch, onnx_graph
from fedjax_face.models.small_cnn import BN_EPSILON
from fedjax_face.run import setup as run_setup
# The narrow IResNet the fixtures were made from (make_fixtures.py), as test_arcface_torch builds
# it.
from tests.models.test_arcface_torch import DIM, SIZE, STAGES, _model, _template

onnx = pytest.importorskip('onnx')   # the onnx extra (in the test extra); onnxruntime per test

FIXTURES = os.path.join(os.path.dirname(__file__), 'onnx_fixtures')
TOLERANCE = 1e-6   # absolute, on embeddings of size ~0.5 (module docstring)

# file -> how make_fixtures.py made it (torch 2.13.0+cpu throughout) and its graph's shape.
MADE = {
    'torchscript_opset13_folded.onnx':
        'TorchScript exporter (dynamo=False), opset 13, do_constant_folding=True: each '
        'BatchNorm after a convolution folded into it, the PReLU slopes initializers',
    'torchscript_opset13_unfolded.onnx':
        'TorchScript exporter, opset 13, do_constant_folding=False: every BatchNorm its own '
        'node, each PReLU slope an Unsqueeze of the weight by axes from a Constant node',
    'dynamo_opset18_optimized.onnx':
        'dynamo exporter (dynamo=True, optimize=True), opset 18: BatchNorms after convolutions '
        'folded and the final features BatchNorm1d folded into the fc Gemm; flatten a Reshape',
    'dynamo_opset18_unoptimized.onnx':
        'dynamo exporter, optimize=False, do_constant_folding=False, opset 18: every BatchNorm '
        'its own node, zero convolution biases built by Shape/Expand/CastLike, slopes by '
        'Reshape, the flatten shape computed from the batch (Shape, Squeeze, Concat), Identity',
    'torch2onnx_dynamo.onnx':
        "arcface_torch's torch2onnx.py call (opset_version=11, input_names=['data'], "
        'do_constant_folding=False, batch dim_param set to None after) under torch 2.13, '
        'whose default is the dynamo exporter: no converter to opset 11, so opset 18, features '
        'folded into the Gemm',
    'torch2onnx_dynamo_onnxsim.onnx':
        'torch2onnx_dynamo.onnx through onnxsim.simplify (torch2onnx --simplify)',
    'torch2onnx_torchscript.onnx':
        "torch2onnx.py's call with dynamo=False (what older torch ran): opset 11, no folding, "
        'slopes by Unsqueeze with an axes attribute',
    'torch2onnx_torchscript_onnxsim.onnx':
        'torch2onnx_torchscript.onnx through onnxsim.simplify',
    'modelzoo_r50_shape.onnx':
        "insightface's model-zoo graph (w600k_r50.onnx): input 'input.1', TorchScript exporter, "
        'opset 11, folded: Conv/PRelu/BatchNormalization/Add blocks, Flatten, Gemm, then the '
        "embedding's BatchNormalization",
}
# The exports that keep every BatchNorm as its own node: they hold the state dict itself.
UNFOLDED = ('torchscript_opset13_unfolded.onnx', 'dynamo_opset18_unoptimized.onnx',
            'torch2onnx_torchscript.onnx')


def _path(name):
  return os.path.join(FIXTURES, name)


def test_every_fixture_is_described():
  assert sorted(MADE) == sorted(n for n in os.listdir(FIXTURES) if n.endswith('.onnx'))
  total = sum(os.path.getsize(_path(n)) for n in MADE)
  assert total < 300_000, total   # small, as committed fixtures should be


@pytest.mark.parametrize('name', sorted(MADE))
def test_an_export_embeds_as_onnxruntime_runs_it(name):
  ort = pytest.importorskip('onnxruntime')
  session = ort.InferenceSession(_path(name), providers=['CPUExecutionProvider'])
  images = np.random.default_rng(5).uniform(-1, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
  (expected,) = session.run(None, {session.get_inputs()[0].name: images.transpose(0, 3, 1, 2)})
  state = arcface_torch.state_dict_from_onnx(_path(name))
  assert arcface_torch.stage_sizes(state) == STAGES   # from the graph, not from a config
  got = _model().apply(arcface_torch.variables_from_state_dict(state, _template()), images,
                       train=False)
  assert np.abs(expected).max() > 0.1   # the scale TOLERANCE is stated for
  np.testing.assert_allclose(np.asarray(got), expected, rtol=0, atol=TOLERANCE)


def test_the_unfolded_exports_hold_the_same_state_dict():
  first, *others = [arcface_torch.state_dict_from_onnx(_path(n)) for n in UNFOLDED]
  assert first['features.weight'].tolist() == [1.0] * DIM
  for other in others:
    assert sorted(other) == sorted(first)
    for key, value in first.items():
      np.testing.assert_array_equal(other[key], value, err_msg=key)


def test_a_features_batchnorm_folded_into_the_gemm_is_read_as_an_identity():
  folded = arcface_torch.state_dict_from_onnx(_path('dynamo_opset18_optimized.onnx'))
  unfolded = arcface_torch.state_dict_from_onnx(_path('dynamo_opset18_unoptimized.onnx'))
  np.testing.assert_array_equal(folded['features.running_mean'], np.zeros(DIM))
  np.testing.assert_array_equal(folded['features.running_var'],
                                np.full(DIM, 1 - BN_EPSILON, np.float32))
  # The fc holds the BatchNorm: W / sqrt(var + eps), (b - mean) / sqrt(var + eps) + beta.
  inv = 1 / np.sqrt(unfolded['features.running_var'] + BN_EPSILON)
  np.testing.assert_allclose(folded['fc.weight'], unfolded['fc.weight'] * inv[:, None],
                             rtol=1e-6)
  np.testing.assert_allclose(folded['fc.bias'],
                             (unfolded['fc.bias'] - unfolded['features.running_mean']) * inv
                             + unfolded['features.bias'], rtol=1e-5, atol=1e-7)


def test_the_model_zoo_graph_says_which_iresnet_it_holds(tmp_path):
  # read_backbone (what config.init_from reads) takes the network from the file: stages (1, 2)
  # are no arcface_torch depth, which is said.
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r'modelzoo_r50_shape.onnx: blocks per stage \(1, 2\); expected an '
                           r'arcface_torch IResNet'):
    arcface_torch.read_backbone(_path('modelzoo_r50_shape.onnx'))
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r'modelzoo_r50_shape.onnx: blocks per stage \(1, 2\); expected '
                           r'\(2, 2, 2, 2\)'):
    arcface_torch.state_dict_from_onnx(_path('modelzoo_r50_shape.onnx'), (2, 2, 2, 2))


def test_a_truncated_file_is_a_one_line_usage_error_naming_it(tmp_path):
  data = open(_path('dynamo_opset18_optimized.onnx'), 'rb').read()
  path = tmp_path / 'cut.onnx'
  path.write_bytes(data[:len(data) // 2])
  with pytest.raises(onnx_graph.OnnxFormatError) as error:
    arcface_torch.read_backbone(str(path))
  message = str(error.value)
  assert isinstance(error.value, checks.UsageError)
  assert message.startswith(f'{path}: not a readable ONNX model (DecodeError: ')
  assert '\n' not in message
  path.write_bytes(b'')   # empty: protobuf reads an empty model
  with pytest.raises(onnx_graph.OnnxFormatError, match=f'{path}: an ONNX model with no nodes'):
    arcface_torch.read_backbone(str(path))
  with pytest.raises(onnx_graph.OnnxFormatError, match=r'missing.onnx: not a readable ONNX'):
    arcface_torch.read_backbone(str(tmp_path / 'missing.onnx'))


def test_a_graph_that_is_not_an_iresnet_names_the_node_met(tmp_path):
  model = onnx.load(_path('torchscript_opset13_folded.onnx'))
  prelu = next(n for n in model.graph.node if n.op_type == 'PRelu')
  prelu.op_type, prelu.name = 'Relu', 'the_relu'
  del prelu.input[1:]
  onnx.save(model, str(tmp_path / 'relu.onnx'))
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r"relu.onnx: layer prelu meets Relu node 'the_relu'; expected one "
                           r"PRelu node reading '/conv1/Conv_output_0'"):
    arcface_torch.state_dict_from_onnx(str(tmp_path / 'relu.onnx'))


def test_init_from_an_export_of_torch_2_13_starts_from_its_weights(tmp_path, monkeypatch):
  # The warm start's calls (experiment.validate and warm_start: is_backbone_file, read_backbone,
  # check_model, load_variables) on the dynamo export, read as the narrow network: DEPTHS
  # extended for this test only, as the fixture is no published depth.
  from fedjax_face import experiment, models
  from tests import config_files
  monkeypatch.setitem(arcface_torch.DEPTHS, STAGES, 'narrow')
  monkeypatch.setitem(models.BACKBONES, 'narrow', lambda embedding_dim, **kw: _model())
  path = str(tmp_path / 'backbone.onnx')
  shutil.copy(_path('torch2onnx_dynamo.onnx'), path)
  config = config_files.load_config('fedgc')
  config.model.name, config.model.embedding_dim, config.data.image_size = 'narrow', DIM, SIZE
  config.init_from = path
  assert arcface_torch.is_backbone_file(path)
  experiment.validate(config)
  got = run_setup.warm_start(config)['server']['model']
  expected = arcface_torch.variables_from_state_dict(
      arcface_torch.state_dict_from_onnx(path), _template())
  jax.tree.map(np.testing.assert_array_equal, got, expected)
