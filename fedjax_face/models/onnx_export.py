"""An arcface_torch IResNet state dict as an ONNX graph, the file insightface's tools and its MFR
challenge take; `arcface_torch.state_dict_from_onnx` reads it back.

The graph is the one arcface_torch's `torch2onnx.py` gets from `torch.onnx.export` of the IResNet
in eval mode (insightface, recognition/arcface_torch/torch2onnx.py; the TorchScript exporter at
opset 11 writes the same operators, and an Identity for the dropout), written node by node with
`onnx.helper`, in torch's layout (`arcface_torch.py`'s table):

  input  'data'      float32 [None, 3, S, S]: RGB, NCHW, already normalized as arcface_torch
                     trains, (x / 255 - 0.5) / 0.5 (torch2onnx.py normalizes its sample outside
                     the graph; the batch dim_param is 'None', as it sets it)
  stem   Conv(conv1) -> BatchNormalization(bn1) -> PRelu(prelu)
  block  BatchNormalization(bn1) -> Conv(conv1, pad 1) -> BatchNormalization(bn2) -> PRelu ->
         Conv(conv2, stride s, pad 1) -> BatchNormalization(bn3); Add of it and the shortcut
         (Conv(downsample.0, 1x1, stride s) -> BatchNormalization(downsample.1), or the input)
  head   BatchNormalization(bn2) -> Flatten(axis 1) -> Gemm(fc, transB=1) ->
         BatchNormalization(features)
  output 'embedding' float32 [None, d], not normalized

Each weight is an initializer named by its state-dict key, each node by its module, so no node
is named Sub* or Mul*: insightface's MFR checker (challenges/iccv21-mfr/onnx_helper.py) reads a
graph without such nodes in its first eight as wanting (x - 127.5) / 127.5 applied before it,
which is the normalization above. Nothing is folded (a BatchNorm stays its own node), dropout is
absent (inference). Opset 11 and IR version 6, torch2onnx.py's default opset and the IR that
goes with it, so older runtimes load the file too (MFR's server ran onnxruntime-gpu 1.8,
challenges/mfr/README.md).
"""

from __future__ import annotations

import numpy as np

from fedjax_face.core import checks
from fedjax_face.models import arcface_torch
from fedjax_face.models.small_cnn import BN_EPSILON

OPSET = 11        # arcface_torch's torch2onnx.py default (convert_onnx(..., opset=11))
IR_VERSION = 6    # opset 11's IR version (onnx 1.6.0 in onnx.helper.VERSION_TABLE: IR 6, opset 11)
INPUT, OUTPUT = 'data', 'embedding'   # torch2onnx.py names its input 'data'
BATCH = 'None'    # the batch dim_param torch2onnx.py writes


def _onnx():
  try:
    import onnx   # pylint: disable=g-import-not-at-top  (optional: the onnx extra)
  except ImportError as e:
    raise checks.UsageError('--format=onnx needs the onnx package: pip install onnx (or '
                            "fedjax_face's onnx extra)") from e
  return onnx


class _Graph:
  """The nodes and initializers written so far, each layer by its state-dict prefix."""

  def __init__(self, onnx, state_dict: dict[str, np.ndarray]):
    self.onnx, self.state_dict = onnx, state_dict
    self.nodes, self.initializers = [], []

  def weight(self, key: str, shape=None) -> str:
    value = np.asarray(self.state_dict[key], np.float32)
    self.initializers.append(self.onnx.numpy_helper.from_array(
        value if shape is None else value.reshape(shape), key))
    return key

  def node(self, op: str, name: str, inputs: list[str], output: str = '', **attributes) -> str:
    """Adds node `name` (its output `name` too, unless `output` names it); returns its output."""
    output = output or name
    self.nodes.append(self.onnx.helper.make_node(op, inputs, [output], name=name, **attributes))
    return output

  def conv(self, x: str, prefix: str, stride: int, pad: int) -> str:
    kernel = self.state_dict[f'{prefix}.weight'].shape[-1]
    return self.node('Conv', prefix, [x, self.weight(f'{prefix}.weight')],
                     kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4,
                     dilations=[1, 1], group=1)

  def batch_norm(self, x: str, prefix: str, output: str = '') -> str:
    inputs = [self.weight(f'{prefix}.{t}') for t in ('weight', 'bias', 'running_mean',
                                                      'running_var')]
    return self.node('BatchNormalization', prefix, [x] + inputs, output, epsilon=BN_EPSILON,
                     momentum=0.9)   # momentum: PyTorch's 0.1 as ONNX writes it; unused here

  def prelu(self, x: str, prefix: str) -> str:
    # [C, 1, 1]: one slope per channel, broadcast over NCHW as torch's exporter shapes it.
    return self.node('PRelu', prefix, [x, self.weight(f'{prefix}.weight', (-1, 1, 1))])


def _block(graph: _Graph, x: str, prefix: str, stride: int) -> str:
  out = graph.batch_norm(x, f'{prefix}.bn1')
  out = graph.batch_norm(graph.conv(out, f'{prefix}.conv1', 1, 1), f'{prefix}.bn2')
  out = graph.prelu(out, f'{prefix}.prelu')
  out = graph.batch_norm(graph.conv(out, f'{prefix}.conv2', stride, 1), f'{prefix}.bn3')
  if f'{prefix}.downsample.0.weight' in graph.state_dict:
    x = graph.batch_norm(graph.conv(x, f'{prefix}.downsample.0', stride, 0),
                         f'{prefix}.downsample.1')
  return graph.node('Add', f'{prefix}.add', [out, x])


def onnx_model(state_dict: dict[str, np.ndarray], image_size: int = 112):
  """The ONNX ModelProto of an arcface_torch IResNet state dict (module docstring) on
  `image_size`-px images (arcface_torch's: 112), checked by `onnx.checker`.

  Raises:
    checks.UsageError: the onnx package is not installed.
  """
  onnx = _onnx()
  helper = onnx.helper
  graph = _Graph(onnx, state_dict)
  x = graph.prelu(graph.batch_norm(graph.conv(INPUT, 'conv1', 1, 1), 'bn1'), 'prelu')
  for stage, blocks in enumerate(arcface_torch.stage_sizes(state_dict), start=1):
    for block in range(blocks):   # the first block of every stage has stride 2 (iresnet.py)
      x = _block(graph, x, f'layer{stage}.{block}', 2 if block == 0 else 1)
  x = graph.node('Flatten', 'flatten', [graph.batch_norm(x, 'bn2')], axis=1)
  x = graph.node('Gemm', 'fc', [x, graph.weight('fc.weight'), graph.weight('fc.bias')],
                 transB=1)
  graph.batch_norm(x, 'features', OUTPUT)
  dim = state_dict['fc.weight'].shape[0]
  proto = helper.make_graph(
      graph.nodes, 'arcface_torch_iresnet',
      [helper.make_tensor_value_info(INPUT, onnx.TensorProto.FLOAT,
                                     [BATCH, 3, image_size, image_size])],
      [helper.make_tensor_value_info(OUTPUT, onnx.TensorProto.FLOAT, [BATCH, dim])],
      initializer=graph.initializers)
  model = helper.make_model(proto, opset_imports=[helper.make_opsetid('', OPSET)],
                            producer_name='fedjax_face')
  model.ir_version = IR_VERSION
  onnx.checker.check_model(model)
  return model
