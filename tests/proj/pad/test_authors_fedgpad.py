"""The runner of the FedGPAD authors' code: the tree it lays out for their relative data paths,
the argv it hands them, its errors. Neither torch nor their code is needed, except where skipped."""

import os
import sys
import warnings

import pytest

from fedjax_face import main as fedjax_main
from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.proj.pad import authors_fedgpad as runner
from fedjax_face.tools import export_pad

TINY = 'configs/pad/fedgpad.py:protocol=OCM_I,runlocal'


@pytest.fixture(scope='module')
def exported(tmp_path_factory):
  """A tiny export of protocol O&C&M -> I in the authors' layout."""
  out = str(tmp_path_factory.mktemp('export'))
  export_pad.export(fedjax_main.load_config_file(os.path.join(runner.REPO, TINY)), 'fedgpad', out)
  return out


def _fake_source(folder, main_py='') -> str:
  """A directory with the files check_source asks for (their contents: placeholders)."""
  for rel in runner.SOURCE_FILES:
    path = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
      f.write(main_py if rel == 'main.py' else '')
  return str(folder)


def test_their_relative_data_paths_reach_the_exported_roots(exported, tmp_path):
  work = str(tmp_path / 'seed0')
  layout = runner.lay_out(exported, work, _fake_source(tmp_path / 'src'))
  code = layout['code']
  assert os.path.isfile(os.path.join(code, 'main.py'))
  # DatasetLoader's root, resolved from the directory their main.py runs in.
  datasets = os.path.normpath(os.path.join(code, '../../../datasets'))
  assert datasets == os.path.join(work, 'datasets')
  for letter, name in (('O', 'OULU'), ('C', 'CASIA'), ('M', 'MSU')):
    assert os.path.realpath(os.path.join(datasets, name)) == os.path.realpath(
        os.path.join(exported, letter))
  # Every frame and depth map their loaders open exists: the training lists' live maps are the
  # export's own; the target's are the zero stand-in (their Test reads and discards them).
  for name in runner.CENTERS:
    for list_name, live in (('image_list_real.txt', True), ('image_list_fake.txt', False)):
      for rel, label in runner.read_list(os.path.join(datasets, name, list_name)):
        assert label == int(live) and os.path.isfile(os.path.join(datasets, name, rel))
        depth = os.path.join(datasets, name, runner.their_depth_path(name, rel, live))
        assert os.path.realpath(depth).startswith(os.path.realpath(exported) + os.sep)
  target = os.path.join(datasets, 'idiap')
  rows = runner.read_list(os.path.join(target, 'image_list_all.txt'))
  assert {label for _, label in rows} == {0, 1}
  for rel, label in rows:
    assert os.path.realpath(os.path.join(target, rel)) == os.path.realpath(
        os.path.join(exported, 'I', rel))
    depth = os.path.join(target, runner.their_depth_path('idiap', rel, label == 1))
    assert os.path.realpath(depth) == os.path.realpath(os.path.join(work, 'zero_depth.png'))
  assert not os.path.exists(os.path.join(exported, 'I', 'depth'))
  # Their iteration count: the most full batches of 16 in any training list.
  longest = max(len(runner.read_list(os.path.join(exported, l, f)))
                for l in 'OCM' for f in ('image_list_real.txt', 'image_list_fake.txt'))
  assert layout['iterations_per_epoch'] == longest // 16
  assert layout['target_frames'] == len(rows)


def test_their_depth_rule_is_the_exporters(exported):
  # Their DatasetLoader keeps k = 1 (OULU), 2 (MSU), 3 (CASIA, idiap), 4 (SiW) directories.
  rel = 'train/live/s000/v00000/v00000_000.png'
  assert runner.their_depth_path('MSU', rel, True) == 'depth/train/live/v00000_000_depth.jpg'
  assert runner.their_depth_path('OULU', rel, False) == 'depth/fake_depth.jpg'
  for letter, name in runner.THEIR_NAMES.items():
    assert runner.their_depth_path(name, rel, True) == formats.depth_path(
        rel, formats.DEPTH_DIRS[letter])


def test_argv_is_interned_for_their_identity_comparisons():
  value = ''.join(['Tr', 'ain'])   # a string built at run time, as argparse returns argv's
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', SyntaxWarning)
    comparison = compile("run_type is 'Train'", 'main.py', 'eval')   # main.py's test
  assert not eval(comparison, {'run_type': value})   # pylint: disable=eval-used
  assert eval(comparison, {'run_type': runner.interned(['--run_type', value])[1]})


