"""The tests' fixtures in PyTorch's zip state-dict format, written by the package's own writer
(`io/torch_state_dict.state_dict_bytes`, what torch.save writes since PyTorch 1.6), so the reader
is tested without PyTorch. `Call` adds what only a test writes: a value the pickle makes by
calling a global, as an unsafe file would.
"""

from fedjax_face.io import torch_state_dict

Tensor = torch_state_dict.StoredTensor   # a tensor as stored: storage, offset, size, stride


class Call:
  """A value the pickle makes by calling `module.name()`: what an unsafe file holds."""

  def __init__(self, module: str, name: str):
    self.module, self.name = module, name


def _call_opcodes(value: Call) -> bytes:
  """GLOBAL module.name, an empty tuple, REDUCE: `module.name()` on unpickling."""
  return b'c' + f'{value.module}\n{value.name}\n'.encode('ascii') + b')R'


def write_pth(path, state: dict, *, folder: str = 'archive',
              byteorder: str | None = 'little') -> None:
  """Writes `state` ({key: array, Tensor or Call}) as torch.save does."""
  with open(path, 'wb') as f:
    f.write(torch_state_dict.state_dict_bytes(state, folder=folder, byteorder=byteorder,
                                              other=_call_opcodes))
