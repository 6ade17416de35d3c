"""FedGC (Niu & Deng, AAAI 2022): FedAvg whose server corrects the class embeddings with a
softmax regularizer over every client's classes.

  algorithm.py    build(): the method (Alg. 1), its config section and checks
  regularizer.py  Eq. 5 and FedCos, dense (the paper reading, in its module docstring)
  streamed.py     the same value and gradient in [block, block] tiles, optionally sharded
  correction.py   Alg. 1 line 14 with either, chosen by `fedgc.reg_implementation`
"""

from fedjax_face.algorithms.fedgc.algorithm import (KEEPS_CLIENT_OPTIMIZER, ONE_CLIENT, build,
                                                    check_config, config_section,
                                                    regularizer_kwargs, variant_name)

__all__ = ['KEEPS_CLIENT_OPTIMIZER', 'ONE_CLIENT', 'build', 'check_config', 'config_section',
           'regularizer_kwargs', 'variant_name']
