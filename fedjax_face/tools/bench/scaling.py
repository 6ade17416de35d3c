"""Section `scaling`: the best non-loop combination with the clients axis over 1, 2, 4, ... devices.
"""

import functools

import jax

from fedjax_face import algorithms
from fedjax_face import models
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import policy
from fedjax_face.tools.bench.common import (Problem, parse_combination, round_inputs,
                                            scaling_device_counts, variant_name)
from fedjax_face.tools.bench.rounds import bench_backend


def best_parallel_combination(cohort_result: dict) -> str | None:
  """The fastest measured non-loop 'backend/mode' of a cohort's section (a), or None."""
  rows = [r for r in cohort_result['backends']
          if r['status'] == 'measured' and r['backend'] != 'loop']
  if not rows:
    return None
  best = max(rows, key=lambda r: r['images_per_s'])
  return f"{variant_name(best['backend'], best['map_width'])}/{best['step_mode']}"


def bench_scaling(config, problem: Problem, combination: str | None, log=print) -> dict:
  """One combination with the clients axis over 1, 2, 4, ... of the visible devices."""
  b = config.bench
  visible = jax.device_count()
  out = {'cohort': problem.name, 'combination': combination, 'visible_devices': visible,
         'rows': []}
  counts = scaling_device_counts(b, visible)
  if combination is None:
    out['rows'] = [{'devices': n, 'status': 'skipped',
                    'reason': 'no non-loop combination was measured in section rounds'}
                   for n in counts]
    return out
  backend, width, mode = parse_combination(combination)
  backbone = models.build_backbone(
      config.model, conv_gradient=policy.conv_gradient_for(config, backend, mode))
  alg = algorithms.get('fedpe').build(config, backbone, problem.fed, step_mode=mode)
  state = alg.init(jax.random.PRNGKey(config.seed))
  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  round_in = functools.cache(lambda multiple: round_inputs(problem, multiple, config.seed))
  timing = dict(warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  for n in counts:
    if width is not None and width % n:
      out['rows'].append({'devices': n, 'status': 'skipped',
                          'reason': f'map width {width} is not a multiple of {n} devices'})
      continue
    # One device needs no mesh: the row runs section (a)'s program (a persistent compilation
    # cache then serves it instead of compiling it again).
    mesh = engine_lib.make_mesh(n) if n > 1 else None
    out['rows'].append({'devices': n, **bench_backend(alg, problem, state, rng, backend, width,
                                                      round_in, timing, mesh=mesh)})
    log(f"scaling {combination}, devices={n}: {out['rows'][-1]['images_per_s']:,.0f} images/s")
  return out
