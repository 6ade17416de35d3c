"""`data.source='pad'`: the embedded face anti-spoofing benchmark (`data/synthetic/pad_benchmark.py`)
as a data source. The data centers are the data's own clients (each holds its attack and live
classes), depth maps are per-sample targets, and the PAD evaluator scores the unseen target's
test videos and the data centers' held-out ones (`pad_sets`); subject-level membership inference
reads each frame's subject (`pad_subjects`)."""

import dataclasses
from typing import NamedTuple, Sequence

import ml_collections
import numpy as np

from fedjax_face.data import types, views
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.data.synthetic.pad_benchmark import ATTACKS, DOMAINS, DOMAIN_NAMES, PadSet

TASK = 'anti_spoofing'
SUBJECT_STRIDE = 1 << 20            # subject ids of data center k start at k * this
DATA_FIELDS = ('sources', 'target', 'center_attacks', 'pooled', 'subjects', 'test_subjects',
               'live_videos', 'attack_videos', 'frames')


class PadSets(NamedTuple):
  """What the PAD evaluator scores: the data centers (`sources`), the unseen `target`, each scored
  domain's test frames (`test`: the target first, then `data.pad.extra_targets`) and the data
  centers' held-out frames (`validation`: the paper's threshold, and the in-domain error; a
  `CenterFrames`, each frame's data center in `validation.center`)."""
  sources: tuple[str, ...]
  target: str
  test: dict[str, PadSet]
  validation: PadSet
  protocol: str = ''   # every training source named (`protocol`); '' from a source without one


def run_name(config) -> str:
  """results.json's name of a run after its method's: its source domains and the target."""
  p = config.data.pad
  return f"{'pooled ' if p.pooled else ''}{'+'.join(p.sources)}->{p.target}"


def protocol(config) -> str:
  """The protocol naming every training source (`PadSets.protocol`): the data centers joined by
  '&', ' -> ', the target ('O&C&I -> M', as proj/pad's tables label a protocol; the notation of
  sources/pad_lists.py:protocol, where a training-only source is '+<name>': the embedded
  benchmark has no such source). Pooling (the 'All' baseline) changes who holds the frames, not
  the protocol. `run_name` ('O+C+I->M') stays as archived runs and `reproduce` name them."""
  p = config.data.pad
  return f"{'&'.join(p.sources)} -> {p.target}"


def config_section(sources=('O', 'C', 'I'), target='M') -> ml_collections.ConfigDict:
  """`config.data.pad`: which domains are the data centers and which the unseen target, and the
  benchmark's sizes."""
  c = ml_collections.ConfigDict()
  c.sources = tuple(sources)   # the data centers (clients), in client order
  c.target = target            # the users' domain, never trained on (leave-one-out)
  c.center_attacks = ()        # () = every data center trains on all its attacks; else one
                               # '+'-joined set of kinds per data center, in `sources` order
                               # (Table X: ('print+cut', 'display+replay'))
  c.extra_targets = ()         # other unseen domains scored too, e.g. a Single run scored on
                               # every other domain (the benchmark's calibration, Table I)
  c.pooled = False             # True: one client holding every data center's frames (the
                               # paper's 'All' baseline: centralized, privacy broken)
  c.subjects = 48              # per domain (the real sets have 35-165; with 20, i.e. 12 to train
                               # on, a detector barely learned its own domain: docs/pad.md)
  c.test_subjects = 8          # of them held out (the target's test set; the sources' validation)
  c.live_videos = 2            # per subject
  c.attack_videos = 4
  c.frames = 4                 # per video
  c.subject_frames = 0         # 0: batches as `federated.balanced_classes` draws them; k > 0
                               # (even): drawn by subject, every step k frames (k/2 live, k/2
                               # attack) of each training subject (subject-level DP-SGD:
                               # algorithms/pad_dp_sgd.py; data/federated.py)
  return c
def check_config(config) -> None:
  """The `data.pad` section of a `data.source='pad'` config, and what it implies elsewhere."""
  p = config.data.pad
  unknown = [d for d in tuple(p.sources) + (p.target,) if d not in DOMAINS]
  if unknown:
    raise ValueError(f'config.data.pad names domains {unknown}; expected names from '
                     f'{DOMAIN_NAMES}.')
  if not p.sources or len(set(p.sources)) != len(p.sources) or p.target in p.sources:
    raise ValueError(f'config.data.pad.sources={tuple(p.sources)} with target={p.target!r}; '
                     'expected distinct data centers, none of them the target (leave-one-out).')
  extra = tuple(p.extra_targets)
  if any(d not in DOMAINS for d in extra) or set(extra) & (set(p.sources) | {p.target}) or (
      len(set(extra)) != len(extra)):
    raise ValueError(f'config.data.pad.extra_targets={extra} with sources={tuple(p.sources)} and '
                     f'target={p.target!r}; expected distinct domains from {DOMAIN_NAMES}, '
                     'none of them a data center or the target.')
  train_attacks(p)
  check_clients(config, 'data.pad', tuple(p.sources), p.pooled)
  frames = p.get('subject_frames', 0)
  if not isinstance(frames, int) or isinstance(frames, bool) or frames < 0 or frames % 2:
    raise ValueError(f'config.data.pad.subject_frames={frames!r}; expected 0 or an even number '
                     'of frames per subject (half live, half attack).')
  if frames and p.pooled:
    raise ValueError(f'config.data.pad.subject_frames={frames} with pooled=True; subject draws '
                     "are a data center's own; expected pooled=False.")


