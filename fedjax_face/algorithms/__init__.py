"""Registry of algorithms: `ALGORITHMS[name].build(config, model, fed, step_mode=...)`.

Each module implements one paper method; see `core/algorithm.py` for the contract.
"""

from fedjax_face.algorithms import centralized, fedgc, fedpe

ALGORITHMS = {
    'centralized': centralized,
    'fedpe': fedpe,
    'fedgc': fedgc,
}

# Algorithms that train on a single client holding every identity.
CENTRALIZED = frozenset({'centralized'})


def get(name: str):
  if name not in ALGORITHMS:
    raise ValueError(f'algorithm={name!r} is unknown; expected one of {sorted(ALGORITHMS)}.')
  return ALGORITHMS[name]
