"""Data sources: `config.data.source` names one, as `config.algorithm` names a method.

| source | task | training set | its section |
| --- | --- | --- | --- |
| `synthetic` | recognition | rendered from the seed, in memory (`data/synthetic/benchmark.py`) | `data.synthetic` |
| `insightface` | recognition | `<root>/{train.rec, train.idx, property}`, streamed | `data.insightface` |
| `image_folder` | recognition | `<root>/<identity>/*.jpg`, streamed | `data.image_folder` |
| `tfds` | recognition | a TFDS data set prepared in `data_dir`, streamed | `data.tfds` |
| `client_folders` | recognition | `<root>/<client>/<identity>/*.jpg`: one image folder per client, streamed | `data.client_folders` |
| `fedfr_split` | recognition | FedFR's pre-split RecordIO: one set per client, the public set, the held-out images (`data/formats/fedfr_split.py`), streamed | `data.fedfr_split` |
| `pad` | anti_spoofing | the five-domain PAD benchmark (`data/synthetic/pad_benchmark.py`) | `data.pad` |
| `pad_lists` | anti_spoofing | real PAD data: a root per data center in the FedGPAD / SSDG / MCIO list layouts, or FLIP's shipped `txt/` tree as one root with the data sets named (`data/formats/pad_lists.py`) | `data.pad_lists` |

A source module defines:

  TASK                                   the task its data serve; a task's configs carry the
                                         sections of every source of that task (`add_sections`),
                                         so `--config.data.source=` switches between them
  config_section() -> ConfigDict         its fields, at `config.data.<name>`
  check_config(config) -> None           ValueError naming a wrong field (its own and what it
                                         implies elsewhere, e.g. how many clients fit)
  load(config) -> types.SourceData       the training data (its task's subclass)
  training_views(config, data, one_client) -> (federated view, what the method trains on)
  data_fields(config) -> tuple[str, ...]  the fields that decide the training identities: a run
                                         started from another (`init_from`) must agree on them
  describe(data) -> str                  one line for the log

and may define:

  RESUMABLE_FIELDS                       fields of its section that change how records are
                                         read, not which: a resume may change them (run/resume.py)
  run_name(config) -> str                the second half of results.json's `config_name`
                                         (default: the head's loss and the partition)

and, for the evaluators that read them (each evaluator's check says which it needs):

  pair_sets(config, data, names) -> {name: types.PairSet}     1:1 verification
  PAIR_SET_NAMES                          the names it can render (None: any file stem)
  pair_set_title(name) -> str             how reports title a pair set
  identification_gallery(config, section) -> IdentificationSet   1:N identification
  pad_sets(config, data) -> PadSets                            anti-spoofing scoring
  pad_subjects(config, data) -> (train subject [N], validation subject [M])
                                          each frame's subject, one id per (data center,
                                          subject) (eval/privacy/membership.py)
  held_out_identities(config, num_identities, per_identity) -> (images, labels)
                                          identities no run trains on, rendered as the
                                          training images are (eval/privacy/membership.py)
  identity_probes(config, data, ids, per_identity, num_distractors) -> (images, labels)
                                          new images of training identities and of
                                          distractors (eval/privacy/leakage.py): rendered
                                          (synthetic), or held-out images (fedfr_split's
                                          verification set; the file sources' with
                                          data.private_test_fraction)
  check_identity_probes(config, needed_by)  ValueError when this config's data give no probes
  pictures(config, data, workdir) -> [file names]            pictures of the data, written

`SOURCES` maps a name to its module (a dotted path, imported when used, or a module object: a
test registers one of its own).
"""

import importlib
from types import ModuleType

SOURCES = {
    'synthetic': 'fedjax_face.data.sources.synthetic',
    'insightface': 'fedjax_face.data.sources.insightface',
    'image_folder': 'fedjax_face.data.sources.image_folder',
    'tfds': 'fedjax_face.data.sources.tfds',
    'fedfr_split': 'fedjax_face.data.sources.fedfr_split',
    'client_folders': 'fedjax_face.data.sources.client_folders',
    'pad': 'fedjax_face.data.sources.pad',
    'pad_lists': 'fedjax_face.data.sources.pad_lists',
}


def get(name: str) -> ModuleType:
  """The module of source `name`, or a ValueError naming `config.data.source` and the choices."""
  if name not in SOURCES:
    raise ValueError(f'config.data.source={name!r}; expected one of {tuple(SOURCES)}.')
  module = SOURCES[name]
  return importlib.import_module(module) if isinstance(module, str) else module


def task_of(config) -> str:
  """The task of the config's data source ('recognition', 'anti_spoofing')."""
  return get(config.data.source).TASK


def of_task(task: str) -> tuple[str, ...]:
  """The sources whose data serve `task` ('recognition', 'anti_spoofing')."""
  return tuple(name for name in SOURCES if get(name).TASK == task)


def add_sections(config, task: str) -> None:
  """Adds `config.data.<name>` for every source of `task`, with its defaults."""
  for name in of_task(task):
    config.data[name] = get(name).config_section()


def section(config):
  """`config.data.<source>`, or a ValueError saying how to add it."""
  name = config.data.source
  if name not in config.data:
    raise ValueError(f'config.data.{name} is missing; data.source={name!r} reads its settings '
                     f'there (a config of a {get(name).TASK} task carries it; or add '
                     f'`c.data.{name} = sources.get({name!r}).config_section()`).')
  return config.data[name]


def check_config(config) -> None:
  """The source's own checks, after its section is found."""
  section(config)
  get(config.data.source).check_config(config)


def load(config):
  """The training data of `config.data.source`."""
  return get(config.data.source).load(config)


def training_views(config, data, one_client: bool):
  """(federated view, what the method trains on): see `views.identity_views`."""
  return get(config.data.source).training_views(config, data, one_client)


def data_fields(config) -> tuple[str, ...]:
  """The config fields that decide a run's training identities and their images."""
  return ('seed', 'data.source', 'data.image_size') + tuple(
      get(config.data.source).data_fields(config))


def run_name(config) -> str:
  """What a run on this source is called after its method's name (results.json's `config_name`):
  the source's `run_name`, else the head's loss and the partition of the identities."""
  module = get(config.data.source)
  if hasattr(module, 'run_name'):
    return module.run_name(config)
  return f'{config.head.loss}/{config.federated.partition}'


def require(config, capability: str, needed_by: str) -> ModuleType:
  """The source's module when it provides `capability` (e.g. 'pair_sets'), else a ValueError
  naming who needs it."""
  module = get(config.data.source)
  if not hasattr(module, capability):
    raise ValueError(f'{needed_by} with data.source={config.data.source!r}: that source has no '
                     f'{capability}; expected a source that has ('
                     f'{", ".join(n for n in SOURCES if hasattr(get(n), capability))}).')
  return module
