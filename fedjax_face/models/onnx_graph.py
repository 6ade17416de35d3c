"""An ONNX file as its constants and the nodes that compute on its input, whichever exporter wrote
it: what `models/arcface_torch.py` follows to read an exported IResNet.

Exporters differ in how a weight reaches the node that uses it. The TorchScript exporter without
constant folding gives a PReLU its slope through an Unsqueeze of the weight (opset 13: the axes
from a Constant node); the dynamo exporter without its optimizer builds each convolution's zero
bias from Shape, Expand and CastLike, and reshapes each slope. `read` therefore folds every node
whose inputs are all constants (initializers, Constant nodes, what is already folded) into a
constant, evaluated by the onnx package's reference evaluator (`onnx.reference`), pass after
pass until none is left. CastLike's second input only lends its element type, so a CastLike of
a constant folds as well. Identity, and Dropout at inference, pass their input through and are
dropped. What is left is the computation on the image, for the reader to follow by data flow.

Only the `onnx` package is imported (the `onnx` extra); onnxruntime is the tests' reference.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedjax_face.core import checks


class OnnxFormatError(checks.UsageError):
  """A file that is not a readable ONNX model; the message names the file (and node)."""


class Graph(NamedTuple):
  """The computation on an ONNX model's one input, constants folded away.

  Attributes:
    path: the file, for messages.
    input: the name of the graph's one non-constant input (the images, NCHW).
    outputs: the names of the graph's outputs.
    nodes: the nodes left after folding, in the file's order.
    constants: every constant tensor by name: initializers, Constant nodes and folded outputs.
    consumers: tensor name -> the nodes (of `nodes`) that read it.
  """
  path: str
  input: str
  outputs: tuple[str, ...]
  nodes: list
  constants: dict[str, np.ndarray]
  consumers: dict[str, list]

  def users(self, name: str) -> list:
    """The nodes that read tensor `name`'s values: a Shape or Size node reads only its shape
    (the dynamo exporter sizes a flatten from the input's batch that way), so is not one."""
    return [n for n in self.consumers.get(name, []) if n.op_type not in ('Shape', 'Size')]


def describe(node) -> str:
  """A node as messages name it: its op type and its name (or, unnamed, its first output)."""
  return f'{node.op_type} node {node.name or node.output[0]!r}'


def attributes(node) -> dict:
  """A node's attributes by name, as Python values (floats, ints, lists of them, bytes)."""
  from onnx import helper   # pylint: disable=g-import-not-at-top
  return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _onnx(path: str):
  try:
    import onnx   # pylint: disable=g-import-not-at-top  (optional: only this reader needs it)
  except ImportError as e:
    raise ImportError(f'{path}: reading ONNX needs the onnx package: pip install onnx '
                      "(or fedjax_face's onnx extra)") from e
  return onnx


def load(path: str):
  """The ModelProto of `path`, local functions inlined.

  Raises:
    OnnxFormatError: the file is missing, truncated or not ONNX (protobuf's own error, which
      names no file, becomes one line that does); ImportError: `onnx` is not installed.
  """
  onnx = _onnx(path)
  try:
    model = onnx.load(path)
  except Exception as e:   # pylint: disable=broad-except  (protobuf's DecodeError, OSError, ...)
    detail = ' '.join(str(e).split()) or type(e).__name__
    raise OnnxFormatError(f'{path}: not a readable ONNX model ({type(e).__name__}: {detail}); '
                          'expected a complete .onnx file as torch.onnx.export writes it') from e
  if not model.graph.node:
    raise OnnxFormatError(f'{path}: an ONNX model with no nodes; expected an exported network '
                          '(a truncated or empty file?)')
  if model.functions:
    model = onnx.inliner.inline_local_functions(model)
  return model


def _element_types(onnx, model) -> dict[str, np.dtype]:
  """The numpy dtype of every tensor whose type the file declares or onnx's shape inference
  finds (CastLike needs only its second input's type)."""
  try:
    model = onnx.shape_inference.infer_shapes(model)
  except Exception:   # pylint: disable=broad-except  (inference is a help here, not a check)
    pass
  graph, types = model.graph, {}
  for info in list(graph.input) + list(graph.value_info) + list(graph.output):
    elem = info.type.tensor_type.elem_type
    if elem:
      types[info.name] = onnx.helper.tensor_dtype_to_np_dtype(elem)
  return types


def _evaluate(onnx, node, values: list[np.ndarray], opsets) -> list[np.ndarray]:
  """The outputs of one node on constant inputs, by onnx's reference evaluator (a one-node model
  under the file's opsets, so the operator version is the file's)."""
  from onnx import helper   # pylint: disable=g-import-not-at-top
  from onnx.reference import ReferenceEvaluator   # pylint: disable=g-import-not-at-top
  empty = helper.make_empty_tensor_value_info
  names = [n for n in node.input if n]
  graph = helper.make_graph([node], 'fold', [empty(n) for n in names],
                            [empty(n) for n in node.output if n])
  model = helper.make_model(graph, opset_imports=opsets)
  return ReferenceEvaluator(model).run(None, dict(zip(names, values)))


def _passes_through(node, constants) -> bool:
  """Whether `node` returns its first input unchanged: Identity, or Dropout at inference (no
  training_mode input, or a constant false one; its mask output unused)."""
  if node.op_type == 'Identity':
    return True
  if node.op_type != 'Dropout' or (len(node.output) > 1 and node.output[1]):
    return False
  mode = node.input[2] if len(node.input) > 2 else ''
  return not mode or (mode in constants and not bool(np.asarray(constants[mode])))


def fold(model, path: str) -> Graph:
  """The model's computation on its input with every constant subgraph evaluated (module
  docstring).

  Raises:
    OnnxFormatError: a graph with other than one non-constant input, or a constant node the
      reference evaluator cannot evaluate (named).
  """
  onnx = _onnx(path)
  from onnx import numpy_helper   # pylint: disable=g-import-not-at-top
  graph = model.graph
  constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
  inputs = [i.name for i in graph.input if i.name not in constants]
  if len(inputs) != 1:
    raise OnnxFormatError(f'{path}: graph inputs {inputs}; expected one, the images')
  types = None   # element types, inferred when a CastLike first needs them
  opsets = list(model.opset_import)
  alias = {}   # tensor -> the tensor an Identity (or inference Dropout) passed through
  nodes, changed = list(graph.node), True
  while changed:
    changed, left = False, []
    for node in nodes:
      node.input[:] = [alias.get(n, n) for n in node.input]
      given = [n for n in node.input if n]
      type_only = node.op_type == 'CastLike' and len(given) == 2 and given[1] not in constants
      if type_only and types is None:
        types = _element_types(onnx, model)
      if type_only and given[1] in types:
        values = [constants.get(given[0]), np.zeros(0, types[given[1]])]
      else:
        values = [constants.get(n) for n in given]
      foldable = (node.domain in ('', 'ai.onnx') and (given or node.op_type == 'Constant')
                  and all(v is not None for v in values))
      if foldable:
        try:
          outputs = _evaluate(onnx, node, values, opsets)
        except Exception as e:   # pylint: disable=broad-except  (named below, one line)
          detail = ' '.join(str(e).split())[:200]
          raise OnnxFormatError(f'{path}: constant {describe(node)} does not evaluate '
                                f'({type(e).__name__}: {detail}); expected a valid ONNX '
                                'operator') from e
        constants.update({n: np.asarray(v) for n, v in zip(node.output, outputs) if n})
        changed = True
      elif _passes_through(node, constants):
        alias[node.output[0]] = node.input[0]
        changed = True
      else:
        left.append(node)
    nodes = left
  outputs = tuple(alias.get(o.name, o.name) for o in graph.output)
  consumers = {}
  for node in nodes:
    for name in node.input:
      consumers.setdefault(name, []).append(node)
  return Graph(path, inputs[0], outputs, nodes, constants, consumers)


def read(path: str) -> Graph:
  """`fold(load(path))`: the file's computation on its input, constants folded."""
  return fold(load(path), path)
