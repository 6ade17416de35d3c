"""Section `rounds`: images/s of a round through `core.engine.RoundEngine` for every backend x step
mode, against the sequential loop of a jitted step (how fedjax and pfl-research run clients) and
centralized training on the same images.
"""

from typing import Callable
import functools

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face import algorithms
from fedjax_face import models
from fedjax_face.algorithms import common
from fedjax_face.core import aggregation
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import local
from fedjax_face.core import policy
from fedjax_face.tools.bench.common import (Problem, backend_variants, combination_name,
                                            images_per_round, measured, round_inputs,
                                            skip_reason)
from fedjax_face.tools.timing import measure


def make_local_step(config, model) -> tuple[Callable, Callable]:
  """(jitted `step((params, batch_stats, opt_state), batch) -> (carry, loss)`, jitted opt init).

  FedPE's local step (`common.local_step`, the one the engine's clients run) on its own, so a
  Python loop can drive it the way fedjax and pfl-research run clients. `params` is
  {'backbone', 'W'}; `batch` holds one step's `images` [B, H, W, 3] uint8, `labels`, `mask` [B],
  the client's `class_mask` [C] and the step's `rng`.
  """
  optimizer = common.make_optimizer(config.optimizer)
  one_step = common.local_step(model, head_kwargs=common.head_kwargs(config), optimizer=optimizer)

  def step(carry, batch):
    return one_step(carry, batch, batch['class_mask'])

  return jax.jit(local.skip_if_empty(step)), jax.jit(optimizer.init)


@functools.partial(jax.jit, static_argnums=2)
def _client_step_keys(round_rng, client_id, num_steps: int):
  """The engine's client key (fold_in of the id) split per step, as `local_trainer` does."""
  return jax.random.split(jax.random.fold_in(round_rng, client_id), num_steps)


_weighted_mean = jax.jit(aggregation.weighted_mean)


def sequential_round(step: Callable, init_opt: Callable, server_model, class_embeddings,
                     client_ids: np.ndarray, weights: np.ndarray, data: dict, rng: jax.Array):
  """One FedPE round as a Python loop over clients, each a Python loop of jitted steps.

  Args:
    step, init_opt: from `make_local_step`.
    server_model: the broadcast backbone variables ({'params', 'batch_stats'}).
    class_embeddings: every client's W stacked `[K, C_max, d]` (FedPE's private state).
    client_ids, weights, data: the round (`round_inputs`); padding clients are skipped, as their
      weight is 0.
    rng: the round's key (client k's steps use the engine's `fold_in(rng, k)` split per step).

  Returns:
    (weighted mean of the client backbones, list of the real clients' new W).
  """
  models_out, ws = [], []
  real = [row for row, k in enumerate(client_ids) if k < len(class_embeddings)]
  for row in real:
    k = int(client_ids[row])
    params = {'backbone': server_model['params'], 'W': class_embeddings[k]}
    carry = (params, server_model.get('batch_stats', {}), init_opt(params))
    num_steps = data['images'].shape[1]
    keys = _client_step_keys(rng, k, num_steps)
    for s in range(num_steps):
      batch = {'images': data['images'][row, s], 'labels': data['labels'][row, s],
               'mask': data['mask'][row, s], 'class_mask': data['class_mask'][row],
               'rng': keys[s]}
      carry, _ = step(carry, batch)
    params, batch_stats, _ = carry
    variables = {'params': params['backbone']}
    if batch_stats:
      variables['batch_stats'] = batch_stats
    models_out.append(variables)
    ws.append(params['W'])
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *models_out)
  return _weighted_mean(stacked, jnp.asarray(weights[real])), ws


def centralized_batches(client_ids: np.ndarray, data: dict, num_clients: int,
                        rng: jax.Array) -> list[dict]:
  """Per local step, the real clients' batches concatenated into one of K·B samples.

  Labels become indices into the cohort's classes laid end to end (client row r's local class c is
  r·C_max + c), so one head over all of them is a softmax over every identity of the cohort, the
  "global optimization" of centralized training.
  """
  real = client_ids < num_clients
  images, labels, mask = data['images'][real], data['labels'][real], data['mask'][real]
  class_mask = data['class_mask'][real]
  num_rows, max_classes = class_mask.shape
  labels = labels + (np.arange(num_rows, dtype=np.int32) * max_classes)[:, None, None]
  keys = jax.random.split(rng, images.shape[1])
  return [{'images': images[:, s].reshape((-1,) + images.shape[3:]),
           'labels': labels[:, s].reshape(-1), 'mask': mask[:, s].reshape(-1),
           'class_mask': class_mask.reshape(-1), 'rng': keys[s]}
          for s in range(images.shape[1])]


def centralized_round(step: Callable, carry, batches: list[dict]):
  """S jitted steps of batch K·B; returns the final carry."""
  for batch in batches:
    carry, _ = step(carry, batch)
  return carry


