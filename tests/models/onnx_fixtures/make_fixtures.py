"""Writes the ONNX fixtures of tests/models/test_onnx_exports.py: one narrow IResNet of random
weights, exported by each exporter a user of arcface_torch meets. Run once, by hand, in a venv
outside the repository (the tests never run it and need no torch):

  python -m venv /tmp/torchvenv
  /tmp/torchvenv/bin/pip install torch==2.13.0 onnx==1.23.2 onnxscript numpy onnxsim
  /tmp/torchvenv/bin/python tests/models/onnx_fixtures/make_fixtures.py

The network is arcface_torch's IResNet with its module names (conv1, bn1, prelu, layer{s}.{b}
with bn1 conv1 bn2 prelu conv2 bn3 and a downsample on each stage's first block, bn2, dropout,
fc, features), narrowed to the tests' sizes: stages (1, 2), widths (4, 8), stem 4, a 6-d
embedding, 12 px images (3x3 maps before the fc). Every BatchNorm statistic and PReLU slope is
random, so a folding that loses one shows; `features.weight` is fixed at 1 as arcface_torch
fixes it.
"""

import os
import sys

import numpy as np
import onnx
import torch
from torch import nn

STAGES, WIDTHS, STEM, DIM, SIZE = (1, 2), (4, 8), 4, 6, 12
HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
  """arcface_torch's IBasicBlock: BN, conv3x3, BN, PReLU, conv3x3 (strided), BN, plus shortcut."""

  def __init__(self, inputs, width, stride):
    super().__init__()
    self.bn1 = nn.BatchNorm2d(inputs, eps=1e-5)
    self.conv1 = nn.Conv2d(inputs, width, 3, 1, 1, bias=False)
    self.bn2 = nn.BatchNorm2d(width, eps=1e-5)
    self.prelu = nn.PReLU(width)
    self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
    self.bn3 = nn.BatchNorm2d(width, eps=1e-5)
    self.downsample = None
    if stride != 1 or inputs != width:
      self.downsample = nn.Sequential(nn.Conv2d(inputs, width, 1, stride, bias=False),
                                      nn.BatchNorm2d(width, eps=1e-5))

  def forward(self, x):
    out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
    return out + (x if self.downsample is None else self.downsample(x))


class NarrowIResNet(nn.Module):
  """arcface_torch's IResNet forward: stem, stages, bn2, flatten, dropout, fc, features."""

  def __init__(self):
    super().__init__()
    self.conv1 = nn.Conv2d(3, STEM, 3, 1, 1, bias=False)
    self.bn1 = nn.BatchNorm2d(STEM, eps=1e-5)
    self.prelu = nn.PReLU(STEM)
    inputs = STEM
    for s, (blocks, width) in enumerate(zip(STAGES, WIDTHS), start=1):
      layers = []
      for b in range(blocks):
        layers.append(Block(inputs, width, 2 if b == 0 else 1))
        inputs = width
      setattr(self, f'layer{s}', nn.Sequential(*layers))
    self.bn2 = nn.BatchNorm2d(inputs, eps=1e-5)
    self.dropout = nn.Dropout(p=0.0)
    final = SIZE // 2 ** len(STAGES)
    self.fc = nn.Linear(inputs * final * final, DIM)
    self.features = nn.BatchNorm1d(DIM, eps=1e-5)
    nn.init.constant_(self.features.weight, 1.0)
    self.features.weight.requires_grad = False

  def forward(self, x):
    x = self.prelu(self.bn1(self.conv1(x)))
    for s in range(1, len(STAGES) + 1):
      x = getattr(self, f'layer{s}')(x)
    x = self.dropout(torch.flatten(self.bn2(x), 1))
    return self.features(self.fc(x))


def network(seed: int = 0) -> NarrowIResNet:
  """The network in eval mode, every BatchNorm statistic and slope random (features.weight 1)."""
  torch.manual_seed(seed)
  net = NarrowIResNet()
  with torch.no_grad():
    for name, module in net.named_modules():
      if isinstance(module, (nn.BatchNorm1d, nn.BatchNorm2d)):
        if name != 'features':
          module.weight.uniform_(0.5, 1.5)
        module.bias.normal_(0, 0.1)
        module.running_mean.normal_(0, 0.1)
        module.running_var.uniform_(0.5, 1.5)
      elif isinstance(module, nn.PReLU):
        module.weight.uniform_(0.1, 0.4)
  return net.eval()


