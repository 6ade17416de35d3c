"""The PyTorch references of the bench (optional: only when torch is installed).

Their models, written here in PyTorch from the same architecture facts as the project's: the
fedavg_cnn section's classifier CNN, and arcface_torch's IResNet (`models/iresnet.py`'s layout);
and the strongest CPU loop peers use: one process per core, one thread each (`PerCore`), beside
one process on 1 and on all usable threads.
"""

from __future__ import annotations

import importlib.util
import multiprocessing

import numpy as np


def available() -> bool:
  return importlib.util.find_spec('torch') is not None


def cnn(image_size: int, num_classes: int):
  """conv32-pool-conv64-pool-dense128-dense (the fedavg_cnn section's `ClassifierCNN`)."""
  from torch import nn   # pylint: disable=g-import-not-at-top
  return nn.Sequential(
      nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
      nn.Linear(64 * (image_size // 4) ** 2, 128), nn.ReLU(), nn.Linear(128, num_classes))


def iresnet(stage_sizes, embedding_dim: int = 512, image_size: int = 112):
  """arcface_torch's IResNet: the layout of `models/iresnet.py`, state-dict keys included."""
  import torch   # pylint: disable=g-import-not-at-top
  from torch import nn   # pylint: disable=g-import-not-at-top

  class Block(nn.Module):
    def __init__(self, cin, cout, stride):
      super().__init__()
      self.bn1 = nn.BatchNorm2d(cin, eps=1e-5)
      self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
      self.bn2 = nn.BatchNorm2d(cout, eps=1e-5)
      self.prelu = nn.PReLU(cout)
      self.conv2 = nn.Conv2d(cout, cout, 3, stride, 1, bias=False)
      self.bn3 = nn.BatchNorm2d(cout, eps=1e-5)
      self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout, eps=1e-5))
                         if stride != 1 or cin != cout else None)

    def forward(self, x):
      out = self.bn3(self.conv2(self.prelu(self.bn2(self.conv1(self.bn1(x))))))
      return out + (x if self.downsample is None else self.downsample(x))

  class IResNet(nn.Module):
    def __init__(self):
      super().__init__()
      self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
      self.bn1 = nn.BatchNorm2d(64, eps=1e-5)
      self.prelu = nn.PReLU(64)
      cin = 64
      for s, (blocks, width) in enumerate(zip(stage_sizes, (64, 128, 256, 512)), start=1):
        setattr(self, f'layer{s}', nn.Sequential(*[Block(cin if b == 0 else width, width,
                                                         2 if b == 0 else 1)
                                                   for b in range(blocks)]))
        cin = width
      self.bn2 = nn.BatchNorm2d(512, eps=1e-5)
      self.fc = nn.Linear(512 * (image_size // 16) ** 2, embedding_dim)
      self.features = nn.BatchNorm1d(embedding_dim, eps=1e-5)
      nn.init.constant_(self.features.weight, 1.0)
      self.features.weight.requires_grad = False

    def forward(self, x):
      x = self.prelu(self.bn1(self.conv1(x)))
      for s in range(1, len(stage_sizes) + 1):
        x = getattr(self, f'layer{s}')(x)
      return self.features(self.fc(torch.flatten(self.bn2(x), 1)))

  return IResNet()


# -- one process per core ----------------------------------------------------------------------

_WORK = {}   # in each worker process: what its initializer built


def _init_worker(build, args):
  import torch   # pylint: disable=g-import-not-at-top
  torch.set_num_threads(1)
  _WORK['task'] = build(*args)


def _call(args):
  return _WORK['task'](*args)


class PerCore:
  """`processes` spawned workers, one thread each, each holding `build(*args)` (a picklable
  top-level function returning the worker's task); `map` runs the task on each argument tuple,
  one per worker at a time."""

  def __init__(self, processes: int, build, args: tuple):
    self.processes = processes
    self._pool = multiprocessing.get_context('spawn').Pool(
        processes, initializer=_init_worker, initargs=(build, args))

  def map(self, calls: list[tuple]) -> list:
    return self._pool.map(_call, calls, chunksize=1)

  def close(self):
    self._pool.terminate()
    self._pool.join()


# -- the fedavg_cnn section's round, one client chunk per worker --------------------------------

def cnn_round_data(spec, image_size: int, num_classes: int, seed: int):
  """The round's images (uint8, NCHW) and labels, the same in every process."""
  rng = np.random.default_rng(seed)
  shape = (spec['cohort_size'], spec['local_steps'], spec['batch_size'], 3, image_size,
           image_size)
  return (rng.integers(0, 256, shape, dtype=np.uint8),
          rng.integers(0, num_classes, shape[:3]).astype(np.int64))


def cnn_clients(spec, image_size: int, num_classes: int, learning_rate: float, seed: int,
                device: str = 'cpu', channels_last: bool = False):
  """The round's client work on `device`: `(start state, client ids) -> the sum of those
  clients' trained states` (numpy in and out; on CUDA, returning waits for the device). A
  `PerCore` worker's task, and the in-process rows' round. `channels_last`: the model's weights
  and every batch in PyTorch's NHWC memory format (the bench's rows use its default, NCHW; on
  one CPU thread its NCHW max-pool forward was the loop's largest cost)."""
  import torch   # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  layout = torch.channels_last if channels_last else torch.contiguous_format
  model = cnn(image_size, num_classes).to(device).to(memory_format=layout)
  images, labels = (torch.from_numpy(a).to(device)
                    for a in cnn_round_data(spec, image_size, num_classes, seed))
  loss_fn = torch.nn.CrossEntropyLoss()

  def train(start: dict, clients) -> dict:
    start = {k: torch.from_numpy(v).to(device) for k, v in start.items()}
    total = {k: torch.zeros_like(v) for k, v in start.items()}
    for client in clients:
      model.load_state_dict(start)
      opt = torch.optim.SGD(model.parameters(), lr=learning_rate)
      for s in range(spec['local_steps']):
        opt.zero_grad()
        batch = (images[client, s].float() / 127.5 - 1.0).contiguous(memory_format=layout)
        loss_fn(model(batch), labels[client, s]).backward()
        opt.step()
      for k, v in model.state_dict().items():
        total[k] += v
    return {k: v.cpu().numpy() for k, v in total.items()}
  return train


def initial_cnn_state(image_size: int, num_classes: int, seed: int) -> dict:
  """The CNN's initial state dict as numpy (the round's start, the same in every process)."""
  import torch   # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  return {k: v.numpy() for k, v in cnn(image_size, num_classes).state_dict().items()}


# -- backbone training steps -------------------------------------------------------------------

def backbone_steps(stage_sizes, image_size: int, batch_size: int, num_classes: int, seed: int,
                   device: str = 'cpu'):
  """A worker's task: `(steps,) -> final loss` of SGD on an IResNet plus a linear classifier,
  batch `batch_size` of random images, on `device` (returning the loss waits for it)."""
  import torch   # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  model = torch.nn.Sequential(iresnet(stage_sizes, 512, image_size),
                              torch.nn.Linear(512, num_classes)).to(device)
  opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
  rng = np.random.default_rng(seed)
  images = torch.from_numpy(rng.uniform(-1, 1, (batch_size, 3, image_size, image_size))
                            .astype(np.float32)).to(device)
  labels = torch.from_numpy(rng.integers(0, num_classes, batch_size).astype(np.int64)).to(device)
  loss_fn = torch.nn.CrossEntropyLoss()

  def train(steps: int) -> float:
    for _ in range(steps):
      opt.zero_grad()
      loss = loss_fn(model(images), labels)
      loss.backward()
      opt.step()
    return float(loss)
  return train
