"""Unpickling files from elsewhere without executing them.

A pickle can import and call any global. The readers of pickled formats (`data/formats/
verification_bin.py`: insightface's `.bin` pair sets; `io/torch_state_dict.py`: PyTorch's
`.pth` state dicts) unpickle with `RestrictedUnpickler`, whose `find_class` returns only the
stand-ins a reader admits, by (module, name): small callables written here that check their
arguments and build the value themselves. Every other global is refused (`Refused`) before
anything is imported or called.
"""

import pickle


class Refused(Exception):
  """The pickle asked for something not admitted (a global, a persistent id, a stand-in's
  arguments); nothing was imported or executed. Readers re-raise it with `refusal`."""


def refusal(path: str, error: Refused) -> str:
  """The one-line message of a refused pickle in file `path`."""
  return f'{path}: {error}; refused, nothing was imported or executed'


def text(value) -> str:
  """A name from a Python 2 pickle read with encoding='bytes' comes back as bytes."""
  return value.decode('ascii') if isinstance(value, (bytes, bytearray)) else value


class StandIn:
  """What `find_class` returns: a frozen callable, so BUILD cannot set attributes on it."""

  __slots__ = ('_fn', '_name')

  def __init__(self, name: str, fn):
    object.__setattr__(self, '_name', name)
    object.__setattr__(self, '_fn', fn)

  def __call__(self, *args, **kwargs):
    return self._fn(*args, **kwargs)

  def __setattr__(self, key, value):
    raise Refused(f'setting {self._name}.{key} is not admitted')


class RestrictedUnpickler(pickle.Unpickler):
  """An unpickler whose globals are only `admitted`'s stand-ins.

  Args:
    file: the binary stream.
    admitted: {(module, name): StandIn} (or a plain container type such as
      `collections.OrderedDict`).
    holds: what the format holds, for the refusal message ('a verification .bin holds ...').
    persistent_load: the format's persistent-id handler; None refuses persistent ids.
    encoding: as `pickle.Unpickler`'s.
  """

  def __init__(self, file, admitted: dict, holds: str, persistent_load=None,
               encoding: str = 'bytes'):
    super().__init__(file, encoding=encoding)
    self._admitted = admitted
    self._holds = holds
    self._persistent = persistent_load

  def find_class(self, module, name):
    module, name = text(module), text(name)
    stand_in = self._admitted.get((module, name))
    if stand_in is None:
      raise Refused(f'the pickle tries to load the global {module}.{name} ({self._holds})')
    return stand_in

  def persistent_load(self, pid):
    if self._persistent is None:
      raise Refused(f'the pickle uses a persistent id ({pid!r})')
    return self._persistent(pid)
