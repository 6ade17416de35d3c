"""The federated building blocks (core/blocks.py, core/secure_aggregation.py,
data/participation.py) as named variants of two settings: FedPE in the FedGC paper's setting (36
clients, all in every round) and FedFV in its one-identity setting (1,000 clients, 8 a round).

One name per row of docs/blocks_table1.md and blocks_table2.md, each a set of config overrides;
`configs/blocks/fedgc_setting.py:block=<name>` and `configs/blocks/fedfv_setting.py:block=<name>` run them, and
`proj/blocks/reproduce.py` builds the tables from the same overrides.

The hyper-parameters are the literature's usual ones, not tuned here: FedAvgM's server momentum
0.9 at rate 1 (Hsu et al. 2019); FedAdam's η = 10^-1.5 and τ = 1e-3 (the middle of Reddi et
al.'s best grid values); FedProx's μ = 0.01 (Li et al.'s grid runs 0.001 to 1).
"""

import ml_collections

# name -> (label, overrides as (dotted field, value)).
VARIANTS = {
    'fedavg': ('FedAvg (the method as it is)', ()),
    'fedavgm': ('FedAvgM (server momentum 0.9)', (('server_optimizer.name', 'fedavgm'),)),
    'fedadam': ('FedAdam (eta 10^-1.5, tau 1e-3)', (('server_optimizer.name', 'fedadam'),)),
    'fedprox': ('FedProx (mu 0.01)', (('optimizer.correction', 'fedprox'),)),
    'scaffold': ('SCAFFOLD (option II)', (('optimizer.correction', 'scaffold'),)),
    'stragglers': ('participation 0.25, 20 % stragglers dropped',
                   (('federated.participation', 0.25), ('federated.straggler_drop', 0.2))),
    'q8': ('8-bit quantized updates', (('compression.codec', 'quantize'),
                                       ('compression.bits', 8))),
    'top1': ('top-1 % updates, error feedback', (('compression.codec', 'topk'),
                                                 ('compression.fraction', 0.01))),
    'secagg': ('secure aggregation', (('secure_aggregation.enabled', True),)),
    'secagg_dp16': ('secure aggregation + DP, epsilon 16',
                    (('secure_aggregation.enabled', True), ('dp.enabled', True),
                     ('dp.target_epsilon', 16.0))),
}
# FedFV's setting draws 8 of 1,000 clients a round already: its participation row keeps that
# cohort and drops the slowest 20 % of it (one of 8: floor(0.2·8) = 1).
FEDFV_STRAGGLERS = ('8 of 1,000 a round (its own), 20 % stragglers dropped',
                    (('federated.straggler_drop', 0.2),))


def variants(setting: str) -> dict:
  """VARIANTS as `setting` ('fedpe' | 'fedfv') runs them."""
  out = dict(VARIANTS)
  if setting == 'fedfv':
    out['stragglers'] = FEDFV_STRAGGLERS
  return out


def apply(c: ml_collections.ConfigDict, setting: str, name: str) -> ml_collections.ConfigDict:
  """`c` with the overrides of variant `name`."""
  for field, value in variants(setting)[name][1]:
    *path, key = field.split('.')
    section = c
    for part in path:
      section = section[part]
    section[key] = value
  return c