def test_missing_source_torch_and_data_are_named(exported, tmp_path, monkeypatch):
  with pytest.raises(runner.AuthorsCodeError, match='missing main.py, core/__init__.py'):
    runner.check_source(str(tmp_path))
  with pytest.raises(SystemExit, match='is not the FedGPAD authors'):
    runner.main(['--source', str(tmp_path), '--out', str(tmp_path / 'out')])
  monkeypatch.setitem(sys.modules, 'torch', None)   # `import torch` raises ImportError
  with pytest.raises(runner.AuthorsCodeError, match='pip install torch==2.14.1 torchvision'):
    runner.require_torch()
  source = _fake_source(tmp_path / 'src')
  with pytest.raises(runner.AuthorsCodeError, match=r'O, C, M -> I'):
    runner.lay_out(str(tmp_path / 'nothing'), str(tmp_path / 'w1'), source)
  assert not os.path.exists(tmp_path / 'w1')
  with pytest.raises(runner.AuthorsCodeError, match='exists'):
    runner.lay_out(exported, str(tmp_path), source)


def test_a_missing_depth_map_is_named(exported, tmp_path):
  import shutil  # pylint: disable=import-outside-toplevel
  copy = str(tmp_path / 'export')
  shutil.copytree(exported, copy)
  os.remove(os.path.join(copy, 'M', 'depth', 'fake_depth.jpg'))
  with pytest.raises(runner.AuthorsCodeError, match=r'M/depth/fake_depth.jpg is missing'):
    runner.lay_out(copy, str(tmp_path / 'w'), _fake_source(tmp_path / 'src'))


def test_summary_and_digest(tmp_path):
  results = [{'seed': s, 'defaults': True, 'metrics': {'hter': h, 'auc': a}}
             for s, h, a in ((0, 0.1, 0.9), (1, 0.2, 0.8), (2, 0.3, 0.7))]
  out = runner.summary(results)
  assert out['seeds'] == [0, 1, 2]
  assert out['hter']['mean'] == pytest.approx(20.0) and out['hter']['std'] == pytest.approx(10.0)
  assert out['auc']['mean'] == pytest.approx(80.0)
  source = _fake_source(tmp_path / 'src')
  digest = runner.source_digest(source)
  with open(os.path.join(source, 'core', 'test.py'), 'w') as f:
    f.write('# changed\n')
  assert runner.source_digest(source) != digest


MAIN_PY = '''
import sys
import torch
from core import Train_FedAvgDep
print(torch.zeros(1).cuda().device, torch.nn.Linear(1, 1).cuda().weight.device)
if sys.argv[2] is 'Train':
  open('ran.txt', 'w').write(sys.argv[2])
'''


def test_their_main_runs_with_the_shims(tmp_path, capsys):
  torch = pytest.importorskip('torch')
  source = _fake_source(tmp_path / 'src', MAIN_PY)
  with open(os.path.join(source, 'core', '__init__.py'), 'w') as f:
    f.write('from .train_FedAvgDep import Train_FedAvgDep\n'
            'from .train_Aggr import Train_Aggr\n')
  with open(os.path.join(source, 'core', 'train_FedAvgDep.py'), 'w') as f:
    f.write('def Train_FedAvgDep():\n  pass\n')
  cuda = torch.Tensor.cuda
  cwd = os.getcwd()
  with runner._their_process(source, 'cpu'):   # pylint: disable=protected-access
    with warnings.catch_warnings():
      warnings.simplefilter('ignore', SyntaxWarning)
      runner.run_main(source, ['--run_type', ''.join(['Tr', 'ain'])])
    with pytest.raises(runner.AuthorsCodeError, match='train_Aggr.py is not in'):
      sys.modules['core.train_Aggr'].Train_Aggr()
  assert open(os.path.join(source, 'ran.txt')).read() == 'Train'
  assert 'cpu cpu' in capsys.readouterr().out
  assert torch.Tensor.cuda is cuda and os.getcwd() == cwd
  assert 'core' not in sys.modules and 'core.train_Aggr' not in sys.modules


def test_frames_are_resized_to_their_input_size_and_the_rest_linked(exported, tmp_path):
  from PIL import Image  # pylint: disable=import-outside-toplevel
  assert runner.frame_size(exported) == (32, 32)
  out = str(tmp_path / 'export_64')
  assert runner.resized_copy(exported, out, 64) == out
  assert runner.frame_size(out) == (64, 64)
  for letter in 'OCMI':
    rows = runner.read_list(os.path.join(out, letter, 'image_list_all.txt'))
    assert os.path.islink(os.path.join(out, letter, 'image_list_all.txt'))
    with Image.open(os.path.join(out, letter, rows[0][0])) as image:
      assert image.size == (64, 64) and image.mode == 'RGB'
  assert os.path.realpath(os.path.join(out, 'M', 'depth', 'fake_depth.jpg')) == os.path.realpath(
      os.path.join(exported, 'M', 'depth', 'fake_depth.jpg'))
  assert runner.frame_size(exported) == (32, 32)            # the export is left as it was
  os.remove(os.path.join(out, 'O', 'image_list_real.txt'))
  runner.resized_copy(exported, out, 64)                     # a completed copy is reused
  assert not os.path.exists(os.path.join(out, 'O', 'image_list_real.txt'))
