"""Who is in the federation: each data holder's description, and the skeleton of the federated view
the method is built on when no party holds every client's data.

In the simulator one process holds every client's images, and `method.build(config, model, fed)`
reads from `fed` only its shape: the client count, each client's example count (the aggregation
weights n_k, Alg. 1 line 11 of FedGC), its class count (the padded class tables, `[K, C_max]`),
the image shape and the global identity of each class (FedGC's server rows). A federation learns
these from the holders' descriptions (`describe`), and both sides build the method on the same
skeleton (`skeleton`), so the server's functions and the holders' are the simulator's.

Identities are numbered client by client, as `data.source='client_folders'` numbers them (the
same folder name at two holders is two identities): the simulator of the same folders is the
federation's reference.
"""

import dataclasses
from typing import NamedTuple

import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import federated
from fedjax_face.io import provenance


class Description(NamedTuple):
  """What a data holder tells the server before the first round: its client index (agreed with
  the server when the holder joined), n_k, C_k, the shape of its images, and its code (`code`:
  the commit and the library versions that change numerics)."""
  client: int
  num_examples: int
  num_classes: int
  image_shape: tuple[int, int, int]
  code: str = ''
  targets: tuple[str, ...] = ()   # per-sample targets beside the labels: 'depth:32x32:float32'

  def to_config(self) -> dict:
    return {'client': self.client, 'num_examples': self.num_examples,
            'num_classes': self.num_classes, 'image_shape': list(self.image_shape),
            'code': self.code, 'targets': list(self.targets)}

  @classmethod
  def from_config(cls, record) -> 'Description':
    return cls(int(record['client']), int(record['num_examples']), int(record['num_classes']),
               tuple(int(x) for x in record['image_shape']), str(record.get('code', '')),
               tuple(str(t) for t in record.get('targets', [])))


def code_label() -> str:
  """This process's code: the commit of its checkout (`io/provenance.py`'s label, '+dirty' when
  tracked files differ) and the versions of the libraries whose numerics a round depends on."""
  libraries = ' '.join(f'{name}=={v}' for name, v in provenance.versions().items())
  return f'{provenance.commit_label({"git": provenance.git_state()})} {libraries}'


def target_spec(name: str, values: np.ndarray) -> str:
  """'name:32x32:float32': a per-sample target's name, the shape of one sample's, its dtype."""
  return f'{name}:{"x".join(map(str, values.shape[1:]))}:{values.dtype}'


def blank_targets(specs) -> dict[str, np.ndarray] | None:
  """One zero sample of each target `target_spec` names (the skeleton's), or None for none."""
  out = {}
  for spec in specs:
    name, shape, dtype = spec.split(':')
    out[name] = np.zeros((1,) + tuple(int(x) for x in shape.split('x') if x), np.dtype(dtype))
  return out or None


def describe(fed: federated.FederatedData, client: int, code: str = '') -> Description:
  """The description of the holder whose own data is `fed`'s one client."""
  return Description(client, int(fed.num_examples[0]), int(fed.class_mask[0].sum()),
                     tuple(int(x) for x in fed.images.shape[1:]), code,
                     tuple(target_spec(n, v) for n, v in sorted((fed.targets or {}).items())))


def check_roster(config, descriptions: list[Description], code: str | None = None
                 ) -> list[Description]:
  """The descriptions in client order, checked against the config every party reads and, when
  `code` is given (the server's `code_label()`), against the server's code.

  Raises:
    checks.UsageError: a client index twice or missing, a holder whose images are not the
      config's `data.image_size`, or one running other code; one line naming the holder.
  """
  expected = config.federated.num_clients
  by_client = {}
  for d in descriptions:
    if d.client in by_client:
      raise checks.UsageError(f'two data holders say they are client {d.client}; expected each '
                              f'of 0..{expected - 1} once.')
    by_client[d.client] = d
  if sorted(by_client) != list(range(expected)):
    raise checks.UsageError(f'federated.num_clients={expected} but the data holders are clients '
                            f'{sorted(by_client)}; expected each of 0..{expected - 1} once.')
  size = config.data.image_size
  for d in by_client.values():
    if d.targets != by_client[min(by_client)].targets:
      raise checks.UsageError(f'data holder of client {d.client} has targets {list(d.targets)}; '
                              f'client {min(by_client)} has {list(by_client[min(by_client)].targets)}: '
                              'expected the same on every holder.')
    if d.image_shape[:2] != (size, size) or d.num_examples < 1 or d.num_classes < 1:
      raise checks.UsageError(
          f'data holder of client {d.client}: {d.num_examples} images of {d.num_classes} '
          f'classes, shape {list(d.image_shape)}; expected data.image_size={size} '
          f'([{size}, {size}, 3]) and at least one image.')
    if code is not None and d.code != code:
      raise checks.UsageError(f'data holder of client {d.client} runs {d.code or "unrecorded"}; '
                              f'the server runs {code}: expected the same code on every party.')
  return [by_client[k] for k in range(expected)]


def identity_table(class_counts) -> np.ndarray:
  """int32 `[K, C_max]`: client k's local class c is identity sum_{j<k} C_j + c; -1 pads."""
  counts = np.asarray(class_counts, np.int64)
  table = np.full((len(counts), int(counts.max())), -1, np.int32)
  first = np.concatenate([[0], np.cumsum(counts)[:-1]])
  for k, (start, count) in enumerate(zip(first, counts)):
    table[k, :count] = np.arange(start, start + count)
  return table


def skeleton(descriptions: list[Description], subject_frames: int = 0
             ) -> federated.FederatedData:
  """The federated view the method is built on, without images (one blank image gives the shape;
  `run.setup.one_client_data` reads it for the message's shapes): each client's example count
  and class table, from the roster."""
  shape = descriptions[0].image_shape
  indices = [np.zeros(d.num_examples, np.int64) for d in descriptions]
  labels = [np.zeros(d.num_examples, np.int32) for d in descriptions]
  return federated.FederatedData(np.zeros((1,) + tuple(shape), np.uint8), indices, labels,
                                 identity_table([d.num_classes for d in descriptions]),
                                 targets=blank_targets(descriptions[0].targets),
                                 subject_frames=subject_frames)


def placed(skeleton_fed: federated.FederatedData, own: federated.FederatedData,
           client: int) -> federated.FederatedData:
  """A holder's own data (`own`, one client) at its place `client` of the federation's view, so
  that `federated.sample_round(view, [client], ...)` draws the very batches the simulator draws
  for that client: the draw is a pure function of (seed, round, client) and of that client's
  own samples alone."""
  indices = list(skeleton_fed.client_indices)
  labels = list(skeleton_fed.client_local_labels)
  indices[client], labels[client] = own.client_indices[0], own.client_local_labels[0]
  return dataclasses.replace(skeleton_fed, images=own.images, client_indices=indices,
                             client_local_labels=labels, targets=own.targets)
