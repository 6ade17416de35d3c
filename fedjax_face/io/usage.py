"""A usage error on the command line: one line on stderr and exit status 2, the same for every
command of the project (`main`, `export`, `reproduce`)."""

import sys

USAGE_EXIT = 2   # the command line cannot work as written


def one_line(message: str, prog: str) -> str:
  """'<prog>: <message>' with the message's lines joined into one."""
  line = ' '.join(part.strip() for part in message.splitlines() if part.strip())
  return f'{prog}: {line}'


def print_refusal(message: str, prog: str) -> None:
  """`one_line` of `message` on stderr."""
  print(one_line(message, prog), file=sys.stderr, flush=True)