def bench_backend(algorithm, problem: Problem, state, rng, backend: str, width: int | None,
                  round_in: Callable, timing: dict, mesh=None) -> dict:
  """One combination: `RoundEngine.run_round` on the cohort padded as the engine needs it
  (section (a) on one device; section (f) with the clients axis over `mesh`). `width` is the map
  width or the loop's threads (None: the engine's default)."""
  width_arg = {}
  if width is not None:
    width_arg = {'loop_threads': width} if backend == 'loop' else {'map_width': width}
  eng = engine_lib.RoundEngine(algorithm, backend=backend, mesh=mesh, **width_arg)
  ids, weights, data = round_in(eng.cohort_multiple())
  timed = measure(eng.run_round, state, ids, weights, data, rng, **timing)
  return measured({'padded_cohort': len(ids)},
                  images_per_round(ids, data, problem.fed.num_clients), timed)


def bench_sequential(config, model, problem: Problem, state, rng, round_in: Callable,
                     timing: dict) -> dict:
  """Section (b): `sequential_round` over the unpadded cohort."""
  ids, weights, data = round_in(1)
  step, init_opt = make_local_step(config, model)
  timed = measure(sequential_round, step, init_opt, state.server['model'], state.clients['W'],
                  ids, weights, data, rng, **timing)
  return measured({'name': f'{problem.name}/sequential'},
                  images_per_round(ids, data, problem.fed.num_clients), timed)


def bench_centralized(config, model, problem: Problem, state, rng, round_in: Callable,
                      timing: dict) -> dict:
  """Section (c): S steps of the cohort's batches concatenated, one head over all its classes."""
  ids, _, data = round_in(1)
  batches = centralized_batches(ids, data, problem.fed.num_clients, rng)
  w = state.clients['W'][ids[ids < problem.fed.num_clients]]
  server_model = state.server['model']
  params = {'backbone': server_model['params'], 'W': w.reshape((-1, w.shape[-1]))}
  step, init_opt = make_local_step(config, model)
  carry = (params, server_model.get('batch_stats', {}), init_opt(params))
  timed = measure(centralized_round, step, carry, batches, **timing)
  row = {'name': f'{problem.name}/centralized', 'batch_size': int(batches[0]['images'].shape[0]),
         'steps': len(batches), 'classes': int(batches[0]['class_mask'].sum())}
  return measured(row, int(sum(batch['mask'].sum() for batch in batches)), timed)


def best_and_ratios(result: dict) -> tuple[dict | None, dict | None]:
  """The fastest measured combination of a cohort and its rate over the two baselines."""
  rows = [r for r in result['backends'] if r['status'] == 'measured']
  if not rows:
    return None, None
  best = max(rows, key=lambda r: r['images_per_s'])
  return ({'name': best['name'], 'images_per_s': best['images_per_s']},
          {'best_over_sequential': best['images_per_s'] / result['sequential']['images_per_s'],
           'best_over_centralized': best['images_per_s'] / result['centralized']['images_per_s']})


def bench_cohort(config, model, problem: Problem, platform_name: str, log=print) -> dict:
  """Sections (a)-(c) for one cohort: every backend x step mode, then the two baselines.

  Every call starts from the same initial state, key and round data, so each does the same work.
  """
  b, seed = config.bench, config.seed

  @functools.cache
  def algorithm(mode: str, conv_gradient: str):
    backbone = models.build_backbone(config.model, conv_gradient=conv_gradient)
    return algorithms.get('fedpe').build(config, backbone, problem.fed, step_mode=mode)

  # Neither the step mode nor the conv gradient changes the parameters: one initial state.
  state = algorithms.get('fedpe').build(config, model, problem.fed, step_mode='unroll').init(
      jax.random.PRNGKey(seed))
  rng = jax.random.fold_in(jax.random.PRNGKey(seed), 1)
  round_in = functools.cache(lambda multiple: round_inputs(problem, multiple, seed))
  timing = dict(warmup=b.warmup, repeats=b.repeats, budget_s=b.max_timed_s)
  ids, _, data = round_in(1)
  out = {'cohort': {**problem.spec.to_dict(),
                    'images_per_round': images_per_round(ids, data, problem.fed.num_clients),
                    'classes': int(problem.fed.class_mask[problem.cohort].sum())},
         'backends': []}
  for backend, width in backend_variants(b):
    for mode in b.step_modes:
      name = combination_name(problem.name, backend, width, mode)
      conv_gradient = policy.conv_gradient_for(config, backend, mode, platform_name)
      row = {'name': name, 'backend': backend, 'step_mode': mode, 'conv_gradient': conv_gradient,
             'map_width': width if backend == 'map' else None,
             'loop_threads': (width or 1) if backend == 'loop' else None}
      reason = skip_reason(b, name, platform_name)
      if reason:
        out['backends'].append({**row, 'status': 'skipped', 'reason': reason})
        log(f'{name}: skipped ({reason})')
        continue
      row.update(bench_backend(algorithm(mode, conv_gradient), problem, state, rng, backend, width,
                               round_in, timing))
      out['backends'].append(row)
      log(f"{name}: {row['images_per_s']:,.0f} images/s")
  for key, fn in (('sequential', bench_sequential), ('centralized', bench_centralized)):
    out[key] = fn(config, model, problem, state, rng, round_in, timing)
    log(f"{problem.name}/{key}: {out[key]['images_per_s']:,.0f} images/s")
  out['best'], out['ratios'] = best_and_ratios(out)
  return out
