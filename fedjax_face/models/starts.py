"""What a run starts from besides random weights (`config.init_from`): an arcface_torch backbone
file (`.pth` / `.onnx`, models/arcface_torch.py) or a checkpoint of another run, read and
verified by io/checkpoint.py. Which round of a run may start another is run/resume.py's rule."""

import jax
import numpy as np

from fedjax_face.core import blocks, checks
from fedjax_face.io import checkpoint
from fedjax_face.models import arcface_torch


class StartError(checks.UsageError):
  """A start whose weights do not fit this run's model: main.py prints it as one line, exit 2."""


def load_init(path: str, model_config, image_size: int, *, step: int = 0,
              trust_unverified: bool = False, trust_hint: str = '') -> dict:
  """What `Algorithm.init` starts from: `{'server': {'model': variables}}` for a backbone file,
  converted to `model_config` at `image_size`; for a run's workdir, its checkpoint of round
  `step` as nested dicts, verified as a resume verifies (`checkpoint.read_verified`), its method's
  part when it trained with the federated blocks (`blocks.method_start`)."""
  if arcface_torch.is_backbone_file(path):
    return {'server': {'model': arcface_torch.load_variables(path, model_config, image_size)}}
  return blocks.method_start(checkpoint.read_verified(
      path, step, f'config.init_from={path!r}', trust_unverified, trust_hint=trust_hint,
      other='rerun the run it comes from, or name another round with config.init_from_step'))


def matching_tree(name: str, template, restored):
  """`restored` cast to `template`'s structure, shapes and dtypes, or a StartError naming the
  first leaf that differs (`name` says what was restored, e.g. 'init_from=... server.model')."""
  flat_t = dict(jax.tree_util.tree_flatten_with_path(template)[0])
  flat_r = dict(jax.tree_util.tree_flatten_with_path(restored)[0])
  keys = lambda d: {jax.tree_util.keystr(k) for k in d}
  if keys(flat_t) != keys(flat_r):
    missing = sorted(keys(flat_t) - keys(flat_r))[:3]
    extra = sorted(keys(flat_r) - keys(flat_t))[:3]
    raise StartError(f'{name} does not have this run\'s structure: missing {missing}, '
                     f'unexpected {extra} (was it trained with the same config.model?).')
  for path, want in flat_t.items():
    got = flat_r[path]
    if tuple(np.shape(got)) != tuple(np.shape(want)):
      raise StartError(f'{name}{jax.tree_util.keystr(path)} has shape {tuple(np.shape(got))}; '
                       f'this run expects {tuple(np.shape(want))} (same config.model and '
                       'data.image_size as the run it starts from?).')
  return jax.tree.map(lambda t, r: jax.numpy.asarray(r, dtype=jax.numpy.result_type(t)),
                      template, restored)
