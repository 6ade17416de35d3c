r"""The FedGPAD authors' code (rshaojimmy/FedGPAD, PyTorch) run unmodified on our exported
benchmark: the cross-check of issue 34.

    python -m fedjax_face.proj.pad.authors_fedgpad --source=/tmp/fedgpad_src \
        --seeds=0,1,2 --out=/tmp/authors_runs

`--source` is their repository's files (`git archive` of its mirror, nothing changed). For each
seed the command exports the embedded benchmark in the authors' list layout
(`tools/export_pad.py --layout=fedgpad`; `--export_config`, default protocol O&C&M -> I at 32x32,
the data of our archived FedGPAD runs), resizes its frames to the 256x256 their network needs,
lays out the directory tree their relative data paths expect, runs their `main.py --run_type
Train`, then `main.py --run_type Test`, each with their defaults plus `--manual_seed`, and scores
the frame scores their Test writes (.h5) with their own `misc/metrics_utils.py`.
`<out>/seed<N>/result.json` holds what it reports; `--exported=DIR` (may contain `{seed}`) reads
an existing export instead.

Their defaults (main.py) train on OULU, CASIA and MSU and test on idiap: our O, C, M and I
(`THEIR_NAMES`), protocol OCM_I. Their command line cannot name other sets: the list arguments
are `type=str`, so a given value is iterated character by character.

What the runner changes in the process, never in their files (each is a "device flag" or a
launch detail; `--device=cuda` drops the first):

1. `torch.Tensor.cuda` and `torch.nn.Module.cuda` return their object unchanged: seven files call
   `.cuda()` with no device option, and this machine has no GPU.
2. argv strings are interned (`sys.intern`): main.py tests `args.run_type is 'Train'`, an identity
   comparison that is False for a string parsed from argv unless interned.
3. `core/__init__.py` imports four modules the repository does not ship (`MISSING_CORE`); empty
   stand-ins go into `sys.modules` for those absent, so that `from core import ...` works. The
   FedGPAD path (`Train_FedAvgDep`, `Test`) uses none of them.
4. The data roots are `../../../datasets/<NAME>` relative to the working directory: the code runs
   from `<work>/run/authors/FedGPAD` (a copy of `--source`) and `<work>/datasets/<NAME>` link to
   the export's roots.
5. Their Test reads a depth map for every target frame and throws it away; the export writes no
   depth maps for the target (it is never trained on), so the target's `depth/` is made of links
   to one all-zero 32x32 map.
6. One thread: OMP / MKL variables and `torch.set_num_threads`.
7. Frames not 256x256 are resized to it (bicubic, as their loaders resample) into
   `<export>_256/`: their FeatExtractor concatenates 1/8-size feature maps with 32x32 pools and
   their decoder rebuilds 256x256 images, so no other size runs. (The `paper` config's 256x256
   export needs more than this machine's 24 GB: `make_domain` renders a domain at once.)

What their defaults cost on a CPU, measured with `--timing_steps`, is in docs/pad.md ("The
authors' code"): more memory than a 24 GB machine has, and days of training a seed.

`--timing_steps=K` only times: it stops training after K local updates and the Test after K
batches (the Test then scores an untrained model: their `init_model` silently keeps the random
weights when a snapshot is missing) and writes `timing.json` with the estimate at their defaults.
PyTorch is an optional dependency (`TORCH_INSTALL`); only the functions that run their code import
it.
"""

import argparse
import contextlib
import hashlib
import json
import math
import os
import resource
import runpy
import shlex
import shutil
import statistics
import sys
import time
import types

import numpy as np
from PIL import Image

from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.io import files

# Our domain letter -> the data-set name in their code; their main.py defaults.
THEIR_NAMES = {'O': 'OULU', 'C': 'CASIA', 'M': 'MSU', 'I': 'idiap', 'S': 'SiW'}
CENTERS, TARGET = ('OULU', 'CASIA', 'MSU'), 'idiap'
DEPTH_SIZE = 32                           # their DepthImg_loader's size
IMAGE_SIZE = 256    # their FeatExtractor concatenates 1/8-size maps with 32x32 pools: 256 only
BATCH, EPOCHS, SNAPSHOT = 16, 20, '10'    # main.py: --batchsize, --epochs, --snapshotnum
RESULTS = 'results/Train_xxxxx'           # main.py: --results_path
SAVE_NAME = 'FedAvgDep/' + '-'.join(CENTERS) + '1'   # main.py's savefilename
CODE_DIR = os.path.join('run', 'authors', 'FedGPAD')  # three levels: ../../../datasets
THEIR_PACKAGES = ('core', 'models', 'misc', 'datasets')
MISSING_CORE = ('train_FedAvgDepNodis', 'train_Aggr', 'train_AggrDep', 'test_SF')
SOURCE_FILES = ('main.py', 'core/__init__.py', 'core/train_FedAvgDep.py', 'core/test.py',
                'datasets/DatasetLoader.py', 'datasets/TargetDatasetLoader.py',
                'models/DGFANet.py', 'models/Update_depaux.py', 'models/Fed.py',
                'misc/utils.py', 'misc/saver.py', 'misc/metrics_utils.py')
