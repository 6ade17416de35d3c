"""Methods by name: `get(name)` is the module of one paper method, imported when first asked for.

Every method module defines:

  build(config, model, fed, *, step_mode) -> core.algorithm.Algorithm
      the method's pure functions over pytrees (the contract: core/algorithm.py);
  config_section() -> ml_collections.ConfigDict | None
      the defaults of its own `config.<name>` section (None: it has none); its configs add it;
  check_config(config) -> None
      raises ValueError naming the field of its section that is wrong and what was expected;
  variant_name(config) -> str
      the paper's name of the variant a config runs ('fedcos', 'fedpe+fixed', ...);
  ONE_CLIENT: bool
      True when it trains on one client holding every identity (centralized training).

and may define KEEPS_CLIENT_OPTIMIZER = True when its clients can keep their optimizer state
between rounds (`federated.client_optimizer_state='keep'`), and SECTION, the name of its section
when it is not the method's (FedPAD's is `config.fedgpad`; `section_name`).

Adding a method is one line here (WORKSPACE.md, "How to add a method").
"""

import importlib
import types

from fedjax_face.algorithms import pad_dp_sgd
from fedjax_face.core import blocks

ALGORITHMS = {
    'centralized': 'fedjax_face.algorithms.centralized',
    'fedpe': 'fedjax_face.algorithms.fedpe',
    'fedgc': 'fedjax_face.algorithms.fedgc',
    'fedfv': 'fedjax_face.algorithms.fedfv',
    'fedaws': 'fedjax_face.algorithms.fedaws',
    'feduv': 'fedjax_face.algorithms.feduv',
    'fedface': 'fedjax_face.algorithms.fedface',
    'fedfr': 'fedjax_face.algorithms.fedfr',
    'fedpad': 'fedjax_face.algorithms.fedgpad',    # FedGPAD's module: its Alg. 1, no ES / Dec
    'fedgpad': 'fedjax_face.algorithms.fedgpad',
    'fedma': 'fedjax_face.algorithms.fedma',        # FedGPAD's Table V baseline
    'fedbn': 'fedjax_face.algorithms.fedbn',        # personalization: local BatchNorm
    'fedrep': 'fedjax_face.algorithms.fedrep',      # personalization: local head (FedPer too)
    'ditto': 'fedjax_face.algorithms.ditto',        # personalization: regularized personal models
    'apfl': 'fedjax_face.algorithms.apfl',          # personalization: mixed models, alpha learned
}


# Methods the federated building blocks (core/blocks.py: server optimizers, FedProx / SCAFFOLD,
# compression; secure aggregation) do not apply to, and why. Participation applies to all.
NOT_FOR_BLOCKS = {
    'centralized': 'one client trains on every identity: nothing is sent or aggregated.',
    'fedma': "its server matches neurons across the clients' models, so it needs each model "
             'as sent: no mean to step on, compress against or sum under masks.',
}


def blocks_refusal(config) -> str | None:
  """Why the blocks `config` switches on do not apply to its method, or None."""
  if config.algorithm in NOT_FOR_BLOCKS:
    return NOT_FOR_BLOCKS[config.algorithm]
  if (config.secure_aggregation.enabled and config.algorithm in ('fedpad', 'fedgpad')
      and config.fedgpad.weighting == 'uniform'):
    return ("secure_aggregation.enabled with fedgpad.weighting='uniform': the server sees only "
            "the sum, which clients weight by the engine's n_k; set fedgpad.weighting="
            "'examples'.")
  return None


def get(name: str) -> types.ModuleType:
  """The module of method `name`; ValueError naming the known methods otherwise."""
  if name not in ALGORITHMS:
    raise ValueError(f'config.algorithm={name!r} is unknown; expected one of '
                     f'{sorted(ALGORITHMS)}.')
  return importlib.import_module(ALGORITHMS[name])


def section_name(name: str) -> str:
  """The name of method `name`'s own config section: `config.<section_name>`."""
  return getattr(get(name), 'SECTION', name)


def check_config(config) -> None:
  """The method's own checks of its section (the shared sections: `config_lib.validate`)."""
  method = get(config.algorithm)
  if (config.federated.client_optimizer_state == 'keep' and not method.ONE_CLIENT
      and not getattr(method, 'KEEPS_CLIENT_OPTIMIZER', False)):
    offered = sorted(name for name in ALGORITHMS
                     if getattr(get(name), 'KEEPS_CLIENT_OPTIMIZER', False))
    raise ValueError(f"config.federated.client_optimizer_state='keep' is not offered by "
                     f"{config.algorithm}; expected 'reset' (methods that offer it: {offered}).")
  # (An anti-spoofing config has no split: its data centers hold their own data.)
  if config.data.get('centralized_on', 'all') != 'all' and not method.ONE_CLIENT:
    raise ValueError(f"config.data.centralized_on={config.data.centralized_on!r} with "
                     f"{config.algorithm}: it chooses what a centralized run trains on; a "
                     "federated method's clients hold the private identities. Expected 'all'.")
  if config.dp.enabled and method.ONE_CLIENT:
    raise ValueError(f'config.dp.enabled=True with {config.algorithm}: client-level differential '
                     'privacy needs clients; a centralized run has one. Expected a federated '
                     'method, or dp.enabled=False.')
  if pad_dp_sgd.enabled(config) and config.algorithm not in pad_dp_sgd.METHODS:
    raise ValueError(pad_dp_sgd.refusal_line(config))
  refusal = blocks_refusal(config)
  if refusal and config.secure_aggregation.enabled:
    raise ValueError(f'secure_aggregation.enabled=True with {config.algorithm}: {refusal}')
  blocks.check(config, config.algorithm, refusal)
  method.check_config(config)