def _save_inline(path):
  """Re-saves `path` with its weights inside the file (the dynamo exporter may write them beside
  it, as `<name>.data`), as arcface_torch's torch2onnx re-saves its export."""
  model = onnx.load(path)
  onnx.save(model, path)
  if os.path.exists(path + '.data'):
    os.remove(path + '.data')
  return model


def _strip(path):
  """Drops the dynamo exporter's per-node metadata (Python stack traces, two thirds of a small
  file) and doc strings: text only, the graph, its weights and value_info stay as exported."""
  model = onnx.load(path)
  model.doc_string = model.graph.doc_string = ''
  for node in model.graph.node:
    del node.metadata_props[:]
    node.doc_string = ''
  onnx.save(model, path)


def main():
  net = network()
  x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (2, 3, SIZE, SIZE))
                       .astype(np.float32))
  out = lambda name: os.path.join(HERE, name)
  batch = {'data': {0: 'batch'}}
  # The TorchScript exporter (dynamo=False), folded and not; opset 13 unfolded gives the PReLU
  # slope through an Unsqueeze node.
  torch.onnx.export(net, (x,), out('torchscript_opset13_folded.onnx'), dynamo=False,
                    opset_version=13, input_names=['data'], dynamic_axes=batch,
                    do_constant_folding=True)
  torch.onnx.export(net, (x,), out('torchscript_opset13_unfolded.onnx'), dynamo=False,
                    opset_version=13, input_names=['data'], dynamic_axes=batch,
                    do_constant_folding=False)
  # The dynamo exporter (torch 2.13's default), with its optimizer (which folds) and without.
  batch_dim = {'x': {0: torch.export.Dim('batch', min=1, max=1024)}}
  torch.onnx.export(net, (x,), out('dynamo_opset18_optimized.onnx'), dynamo=True,
                    opset_version=18, input_names=['data'], dynamic_shapes=batch_dim,
                    external_data=False, do_constant_folding=True, optimize=True)
  torch.onnx.export(net, (x,), out('dynamo_opset18_unoptimized.onnx'), dynamo=True,
                    opset_version=18, input_names=['data'], dynamic_shapes=batch_dim,
                    external_data=False, do_constant_folding=False, optimize=False)
  # arcface_torch's torch2onnx.py call (opset 11, input 'data', do_constant_folding=False), batch
  # made dynamic afterwards as the script does; under torch 2.13 it is the dynamo exporter unless
  # dynamo=False is passed, so both.
  for dynamo, name in ((True, 'torch2onnx_dynamo'), (False, 'torch2onnx_torchscript')):
    path = out(f'{name}.onnx')
    torch.onnx.export(net, (x[:1],), path, dynamo=dynamo, input_names=['data'],
                      keep_initializers_as_inputs=False, verbose=False, opset_version=11,
                      do_constant_folding=False,
                      **({'dynamic_shapes': batch_dim} if dynamo else {'dynamic_axes': batch}))
    model = _save_inline(path)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = 'None'
    onnx.save(model, path)
    try:
      from onnxsim import simplify
    except ImportError:
      print('onnxsim is not installed: no simplified fixture', file=sys.stderr)
      continue
    simplified, ok = simplify(model)
    assert ok, name
    onnx.save(simplified, out(f'{name}_onnxsim.onnx'))
  # insightface's model-zoo graph (w600k_r50.onnx and its kin): input 'input.1', each BatchNorm
  # after a convolution folded into it, Flatten, Gemm, then the embedding's BatchNormalization:
  # what the TorchScript exporter of its day wrote with folding, at opset 11.
  torch.onnx.export(net, (x,), out('modelzoo_r50_shape.onnx'), dynamo=False, opset_version=11,
                    input_names=['input.1'], dynamic_axes={'input.1': {0: 'None'}},
                    do_constant_folding=True)
  for name in sorted(os.listdir(HERE)):
    if name.endswith('.onnx'):
      _strip(out(name))
  for name in sorted(os.listdir(HERE)):
    if name.endswith('.onnx'):
      model = onnx.load(out(name))
      ops = sorted({n.op_type for n in model.graph.node})
      print(f'{name}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes, '
            f'{os.path.getsize(out(name))} bytes, {ops}')


if __name__ == '__main__':
  main()