EXPORT_CONFIG = 'configs/pad/fedgpad.py:protocol=OCM_I'   # our archived runs' data
TORCH_INSTALL = ('python -m venv --system-site-packages /tmp/authors_venv && /tmp/authors_venv/bin/'
                 'pip install torch==2.14.1 torchvision==0.29.1 tensorboard h5py scikit-learn')
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


class AuthorsCodeError(RuntimeError):
  """The authors' code, its dependencies or its data are not where the runner needs them."""


def check_source(source: str) -> str:
  """`source` as an absolute path, after checking it holds their files."""
  missing = [f for f in SOURCE_FILES if not os.path.isfile(os.path.join(source, f))]
  if missing:
    raise AuthorsCodeError(
        f'--source={source} is not the FedGPAD authors\' code: missing {", ".join(missing)}. '
        'Expected the files of rshaojimmy/FedGPAD, e.g. `git --git-dir=<mirror> archive HEAD | '
        'tar -x -C /tmp/fedgpad_src`.')
  return os.path.abspath(source)


def require_torch() -> None:
  """Imports what their code imports beyond the project's dependencies, or says how to get it."""
  for name in ('torch', 'torchvision', 'torch.utils.tensorboard', 'h5py', 'sklearn', 'scipy'):
    try:
      __import__(name)
    except ImportError as error:
      raise AuthorsCodeError(
          f'The authors\' code needs {name} ({error}); PyTorch is an optional dependency of this '
          f'runner. Install it apart from the project\'s environment: {TORCH_INSTALL}, then run '
          'this command with /tmp/authors_venv/bin/python.') from error


def interned(argv: list[str]) -> list[str]:
  """Shim 2: argv whose strings are `is`-equal to the same literals in their code."""
  return [sys.intern(str(a)) for a in argv]


def their_depth_path(name: str, rel: str, live: bool) -> str:
  """The depth map their loaders open for frame `rel` of data set `name`: the first k
  directories of `rel` under depth/ (k of the data set, DatasetLoader.py), or the one attack
  map; the rule our fedgpad reader follows (`formats.depth_path`)."""
  if not live:
    return formats.FAKE_DEPTH
  path = formats.depth_path(rel.strip(), formats.DEPTH_DIRS[name])
  if path is None:
    raise AuthorsCodeError(f'{rel} of {name} has fewer than {formats.DEPTH_DIRS[name]} '
                           'directories: their loader would not find its depth map.')
  return path


def read_list(path: str) -> list[tuple[str, int]]:
  """Their `image_list_*.txt`: `<path> <label>` lines."""
  with open(path) as f:
    rows = [line.split() for line in f if line.strip()]
  return [(r[0], int(r[1])) for r in rows]


def _export_root(exported: str, name: str) -> str:
  letter = next(k for k, v in THEIR_NAMES.items() if v == name)
  root = os.path.join(exported, letter)
  if not os.path.isdir(root):
    raise AuthorsCodeError(f'{root} is missing: their defaults train on {", ".join(CENTERS)} and '
                           f'test on {TARGET} (our O, C, M -> I); export protocol OCM_I '
                           '(`tools/export_pad.py --layout=fedgpad`).')
  return os.path.abspath(root)


