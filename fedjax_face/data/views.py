"""The views a run trains on, from identity-labelled training data: which identities each client
holds (`client_partition`), and what a federated or a centralized method sees (`identity_views`).

Every face-recognition source uses these; a source whose data come with their own clients (the
anti-spoofing data centers) makes its views itself.
"""

import dataclasses

import numpy as np

from fedjax_face.data import federated, partition, splits


def client_partition(config, num_identities: int, families: np.ndarray | None = None,
                     first: int = 0) -> list[np.ndarray]:
  """The partition of identities first..num_identities-1 over the clients: exclusive, with
  look-alike families (`families[i]`: identity i's family; None: every identity its own) spread
  over different clients, plus shared identities when `federated.shared_fraction` > 0 (the FedGC
  general case). `first` > 0 leaves the public identities 0..first-1 out
  (`data.public_identities`)."""
  rng = np.random.default_rng([config.seed, 0xc11e47])
  clients = partition.identity_exclusive(num_identities - first, config.federated.num_clients,
                                         config.federated.partition, rng)
  clients = [ids + first for ids in clients]
  if has_families(families) and len(clients) > 1:
    clients = partition.spread_families(clients, families, rng)
  return partition.share_identities(clients, config.federated.shared_fraction,
                                    config.federated.shared_group_size, rng)


def has_families(families: np.ndarray | None) -> bool:
  """Whether some look-alike family holds more than one identity."""
  return families is not None and len(families) > 0 and bool(np.bincount(families).max() > 1)


def identity_views(config, data, one_client: bool):
  """(the federated view, what the method trains on) of identity-labelled `data` (a
  `types.FaceBenchmark`): the clients' partition, which the evaluators read, and either the same
  or, for a centralized method, one client holding its identities.

  With `data.public_identities` = K_g > 0 (`splits.py`), clients deal out only the private
  identities' training images and every client shares the public identities' images
  (`FederatedData.public_indices`); a centralized run trains on the public identities alone
  (`data.centralized_on='public'`: FedFR's pre-training) or on the public and private training
  images ('all': its upper bound). The private identities' held-out images
  (`data.private_test_fraction`) are in no view.
  """
  images, labels, families = data.train_images, data.train_labels, data.train_families
  num_public = config.data.public_identities
  if not num_public and not config.data.private_test_fraction:
    fed_view = federated.build(images, labels,
                               client_partition(config, data.num_identities, families))
    if not one_client:
      return fed_view, fed_view
    return fed_view, federated.build(images, labels, partition.single_client(data.num_identities))
  split = splits.split_identities(labels, num_public, config.data.private_test_fraction,
                                  config.seed)
  private = federated.build(images, split.training_labels(labels, split.private_train),
                            client_partition(config, data.num_identities, families,
                                             first=num_public))
  public = {} if not num_public else {'public_indices': split.public,
                                       'public_labels': labels[split.public]}
  fed_view = dataclasses.replace(private, test_indices=split.private_test, **public)
  if not one_client:
    return fed_view, fed_view
  if config.data.centralized_on == 'public':
    keep, num_trained = split.public, num_public
  else:
    keep, num_trained = np.concatenate([split.public, split.private_train]), data.num_identities
  return fed_view, federated.build(images, split.training_labels(labels, keep),
                                   partition.single_client(num_trained))


def own_client_views(data, one_client: bool):
  """(the federated view, what the method trains on) of data that come with their own clients
  (`data.client_identities`, e.g. one per anti-spoofing data center); a centralized method gets
  one client holding every identity."""
  fed_view = federated.build(data.train_images, data.train_labels, data.client_identities,
                             data.train_targets)
  if not one_client:
    return fed_view, fed_view
  return fed_view, federated.build(data.train_images, data.train_labels,
                                   partition.single_client(data.num_identities),
                                   data.train_targets)
