"""arcface_torch state dicts as Flax IResNet variables: the converted model computes what
arcface_torch's IResNet computes (a NumPy forward of its NCHW layout, written here from the
architecture), and every mismatch is named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_face.models import arcface_torch, iresnet
from fedjax_face.run import setup as run_setup
from tests import torch_files

EPS = 1e-5
# Narrow, with every block kind: a stride-2 block with its downsample in each stage and an
# identity block; 12 px -> 3x3 maps, so the NCHW flatten order matters.
STAGES, WIDTHS, STEM, DIM, SIZE = (1, 2), (4, 8), 4, 6, 12


def _model():
  return iresnet.IResNet(stage_sizes=STAGES, stage_widths=WIDTHS, stem_width=STEM,
                         embedding_dim=DIM)


def _template():
  x = jnp.zeros((1, SIZE, SIZE, 3))
  return jax.eval_shape(lambda: _model().init(jax.random.PRNGKey(0), x, train=False))


def _random_state_dict(seed: int = 0) -> dict[str, np.ndarray]:
  """An arcface_torch state dict of the narrow network, every tensor random (BN statistics too)."""
  rng = np.random.default_rng(seed)
  state = {}

  def bn(name, c):
    state[f'{name}.weight'] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    state[f'{name}.bias'] = rng.normal(0, 0.1, c).astype(np.float32)
    state[f'{name}.running_mean'] = rng.normal(0, 0.1, c).astype(np.float32)
    state[f'{name}.running_var'] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    state[f'{name}.num_batches_tracked'] = np.array(3, np.int64)

  def conv(name, o, i, k):
    state[f'{name}.weight'] = rng.normal(0, (2 / (i * k * k)) ** 0.5,
                                         (o, i, k, k)).astype(np.float32)

  conv('conv1', STEM, 3, 3)
  bn('bn1', STEM)
  state['prelu.weight'] = rng.uniform(0.1, 0.4, STEM).astype(np.float32)
  c = STEM
  for s, (blocks, width) in enumerate(zip(STAGES, WIDTHS), start=1):
    for b in range(blocks):
      p = f'layer{s}.{b}'
      bn(f'{p}.bn1', c)
      conv(f'{p}.conv1', width, c, 3)
      bn(f'{p}.bn2', width)
      state[f'{p}.prelu.weight'] = rng.uniform(0.1, 0.4, width).astype(np.float32)
      conv(f'{p}.conv2', width, width, 3)
      bn(f'{p}.bn3', width)
      if b == 0:
        conv(f'{p}.downsample.0', width, c, 1)
        bn(f'{p}.downsample.1', width)
      c = width
  bn('bn2', c)
  final = SIZE // 2 ** len(STAGES)
  state['fc.weight'] = rng.normal(0, 0.1, (DIM, c * final * final)).astype(np.float32)
  state['fc.bias'] = rng.normal(0, 0.1, DIM).astype(np.float32)
  bn('features', DIM)
  state['features.weight'] = np.ones(DIM, np.float32)
  return state


# -- arcface_torch's forward in NumPy, NCHW ----------------------------------------------------

def _conv(x, w, stride, pad):
  x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  k = w.shape[-1]
  windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride,
                                                                               ::stride]
  return np.einsum('nchwij,ocij->nohw', windows, w)


def _bn(x, sd, name):
  shape = (1, -1) + (1,) * (x.ndim - 2)
  g = lambda key: sd[f'{name}.{key}'].astype(np.float64).reshape(shape)
  return (x - g('running_mean')) / np.sqrt(g('running_var') + EPS) * g('weight') + g('bias')


def _prelu(x, a):
  return np.where(x >= 0, x, a.reshape(1, -1, 1, 1) * x)


def torch_layout_forward(sd, images_nchw):
  x = _prelu(_bn(_conv(images_nchw, sd['conv1.weight'], 1, 1), sd, 'bn1'), sd['prelu.weight'])
  for s, blocks in enumerate(STAGES, start=1):
    for b in range(blocks):
      p, stride = f'layer{s}.{b}', 2 if b == 0 else 1
      out = _bn(x, sd, f'{p}.bn1')
      out = _conv(out, sd[f'{p}.conv1.weight'], 1, 1)
      out = _prelu(_bn(out, sd, f'{p}.bn2'), sd[f'{p}.prelu.weight'])
      out = _bn(_conv(out, sd[f'{p}.conv2.weight'], stride, 1), sd, f'{p}.bn3')
      if f'{p}.downsample.0.weight' in sd:
        x = _bn(_conv(x, sd[f'{p}.downsample.0.weight'], stride, 0), sd, f'{p}.downsample.1')
      x = out + x
  x = _bn(x, sd, 'bn2').reshape(len(x), -1)          # torch.flatten of N x C x H x W
  x = x @ sd['fc.weight'].T.astype(np.float64) + sd['fc.bias']
  return _bn(x, sd, 'features')


def test_converted_weights_compute_arcface_torch_s_function():
  sd = _random_state_dict()
  variables = arcface_torch.variables_from_state_dict(sd, _template())
  images = np.random.default_rng(1).uniform(-1, 1, (3, SIZE, SIZE, 3)).astype(np.float32)
  got = _model().apply(variables, images, train=False)
  expected = torch_layout_forward(sd, images.transpose(0, 3, 1, 2).astype(np.float64))
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)
  # Every variable came from the file: none is left at its initial value.
  assert jax.tree.structure(variables) == jax.tree.structure(_template())


def test_a_pth_written_in_torch_s_format_converts_the_same(tmp_path):
  sd = _random_state_dict()
  path = tmp_path / 'backbone.pth'
  torch_files.write_pth(path, {f'module.{k}': v for k, v in sd.items()})   # DataParallel's keys
  from fedjax_face.io import torch_state_dict
  read = torch_state_dict.read_state_dict(path)
  got = arcface_torch.variables_from_state_dict(read, _template())
  expected = arcface_torch.variables_from_state_dict(sd, _template())
  jax.tree.map(np.testing.assert_array_equal, got, expected)


def test_mismatches_name_the_first_key():
  template = _template()
  sd = _random_state_dict()
  missing = {k: v for k, v in sd.items() if k != 'layer2.1.conv2.weight'}
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r"backbone.pth has no 'layer2.1.conv2.weight' \(for the Flax variable "
                           r'params/layer2_1/conv2/kernel, shape \(3, 3, 8, 8\)\)'):
    arcface_torch.variables_from_state_dict(missing, template, source='backbone.pth')
  extra = dict(sd, **{'layer3.0.conv1.weight': np.zeros((1,), np.float32)})
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r"'layer3.0.conv1.weight' has no place in the model"):
    arcface_torch.variables_from_state_dict(extra, template)
  wrong = dict(sd, **{'fc.weight': np.zeros((DIM, 99), np.float32)})
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r"'fc.weight' has shape \(6, 99\), which does not fit the model's "
                           r'params/fc/kernel of shape \(72, 6\)'):
    arcface_torch.variables_from_state_dict(wrong, template)
  scaled = dict(sd, **{'features.weight': np.full(DIM, 2.0, np.float32)})
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match="'features.weight' is not all ones"):
    arcface_torch.variables_from_state_dict(scaled, template)


def test_the_keys_say_which_iresnet_a_file_holds(tmp_path):
  for sizes, name in arcface_torch.DEPTHS.items():
    keys = {f'layer{s}.{b}.conv1.weight': np.zeros(1, np.float32)
            for s, n in enumerate(sizes, start=1) for b in range(n)}
    keys['fc.weight'] = np.zeros((128, 4), np.float32)
    torch_files.write_pth(tmp_path / f'{name}.pth', keys)
    _, got, dim = arcface_torch.read_backbone(str(tmp_path / f'{name}.pth'))
    assert (got, dim) == (name, 128)
  torch_files.write_pth(tmp_path / 'odd.pth', {'layer1.0.conv1.weight': np.zeros(1, np.float32),
                                              'fc.weight': np.zeros((2, 2), np.float32)})
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r'odd.pth: blocks per stage \(1,\); expected an arcface_torch IResNet'):
    arcface_torch.read_backbone(str(tmp_path / 'odd.pth'))


def test_flax_paths_map_to_arcface_torch_keys():
  assert arcface_torch.torch_key(('params', 'layer2_0', 'downsample_conv', 'kernel')) == (
      'layer2.0.downsample.0.weight')
  assert arcface_torch.torch_key(('batch_stats', 'layer4_2', 'downsample_bn', 'var')) == (
      'layer4.2.downsample.1.running_var')
  assert arcface_torch.torch_key(('params', 'prelu', 'negative_slope')) == 'prelu.weight'
  assert arcface_torch.torch_key(('batch_stats', 'features', 'mean')) == 'features.running_mean'


# -- config.init_from=<backbone.pth> -----------------------------------------------------------

def _r18_file(tmp_path, embedding_dim: int = 8):
  """An arcface_torch IResNet-18 state dict of random weights (8-d embeddings keep it small), as
  the file torch.save writes, and the state dict."""
  from fedjax_face import models
  model = models.iresnet18(embedding_dim=embedding_dim)
  template = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), jnp.zeros((1, 112, 112, 3)),
                                               train=False))
  rng = np.random.default_rng(3)
  state = {}
  for key_path, leaf in jax.tree_util.tree_flatten_with_path(template)[0]:
    path = tuple(str(k.key) for k in key_path)
    shape = leaf.shape
    if path[-1] == 'kernel':   # arcface_torch's layout: OIHW convs, [out, in] linear
      shape = shape[::-1] if len(shape) == 2 else (shape[3], shape[2], shape[0], shape[1])
    value = (rng.uniform(0.5, 1.5, shape) if path[-1] in ('var', 'scale') else
             rng.normal(0, 0.05, shape))   # BatchNorm variances positive, as trained ones are
    state[arcface_torch.torch_key(path)] = value.astype(np.float32)
  state['features.weight'] = np.ones(embedding_dim, np.float32)
  path = tmp_path / 'r18.pth'
  torch_files.write_pth(path, state)
  return str(path), state, template


def test_init_from_a_backbone_file_starts_the_run_from_its_weights(tmp_path):
  from fedjax_face import experiment
  from fedjax_face.algorithms import common
  from tests import config_files
  path, state, template = _r18_file(tmp_path)
  config = config_files.load_config('fedgc')
  config.model.name, config.model.embedding_dim, config.data.image_size = 'iresnet18', 8, 112
  config.init_from = path
  experiment.validate(config)
  start = run_setup.warm_start(config)
  assert set(start) == {'server'} and set(start['server']) == {'model'}
  expected = arcface_torch.variables_from_state_dict(state, template)
  # What FedGC (and every method that starts from a model) does with it: the model alone.
  variables, classes = common.start_from(start, template, method='fedgc')
  assert classes is None
  jax.tree.map(np.testing.assert_array_equal, variables, expected)
  np.testing.assert_array_equal(variables['params']['fc']['kernel'], state['fc.weight'].T)
  # FedFR needs the pre-training's class matrix as well: a backbone alone is named as such.
  with pytest.raises(ValueError, match=r"holds \['model'\], a backbone alone; fedfr also needs "
                                       "the public identities' class matrix W: pre-train first"):
    common.start_from(start, template, np.zeros((8, 8), np.float32), method='fedfr')


def test_init_from_a_backbone_file_of_another_network_is_refused_before_anything_runs(tmp_path):
  from fedjax_face import experiment
  from tests import config_files
  path, _, _ = _r18_file(tmp_path)
  config = config_files.load_config('fedgc')
  config.model.name, config.model.embedding_dim, config.data.image_size = 'iresnet34', 8, 112
  config.init_from = path
  with pytest.raises(ValueError, match=r"r18.pth' holds arcface_torch's iresnet18 with 8-d "
                     r"embeddings; config.model is 'iresnet34' with embedding_dim=8: expected "
                     r'--config.model.name=iresnet18 --config.model.embedding_dim=8'):
    experiment.validate(config)
  config.model.name, config.init_from_step = 'iresnet18', 3
  with pytest.raises(ValueError, match=r'config.init_from_step=3 with the backbone file'):
    experiment.validate(config)
  # At another image size the fc no longer fits: named with the size.
  config.init_from_step, config.data.image_size = 0, 64
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r"\(at 64 px\): 'fc.weight' has shape \(8, 25088\), which does not fit "
                           r"the model's params/fc/kernel of shape \(8192, 8\)"):
    run_setup.warm_start(config)


# -- ONNX: the tests' own export (onnx.helper); the exporters' own are test_onnx_exports.py's ---

def _write_onnx(path, sd, fold: bool = True, stages=STAGES, size=SIZE, dim=DIM):
  """The narrow network as an ONNX graph in NCHW, BatchNorms after a convolution folded into it
  (PyTorch's exporter does so in eval mode), every other layer as its own node."""
  import onnx   # pylint: disable=g-import-not-at-top  (the test dependency, imported when used)
  from onnx import TensorProto, helper, numpy_helper   # pylint: disable=g-import-not-at-top
  nodes, inits, counter = [], [], [0]

  def name(hint):
    counter[0] += 1
    return f'{hint}_{counter[0]}'

  def init(key, value):
    inits.append(numpy_helper.from_array(np.asarray(value, np.float32), key))
    return key

  def bn(x, prefix):
    out = name(prefix)
    params = [init(f'{prefix}.{k}', sd[f'{prefix}.{k}'])
              for k in ('weight', 'bias', 'running_mean', 'running_var')]
    nodes.append(helper.make_node('BatchNormalization', [x] + params, [out], epsilon=EPS,
                                  name=prefix))
    return out

  def conv(x, prefix, stride, pad, bn_prefix=None):
    w = sd[f'{prefix}.weight']
    out = name(prefix)
    if fold and bn_prefix:   # w' = w * g / sqrt(v + eps), b' = beta - mean * g / sqrt(v + eps)
      g = sd[f'{bn_prefix}.weight'] / np.sqrt(sd[f'{bn_prefix}.running_var'] + EPS)
      shift = sd[f'{bn_prefix}.bias'] - sd[f'{bn_prefix}.running_mean'] * g
      inputs = [x, init(f'{prefix}.w_folded', w * g[:, None, None, None]),
                init(f'{prefix}.b_folded', shift)]
    else:
      inputs = [x, init(f'{prefix}.weight', w)]
    k = w.shape[-1]
    nodes.append(helper.make_node('Conv', inputs, [out], kernel_shape=[k, k],
                                  strides=[stride] * 2, pads=[pad] * 4, name=prefix))
    return out if (fold and bn_prefix) or not bn_prefix else bn(out, bn_prefix)

  def prelu(x, prefix):
    out = name(prefix)
    nodes.append(helper.make_node('PRelu', [x, init(f'{prefix}.weight',
                                                    sd[f'{prefix}.weight'].reshape(-1, 1, 1))],
                                  [out], name=prefix))
    return out

  x = prelu(conv('data', 'conv1', 1, 1, 'bn1'), 'prelu')
  for s, blocks in enumerate(stages, start=1):
    for b in range(blocks):
      p, stride = f'layer{s}.{b}', 2 if b == 0 else 1
      out = conv(bn(x, f'{p}.bn1'), f'{p}.conv1', 1, 1, f'{p}.bn2')
      out = conv(prelu(out, f'{p}.prelu'), f'{p}.conv2', stride, 1, f'{p}.bn3')
      if b == 0:
        x = conv(x, f'{p}.downsample.0', stride, 0, f'{p}.downsample.1')
      added = name('add')
      nodes.append(helper.make_node('Add', [out, x], [added]))
      x = added
  flat = name('flatten')
  nodes.append(helper.make_node('Flatten', [bn(x, 'bn2')], [flat], axis=1))
  fc = name('fc')
  nodes.append(helper.make_node('Gemm', [flat, init('fc.weight', sd['fc.weight']),
                                         init('fc.bias', sd['fc.bias'])], [fc], transB=1,
                                name='fc'))
  out = bn(fc, 'features')
  graph = helper.make_graph(
      nodes, 'iresnet', [helper.make_tensor_value_info('data', TensorProto.FLOAT,
                                                       ['N', 3, size, size])],
      [helper.make_tensor_value_info(out, TensorProto.FLOAT, ['N', dim])], initializer=inits)
  model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
  onnx.checker.check_model(model)
  onnx.save(model, str(path))


@pytest.mark.parametrize('fold', [True, False])
def test_an_onnx_export_under_onnxruntime_embeds_as_the_converted_model(tmp_path, fold):
  ort = pytest.importorskip('onnxruntime')
  pytest.importorskip('onnx')
  sd = _random_state_dict(4)
  path = tmp_path / 'r.onnx'
  _write_onnx(path, sd, fold=fold)
  images = np.random.default_rng(5).uniform(-1, 1, (4, SIZE, SIZE, 3)).astype(np.float32)
  session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
  (expected,) = session.run(None, {'data': images.transpose(0, 3, 1, 2)})
  read = arcface_torch.state_dict_from_onnx(str(path), STAGES)
  variables = arcface_torch.variables_from_state_dict(read, _template())
  got = _model().apply(variables, images, train=False)
  np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)
  if not fold:   # unfolded, the file holds the state dict itself
    for key, value in read.items():
      np.testing.assert_array_equal(value, sd[key].reshape(value.shape), err_msg=key)


