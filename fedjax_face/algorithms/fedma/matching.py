"""FedMA's matching of one layer: the data centers' neurons assigned to global neurons under the
Beta-Bernoulli process posterior (BBP-MAP), on the host (NumPy and SciPy's Hungarian solver).

A neuron is a vector: a conv filter flattened with what belongs to its output channel (here its
BatchNorm scale and bias), or a dense unit's incoming weights with its bias. Each coordinate has
a Gaussian prior N(mu0, sigma0) and each data center's copy is the global one plus N(0, sigma)
noise. As the authors' code (IBM/FedMA `matching/pfnm.py`) does, a global neuron i is held by its
natural parameters, g_i = mu0 / sigma0 + sum of its matched w / sigma (a vector) and the
precision s_i = 1 / sigma0 + m_i / sigma, with m_i the data centers matched to it.

One data center's neurons (rows l, w~_l = w_l / sigma) against the L global neurons and up to
`added` new ones, the cost the assignment maximises (`cost_matrix`):

  existing i:  ||g_i + w~_l||^2 / (s_i + 1/sigma) - ||g_i||^2 / s_i + log(c_i / (J - c_i)),
               c_i = min(m_i, 10)
  new k-th:    ||mu0/sigma0 + w~_l||^2 / (1/sigma0 + 1/sigma) - ||mu0/sigma0||^2 sigma0
               - 2 log k + 2 log(gamma / J)

Readings, with the authors' code as the default where it and the FedMA / PFNM papers differ:
  * The popularity term has weight 1 and counts capped at 10, as in the code (the PFNM paper
    writes 2 log(m / (J - m))).
  * The global width is capped at `cap` hard (the engine's arrays have that width): at most
    min(Lj, cap - L) new columns. The code's cap (700) is soft (one new column always stays).
  * mu0 is one number for every coordinate (the code: 0, and 0.1 meant for the bias, which its
    later layers put on the first weight instead).
  * `match_layer` as `match_layer` in the code: data centers by width, largest first (stable),
    each added in turn, then `iterations` passes in a random order, each removing one data
    center's neurons (a global neuron left with none is deleted) and matching it again.
  * The global neuron is the posterior mean g_i / s_i (the code's), which shrinks towards mu0
    (with sigma = sigma0 = 1 and mu0 = 0 a neuron seen once becomes w / 2), or with
    `estimate='matched_mean'` the plain mean of its matched neurons, FedMA's "matched averaging"
    without the prior.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import optimize

COUNT_CAP = 10   # popularity counts above this count as this (the authors' compute_cost)
ESTIMATES = ('posterior_mean', 'matched_mean')


class Prior(NamedTuple):
  sigma: float = 1.0    # a data center's neuron around the global one (variance)
  sigma0: float = 1.0   # the global neuron's prior variance
  mu0: float = 0.0      # the global neuron's prior mean
  gamma: float = 7.0    # the Indian buffet process mass: how readily new neurons open


class Matched(NamedTuple):
  """A layer's matching: `assignments[j][l]` is data center j's neuron l's global neuron."""
  assignments: list[np.ndarray]   # int [Lj] per data center
  neurons: np.ndarray             # float64 [L, D] the global neurons (the chosen estimate)
  counts: np.ndarray              # int [L] data centers matched to each


class _Global:
  """The global neurons' natural parameters while a layer is matched."""

  def __init__(self, dim: int, prior: Prior):
    self.prior = prior
    self.weights = np.zeros((0, dim))    # g
    self.precisions = np.zeros(0)        # s
    self.counts = np.zeros(0, np.int64)  # m


def cost_matrix(neurons: np.ndarray, weights: np.ndarray, precisions: np.ndarray,
                counts: np.ndarray, num_clients: int, cap: int, prior: Prior) -> np.ndarray:
  """[Lj, L + added] the BBP-MAP objective of giving each of one data center's neurons [Lj, D]
  each existing global neuron (natural parameters `weights` [L, D], `precisions` [L], popularity
  `counts` [L]) or the k-th new one, added = min(Lj, cap - L) (module docstring)."""
  sigma, sigma0, mu0, gamma = prior
  w = neurons / sigma
  # ||g_i + w~_l||^2 expanded, so that no [Lj, L, D] array is formed (ResNet-18's 512-wide
  # layers would need gigabytes).
  gg, ww = np.sum(weights ** 2, -1), np.sum(w ** 2, -1)
  existing = ((gg[None] + 2 * w @ weights.T + ww[:, None]) / (precisions + 1 / sigma)[None]
              - (gg / precisions)[None])
  c = np.minimum(counts, COUNT_CAP)
  existing = existing + np.log(c / (num_clients - c))[None]
  prior_natural = mu0 / sigma0
  new = (np.sum((prior_natural + w) ** 2, -1) / (1 / sigma0 + 1 / sigma)
         - neurons.shape[1] * prior_natural ** 2 * sigma0)
  added = min(len(neurons), cap - len(weights))
  opened = (new[:, None] - 2 * np.log(np.arange(1, added + 1))[None]
            + 2 * np.log(gamma / num_clients))
  return np.hstack([existing, opened])


