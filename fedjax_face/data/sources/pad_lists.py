"""`data.source='pad_lists'`: real anti-spoofing data in the layouts researchers hold
(`data/formats/pad_lists.py`: the FedGPAD authors' lists, SSDG's JSON lists, MCIO text lists;
`data/formats/celeba_spoof.py`: CelebA-Spoof's own JSON labels, layout 'celeba_spoof'), one
root per data center, each in its own layout (several data centers may share one: the MCIO
tree FLIP and FedSIS ship, `data/MCIO` with every data set's lists in `txt/`, names the data set
of each in `datasets`).

Each frame's attack species, where its layout labels it (CelebA-Spoof's spoof type, the
'fedgpad' `_print` / `_video` training lists), is `PadSet.attack`'s index in
`pad_benchmark.ATTACKS`; an attack whose species is not labelled, or not one ATTACKS names
(CelebA-Spoof's 3D masks), is UNKNOWN_ATTACK (-2), live frames LIVE (-1). `protocol` names
every training source ('O&C&I+celeb -> M'), beside `run_name` ('O+C+I+celeb->M').

The benchmark is built exactly as the embedded source builds it (`sources/pad.py:benchmark`):
data center k's training frames labelled 2k (attack) / 2k + 1 (live), one client per data center
(or one for all: `pooled`), their depth maps as `train_targets['depth']` (32x32, the authors'
size; the loss resizes to the model's depth head), `eval_sets` 'test' = the target's 'test'
split and 'validation' = the data centers' 'test' splits. Frames are uint8 RGB at
`data.image_size` (resized bilinearly when the files differ); the model makes RGB + HSV on
device (`preprocess.rgb_hsv`), as for the embedded benchmark. Frames are held in memory.

Example (O&C&I -> M, a root each):

    --config.data.source=pad_lists
    --config.data.pad_lists.centers="('O','C','I')"
    --config.data.pad_lists.roots="('/data/OULU','/data/CASIA','/data/idiap')"
    --config.data.pad_lists.layouts="('fedgpad','fedgpad','fedgpad')"
    --config.data.pad_lists.target=M --config.data.pad_lists.target_root=/data/MSU
    --config.data.pad_lists.target_layout=fedgpad

The same protocol from FLIP's tree as shipped (`data/MCIO/txt`, `data/MCIO/frame`), with
CelebA-Spoof as a fourth, training-only, data center (its training lists alone: it gives no
'validation' frames):

    --config.data.pad_lists.centers="('O','C','I','celeb')"
    --config.data.pad_lists.roots="('/data/MCIO','/data/MCIO','/data/MCIO','/data/MCIO')"
    --config.data.pad_lists.layouts="('mcio','mcio','mcio','mcio')"
    --config.data.pad_lists.datasets="('oulu','casia','replay','celeb')"
    --config.data.pad_lists.target=M --config.data.pad_lists.target_root=/data/MCIO
    --config.data.pad_lists.target_layout=mcio --config.data.pad_lists.target_dataset=msu
    --config.data.pad_lists.depth=ones --config.federated.num_clients=4

CelebA-Spoof in its own layout (`CelebA_Spoof/metas/intra_test/{train,test}_label.json`) as a
fourth data center: its training images train it, its test images join the 'validation' set:

    --config.data.pad_lists.centers="('O','C','I','celeb')"
    --config.data.pad_lists.roots="('/data/MCIO','/data/MCIO','/data/MCIO','/data/CelebA_Spoof')"
    --config.data.pad_lists.layouts="('mcio','mcio','mcio','celeba_spoof')"
    --config.data.pad_lists.datasets="('oulu','casia','replay','')"  (then the target as above)

WMCA / CASIA-SURF / CeFA leave-one-out from FLIP's `data/WCS` tree (the same reader, one frame
a line), here CeFA & SURF -> WMCA (the other two: swap the target with a data center):

    --config.data.pad_lists.centers="('C','S')"
    --config.data.pad_lists.roots="('/data/WCS','/data/WCS')"
    --config.data.pad_lists.layouts="('mcio','mcio')"
    --config.data.pad_lists.datasets="('cefa','surf')"
    --config.data.pad_lists.target=W --config.data.pad_lists.target_root=/data/WCS
    --config.data.pad_lists.target_layout=mcio --config.data.pad_lists.target_dataset=wmca
    --config.data.pad_lists.depth=ones --config.federated.num_clients=2
"""

