"""The checks of config values every section uses: each raises ValueError naming the field
(`config.<name>`) and what was expected. Methods, sources and evaluators check their own sections
with these (`config_lib` re-exports them)."""

import math

import ml_collections


class UsageError(ValueError):
  """Input the user can fix: a config field, a file, a line of a file, a workdir. Its message is
  one line naming which and what was expected; the entry points (`fedjax_face.main`,
  `fedjax_face.evaluate`) print it alone and exit with status 2 (the traceback only with `-v 1`).
  Every reader's and check's own error class derives from it; a plain ValueError from a check of a
  config field (`check_*` below) is treated the same way by the entry points."""


def check_choice(name: str, value, choices) -> None:
  """Raises ValueError unless `config.<name>` is one of `choices`."""
  if value not in choices:
    raise ValueError(f'config.{name}={value!r}; expected one of {tuple(choices)}.')


def check_number(name: str, value, *, allow_zero: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is a finite positive (or, with allow_zero, >= 0)
  number (nan and inf are refused: they would fail rounds later as a divergence)."""
  if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
      or value < 0 or (value == 0 and not allow_zero)):
    expected = 'a finite non-negative number' if allow_zero else 'a finite positive number'
    raise ValueError(f'config.{name}={value!r}; expected {expected}.')


def check_int(name: str, value, *, allow_zero: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is a positive (or, with allow_zero, >= 0) integer."""
  if not isinstance(value, int) or isinstance(value, bool) or value < (0 if allow_zero else 1):
    expected = 'a non-negative integer' if allow_zero else 'a positive integer'
    raise ValueError(f'config.{name}={value!r}; expected {expected}.')


def check_bool(name: str, value) -> None:
  if not isinstance(value, bool):
    raise ValueError(f'config.{name}={value!r}; expected True or False.')


def check_fraction(name: str, value, *, closed_below: bool = False) -> None:
  """Raises ValueError unless `config.<name>` is in (0, 1] (or [0, 1] with closed_below)."""
  ok = isinstance(value, (int, float)) and (0.0 <= value if closed_below else 0.0 < value)
  if not (ok and value <= 1.0):
    interval = '[0, 1]' if closed_below else '(0, 1]'
    raise ValueError(f'config.{name}={value!r}; expected a fraction in {interval}.')


def section(c: ml_collections.ConfigDict, name: str, added_by: str) -> ml_collections.ConfigDict:
  """`c.<name>`, or a ValueError saying which config adds it (a method or evaluator section)."""
  if name not in c:
    raise ValueError(f'config.{name} is missing; {added_by} adds it (start from a file in '
                     'configs/).')
  return c[name]
