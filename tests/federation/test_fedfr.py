"""FedFR over the federation: what it needs beyond the other methods, shown in process.

FedFR's server state holds the public set D_g (`public_images`, `public_labels`: the server
pre-trained on it) and broadcasts it with theta_g's public features; a client reads D_g only from
the broadcast. What each side needs at build time is D_g itself: FedFR's `build` takes it from
the federated view it is built on (`fed.public_indices`), and the roster's skeleton holds none.
`own_data.read_public_set` reads D_g at any party from its own copy (FedFR's pre-training
folders), the very arrays the simulator builds FedFR with (checked here, in the default suite).

Behind `FEDJAX_FACE_FEDERATION=all`: with D_g in the skeleton both sides build on (the skeleton
patched here, as `roster.skeleton` / `protocol.agree` would carry it) and FedFR let through
`protocol.check_federable`, FedFR (runlocal, every module: hard negatives, the contrastive term,
the DFC branch) over three holders of FedFR's split, each reading its own client folder, ends
after two rounds at the simulator's state bit for bit: the server state (theta, Phi, D_g), every
holder's kept W_l, DFC branch and local model, and the round metrics.
"""

import dataclasses
import os

import jax
import numpy as np
import pytest

from fedjax_face.core import checks
from fedjax_face.data import sources, stores
from fedjax_face.federation import holder, own_data, protocol, roster
from tests import config_files, fedfr_split_files
from tests.federation import test_equal_to_simulator as direct

NUM_HOLDERS = direct.NUM_HOLDERS
PUBLIC = 3   # K_g


@pytest.fixture(scope='module')
def split_root(tmp_path_factory):
  """FedFR's split: K_g = 3 public identities in two pre-training folders, 3 clients of 2."""
  root = str(tmp_path_factory.mktemp('fedfr_federation'))
  fedfr_split_files.write_split(root, public=PUBLIC, pretrain_folders=2, clients=NUM_HOLDERS,
                                ids_per_client=2, train=3, held_out=1)
  return root


def fedfr_config(root: str):
  """FedFR's tiny config over the split, on the loop backend, evaluators off."""
  config = config_files.load_config('fedfr/fedfr')
  config.data.source = 'fedfr_split'
  config.data.fedfr_split.root = root
  config.data.public_identities = PUBLIC
  config.data.private_test_fraction = 0.0
  config.federated.num_clients = NUM_HOLDERS
  config.num_rounds = direct.ROUNDS
  config.engine.backend = 'loop'
  config.engine.loop_threads = 1
  del config.evals.verification, config.evals.identification, config.evals.personalized
  return config


def client_folder(root: str, k: int) -> str:
  return os.path.join(root, f'split_train_i{2 * NUM_HOLDERS:04d}c{NUM_HOLDERS:04d}',
                      f'client_{k:04d}')


def test_every_party_reads_the_simulators_public_set(split_root):
  config = fedfr_config(split_root)
  sim = sources.training_views(config, sources.load(config), False)[0]
  images, labels = own_data.read_public_set(config)
  expected, ok = stores.take(sim.images, sim.public_indices)
  assert ok.all() and len(images) == len(sim.public_indices) > 0
  np.testing.assert_array_equal(images, expected)   # bit for bit
  np.testing.assert_array_equal(labels, sim.public_labels)
  assert labels.dtype == np.int32 and int(labels.max()) + 1 == PUBLIC


def test_no_public_identities_no_public_set_and_a_missing_one_is_one_line(split_root):
  config = fedfr_config(split_root)
  config.data.public_identities = 0
  assert own_data.read_public_set(config) is None
  config.data.public_identities = PUBLIC
  config.data.fedfr_split.pretrain = 'none'
  with pytest.raises(checks.UsageError) as raised:
    own_data.read_public_set(config)
  assert str(raised.value) == (
      f"FedFR's public set D_g: data.public_identities={PUBLIC} but "
      f"data.fedfr_split.root={split_root!r} has no pre-training set "
      "(data.fedfr_split.pretrain='none'); expected its split_pretrain_* folder, D_g.")


def with_public_set(skeleton, public):
  """The roster's skeleton holding D_g (its images the skeleton's, all of them public)."""
  images, labels = public
  return dataclasses.replace(skeleton, images=images,
                             public_indices=np.arange(len(labels), dtype=np.int64),
                             public_labels=labels)


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='FedFR in process: FEDJAX_FACE_FEDERATION=all')
def test_fedfr_with_the_public_set_in_the_skeleton_ends_at_the_simulators_state(
    split_root, tmp_path, monkeypatch):
  config = fedfr_config(split_root)
  simulated, sim_metrics = direct.simulate(config)
  public = own_data.read_public_set(config)
  skeleton = roster.skeleton
  monkeypatch.setattr(roster, 'skeleton',
                      lambda *args, **kwargs: with_public_set(skeleton(*args, **kwargs), public))
  monkeypatch.delitem(protocol.NOT_YET, 'fedfr', raising=False)
  holders = [holder.Holder(config, k, client_folder(split_root, k), str(tmp_path / str(k)))
             for k in range(NUM_HOLDERS)]
  federated_state, metrics = direct.run_holders(config, holders)
  assert set(federated_state.server) == {'model', 'Phi', 'public_images', 'public_labels'}
  direct.assert_trees_equal(federated_state.server, simulated.server)
  for k, h in enumerate(holders):
    direct.assert_trees_equal(h.private_at(config.num_rounds),
                              jax.tree.map(lambda x, k=k: x[k], simulated.clients))
  direct.assert_trees_equal(metrics, sim_metrics)
