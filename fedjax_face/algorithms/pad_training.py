"""A data center's training of a presentation-attack detector for the personalization baselines
that run on both tasks (FedBN, FedRep): FedPAD's detector and losses, FedGPAD's batches.

The detector is FedPAD's (`model.name='pad_resnet18'`, the paper's ResNet-18: Eq. 1, the
cross-entropy of the live logit; or the Table II network without ES and Dec, `pad_net` with
`model.disentangle=False`: Eq. 4 + Eq. 5), trained on the loss `pad_losses.total_loss` with the
authors' term weights (`pad_losses.LOSS_WEIGHTS`), on FedGPAD's batches (`fedgpad.training_batch`:
frames and depth maps flipped together, RGB + HSV inputs, live = an odd local class).
"""

import jax.numpy as jnp

from fedjax_face.algorithms import fedgpad, pad_losses, partial_sharing
from fedjax_face.models import pad as pad_model

DETECTORS = ('pad_resnet18', 'pad_net')


def check_detector(config, method: str) -> None:
  """FedPAD's detector, at the data's size (ValueError naming the field otherwise)."""
  m = config.model
  if m.name not in DETECTORS:
    raise ValueError(f'config.model.name={m.name!r} with {method} on anti-spoofing; expected one '
                     f"of {DETECTORS} (FedPAD's detector, models/pad.py).")
  if m.name == 'pad_net' and m.disentangle:
    raise ValueError(f'config.model.disentangle=True with {method}: FedGPAD\'s ES and Dec are '
                     "FedGPAD's own; expected False.")
  if m.image_size != config.data.image_size:
    raise ValueError(f'config.model.image_size={m.image_size} but data.image_size='
                     f'{config.data.image_size}; expected the same.')


def image_shape(config) -> tuple[int, int, int]:
  """The detector's input: RGB + HSV frames at the data's size."""
  size = config.data.image_size
  return (size, size, pad_model.PAD_CHANNELS)


def detector_loss(model, variables, batch) -> tuple[jnp.ndarray, dict]:
  """(FedPAD's loss on one step's frames, the detector's new BatchNorm statistics): FedGPAD's
  batch of `batch`, `pad_losses.total_loss` with the authors' term weights."""
  frames = fedgpad.training_batch(batch)
  outputs, state = model.apply(variables, frames['inputs'], train=True, mutable=['batch_stats'])
  total, _ = pad_losses.total_loss(outputs, frames, pad_losses.LOSS_WEIGHTS)
  return total, state.get('batch_stats', {})


def loss(model):
  """`loss_fn(trained, frozen, batch) -> (loss, the trained part's new statistics)` of
  `partial_sharing.train_part`: the detector's loss on one step's frames, the model being both
  parts together."""
  def loss_fn(trained, frozen, batch):
    total, stats = detector_loss(model, partial_sharing.as_variables(trained, frozen), batch)
    return total, partial_sharing.at_paths_of(stats, trained['stats'])
  return loss_fn


def step_inputs(data: dict, rng) -> dict:
  """A round's steps `[steps, ...]`, as FedGPAD's data centers take them."""
  return fedgpad.step_inputs(data, rng)


def live_logit(outputs) -> jnp.ndarray:
  """The detector's live logit among its heads' outputs."""
  return outputs['logit']