def _assign(state: _Global, neurons: np.ndarray, num_clients: int, cap: int) -> np.ndarray:
  """Matches one data center's neurons into `state` (updated in place); its assignment."""
  prior = state.prior
  cost = cost_matrix(neurons, state.weights, state.precisions, state.counts, num_clients, cap,
                     prior)
  rows, cols = optimize.linear_sum_assignment(-cost)   # maximises the objective
  w = neurons / prior.sigma
  assignment = np.empty(len(neurons), np.int64)
  existing = len(state.weights)
  opened = []
  for row, col in zip(rows, cols):
    if col < existing:
      state.weights[col] += w[row]
      state.precisions[col] += 1 / prior.sigma
      state.counts[col] += 1
      assignment[row] = col
    else:
      assignment[row] = existing + len(opened)
      opened.append(row)
  if opened:   # new neurons go last, in the order of their rows
    state.weights = np.vstack([state.weights, prior.mu0 / prior.sigma0 + w[opened]])
    state.precisions = np.concatenate([state.precisions,
                                       np.full(len(opened), 1 / prior.sigma0 + 1 / prior.sigma)])
    state.counts = np.concatenate([state.counts, np.ones(len(opened), np.int64)])
  return assignment


def _remove(state: _Global, neurons: np.ndarray, assignments: list, j: int) -> None:
  """Takes data center j's neurons out of `state`; a global neuron left with none is deleted
  and the other data centers' assignments renumbered."""
  w = neurons / state.prior.sigma
  for row in np.argsort(-assignments[j]):   # highest global index first
    i = assignments[j][row]
    state.counts[i] -= 1
    if state.counts[i] == 0:
      state.weights = np.delete(state.weights, i, axis=0)
      state.precisions = np.delete(state.precisions, i)
      state.counts = np.delete(state.counts, i)
      for k, a in enumerate(assignments):
        if k != j:
          a[a > i] -= 1
    else:
      state.weights[i] -= w[row]
      state.precisions[i] -= 1 / state.prior.sigma


def match_layer(neurons: list[np.ndarray], cap: int, prior: Prior = Prior(), *,
                iterations: int = 5, estimate: str = 'posterior_mean',
                rng: np.random.Generator | None = None) -> Matched:
  """Matches every data center's neurons (`neurons[j]` [Lj, D], Lj <= cap) to at most `cap`
  global neurons (module docstring)."""
  if estimate not in ESTIMATES:
    raise ValueError(f'estimate={estimate!r}; expected one of {ESTIMATES}')
  if any(len(n) > cap for n in neurons):
    raise ValueError(f'a data center has {max(map(len, neurons))} neurons, more than the cap {cap}')
  rng = rng if rng is not None else np.random.default_rng(0)
  num_clients = len(neurons)
  neurons = [np.asarray(n, np.float64) for n in neurons]
  state = _Global(neurons[0].shape[1], prior)
  assignments = [None] * num_clients
  order = sorted(range(num_clients), key=lambda j: -len(neurons[j]))
  for j in order:
    assignments[j] = _assign(state, neurons[j], num_clients, cap)
  for _ in range(iterations):
    for j in rng.permutation(num_clients):
      _remove(state, neurons[j], assignments, j)
      assignments[j] = _assign(state, neurons[j], num_clients, cap)
  if estimate == 'posterior_mean':
    global_neurons = state.weights / state.precisions[:, None]
  else:
    global_neurons = matched_mean([n for n in neurons], assignments, len(state.counts))
  return Matched(assignments, global_neurons, state.counts)


def matched_mean(values: list[np.ndarray], assignments: list[np.ndarray], width: int
                 ) -> np.ndarray:
  """[width, ...] the mean over data centers of what each gave every global neuron (its rows of
  `values[j]`, by `assignments[j]`); zeros where none did."""
  total = np.zeros((width,) + values[0].shape[1:])
  count = np.zeros(width)
  for v, a in zip(values, assignments):
    np.add.at(total, a, v)
    np.add.at(count, a, 1)
  return total / np.maximum(count, 1).reshape((-1,) + (1,) * (total.ndim - 1))