def _center_batches(root: str, name: str, batch: int) -> tuple[int, int]:
  """The center's training lists and depth maps, checked as their DatasetLoader reads them;
  returns the full batches of its live and attack lists (their loaders drop the last one)."""
  batches = []
  for list_name, live in (('image_list_real.txt', True), ('image_list_fake.txt', False)):
    path = os.path.join(root, list_name)
    if not os.path.isfile(path):
      raise AuthorsCodeError(f'{path} is missing; expected an export in the fedgpad layout.')
    rows = read_list(path)
    for rel, _ in rows:
      depth = os.path.join(root, their_depth_path(name, rel, live))
      if not os.path.isfile(depth):
        raise AuthorsCodeError(f'{depth} is missing: their loader reads it for {rel} of {name} '
                               f'(k = {formats.DEPTH_DIRS[name]}); export with the data set\'s '
                               'depth directories (formats.DEPTH_DIRS).')
    batches.append(len(rows) // batch)
  return tuple(batches)


def frame_size(exported: str) -> tuple[int, int]:
  """The size of the first frame the target's list names."""
  rel = read_list(os.path.join(_export_root(exported, TARGET), 'image_list_all.txt'))[0][0]
  with Image.open(os.path.join(_export_root(exported, TARGET), rel)) as image:
    return image.size


def resized_copy(exported: str, out: str, size: int = IMAGE_SIZE) -> str:
  """Shim 7: the export with every frame of their four data sets resized to `size` x `size`
  (bicubic, the resampling their loaders use), the lists and depth maps linked; `out` is reused
  when a previous call completed it."""
  done = os.path.join(out, 'RESIZED')
  if os.path.isfile(done):
    return out
  for name in CENTERS + (TARGET,):
    root = _export_root(exported, name)
    copy = os.path.join(out, os.path.basename(root))
    for folder, _, names in os.walk(root):
      rel_folder = os.path.relpath(folder, root)
      os.makedirs(os.path.join(copy, rel_folder), exist_ok=True)
      for file in names:
        src, dst = os.path.join(folder, file), os.path.join(copy, rel_folder, file)
        if rel_folder.split(os.sep)[0] in ('train', 'test') and not os.path.lexists(dst):
          with Image.open(src) as image:
            image.convert('RGB').resize((size, size), Image.BICUBIC).save(dst, format='PNG')
        elif not os.path.lexists(dst):
          os.symlink(src, dst)
  with open(done, 'w') as f:
    f.write(f'{os.path.abspath(exported)} {size}\n')
  return out


def lay_out(exported: str, work: str, source: str, batch: int = BATCH) -> dict:
  """Shims 4 and 5: `<work>/datasets/<NAME>` for their defaults' four data sets and a copy of
  their code at `<work>/CODE_DIR`. Returns the code directory and the sizes their run will have:
  their iterations an epoch are the most full batches of any training list."""
  if os.path.exists(work):
    raise AuthorsCodeError(f'{work} exists; give an --out that holds no run of this seed.')
  roots = {name: _export_root(exported, name) for name in CENTERS + (TARGET,)}
  batches = {name: _center_batches(roots[name], name, batch) for name in CENTERS}
  target_list = os.path.join(roots[TARGET], 'image_list_all.txt')
  if not os.path.isfile(target_list):
    raise AuthorsCodeError(f'{target_list} is missing; expected an export in the fedgpad layout.')
  rows = read_list(target_list)
  datasets = os.path.join(work, 'datasets')
  os.makedirs(datasets)
  for name in CENTERS:
    os.symlink(roots[name], os.path.join(datasets, name))
  target = os.path.join(datasets, TARGET)
  os.makedirs(target)
  for entry in os.listdir(roots[TARGET]):
    if entry != 'depth':
      os.symlink(os.path.join(roots[TARGET], entry), os.path.join(target, entry))
  zero = os.path.join(work, 'zero_depth.png')
  Image.fromarray(np.zeros((DEPTH_SIZE, DEPTH_SIZE), np.uint8)).save(zero, format='PNG')
  for depth in [their_depth_path(TARGET, rel, label == 1) for rel, label in rows] + [formats.FAKE_DEPTH]:
    link = os.path.join(target, depth)
    if not os.path.lexists(link):
      os.makedirs(os.path.dirname(link), exist_ok=True)
      exported_map = os.path.join(roots[TARGET], depth)
      os.symlink(exported_map if os.path.isfile(exported_map) else zero, link)
  code = os.path.join(work, CODE_DIR)
  shutil.copytree(source, code, ignore=shutil.ignore_patterns('.git', '__pycache__'))
  return {'code': code, 'iterations_per_epoch': max(max(b) for b in batches.values()),
          'center_batches': batches, 'target_frames': len(rows)}


def source_digest(source: str) -> str:
  """sha256 over their .py files (path and content), to name the code a result came from."""
  h = hashlib.sha256()
  for folder, dirs, names in sorted(os.walk(source)):
    dirs[:] = sorted(d for d in dirs if d not in ('.git', '__pycache__'))
    for name in sorted(n for n in names if n.endswith('.py')):
      path = os.path.join(folder, name)
      h.update(os.path.relpath(path, source).encode() + b'\0')
      with open(path, 'rb') as f:
        h.update(f.read())
  return h.hexdigest()


@contextlib.contextmanager
def _their_process(code: str, device: str):
  """Shims 1 and 3, their directory as cwd and first on sys.path; undone on exit, with their
  packages dropped from sys.modules (their `datasets` would shadow any other)."""
  import torch  # pylint: disable=import-outside-toplevel
  saved_modules = {k: v for k, v in sys.modules.items() if k.split('.')[0] in THEIR_PACKAGES}
  for key in saved_modules:
    del sys.modules[key]
  saved = (os.getcwd(), list(sys.path), list(sys.argv), torch.Tensor.cuda, torch.nn.Module.cuda)
  os.chdir(code)
  sys.path.insert(0, code)
  if device == 'cpu':
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
  for name in MISSING_CORE:
    if not os.path.isfile(os.path.join(code, 'core', name + '.py')):
      stub = types.ModuleType(f'core.{name}', 'Not in the authors\' repository (runner stand-in).')
      setattr(stub, name[0].upper() + name[1:], _absent(name))
      sys.modules[stub.__name__] = stub
  try:
    yield
  finally:
    os.chdir(saved[0])
    sys.path[:], sys.argv[:] = saved[1], saved[2]
    torch.Tensor.cuda, torch.nn.Module.cuda = saved[3], saved[4]
    for key in [k for k in sys.modules if k.split('.')[0] in THEIR_PACKAGES]:
      del sys.modules[key]
    sys.modules.update(saved_modules)


def _absent(name):
  def absent(*args, **kwargs):
    raise AuthorsCodeError(f'core/{name}.py is not in the authors\' repository.')
  return absent


def run_main(code: str, argv: list[str]) -> None:
  """Their main.py as `python main.py <argv>` (shim 2 on argv)."""
  sys.argv[:] = interned([os.path.join(code, 'main.py')] + argv)
  runpy.run_path(os.path.join(code, 'main.py'), run_name='__main__')


class _TimingDone(Exception):
  pass


@contextlib.contextmanager
def _timed(module, cls: str, method: str, limit: int, times: list, when=lambda self: True):
  """Records the wall time of `module.cls.method` calls for which `when(self)`; stops the run
  (raises _TimingDone) after `limit` of them."""
  klass = getattr(module, cls)
  original = getattr(klass, method)

  def timed(self, *args, **kwargs):
    if not when(self):
      return original(self, *args, **kwargs)
    start = time.perf_counter()
    out = original(self, *args, **kwargs)
    times.append(time.perf_counter() - start)
    print(f'[authors_fedgpad] {cls}.{method} #{len(times)}: {times[-1]:.1f} s', flush=True)
    if len(times) >= limit:
      raise _TimingDone
    return out
  setattr(klass, method, timed)
  try:
    yield
  finally:
    setattr(klass, method, original)


def their_metrics(code: str, snapshot: str = SNAPSHOT) -> dict:
  """Their Test's .h5 frame scores measured by their misc/metrics_utils.py: `performances_ZeroShot`
  (ACC, AUC and HTER at the threshold minimising |TPR + FPR - 1| on the target's own ROC) and
  `performances` (also the HTER at the threshold chosen the same way on the data centers'
  training frames, their 'Devp' scores)."""
  import h5py  # pylint: disable=import-outside-toplevel
  from misc import metrics_utils  # pylint: disable=import-outside-toplevel  (theirs, on sys.path)
  folder = os.path.join(code, RESULTS, 'testscore', f'{SAVE_NAME}-TO-{TARGET}')
  with h5py.File(os.path.join(folder, f'Test_results_{snapshot}.h5')) as f:
    test_scores, test_labels = f['test_scores'][()], f['test_labels'][()].astype(int)
  with h5py.File(os.path.join(folder, f'Devp_results_{snapshot}.h5')) as f:
    dev_scores, dev_labels = f['devp_scores'][()], f['devp_labels'][()].astype(int)
  score_file = os.path.join(folder, f'Test_scores_{snapshot}.txt')   # their score-file format
  with open(score_file, 'w') as f:
    f.writelines(f'{float(s)!r} {int(l)}\n' for s, l in zip(test_scores, test_labels))
  acc, auc, hter = metrics_utils.performances_ZeroShot(score_file)
  names = ('val_threshold', 'test_threshold', 'val_ACC', 'val_ACER', 'test_ACC', 'test_APCER',
           'test_BPCER', 'test_ACER', 'test_threshold_ACER')
  perf = metrics_utils.performances(dev_scores, dev_labels, test_scores, test_labels)
  return {'hter': float(hter), 'auc': float(auc), 'acc': float(acc),
          'performances': {k: float(v) for k, v in zip(names, perf)},
          'num_test_frames': int(len(test_scores)), 'num_live': int(np.sum(test_labels == 1)),
          'num_spoof': int(np.sum(test_labels == 0)), 'num_dev_frames': int(len(dev_scores))}


def _set_threads(threads: int) -> None:
  for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
    os.environ[var] = str(threads)
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(threads)


def _flag(flags: list[str], name: str, default):
  return type(default)(flags[flags.index(name) + 1]) if name in flags else default


def run_seed(source: str, exported: str, work: str, seed: int, device: str = 'cpu',
             threads: int = 1, timing_steps: int = 0, their_flags: str = '') -> dict:
  """One seed: their Train then Test at their defaults (or only timings); writes and returns
  `<work>/result.json` (`<work>/timing.json` when timing). `their_flags` (e.g. '--batchsize 2
  --epochs 1 --snapshotnum 1') go to both of their commands: smoke tests only, never a result
  (result.json says `defaults: false`)."""
  source = check_source(source)
  require_torch()
  _set_threads(threads)
  import torch  # pylint: disable=import-outside-toplevel
  if device == 'cuda' and not torch.cuda.is_available():
    raise AuthorsCodeError('--device=cuda, but torch sees no GPU; use --device=cpu.')
  flags = shlex.split(their_flags)
  batch, epochs = _flag(flags, '--batchsize', BATCH), _flag(flags, '--epochs', EPOCHS)
  snapshot = _flag(flags, '--snapshotnum', SNAPSHOT)
  size = frame_size(exported)
  frames = exported
  if size != (IMAGE_SIZE, IMAGE_SIZE):
    frames = resized_copy(exported, os.path.normpath(exported) + f'_{IMAGE_SIZE}')
  layout = lay_out(frames, work, source, batch)
  code = layout['code']
  train = ['--run_type', 'Train', '--manual_seed', str(seed)] + flags
  test = ['--run_type', 'Test', '--manual_seed', str(seed)] + flags
  info = {'seed': seed, 'defaults': not flags, 'exported': os.path.abspath(exported),
          'exported_frame_size': size, 'frames': os.path.abspath(frames), 'source': source,
          'source_sha256': source_digest(source), 'device': device, 'threads': threads,
          'mapping': {k: v for k, v in THEIR_NAMES.items() if v in CENTERS + (TARGET,)},
          'train_argv': train, 'test_argv': test, 'batchsize': batch, 'epochs': epochs,
          'snapshot': snapshot, **{k: v for k, v in layout.items() if k != 'code'}}
  if timing_steps:
    return _timing(code, train, test, timing_steps, info, device, work)
  with _their_process(code, device):
    start = time.perf_counter()
    run_main(code, train)
    info['train_s'] = time.perf_counter() - start
    path = os.path.join(code, RESULTS, 'snapshots', SAVE_NAME, f'FeatExt-{snapshot}.pt')
    if not os.path.isfile(path):   # their Test would silently score random weights
      raise AuthorsCodeError(f'{path} was not written; their Test needs it.')
    start = time.perf_counter()
    run_main(code, test)
    info['test_s'] = time.perf_counter() - start
    info['metrics'] = their_metrics(code, snapshot)
  info['max_rss_gb'] = _max_rss_gb()
  _write_json(os.path.join(work, 'result.json'), info)
  return info


def _max_rss_gb() -> float:
  """This process's peak resident memory (their data loaders' workers not counted)."""
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _timing(code, train, test, steps, info, device, work) -> dict:
  updates, batches = [], []
  with _their_process(code, device):
    from models import DGFANet, Update_depaux  # pylint: disable=import-outside-toplevel
    with contextlib.suppress(_TimingDone), _timed(Update_depaux, 'LocalUpdate', 'train', steps,
                                                  updates):
      run_main(code, train)
    info['train_max_rss_gb'] = _max_rss_gb()
    with contextlib.suppress(_TimingDone), _timed(DGFANet, 'FeatExtractor', 'forward', steps,
                                                  batches, when=lambda m: not m.training):
      run_main(code, test)
  info['max_rss_gb'] = _max_rss_gb()
  # The first call of each pays for the data loaders' start (their 6 workers a loader).
  update_s = statistics.median(updates[1:] or updates)
  batch_s = statistics.median(batches[1:] or batches)
  rounds = info['iterations_per_epoch'] * info['epochs']
  test_batches = math.ceil(info['target_frames'] / info['batchsize']) + sum(
      sum(info['center_batches'][n]) for n in CENTERS)   # the target, then the 'Devp' lists
  info.update(timing_local_updates_s=updates, timing_test_batches_s=batches,
              local_update_s=update_s, round_s=len(CENTERS) * update_s, test_batch_s=batch_s,
              rounds=rounds, test_batches=test_batches,
              rounds_to_snapshot=info['iterations_per_epoch'] * int(info['snapshot']),
              estimate_train_s=rounds * len(CENTERS) * update_s,
              estimate_test_s=test_batches * batch_s)
  info['estimate_seed_s'] = info['estimate_train_s'] + info['estimate_test_s']
  _write_json(os.path.join(work, 'timing.json'), info)
  return info


def _write_json(path: str, data: dict) -> None:
  files.write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def export_benchmark(spec: str, seed: int, out: str) -> str:
  """Our benchmark of config `spec` at `seed`, in the fedgpad layout under `out`."""
  from fedjax_face import main as fedjax_main  # pylint: disable=import-outside-toplevel
  from fedjax_face.tools import export_pad  # pylint: disable=import-outside-toplevel
  path, _, arg = spec.partition(':')
  config = fedjax_main.load_config_file(
      (path if os.path.isabs(path) else os.path.join(REPO, path)) + (f':{arg}' if arg else ''))
  config.seed = seed
  export_pad.export(config, 'fedgpad', out)
  return out


def summary(results: list[dict]) -> dict:
  """Mean and standard deviation over seeds of their HTER and AUC (%)."""
  out = {'seeds': [r['seed'] for r in results], 'defaults': all(r['defaults'] for r in results)}
  for key in ('hter', 'auc'):
    values = [100 * r['metrics'][key] for r in results]
    out[key] = {'values': values, 'mean': statistics.mean(values),
                'std': statistics.stdev(values) if len(values) > 1 else 0.0}
  return out


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--source', required=True, help='the authors\' code (rshaojimmy/FedGPAD)')
  parser.add_argument('--out', required=True, help='one directory seed<N>/ a seed is written in')
  parser.add_argument('--seeds', default='0', help='comma separated, e.g. 0,1,2')
  parser.add_argument('--exported', default='',
                      help='an existing fedgpad-layout export ({seed} is replaced); default: '
                           'export --export_config at each seed under <out>/export_seed<N>')
  parser.add_argument('--export_config', default=EXPORT_CONFIG)
  parser.add_argument('--device', choices=('cpu', 'cuda'), default='cpu')
  parser.add_argument('--threads', type=int, default=1)
  parser.add_argument('--timing_steps', type=int, default=0,
                      help='only time K local updates and K test batches, then estimate')
  parser.add_argument('--their_flags', default='',
                      help='smoke tests only, never a result: more flags for their main.py')
  args = parser.parse_args(argv)
  try:
    check_source(args.source)
    for var in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
      os.environ[var] = str(args.threads)   # before torch starts its thread pools
    require_torch()
    results = []
    for seed in (int(s) for s in args.seeds.split(',')):
      if os.path.exists(os.path.join(args.out, f'seed{seed}')):
        raise AuthorsCodeError(f'{args.out}/seed{seed} exists; give an --out that holds no run '
                               'of this seed.')
      exported = args.exported.format(seed=seed) if args.exported else export_benchmark(
          args.export_config, seed, os.path.join(args.out, f'export_seed{seed}'))
      results.append(run_seed(args.source, exported, os.path.join(args.out, f'seed{seed}'), seed,
                              args.device, args.threads, args.timing_steps, args.their_flags))
  except AuthorsCodeError as error:
    sys.exit(f'authors_fedgpad: {error}')
  if not args.timing_steps:
    _write_json(os.path.join(args.out, 'summary.json'), summary(results))
    print(json.dumps(summary(results), indent=1))


if __name__ == '__main__':
  main()
