"""The FedFR paper's setting (its "Experimental Setup" and "Implementation Details"), shared by
configs/fedfr/: public identities pre-trained centrally, private identities on the clients.

The paper: 10,000 MS-Celeb-1M identities of 100 images; 6,000 public (pre-training, CosFace
s = 30, m = 0.4), 4,000 private over 40 clients x 100, each private identity's images split 60
train / 40 personalized test; a 64-layer SphereFace CNN, 512-d, 112x112; SGD lr 0.001, weight
decay 5e-4; T = 30 rounds of E = 4 local epochs, every client in every round.

The defaults keep that structure (public / private identities, 60/40, every client every round,
the losses and their weights) at a size that runs in minutes on 2 CPU cores: 100 public and
100 private identities of 20 images, 10 clients x 10, the small CNN at 32x32. `paper` puts back
the paper's sizes, with IResNet-34 for the SphereFace-64 network this package does not have.
"""

import math

import ml_collections

from fedjax_face import config_lib, eval as eval_lib


def fedfr_config(algorithm: str, runlocal: bool = False,
                 paper: bool = False) -> ml_collections.ConfigDict:
  """The shared sections of a FedFR-paper config for `algorithm` (its own section not added)."""
  c = config_lib.base_config()
  c.algorithm = algorithm
  c.num_rounds = 30                      # T
  c.log_every = 5
  c.checkpoint_every = 10
  c.data.public_identities = 100         # K_g (paper 6,000)
  c.data.synthetic.num_identities = 200            # K_g + 10 clients x 10 private identities
  c.data.synthetic.images_per_identity = 20        # paper 100
  c.data.private_test_fraction = 0.4     # 40 of 100: personalized evaluation
  c.federated.num_clients = 10           # paper 40
  c.federated.participation = 1.0        # every client every round
  c.federated.local_epochs = 1.0         # E (paper 4)
  c.federated.batch_size = 32
  c.federated.local_steps = 4            # the static cap: ceil(E x 10 x 12 / 32)
  c.head.loss = 'cosface'                # Eq. 1 / 3: s = 30, m = 0.4
  c.head.scale = 30.0
  c.head.margin = 0.4
  c.optimizer.learning_rate = 0.001      # the paper's SGD
  c.optimizer.weight_decay = 5e-4
  c.engine.step_mode = 'scan'            # a client's steps vary with its hard negatives
  # Table 1 / 2's personalized columns (eval/recognition/personalized.py).
  c.evals.personalized = eval_lib.config_section('personalized')
  if paper:
    c.data.public_identities = 6000
    c.data.synthetic.num_identities = 10000
    c.data.synthetic.images_per_identity = 100
    c.data.image_size = 112
    c.federated.num_clients = 40
    c.federated.local_epochs = 4.0
    c.federated.local_steps = 750        # ceil(4 x 100 x 60 / 32)
    c.model.name = 'iresnet34'
    c.model.embedding_dim = 512
  if runlocal:
    config_lib.runlocal(c)
    c.data.public_identities = 8
    c.data.synthetic.num_identities = 16           # 8 public, 4 clients x 2 private
    c.data.synthetic.images_per_identity = 5
    c.federated.num_clients = 4
    c.federated.batch_size = 4
    c.federated.local_steps = 2          # ceil(2 x 3 / 4)
    c.model.width = 4
  return c


# Fig. 4: 100 clients of 40 / 20 / 10 / 1 identities each (the paper). The defaults scale the
# identities per client by 1/5 (keeping the one-identity case) and the clients to 20: a FedFR
# client trains on its hard public images too (~1,300 of the 2,000 here), so 100 clients would
# take half an hour a run on 2 CPU cores.
FIG4_CLIENTS = 20
PAPER_FIG4_CLIENTS = 100
FIG4_IDS_PER_CLIENT = ('8', '4', '2', '1')
PAPER_FIG4_IDS_PER_CLIENT = ('40', '20', '10', '1')
IDS_PER_CLIENT = tuple(sorted(set(FIG4_IDS_PER_CLIENT + PAPER_FIG4_IDS_PER_CLIENT), key=int))


def set_identities_per_client(c: ml_collections.ConfigDict, ids_per_client: int,
                              runlocal: bool = False,
                              paper: bool = False) -> ml_collections.ConfigDict:
  """Fig. 4's setting: a fixed number of clients (20; paper 100; runlocal 4) of `ids_per_client` private
  identities each, the public identities as before. Clients of one identity are dealt out
  `one_per_client`; a federated client's step cap covers E epochs of its private training
  images (a centralized run keeps its steps per round). Only the generic model is compared (the
  figure's), so the personalized evaluation is dropped. Every run of one scenario (its
  pre-training included) must use the same `ids_per_client`: the training-set size decides which
  identities the benchmark draws."""
  clients = (c.federated.num_clients if runlocal else
             PAPER_FIG4_CLIENTS if paper else FIG4_CLIENTS)
  c.federated.num_clients = clients
  c.data.synthetic.num_identities = c.data.public_identities + clients * ids_per_client
  c.federated.partition = 'one_per_client' if ids_per_client == 1 else 'balanced'
  train_images = c.data.synthetic.images_per_identity - math.floor(
      c.data.private_test_fraction * c.data.synthetic.images_per_identity)   # data/splits.py
  if c.algorithm != 'centralized':
    c.federated.local_steps = math.ceil(c.federated.local_epochs * ids_per_client * train_images
                                        / c.federated.batch_size)
  if 'personalized' in c.evals:
    del c.evals.personalized
  return c


def pretraining_config(runlocal: bool = False, paper: bool = False) -> ml_collections.ConfigDict:
  """Centralized CosFace on the public identities (configs/fedfr/pretrain.py); the upper bound
  (configs/fedfr/centralized.py) trains the same way on every training image."""
  c = fedfr_config('centralized', runlocal=runlocal, paper=paper)
  c.data.centralized_on = 'public'
  del c.evals.diagnostics               # no clients' class embeddings: one class matrix
  c.optimizer.learning_rate = 0.1        # the usual CosFace recipe (docs/references.md, sgd-recipe)
  c.engine.step_mode = 'auto'
  c.federated.local_steps = 2 if runlocal else 8
  c.num_rounds = 4 if runlocal else 250  # 2,000 steps of 32: 32 epochs of the 2,000 public images
  c.log_every = 1 if runlocal else 50
  c.checkpoint_every = 0
  return c
