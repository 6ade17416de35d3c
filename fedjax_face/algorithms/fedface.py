"""FedFace (Aggarwal, Zhou, Jain 2021): one identity per client, class embeddings initialised from
the clients' own features, spread out on the server.

The client loss is FedAwS's positive one with FedFace's m = 0.9 (`head.loss='positive_cosine'`,
mean (max{0, m - cos(f, w_i)})^2); the server averages theta, stores the w_i it received and
spreads all class embeddings apart on cosines: relu(cos - 0.3)^2 per ordered pair of normalised
embeddings (`spreadout` with distance 'cosine', margin 0.7), W <- W - lambda·eta_t·grad.

Readings:
  * FedFace initialises each class embedding as its client's mean feature under a pre-trained
    model. This project has no pre-training step yet, so a client selected for the first time sets
    w_i to the normalised mean feature of its images under the model it receives that round, then
    trains (`fedface.embedding_init='mean_feature'`); 'random' keeps the server's random init.
  * FedFace's public code optimises the spreadout with its own SGD (momentum, lr 0.01); here it is
    one step of lambda·eta_t like FedAwS, lambda = `fedface.reg_lambda`.
"""

import ml_collections

from fedjax_face import config_lib
from fedjax_face.algorithms import fedaws, spreadout
from fedjax_face.core.algorithm import Algorithm

ONE_CLIENT = False
EMBEDDING_INITS = ('mean_feature', 'random')


def config_section() -> ml_collections.ConfigDict:
  """`config.fedface` (configs/fedfv/fedface.py)."""
  c = spreadout.config_section(distance='cosine', margin=0.7, reg_lambda=1.0)
  c.embedding_init = 'mean_feature'   # first selection: the client's mean feature | 'random'
  return c


def check_config(config) -> None:
  spreadout.check_config(config, 'fedface')
  config_lib.check_choice('fedface.embedding_init', config.fedface.embedding_init,
                          EMBEDDING_INITS)
  fedaws.check_one_class_setting(config, 'FedFace')


def variant_name(config) -> str:
  return 'fedface' if config.fedface.embedding_init == 'mean_feature' else 'fedface-random-init'


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  return fedaws.build_one_class_method(
      config, model, fed, step_mode=step_mode, name='fedface',
      init_from_features=config.fedface.embedding_init == 'mean_feature')
