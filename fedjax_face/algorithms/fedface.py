"""FedFace (Aggarwal, Zhou, Jain 2021): class embeddings initialised from the clients' own
features, spread out on the server.

One identity per client (the FedFV paper's setting, configs/fedfv/fedface.py): the client loss is
FedAwS's positive one with FedFace's m = 0.9 (`head.loss='positive_cosine'`, mean (max{0, m -
cos(f, w_i)})^2). Several identities per client (the FedFR paper's Fig. 4 re-implementation,
configs/fedfr/fedface.py): CosFace over the client's own classes, as that paper describes. Either
way the client sends theta and its class embeddings; the server averages theta, stores the class
embeddings it received and spreads all of them apart on cosines: relu(cos - 0.3)^2 per ordered
pair of normalised embeddings (`spreadout` with distance 'cosine', margin 0.7), averaged over the
C(C-1) ordered pairs, W <- W - lambda·eta_t·grad.

Readings:
  * FedFace initialises each class embedding as the mean feature of its images under a
    pre-trained model. A client selected for the first time sets its class embeddings to the
    normalised mean features of its classes under the model it receives that round, then trains
    (`fedface.embedding_init='mean_feature'`; 'random' keeps the server's random init). With
    `config.init_from` (the FedFR setting's pre-training) that model is the pre-trained one in
    round 0; without it (the FedFV setting, no pre-training) it is the current global model.
  * FedFace's public code optimises the spreadout with its own SGD (momentum, lr 0.01); here it is
    one step of lambda·eta_t like FedAwS, lambda = `fedface.reg_lambda`.
  * The public code averages the pair penalties; the FedFV paper's Eq. 3, which it uses for
    FedAwS and FedFace alike, sums them. The default follows the code
    (`fedface.reduction='mean'`); 'sum' is Eq. 3, a step C(C-1) times larger at equal lambda.
"""

import ml_collections

from fedjax_face.core import checks
from fedjax_face.algorithms import fedaws, spreadout
from fedjax_face.core.algorithm import Algorithm
from fedjax_face.models import heads

ONE_CLIENT = False
EMBEDDING_INITS = ('mean_feature', 'random')


def config_section() -> ml_collections.ConfigDict:
  """`config.fedface` (configs/fedfv/fedface.py, configs/fedfr/fedface.py)."""
  # The mean over pairs: FedFace's public code (the docstring).
  c = spreadout.config_section(distance='cosine', margin=0.7, reg_lambda=1.0, reduction='mean')
  c.embedding_init = 'mean_feature'   # first selection: the client's mean features | 'random'
  return c


def check_config(config) -> None:
  spreadout.check_config(config, 'fedface')
  checks.check_choice('fedface.embedding_init', config.fedface.embedding_init,
                          EMBEDDING_INITS)
  one_each = config.federated.partition == 'one_per_client'
  if one_each and config.head.loss != 'positive_cosine':
    raise ValueError(f"config.head.loss={config.head.loss!r} with federated.partition="
                     "'one_per_client'; FedFace's one-identity clients train the positive-only "
                     "loss: expected 'positive_cosine'.")
  if not one_each and config.head.loss not in heads.CLASSIFIER_HEADS:
    raise ValueError(f'config.head.loss={config.head.loss!r} with federated.partition='
                     f"{config.federated.partition!r}; clients of several identities train a "
                     f'classification loss over them: expected one of {heads.CLASSIFIER_HEADS} '
                     "(or federated.partition='one_per_client' for the positive-only loss).")


def variant_name(config) -> str:
  return 'fedface' if config.fedface.embedding_init == 'mean_feature' else 'fedface-random-init'


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  return fedaws.build_spreadout_method(
      config, model, fed, step_mode=step_mode, name='fedface',
      init_from_features=config.fedface.embedding_init == 'mean_feature')