import os

import ml_collections
import numpy as np

from fedjax_face.core import policy
from fedjax_face.data.formats import celeba_spoof
from fedjax_face.data.formats import pad_lists as formats
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic.pad_benchmark import ATTACKS, DEPTH_SIZE, LIVE, PadSet

TASK = 'anti_spoofing'
DATA_FIELDS = ('centers', 'roots', 'layouts', 'target', 'target_root', 'target_layout',
               'datasets', 'target_dataset', 'depth_dirs', 'depth', 'frames_per_video',
               'attack_lists', 'skip_bad_records', 'pooled')
RESUMABLE_FIELDS = ('skip_bad_records',)   # run/resume.py: a resume may change it
UNKNOWN_ATTACK = -2        # PadSet.attack of an attack frame whose species ATTACKS does not
                           # name: the lists do not say it, or it is outside ATTACKS
# What a data center may be read in: the three list layouts, and CelebA-Spoof's JSON labels.
LAYOUTS = formats.LAYOUTS + (celeba_spoof.LAYOUT,)


def run_name(config) -> str:
  """results.json's name of a run after its method's: its data centers and the target."""
  p = config.data.pad_lists
  return f"{'pooled ' if p.pooled else ''}{'+'.join(p.centers)}->{p.target}"


def protocol(config) -> str:
  """The protocol naming every training source (`PadSets.protocol`): the data centers that give
  'validation' frames joined by '&', then '+<name>' for each training-only one (an MCIO data
  set of `formats.TRAIN_ONLY`: FLIP's CelebA-Spoof lists), ' -> ', the target: FLIP's "OCI -> M"
  with CelebA-Spoof is 'O&C&I+celeb -> M' here. `run_name` stays as archived runs name it."""
  p = config.data.pad_lists
  extra = [n in formats.TRAIN_ONLY for n in _datasets(p)]
  return ('&'.join(c for c, e in zip(p.centers, extra) if not e)
          + ''.join(f'+{c}' for c, e in zip(p.centers, extra) if e) + f' -> {p.target}')


def config_section() -> ml_collections.ConfigDict:
  """`config.data.pad_lists`: the data centers as roots with a layout each, and the target."""
  c = ml_collections.ConfigDict()
  c.centers = ('O', 'C', 'I')   # names of the data centers (clients, in this order)
  c.roots = ()                  # one directory per data center
  c.layouts = ()                # one of LAYOUTS per data center
  c.target = 'M'                # the unseen target's name
  c.target_root = ''
  c.target_layout = ''
  c.datasets = ()               # 'mcio' layout: () or one <ds> per data center ('' = the one in
                                # its root), the lists <ds>_{real,fake}_<split>.txt it reads
  c.target_dataset = ''         # the target's <ds> ('' = the one in target_root)
  c.depth_dirs = ()             # () or one k per data center (0: the data set's,
                                # formats.DEPTH_DIRS by its name): depth/<first k dirs>/...
  c.depth = 'maps'              # 'maps': the depth files, refused when missing; 'ones':
                                # all-ones live maps (CDCN code), no files read
  c.frames_per_video = (1, 2)   # SSDG's sampling of a list of every frame: frames kept per
                                # video of a data center's, of an evaluation list
  c.attack_lists = ()           # 'fedgpad' layout: () or one of 'fake', 'print', 'video' per
                                # data center (image_list_<x>.txt; Table X)
  c.skip_bad_records = False    # True: drop bad list entries (counted in one log line)
  c.pooled = False              # one client holding every data center's frames ('All')
  return c


