"""The FedFV paper's setting (Sec. 4.1-4.2), shared by its configs: one identity per client.

The paper: 1,000 CASIA-WebFace identities with at least 30 images, 30 images each, one per client;
8 clients per round, 1 local epoch, SGD at 0.1 divided by 10 at 2/3 and 13/15 of 15,000 rounds;
five Conv-ReLU-MaxPool-GroupNorm blocks (64..512 channels) and a 512-d embedding at 64x64.

The defaults keep the paper's structure (1,000 clients of 30 images, 8 per round, 1 epoch, the
schedule's shape, the GroupNorm backbone) at a width, image size and round count that train in
minutes on 2 CPU cores; `paper` puts back the paper's backbone and input size.
"""

import ml_collections

from fedjax_face import config_lib


def one_per_client_config(algorithm: str, runlocal: bool = False,
                          paper: bool = False) -> ml_collections.ConfigDict:
  """The shared sections of a FedFV-paper config for `algorithm` (its own section not added)."""
  c = config_lib.base_config()
  c.algorithm = algorithm
  c.num_rounds = 1500
  c.log_every = 100
  c.checkpoint_every = 500
  c.data.synthetic.num_identities = 1000           # Sec. 4.1: 1,000 identities, 30 images each
  c.data.synthetic.images_per_identity = 30
  c.data.image_size = 32
  c.federated.num_clients = 1000         # one client per identity
  c.federated.partition = 'one_per_client'
  c.federated.participation = 0.008      # 8 clients per round (Sec. 4.2)
  c.federated.local_epochs = 1.0         # E = 1
  c.federated.batch_size = 10            # B (not given in the paper): 3 steps per epoch of 30
  c.federated.local_steps = 3            # the static cap: ceil(30 / 10)
  c.model.name = 'gn_cnn'
  c.model.width = 16
  c.model.num_stages = 5
  c.model.embedding_dim = 128
  c.optimizer.learning_rate = 0.1        # Sec. 4.2: SGD, 0.1, / 10 at 10k and 13k of 15k rounds
  c.optimizer.momentum = 0.0             # plain SGD as written (the paper names no momentum
  c.optimizer.weight_decay = 0.0         # or weight decay)
  c.optimizer.schedule = 'step'
  c.optimizer.decay_at = (2 / 3, 13 / 15)
  # Eq. 2: normalised softmax, logits s·cos (CosFace with m = 0); s = 1 is Eq. 2 to the letter.
  c.head.loss = 'cosface'
  c.head.margin = 0.0
  c.head.scale = 16.0
  if paper:
    c.model.width = 64                   # 64, 128, 256, 512, 512 channels
    c.model.embedding_dim = 512
    c.data.image_size = 64
    c.num_rounds = 15000
  if runlocal:
    config_lib.runlocal(c)
    c.num_rounds = 6
    c.data.synthetic.num_identities = 16
    c.data.synthetic.images_per_identity = 6
    c.federated.num_clients = 16
    c.federated.participation = 0.25     # 4 per round, 12 left to build equivalents from
    c.federated.batch_size = 3
    c.federated.local_steps = 2
    c.model.width = 4
    c.model.num_stages = 3
  return c