def check_clients(config, where: str, centers: tuple[str, ...], pooled: bool) -> None:
  """What a PAD source's data centers (`centers`, read from `config.<where>`) imply for the
  clients, the BatchNorm groups and the balanced batches (every PAD source)."""
  what, field = ('benchmark', 'sources') if where == 'data.pad' else ('lists', 'centers')
  clients = 1 if pooled else len(centers)
  if config.federated.num_clients != clients:
    raise ValueError(f'config.federated.num_clients={config.federated.num_clients}; the PAD '
                     f'{what} has one client per data center (one for all with {where}.pooled): '
                     f'expected {clients} ({where}.{field}={centers}).')
  groups = config.model.get('batch_norm_groups', 1)
  if groups != 1 and not (pooled and config.federated.balanced_classes
                          and groups == len(centers)):
    raise ValueError(f'config.model.batch_norm_groups={groups} with {where}.pooled={pooled}, '
                     f'federated.balanced_classes={config.federated.balanced_classes} and '
                     f'{len(centers)} data centers; expected 1, or (pooled, balanced classes) '
                     f'{len(centers)}: one BatchNorm slice per data center of a pooled batch.')
  classes = 2 * len(centers) if pooled else 2
  if config.federated.balanced_classes and config.federated.batch_size % classes:
    raise ValueError(f'config.federated.batch_size={config.federated.batch_size} with balanced '
                     f'classes; a client holds {classes} classes (attack and live of each of its '
                     f'data centers): expected a multiple of {classes}.')


def train_attacks(p) -> list[tuple[str, ...]]:
  """The attack kinds each data center of `config.data.pad` trains on, in `sources` order."""
  if not p.center_attacks:
    return [tuple(DOMAINS[source].attacks) for source in p.sources]
  if len(p.center_attacks) != len(p.sources):
    raise ValueError(f'config.data.pad.center_attacks={tuple(p.center_attacks)} has '
                     f'{len(p.center_attacks)} entries for {len(p.sources)} data centers '
                     f'{tuple(p.sources)}; expected one per data center, or ().')
  kinds = []
  for source, entry in zip(p.sources, p.center_attacks):
    entry_kinds = tuple(str(entry).split('+'))
    if any(k not in ATTACKS for k in entry_kinds):
      raise ValueError(f'config.data.pad.center_attacks entry {entry!r} (data center {source}); '
                       f"expected '+'-joined kinds from {ATTACKS}.")
    kept = tuple(k for k in entry_kinds if k in DOMAINS[source].attacks)
    if not kept:
      raise ValueError(f'config.data.pad.center_attacks entry {entry!r} leaves data center '
                       f'{source} no attack (it has {tuple(DOMAINS[source].attacks)}).')
    kinds.append(kept)
  return kinds


def domain_frames(name: str, config) -> PadSet:
  """Every frame of domain `name` at the sizes of `config.data.pad`."""
  p = config.data.pad
  return pad_benchmark.make_domain(name, seed=config.seed, image_size=config.data.image_size,
                     subjects=p.subjects, test_subjects=p.test_subjects,
                     live_videos=p.live_videos, attack_videos=p.attack_videos, frames=p.frames)


def training_frames(frames: PadSet, kinds: tuple[str, ...]) -> PadSet:
  """A data center's training frames: its train subjects' live frames and attacks of `kinds`."""
  kept = [ATTACKS.index(a) for a in kinds]
  return frames.take((frames.split == 0) & (frames.live | np.isin(frames.attack, kept)))


def held_out(frames: PadSet) -> PadSet:
  """A domain's test subjects (a data center's validation subjects)."""
  return frames.take(frames.split == 1)


@dataclasses.dataclass(frozen=True)
class CenterFrames(PadSet):
  """Several data centers' frames as one set (`concat`: the data centers' held-out 'validation'
  frames), each frame with its data center: `center` is its index in the source's data centers
  (`data.pad.sources`, `data.pad_lists.centers`), i.e. the client that holds that center. Every
  source knows it, whether or not its lists name subjects; `take` keeps it beside the frames."""
  center: np.ndarray   # int32 [N]


def unique_subjects(sets: list[PadSet], centers: Sequence[int] | None = None) -> list[np.ndarray]:
  """Data center k's subject s as `k * SUBJECT_STRIDE + s`, k = `centers[i]` for `sets[i]`
  (default: i): a domain numbers its own subjects from 0, so two centers' would otherwise share
  ids, and the same subject gets the same id in the training frames and in the validation frames;
  unknown subjects (-1) stay -1."""
  centers = range(len(sets)) if centers is None else centers
  return [np.where(s.subject >= 0, k * SUBJECT_STRIDE + s.subject, -1).astype(np.int32)
          for k, s in zip(centers, sets)]