def check_config(config) -> None:
  p = config.data.pad_lists
  centers = tuple(p.centers)
  if not centers or len(set(centers)) != len(centers) or p.target in centers:
    raise ValueError(f'config.data.pad_lists.centers={centers} with target={p.target!r}; '
                     'expected distinct data centers, none of them the target.')
  for field in ('roots', 'layouts'):
    if len(tuple(p[field])) != len(centers):
      raise ValueError(f'config.data.pad_lists.{field}={tuple(p[field])}; expected one per data '
                       f'center {centers}.')
  for field in ('depth_dirs', 'attack_lists', 'datasets'):
    if tuple(p[field]) and len(tuple(p[field])) != len(centers):
      raise ValueError(f'config.data.pad_lists.{field}={tuple(p[field])}; expected () or one '
                       f'per data center {centers}.')
  for where, layout in [(f'layouts[{i}]', l) for i, l in enumerate(p.layouts)] + [
      ('target_layout', p.target_layout)]:
    if layout not in LAYOUTS:
      raise ValueError(f'config.data.pad_lists.{where}={layout!r}; expected one of '
                       f'{LAYOUTS}.')
  for where, layout, name in [(f'datasets[{i}]', l, n)
                              for i, (l, n) in enumerate(zip(p.layouts, _datasets(p)))] + [
      ('target_dataset', p.target_layout, p.target_dataset)]:
    if name and layout != 'mcio':
      raise ValueError(f'config.data.pad_lists.{where}={name!r} with layout {layout!r}; a data '
                       "set is named only for the 'mcio' layout: expected ''.")
  if p.target_dataset in formats.TRAIN_ONLY:
    raise ValueError(f'config.data.pad_lists.target_dataset={p.target_dataset!r}; '
                     f'{formats.TRAIN_ONLY[p.target_dataset]} ships training lists only: expected '
                     'a data set with test lists (it may be a data center).')
  if all(n in formats.TRAIN_ONLY for n in _datasets(p)):
    raise ValueError(f'config.data.pad_lists.datasets={tuple(p.datasets)}; expected a data '
                     "center with test lists (the 'validation' frames) besides "
                     f'{tuple(formats.TRAIN_ONLY)}.')
  if not p.target_root or any(not r for r in p.roots):
    raise ValueError(f'config.data.pad_lists.roots={tuple(p.roots)}, target_root='
                     f'{p.target_root!r}; expected a directory for every data center and the '
                     'target.')
  missing = [r for r in tuple(p.roots) + (p.target_root,) if not os.path.isdir(r)]
  if missing:
    raise ValueError(f'config.data.pad_lists: the roots {missing} are not directories.')
  if p.depth not in formats.DEPTH_POLICIES:
    raise ValueError(f'config.data.pad_lists.depth={p.depth!r}; expected one of '
                     f"{formats.DEPTH_POLICIES} ('none', no depth loss, is not supported: the "
                     'PAD losses need a depth target per frame).')
  if p.depth == 'maps':
    for center, k in zip(centers, _depth_dirs(p)):
      if not k:
        raise ValueError(f'config.data.pad_lists.depth_dirs: data center {center!r} has no '
                         f'default k (known: {tuple(formats.DEPTH_DIRS)}); set one k per data '
                         "center, or data.pad_lists.depth='ones'.")
  fpv = tuple(p.frames_per_video)
  if len(fpv) != 2 or any(not isinstance(k, int) or k < 1 for k in fpv):
    raise ValueError(f'config.data.pad_lists.frames_per_video={fpv}; expected (frames per '
                     'training video, frames per evaluation video), integers >= 1.')
  for center, layout, attack in zip(centers, p.layouts, _attack_lists(p)):
    if attack not in formats.ATTACK_LISTS or (attack != 'fake' and layout != 'fedgpad'):
      raise ValueError(f'config.data.pad_lists.attack_lists entry {attack!r} (data center '
                       f"{center}, layout {layout!r}); expected one of {formats.ATTACK_LISTS}, "
                       "and 'fake' unless the layout is 'fedgpad'.")
  pad_source.check_clients(config, 'data.pad_lists', centers, p.pooled)


def _depth_dirs(p) -> list[int]:
  given = tuple(p.depth_dirs) or (0,) * len(p.centers)
  return [int(k) or formats.DEPTH_DIRS.get(c, 0) for c, k in zip(p.centers, given)]


