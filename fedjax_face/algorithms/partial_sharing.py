"""Which of a model's layers a client shares and which it keeps: the personalization baselines
that keep part of the backbone on the client (FedBN: its BatchNorm layers; FedRep / FedPer: its
last layers).

Backbone variables are flax's nested dicts, `{'params': {layer: {...}}, 'batch_stats': {layer:
{...}}}`. A *layer* here is the module path under a collection (`('bn0',)`, `('layer1_0',
'bn1')`), and a variable's *path* is `(collection, *layer, leaf name)`. `split` cuts a tree of
variables into the part a client sends and the part it keeps, by layer; `merge` puts the two back.
Both parts keep flax's nesting, so they are ordinary pytrees for the engine (stacked per client,
averaged, clipped under DP).
"""

from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import optax
from flax import traverse_util

from fedjax_face.core import local, loss_scale, precision

Path = tuple[str, ...]


def _flat(tree: dict) -> dict[Path, object]:
  return traverse_util.flatten_dict(tree) if tree else {}


def _nested(flat: dict[Path, object]) -> dict:
  return traverse_util.unflatten_dict(flat) if flat else {}


def layer_of(path: Path) -> Path:
  """The layer of a variable's path `(collection, *layer, leaf)`."""
  return path[1:-1]


def split(variables: dict, is_kept: Callable[[Path], bool]) -> tuple[dict, dict]:
  """(shared, kept): the variables whose path `is_kept` refuses, and those it accepts."""
  flat = _flat(variables)
  shared = {p: v for p, v in flat.items() if not is_kept(p)}
  kept = {p: v for p, v in flat.items() if is_kept(p)}
  return _nested(shared), _nested(kept)


def merge(*parts: dict) -> dict:
  """The variables of disjoint parts (`split`'s) as one tree; a path in two parts is an error."""
  flat = {}
  for part in parts:
    for path, value in _flat(part).items():
      if path in flat:
        raise ValueError(f'variable {"/".join(path)} is in two parts; expected disjoint parts.')
      flat[path] = value
  return _nested(flat)


def batch_norm_layers(variables: dict) -> frozenset[Path]:
  """The layers that hold running statistics (`batch_stats`): the BatchNorm layers. Their
  learned scale and shift sit under the same layer in `params`."""
  return frozenset(path[:-1] for path in _flat(variables.get('batch_stats', {})))


def in_layers(layers: Iterable[Path]) -> Callable[[Path], bool]:
  """The predicate of `split`: a variable of one of `layers` (its parameters and statistics)."""
  layers = frozenset(layers)
  return lambda path: layer_of(path) in layers


def under_top_level(names: Iterable[str]) -> Callable[[Path], bool]:
  """The predicate of `split`: a variable of a top-level module named in `names`, or of a module
  inside one."""
  names = frozenset(names)
  return lambda path: len(path) > 2 and path[1] in names


def at_paths_of(tree: dict, template: dict) -> dict:
  """The entries of `tree` at the paths `template` has (a part's variables taken from a whole,
  e.g. the running statistics a forward pass updated, of the layers one part holds)."""
  flat = _flat(tree)
  return _nested({path: flat[path] for path in _flat(template)})


def as_variables(*parts: dict) -> dict:
  """Flax variables of the whole model from parts `{'params', 'stats'}` (`train_part`'s)."""
  params = merge(*[p['params'] for p in parts])
  stats = merge(*[p['stats'] for p in parts])
  return {'params': params, 'batch_stats': stats} if stats else {'params': params}


def train_part(loss_fn: Callable, optimizer: optax.GradientTransformation, params, stats,
               frozen, xs, *, step_mode: str, lr_scale=None, loss_scale_state=None):
  """Steps over `xs` (leading axis: steps) that update `params` alone: (params, stats, losses).

  `loss_fn(params, stats, frozen, batch) -> (loss, new stats)`; the gradient is taken with
  respect to `params` only, and `frozen` is a constant of every step, so it cannot move. `stats`
  are what the forward pass updates without a gradient (the trained part's BatchNorm running
  statistics). The optimizer starts afresh over `params`. A step without a valid sample
  (`batch['mask']`) leaves everything as it was.

  A loss whose backbone computes in float16 (`precision.computes_in_float16`, read from its
  program: this function is handed a loss, not a model) trains under dynamic loss scaling
  (core/loss_scale.py). Its scale starts at `loss_scale_state` (a client's kept one) when given,
  and the function then returns the optimizer's end state fourth, (params, stats, losses,
  opt_state): its `loss_scale` is what the client keeps, and `loss_scale.round_metrics(None,
  opt_state)` the round's metrics. Otherwise the scale starts fresh with the optimizer.
  """
  one_step = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), xs)   # 0 steps ok
  optimizer = loss_scale.scaled_optimizer(
      optimizer, precision.computes_in_float16(loss_fn, params, stats, frozen, one_step))

  def step(carry, batch):
    params, stats, opt_state = carry
    (loss, new_stats), grads = loss_scale.value_and_grad_of(loss_fn, has_aux=True)(
        opt_state, params, stats, frozen, batch)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    if lr_scale is not None:
      updates = jax.tree.map(lambda u: u * lr_scale.astype(u.dtype), updates)
    params, stats = loss_scale.undo_if_skipped(
        new_opt_state, opt_state, (optax.apply_updates(params, updates), new_stats),
        (params, stats))
    return (params, stats, new_opt_state), loss

  carry = (params, stats, loss_scale.with_scale(optimizer.init(params), loss_scale_state))
  (params, stats, opt_state), losses = local.run_steps(local.skip_if_empty(step), carry, xs,
                                                       mode=step_mode)
  if loss_scale_state is not None:
    return params, stats, losses, opt_state
  return params, stats, losses


def mean_over_active(losses, mask):
  """The mean step loss over the steps that had a sample (`mask` `[steps, batch]`)."""
  active = jnp.any(mask, axis=-1)
  return jnp.sum(losses * active) / jnp.maximum(active.sum(), 1)