def concat(sets: list[PadSet], name: str, centers: Sequence[int] | None = None) -> CenterFrames:
  """Several data centers' frames as one set (video and subject ids made unique across them),
  each frame's data center in `center`: `centers[i]` for the frames of `sets[i]` (default: i; a
  source whose training-only centers give no held-out frames names the others' indices)."""
  centers = list(range(len(sets)) if centers is None else centers)
  offsets = np.cumsum([0] + [int(s.video.max()) + 1 for s in sets[:-1]])
  fields = {f.name: np.concatenate([getattr(s, f.name) for s in sets])
            for f in dataclasses.fields(PadSet) if f.name not in ('domain', 'video', 'subject')}
  video = np.concatenate([s.video + o for s, o in zip(sets, offsets)])
  center = np.concatenate([np.full(len(s.live), k, np.int32) for s, k in zip(sets, centers)])
  subject = np.concatenate(unique_subjects(sets, centers))
  return CenterFrames(domain=name, video=video, subject=subject, center=center, **fields)


def load(config):
  """The benchmark as `types.AntiSpoofingData`: the data centers' training frames (train
  subjects, the attacks of `train_attacks` and live), labelled 2k (attack) and 2k + 1 (live) for
  data center k, which holds exactly those two classes (`client_identities`; `pooled`: one
  client holds all, so that live = an odd class either way), their depth maps
  (`train_targets`), and `eval_sets`: 'test' = the target's test subjects, 'validation' = the data
  centers' held-out subjects (the paper's threshold from the data centers' data; also the
  in-domain error), and 'test:<X>' for each of `extra_targets`."""
  p = config.data.pad
  sources = [domain_frames(name, config) for name in p.sources]
  train = [training_frames(frames, kinds) for frames, kinds in zip(sources, train_attacks(p))]
  target = domain_frames(p.target, config)
  return benchmark(train, {'test': held_out(target),
                           'validation': concat([held_out(s) for s in sources], 'sources'),
                           **{f'test:{name}': held_out(domain_frames(name, config))
                              for name in p.extra_targets}}, p.pooled)


def benchmark(train: list[PadSet], eval_sets: dict[str, PadSet],
              pooled: bool) -> types.AntiSpoofingData:
  """Every PAD source's `types.AntiSpoofingData`: data center k's training frames `train[k]`
  labelled 2k (attack) and 2k + 1 (live), the client holding exactly those two classes (pooled:
  one client holds all, so that live = an odd class either way), their depth maps as
  `train_targets['depth']`, `eval_sets` as given, and each training frame's subject numbered
  across the data centers as `concat` numbers the validation subjects (`unique_subjects`; -1 where
  the lists name none)."""
  labels = np.concatenate([2 * k + t.live.astype(np.int32) for k, t in enumerate(train)])
  return types.AntiSpoofingData(
      train_images=np.concatenate([t.images for t in train]),
      train_labels=labels.astype(np.int32), num_identities=2 * len(train),
      client_identities=([np.arange(2 * len(train), dtype=np.int32)] if pooled else
                         [np.array([2 * k, 2 * k + 1], np.int32) for k in range(len(train))]),
      train_targets={'depth': np.concatenate([t.depth for t in train])},
      eval_sets=eval_sets, train_subjects=np.concatenate(unique_subjects(train)))


def training_views(config, data, one_client: bool):
  """The data centers' view; with `subject_frames` drawn by subject (each frame's subject from
  `data.train_subjects`)."""
  fed_view, train_view = views.own_client_views(data, one_client)
  frames = config.data.pad.get('subject_frames', 0)
  if not frames:
    return fed_view, train_view
  by_subject = lambda v: dataclasses.replace(
      v, subject_frames=frames, targets={**v.targets, 'subject': data.train_subjects})
  drawn = by_subject(fed_view)
  return drawn, (drawn if train_view is fed_view else by_subject(train_view))


def data_fields(config) -> tuple[str, ...]:
  del config
  return tuple(f'data.pad.{f}' for f in DATA_FIELDS)


def describe(data) -> str:
  return (f'{len(data.train_images)} training frames of {len(data.client_identities)} data '
          'center(s)')


def pad_sets(config, data) -> PadSets:
  p, sets = config.data.pad, data.eval_sets
  return PadSets(sources=tuple(p.sources), target=p.target,
                 test={p.target: sets['test'], **{d: sets[f'test:{d}'] for d in p.extra_targets}},
                 validation=sets['validation'], protocol=protocol(config))


def pad_subjects(config, data) -> tuple[np.ndarray, np.ndarray]:
  """(each training frame's subject `[N]`, each validation frame's `[M]`), int32, one id per
  (data center, subject) (`unique_subjects`): the training subjects (members) and the same
  centers' held-out subjects (non-members) of subject-level membership inference. The embedded
  benchmark knows every frame's subject; `pad_lists` does not (its lists name none)."""
  del config
  return (np.asarray(data.train_subjects),
          np.asarray(data.eval_sets['validation'].subject))