def _attack_lists(p) -> list[str]:
  return list(p.attack_lists) or ['fake'] * len(p.centers)


def _datasets(p) -> list[str]:
  return list(p.datasets) or [''] * len(p.centers)


def attack_codes(frames: formats.Frames) -> np.ndarray:
  """`PadSet.attack` of each frame: LIVE, the index in ATTACKS of its labelled species, or
  UNKNOWN_ATTACK (no species labelled, or one ATTACKS does not name: CelebA-Spoof's '3d_mask').
  Species are matched by name, so a species added to ATTACKS gets its code here unchanged."""
  return np.array([LIVE if live else ATTACKS.index(s) if s in ATTACKS else UNKNOWN_ATTACK
                   for live, s in zip(frames.live, frames.species)], np.int8)


def _read_frames(config, root, layout, split, depth_dirs, attack_list, name) -> formats.Frames:
  """The frames one split of one root lists, in `layout`."""
  p = config.data.pad_lists
  if layout == celeba_spoof.LAYOUT:
    return celeba_spoof.read(root, split, depth_dirs=depth_dirs, depth_policy=p.depth,
                             skip_bad_records=p.skip_bad_records)
  return formats.read(layout, root, split, depth_dirs=depth_dirs, depth_policy=p.depth,
                      frames_per_video=p.frames_per_video[split != 'train'],
                      attack_list=attack_list, name=name, skip_bad_records=p.skip_bad_records)


def _read(config, root, layout, split, depth_dirs=None, attack_list='fake', name='') -> PadSet:
  """One split of one root as a PadSet (split 0 = 'train', 1 = 'test'; subject unknown; each
  frame's species where the layout labels it, `attack_codes`)."""
  p, size = config.data.pad_lists, config.data.image_size
  frames = _read_frames(config, root, layout, split, depth_dirs, attack_list, name)
  frames, images, depth = formats.load_frames(frames, size, DEPTH_SIZE, train=split == 'train',
                                              skip_bad_records=p.skip_bad_records,
                                              threads=formats.decode_threads(
                                                  frames.paths, policy.usable_cpus()))
  n = len(frames.paths)
  return PadSet(domain=root, images=images, depth=depth, live=frames.live,
                attack=attack_codes(frames),
                video=frames.video, subject=np.full(n, -1, np.int32),
                split=np.full(n, int(split != 'train'), np.int8))


def load(config):
  """The lists' frames as `types.AntiSpoofingData` (`sources/pad.py:benchmark`). Every list and
  frame is read here, so that a bad one stops the run before anything else is made. A
  training-only data set (`formats.TRAIN_ONLY`) gives training frames alone."""
  p = config.data.pad_lists
  train, validation, held_out_centers = [], [], []
  for center, (root, layout, k, attack, name) in enumerate(zip(
      p.roots, p.layouts, _depth_dirs(p), _attack_lists(p), _datasets(p))):
    train.append(_read(config, root, layout, 'train', k, attack, name))
    if name not in formats.TRAIN_ONLY:
      validation.append(_read(config, root, layout, 'test', name=name))
      held_out_centers.append(center)
  target = _read(config, p.target_root, p.target_layout, 'test', name=p.target_dataset)
  # Each held-out frame keeps its data center's index in `centers` (`CenterFrames.center`): the
  # lists name no subject, and a training-only center before another would shift positions.
  validation = pad_source.concat(validation, 'sources', held_out_centers)
  return pad_source.benchmark(train, {'test': target, 'validation': validation}, p.pooled)


# The same views as the embedded benchmark's: each data center is one client.
training_views = pad_source.training_views


def data_fields(config) -> tuple[str, ...]:
  del config
  return tuple(f'data.pad_lists.{f}' for f in DATA_FIELDS)


def describe(data) -> str:
  return (f'{len(data.train_images)} training frames of {len(data.client_identities)} data '
          'center(s), from list files')


def pad_sets(config, data) -> pad_source.PadSets:
  p = config.data.pad_lists
  return pad_source.PadSets(sources=tuple(p.centers), target=p.target,
                            test={p.target: data.eval_sets['test']},
                            validation=data.eval_sets['validation'], protocol=protocol(config))
