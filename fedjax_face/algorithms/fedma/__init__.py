"""FedMA (Wang et al., ICLR 2020), the FedGPAD paper's Table V baseline: layer-wise matched
averaging at fixed shapes.

  algorithm.py  build(): the schedule (one round per matched layer, then FedAvg rounds), its
                config section and checks, and the readings
  matching.py   one layer's BBP-MAP matching on the host (the cost, the Hungarian assignment,
                the posterior)
  layers.py     the network's matched layers, masks of active channels, and the permutation of
                a matched layer's consumers' inputs
"""

from fedjax_face.algorithms.fedma.algorithm import (L, ONE_CLIENT, build, check_config,
                                                    config_section, variant_name)
from fedjax_face.algorithms.fedma.matching import Prior, cost_matrix, match_layer

__all__ = ['L', 'ONE_CLIENT', 'Prior', 'build', 'check_config', 'config_section', 'cost_matrix',
           'match_layer', 'variant_name']
