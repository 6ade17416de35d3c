"""Binary narrow-sense BCH codes in systematic form: FedUV's codewords.

A BCH(n, k) code over GF(2), n = 2^m - 1, is the cyclic code whose generator polynomial g(x) is
the product of the distinct minimal polynomials of alpha^1 .. alpha^(d-1), alpha a primitive
element of GF(2^m) (narrow sense: the roots start at alpha^1). The field is built on MATLAB's
default primitive polynomial of degree m with alpha = x, as the `galois` package builds its
`BCH(n, k)`, so the codes and their codewords are galois's bit for bit
(tests/algorithms/test_feduv.py compares them). galois compiles numba kernels for each field
before its first code, in every process; these are built in numpy (BUILD_NOTES.md has both
timings).

A codeword is an array of n bits, highest degree first: the k message bits, then the n - k parity
bits r(x) = m(x) x^(n-k) mod g(x), so that m(x) x^(n-k) + r(x) is a multiple of g(x).
"""

import functools
from typing import NamedTuple

import numpy as np

# MATLAB's default primitive polynomials of GF(2^m) (`gfprimdf`), as bit masks (bit i: the
# coefficient of x^i); each is primitive, so x generates the field's multiplicative group.
PRIMITIVE_POLYNOMIALS = {
    2: 0b111,            # x^2 + x + 1
    3: 0b1011,           # x^3 + x + 1
    4: 0b10011,          # x^4 + x + 1
    5: 0b100101,         # x^5 + x^2 + 1
    6: 0b1000011,        # x^6 + x + 1
    7: 0b10001001,       # x^7 + x^3 + 1
    8: 0b100011101,      # x^8 + x^4 + x^3 + x^2 + 1
    9: 0b1000010001,     # x^9 + x^4 + 1
    10: 0b10000001001,   # x^10 + x^3 + 1
}


class Code(NamedTuple):
  """BCH(n, k) with designed distance d; `generator` holds g(x)'s n - k + 1 bits, highest degree
  first."""
  n: int
  k: int
  d: int
  generator: np.ndarray


def field_degree(n: int) -> int:
  """m with n = 2^m - 1, for the lengths this module has a field for."""
  m = (n + 1).bit_length() - 1
  if n < 3 or 2**m - 1 != n or m not in PRIMITIVE_POLYNOMIALS:
    raise ValueError(f'BCH code length n={n}; expected 2^m - 1 for m in '
                     f'{sorted(PRIMITIVE_POLYNOMIALS)}.')
  return m


def cyclotomic_cosets(n: int) -> dict[int, frozenset[int]]:
  """i -> its cyclotomic coset {i * 2^j mod n}, for 1 <= i < n: the exponents whose powers of
  alpha share a minimal polynomial."""
  coset_of = {}
  for i in range(1, n):
    if i not in coset_of:
      coset, j = set(), i
      while j not in coset:
        coset.add(j)
        j = 2 * j % n
      for member in coset:
        coset_of[member] = frozenset(coset)
  return coset_of


def dimensions(n: int) -> list[int]:
  """Every k > 0 of a narrow-sense binary BCH code of length n: g(x) has one root per member of
  the cosets of 1 .. d-1, so k = n - |their union| for each designed distance d."""
  coset_of, covered, dims = cyclotomic_cosets(n), set(), set()
  for i in range(1, n):
    covered |= coset_of[i]
    dims.add(n - len(covered))
  return sorted(dims - {0})


def _powers_of_alpha(m: int) -> list[int]:
  """alpha^0 .. alpha^(2^m - 2) as bit masks of polynomials in alpha = x modulo the field's
  polynomial."""
  poly, size, out, x = PRIMITIVE_POLYNOMIALS[m], 2**m, [], 1
  for _ in range(size - 1):
    out.append(x)
    x <<= 1
    if x & size:
      x ^= poly
  return out


def _minimal_polynomial(coset: frozenset[int], power: list[int]) -> int:
  """prod over j in `coset` of (x + alpha^j), as a bit mask: its coefficients lie in GF(2)."""
  n = len(power)
  log = {value: i for i, value in enumerate(power)}

  def times(a: int, b: int) -> int:   # field elements as bit masks
    return 0 if a == 0 or b == 0 else power[(log[a] + log[b]) % n]

  coefficients = [1]   # field elements, highest degree first
  for j in sorted(coset):
    root = power[j]
    shifted = coefficients + [0]                            # times x
    scaled = [0] + [times(c, root) for c in coefficients]   # times alpha^j
    coefficients = [a ^ b for a, b in zip(shifted, scaled)]
  if any(c not in (0, 1) for c in coefficients):
    raise AssertionError(f'the minimal polynomial of coset {sorted(coset)} left GF(2)')
  return int(''.join(map(str, coefficients)), 2)


def _times(a: int, b: int) -> int:
  """The product of two GF(2) polynomials given as bit masks."""
  out = 0
  while b:
    if b & 1:
      out ^= a
    a <<= 1
    b >>= 1
  return out


@functools.lru_cache(maxsize=None)
def code(n: int, k: int) -> Code:
  """The narrow-sense binary BCH(n, k) code; ValueError when no designed distance gives k."""
  m = field_degree(n)
  if k not in dimensions(n):
    raise ValueError(f'no binary BCH({n}, {k}) code; expected k in {dimensions(n)}.')
  power, coset_of = _powers_of_alpha(m), cyclotomic_cosets(n)
  roots, used, generator, d = set(), set(), 1, 1
  # Add the roots alpha^1, alpha^2, ... until n - k of them: the designed distance d is then the
  # first exponent not among them (the largest d whose code this is).
  while n - len(roots) > k:
    coset = coset_of[d]
    if coset not in used:
      used.add(coset)
      roots |= coset
      generator = _times(generator, _minimal_polynomial(coset, power))
    d += 1
  while d in roots:
    d += 1
  bits = np.array([int(b) for b in bin(generator)[2:]], np.uint8)
  assert len(bits) == n - k + 1, (n, k, len(bits))
  return Code(n=n, k=k, d=d, generator=bits)


def _remainder(words: np.ndarray, generator: np.ndarray) -> np.ndarray:
  """`words` [num, L] (highest degree first) modulo g(x): [num, deg g], long division over GF(2)
  of every word at once."""
  words = np.array(words, np.uint8)
  degree = len(generator) - 1
  for i in range(words.shape[1] - degree):
    lead = words[:, i].astype(bool)
    words[lead, i:i + degree + 1] ^= generator
  return words[:, words.shape[1] - degree:]


def encode(c: Code, messages: np.ndarray) -> np.ndarray:
  """`[num, n]` uint8 systematic codewords of `messages` [num, k] (bits, highest degree first)."""
  messages = np.asarray(messages, np.uint8)
  if messages.ndim != 2 or messages.shape[1] != c.k or np.any(messages > 1):
    raise ValueError(f'BCH({c.n}, {c.k}) messages of shape {messages.shape}; expected [num, {c.k}] '
                     'bits.')
  shifted = np.concatenate([messages, np.zeros((len(messages), c.n - c.k), np.uint8)], axis=1)
  return np.concatenate([messages, _remainder(shifted, c.generator)], axis=1)


def is_codeword(c: Code, words: np.ndarray) -> np.ndarray:
  """`[num]` bool: whether each of `words` [num, n] is a multiple of g(x)."""
  return ~np.any(_remainder(words, c.generator), axis=1)
