"""Pytrees as named numpy arrays: what a federation message carries, and what a data holder keeps
in its own folder.

A tree is flattened to `{name: array}`, each name the leaf's path (`jax.tree_util.keystr`, e.g.
`['model']['params']['conv1']['kernel']`), so a message names every array it holds and a reader
can say which one is missing or has the wrong shape. The receiver rebuilds the tree from a
template of what it expects (arrays or `jax.ShapeDtypeStruct`s, from the method's own functions
under `jax.eval_shape`), never from the message's own description: a message cannot make its
reader build a structure it did not expect. Arrays travel as their exact bytes (dtype and shape
kept), so a round over the wire is the simulator's round bit for bit.
"""

import io
import os

import jax
import numpy as np

from fedjax_face.core import checks


def to_arrays(tree) -> dict[str, np.ndarray]:
  """`{leaf path: numpy array}` of every leaf of `tree`, in the tree's leaf order."""
  leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
  return {jax.tree_util.keystr(path): np.asarray(leaf) for path, leaf in leaves}


def from_arrays(arrays: dict[str, np.ndarray], template, what: str):
  """The tree of `template`'s structure whose leaves are `arrays` (`to_arrays` of such a tree).

  Raises:
    checks.UsageError: a name is missing or extra, or an array's shape or dtype differs from the
      template's; the message names `what` (the message or file) and the first array at fault.
  """
  leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
  names = [jax.tree_util.keystr(path) for path, _ in leaves]
  missing = [n for n in names if n not in arrays]
  extra = sorted(set(arrays) - set(names))
  if missing or extra:
    raise checks.UsageError(f'{what}: arrays {missing[:3]} missing, {extra[:3]} unexpected; '
                            f'expected the {len(names)} arrays of the method\'s message.')
  out = []
  for name, (_, spec) in zip(names, leaves):
    value = np.asarray(arrays[name])
    if value.shape != tuple(np.shape(spec)) or value.dtype != np.dtype(spec.dtype):
      raise checks.UsageError(f'{what}: {name} is {value.dtype}{list(value.shape)}; expected '
                              f'{np.dtype(spec.dtype)}{list(np.shape(spec))}.')
    out.append(value)
  return jax.tree_util.tree_unflatten(treedef, out)


def save(path: str, tree) -> None:
  """`tree`'s arrays in one .npz file, written whole or not at all (a temporary file renamed), so
  that a holder stopped mid-write keeps its previous round's state."""
  buffer = io.BytesIO()
  np.savez(buffer, **to_arrays(tree))
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  temporary = f'{path}.tmp'
  with open(temporary, 'wb') as f:
    f.write(buffer.getvalue())
  os.replace(temporary, path)


def load(path: str, template):
  """The tree `save` wrote to `path`, rebuilt on `template` (checked as `from_arrays` checks)."""
  with np.load(path, allow_pickle=False) as held:
    return from_arrays({name: held[name] for name in held.files}, template, path)
