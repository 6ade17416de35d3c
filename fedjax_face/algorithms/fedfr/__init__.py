"""FedFR (Liu, Wang, Chien & Lai, AAAI 2022): a pre-trained model improved by clients with private
identities, trained on hard-negative public images with a contrastive term, each client also
training a personalized branch (DFC).

  algorithm.py       build(): the method, its config section and checks (the paper's readings,
                     in its module docstring)
  client.py          a client's round: Eq. 7 on a batch, the local epochs, what is sent and kept
  losses.py          Eq. 5 (contrastive), Eq. 6 (DFC) and Table 2's DFC CosFace and KD terms
  hard_negatives.py  hard-negative sampling and the epoch over local and kept public images
"""

from fedjax_face.algorithms.fedfr.algorithm import (ADAPTATIONS, DFC_LOSSES, LOCAL_CLASS_INITS,
                                                    ONE_CLIENT, build, check_config,
                                                    config_section, variant_name)
from fedjax_face.algorithms.fedfr.hard_negatives import (epoch_order, hard_negative_mask,
                                                         kept_public)
from fedjax_face.algorithms.fedfr.losses import (contrastive_loss, dfc_cosface_loss, dfc_cosines,
                                                 dfc_loss, dfc_transform, distillation_loss,
                                                 dynamic_range)

__all__ = ['ADAPTATIONS', 'DFC_LOSSES', 'LOCAL_CLASS_INITS', 'ONE_CLIENT', 'build', 'check_config',
           'config_section', 'contrastive_loss', 'dfc_cosface_loss', 'dfc_cosines', 'dfc_loss',
           'dfc_transform', 'distillation_loss', 'dynamic_range', 'epoch_order',
           'hard_negative_mask', 'kept_public', 'variant_name']
