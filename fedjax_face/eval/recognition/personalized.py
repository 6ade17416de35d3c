"""FedFR's personalized protocol: each client evaluated on its own identities with its own model,
then averaged over clients.

For client c, with the private identities' held-out images (`data.private_test_fraction`):
  1:1  genuine pairs: every two different test images of one of c's identities; impostor pairs:
       every test image of c's identities with every test image of another client's identities
       (the paper: "pairing one local identity with a random identity from other clients", 630
       million per client at its size, i.e. all of them). TAR at fixed FARs, pooled
       (`verification.tar_at_far`), on the cosine distance 1 - cos.
  1:N  gallery: one template per identity of c, the mean feature of its training images; probes:
       every test image of every client, c's own mated, the others' non-mated distractors. TPIR at
       fixed FPIRs (`identification.tpir_at_fpir`).
Features are the client's personalized model's (FedFR: [theta_l, Pi], the DFC branch's f'), or the
global model's for a method without one. A FAR below 1 / (impostor pairs) or an FPIR below
1 / (non-mated probes) cannot be resolved at the benchmark's size and is reported as None.

Beside the mean over the K clients, the spread across them (issue 61: "the worst 10 %", as the
fair federated learning papers report it: q-FFL, Li et al., ICLR 2020, Table 1 'Worst 10%', and
Ditto, Li et al., ICML 2021, both the mean accuracy of the worst 10 % of devices):
`spread_over_clients`, the mean of the lowest ceil(K / 10) clients' values, the lowest client's
value (min), and every client's value.
"""

from typing import Any, Sequence

import numpy as np

from fedjax_face.eval.recognition import identification, verification

FARS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1)   # Table 1 / 2 report 1e-6, 1e-5
FPIRS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)        # Table 1 / 2 report 1e-5, 1e-4


def client_pairs(labels: np.ndarray, own: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(`[P]` first, `[P]` second, `[P]` issame) indices into the test images `labels` of client c's
  1:1 pairs: genuine = two different images of one own identity (i < j), impostor = an own image
  with another client's image. `own` bool marks c's images."""
  mine, others = np.flatnonzero(own), np.flatnonzero(~own)
  first, second = np.triu_indices(len(mine), k=1)
  same = labels[mine][first] == labels[mine][second]
  genuine = (mine[first][same], mine[second][same])
  imp_first, imp_second = np.meshgrid(mine, others, indexing='ij')
  firsts = np.concatenate([genuine[0], imp_first.reshape(-1)])
  seconds = np.concatenate([genuine[1], imp_second.reshape(-1)])
  issame = np.concatenate([np.ones(len(genuine[0]), bool), np.zeros(imp_first.size, bool)])
  return firsts, seconds, issame


def client_verification(test_features: np.ndarray, test_labels: np.ndarray, own: np.ndarray,
                        fars: Sequence[float] = FARS) -> dict[str, Any]:
  """Client c's 1:1 TAR at `fars` on its pairs (`client_pairs`) of unit `test_features`."""
  first, second, issame = client_pairs(test_labels, own)
  if not issame.any() or issame.all():
    raise ValueError(f'a client has {int(issame.sum())} genuine and {int((~issame).sum())} '
                     'impostor test pairs; the personalized 1:1 protocol needs both (at least two '
                     'held-out images of an identity: data.private_test_fraction).')
  cos = np.sum(test_features[first] * test_features[second], axis=1)
  tar, _ = verification.tar_at_far(1.0 - cos, issame, fars)
  return {'tar': tar, 'genuine_pairs': int(issame.sum()), 'impostor_pairs': int((~issame).sum())}


def client_identification(train_features: np.ndarray, train_labels: np.ndarray,
                          test_features: np.ndarray, test_labels: np.ndarray, own: np.ndarray,
                          fpirs: Sequence[float] = FPIRS) -> dict[str, Any]:
  """Client c's 1:N TPIR at `fpirs`: its identities' mean training features against every test
  image (`own` marks the mated ones)."""
  gallery, gallery_ids = identification.templates(train_features, train_labels)
  tpir, _ = identification.tpir_at_fpir(test_features, test_labels, own, gallery, gallery_ids,
                                        fpirs)
  return {'tpir': tpir, 'gallery': int(len(gallery_ids)), 'mated_probes': int(own.sum()),
          'non_mated_probes': int((~own).sum())}


def mean_over_clients(per_client: list[dict[str, float | None]]) -> dict[str, float | None]:
  """The mean over clients of each operating point, None when any client could not resolve it."""
  keys = per_client[0].keys()
  return {k: (None if any(c[k] is None for c in per_client)
              else float(np.mean([c[k] for c in per_client]))) for k in keys}


def worst_count(num_clients: int) -> int:
  """How many clients "the worst 10 %" of `num_clients` holds: ceil(K / 10), so one client for
  K <= 10 (the figure is then the worst client's). Integer arithmetic: math.ceil(0.1 * 30) is 4,
  since 0.1 * 30 = 3.0000000000000004 in floating point."""
  return -(-num_clients // 10)


def spread_over_clients(per_client: list[dict[str, float | None]]) -> dict[str, Any]:
  """The spread across clients of each operating point: 'worst_10pct', the mean of the lowest
  `worst_count(K)` clients' values; 'min', the lowest; 'per_client', every client's value in
  client order. Chosen over numpy's 10th percentile, which for K < 10 interpolates between the
  two lowest clients and so reports a rate no client has; this mean is the worst client's own
  value there, and a mean of whole clients above. As in `mean_over_clients`, an operating point
  that any client cannot resolve (None) has no worst or min (None): its value there is unknown,
  not low."""
  keys, count = per_client[0].keys(), worst_count(len(per_client))
  lowest = lambda k, n: (None if any(c[k] is None for c in per_client)
                         else float(np.mean(np.sort([c[k] for c in per_client])[:n])))
  return {'worst_10pct': {k: lowest(k, count) for k in keys},
          'min': {k: lowest(k, 1) for k in keys},
          'per_client': {k: [c[k] for c in per_client] for k in keys}}