def test_an_onnx_graph_of_another_network_is_named(tmp_path):
  pytest.importorskip('onnx')
  sd = _random_state_dict(4)
  _write_onnx(tmp_path / 'r.onnx', sd)
  # The graph says its stages; asked for others, the reader names both.
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=r'r.onnx: blocks per stage \(1, 2\); expected \(2, 2\)'):
    arcface_torch.state_dict_from_onnx(str(tmp_path / 'r.onnx'), (2, 2))
  # A block without its PReLU: the layer and the node met instead are named.
  _write_onnx(tmp_path / 'r.onnx', sd, fold=False)
  import onnx   # pylint: disable=g-import-not-at-top
  model = onnx.load(str(tmp_path / 'r.onnx'))
  prelu = next(n for n in model.graph.node if n.name == 'layer2.1.prelu')
  before = next(n for n in model.graph.node if n.output[0] == prelu.input[0])
  for node in model.graph.node:   # its readers read what it read
    node.input[:] = [prelu.input[0] if i == prelu.output[0] else i for i in node.input]
  model.graph.node.remove(prelu)
  onnx.save(model, str(tmp_path / 'r.onnx'))
  with pytest.raises(arcface_torch.BackboneMismatchError,
                     match=rf"r.onnx: layer layer2.1.prelu meets Conv node 'layer2.1.conv2'; "
                           rf"expected one PRelu node reading '{before.output[0]}'"):
    arcface_torch.state_dict_from_onnx(str(tmp_path / 'r.onnx'))


def test_init_from_an_onnx_export_starts_from_its_weights(tmp_path):
  pytest.importorskip('onnx')
  from fedjax_face import experiment
  from tests import config_files
  _, state, template = _r18_file(tmp_path)
  # Unfolded, the export holds the parameters themselves (the folded case's function is
  # test_an_onnx_export_under_onnxruntime_embeds_as_the_converted_model's).
  _write_onnx(tmp_path / 'r18.onnx', state, fold=False, stages=(2, 2, 2, 2), size=112, dim=8)
  config = config_files.load_config('fedgc')
  config.model.name, config.model.embedding_dim, config.data.image_size = 'iresnet18', 8, 112
  config.init_from = str(tmp_path / 'r18.onnx')
  experiment.validate(config)
  got = run_setup.warm_start(config)['server']['model']
  jax.tree.map(np.testing.assert_array_equal, got,
               arcface_torch.variables_from_state_dict(state, template))
  # The graph says which IResNet it holds; another config.model is named as for a .pth.
  config.model.name = 'small_cnn'
  with pytest.raises(ValueError, match=r"r18.onnx' holds arcface_torch's iresnet18 with 8-d "
                                       r"embeddings; config.model is 'small_cnn'"):
    experiment.validate(config)
