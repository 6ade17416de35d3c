"""Identity leakage (issue 59 part 1): what each party holds of an identity, used as an enrollment
template and matched against new images of that identity among distractors (docs/privacy.md,
"What each party sees").

The attacker's templates, one kind per view (`KINDS`; which method reveals which: `REVEALS`):

  server_rows         curious server: the class rows each client of the replayed rounds sends
                      (`Algorithm.client_rows`: FedGC's W_k, FedAwS's and FedFace's positive
                      rows, FedFV's w_i), each labelled by the identity the client holds there.
                      The rounds: the `rounds` consecutive ones ending at `round`, the union of
                      their cohorts (one round of FedFV's is 8 identities, too few for a rank-1
                      or a TAR at 1e-3 to mean anything); an identity sent in several keeps its
                      latest row (`latest_per_identity`), the replaced ones counted
                      (`repeats`).
  broadcast_as_is     curious client: FedFV's equivalent embeddings (Eq. 5) that round
                      `round`'s first client received (that round alone: a client sees the
                      broadcast of the rounds it takes part in), each taken as a template of
                      each of its k members (a blend of k people: rank-1 of one member is at
                      most one in k).
  broadcast_shared    the same, decoded: two received equivalents whose cosine reaches
                      `share_threshold` likely share a member; their normalised sum leans
                      towards it (for orthogonal rows, cos 2/√6 ≈ 0.82 with it, against 1/√2 for
                      one equivalent). Labelled by the member they truly share; links sharing
                      none are counted (`false_links`) and dropped.
  projection_update   curious server, FedUV (the control): W′ as client k sends it, over the
                      rounds as server_rows. Its rows name no identity without the private
                      codeword v_k; the decode tried is the top right singular vector of
                      W′_k − W′ (the received one): Eq. 4's
                      gradient in W′ is v_k g^T, so that vector is ± the client's mean feature
                      (the sign is v_k's, unknown: it is taken as the SVD gives it).
  released            third party: the final class embeddings (`EvalInputs.class_embeddings`)
                      of a method whose server holds them (published with the model).

Beside each kind, on the same identities: `exact`, the ceiling (the template is the mean
global-model embedding of the identity's training images), and `random`, chance measured
(Gaussian templates). Scores: rank-1 re-identification (`identification.rank_n`: each template
against one template per candidate, the mean of its probes' embeddings; candidates = the kind's
identities + the distractors, chance 1 / candidates) and TAR at FAR 1e-3 and 1e-2
(`verification.tar_at_far`: every template against every probe image, genuine when they share
the identity). Probes: `identity_probes` of the data source (new images of the training
identities, and of held-out distractors), embedded by the global model as the 1:1 protocol does
(`verification.compute_embeddings`).

Real data: the probes are held-out images of the clients' identities (`fedfr_split`: its
verification set; `image_folder`, `insightface`, `tfds`: `data.private_test_fraction`'s split),
and the distractors the lowest identities that no template names (clients' identities, trained
on, not strangers: the real splits hold out no one else). An attacked identity without held-out
images is left out of its kind (`without_probes`). The exact template never uses a held-out image
(`FederatedData.test_indices`). `client_folders` holds nothing out: refused.
"""

import itertools

import ml_collections
import numpy as np

from fedjax_face.core import arrays, checks
from fedjax_face.data import sources, stores
from fedjax_face.eval import EvalOutput, Evaluator
from fedjax_face.eval.recognition import identification, verification

KINDS = ('server_rows', 'broadcast_as_is', 'broadcast_shared', 'projection_update', 'released')
PARTY = {'server_rows': 'curious server', 'broadcast_as_is': 'curious client',
         'broadcast_shared': 'curious client', 'projection_update': 'curious server',
         'released': 'third party'}
# What each method reveals, as its "what crosses" tests assert (tests/algorithms/): FedPE's W_k
# and FedFR's W_l never leave the client (FedFR sends θ and the public Φ), FedUV sends θ and W′
# and never the codeword; a method absent here reveals no rows.
REVEALS = {
    'fedgc': ('server_rows', 'released'),
    'fedaws': ('server_rows', 'released'),
    'fedface': ('server_rows', 'released'),
    'fedfv': ('server_rows', 'broadcast_as_is', 'broadcast_shared', 'released'),
    'feduv': ('projection_update',),
}
FARS = (1e-3, 1e-2)
_RANDOM_STREAM = 0x1EA4   # the random templates' generator: SeedSequence([seed, this])


def config_leakage() -> ml_collections.ConfigDict:
  """Off by default (`round=0`), so the section can sit in every recognition config."""
  c = ml_collections.ConfigDict()
  c.round = 0                   # the replayed round r (1..num_rounds) attacked; 0 = off
  c.rounds = 1                  # the server's views: the `rounds` consecutive rounds ending at
                                # `round` (each one's cohort; a client's latest message kept);
                                # replaying them needs the checkpoints of rounds round-rounds ..
                                # round-1 (e.g. checkpoint_every=1, checkpoint_keep > rounds)
  c.kinds = ()                  # (): every kind the method reveals (REVEALS); or some of KINDS
  c.max_identities = 64         # attacked identities per kind (the lowest ids it covers)
  c.num_distractors = 64        # held-out identities among the candidates
  c.probes_per_identity = 4     # new images per identity (attacked and distractor)
  c.exact_images = 8            # training images per identity in the exact template
  c.share_threshold = 0.35      # broadcast_shared: cosine at which two equivalents are linked
  return c


def kinds_of(config, section) -> tuple[str, ...]:
  """The kinds asked: `section.kinds`, or every kind the method reveals when it is empty."""
  if not section.kinds:
    return REVEALS.get(config.algorithm, ())
  return tuple(section.kinds)


def check_leakage(config, section) -> None:
  checks.check_int('evals.leakage.round', section.round, allow_zero=True)
  if section.round == 0:
    return
  if section.round > config.num_rounds:
    raise ValueError(f'config.evals.leakage.round={section.round}; expected a round of the run '
                     f'(1..num_rounds={config.num_rounds}), or 0 (off).')
  rounds = section.get('rounds', 1)
  checks.check_int('evals.leakage.rounds', rounds)
  if rounds > section.round:
    raise ValueError(f'config.evals.leakage.rounds={rounds}; expected at most round='
                     f'{section.round} (the rounds replayed end at it and start at round 1 or '
                     'later).')
  source = sources.require(config, 'identity_probes', 'config.evals.leakage')
  if hasattr(source, 'check_identity_probes'):   # real data: probes only where images are held out
    source.check_identity_probes(config, 'config.evals.leakage')
  kinds = section.kinds
  if isinstance(kinds, str) or any(k not in KINDS for k in kinds):
    raise ValueError(f'config.evals.leakage.kinds={kinds!r}; expected a tuple of some of {KINDS} '
                     '(empty: every kind the method reveals).')
  revealed = REVEALS.get(config.algorithm, ())
  if not revealed:
    raise ValueError(f'config.evals.leakage with algorithm={config.algorithm!r}: the method '
                     'reveals no identity rows to anyone (docs/privacy.md, "What each party '
                     f'sees"); expected evals.leakage.round=0 or one of {tuple(REVEALS)}.')
  for kind in kinds_of(config, section):
    if kind not in revealed:
      raise ValueError(f'config.evals.leakage.kinds has {kind!r}, which algorithm='
                       f'{config.algorithm!r} does not reveal; expected some of {revealed}.')
  for name in ('max_identities', 'num_distractors', 'probes_per_identity', 'exact_images'):
    checks.check_int(f'evals.leakage.{name}', section[name])
  t = section.share_threshold
  if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t < 1:
    raise ValueError(f'config.evals.leakage.share_threshold={t!r}; expected a cosine in (0, 1).')


# --- the score, on given embeddings (the known-answer tests call it) -------------------------

def _unit(x) -> np.ndarray:
  return arrays.l2_normalize(np.asarray(x, np.float64))


def score(templates, template_labels, probe_emb, probe_labels, *, exclude=None) -> dict:
  """Rank-1 re-identification and TAR at `FARS` of `templates` `[T, d]` (identity
  `template_labels` `[T]`) against probe images `probe_emb` `[P, d]` (`probe_labels` `[P]`, the
  attacked identities and the distractors): `identification.rank_n` against one template per
  candidate (the mean of its probes), `verification.tar_at_far` over every (template, probe)
  pair. `exclude` `[T, P]` bool: pairs left out of the TAR (a blended template's other
  members)."""
  templates, probe_emb = _unit(templates), _unit(probe_emb)
  template_labels, probe_labels = np.asarray(template_labels), np.asarray(probe_labels)
  gallery, ids = identification.templates(probe_emb, probe_labels)
  rank1 = identification.rank_n(templates, template_labels, gallery, ids, ranks=(1,))[1]
  dist = np.maximum(2.0 - 2.0 * templates @ probe_emb.T, 0.0)   # squared L2 of unit vectors
  same = template_labels[:, None] == probe_labels[None, :]
  keep = np.ones_like(same) if exclude is None else ~np.asarray(exclude, bool)
  tar, _ = verification.tar_at_far(dist[keep], same[keep], FARS)
  return {'rank1': rank1, 'tar_at_far': tar, 'templates': int(len(templates)),
          'identities': int(np.unique(template_labels).size), 'candidates': int(len(ids)),
          'chance_rank1': 1.0 / len(ids)}


# --- the templates of each kind --------------------------------------------------------------

def server_rows(updates, clients, identity_table, row_keys) -> tuple[np.ndarray, np.ndarray]:
  """(rows `[T, d]`, identity of each): every class row the clients sent under `row_keys`,
  labelled through `identity_table` `[K, C_max]` (padding rows, -1, left out)."""
  rows, labels = [], []
  for client, update in zip(clients, updates):
    ids = np.asarray(identity_table)[client]
    for key in row_keys:
      sent = np.asarray(update[key], np.float64).reshape(len(ids), -1)
      rows.append(sent[ids >= 0])
      labels.append(ids[ids >= 0])
  return np.concatenate(rows), np.concatenate(labels)


def latest_per_identity(per_round: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray,
                                                                                  np.ndarray,
                                                                                  int]:
  """(rows, identities, repeats) of the union of several rounds' (rows, identities), oldest round
  first: an identity sent in several rounds keeps the row of the latest, the one the server
  holds at the end, from the model nearest the one that embeds the probes (an older row lives
  in an older embedding space; a mean would blend the two). `repeats`: the rows replaced."""
  latest = {}
  total = 0
  for rows, labels in per_round:
    for row, label in zip(rows, labels.tolist()):
      latest[label] = row
      total += 1
  labels = np.fromiter(latest, np.int64, len(latest))
  rows = np.stack(list(latest.values())) if latest else np.zeros((0, 0))
  return rows, labels, total - len(latest)


def equivalent_members(equivalents, class_rows, group_size: int, *, search: int = 6,
                       atol: float = 1e-4) -> list[tuple[int, ...] | None]:
  """The k identities each equivalent embedding `[n, d]` was fused from (Eq. 5: the normalised
  mean of k unit rows of `class_rows` `[N, d]`), found among its `k + search` most similar rows;
  None when no k of them reproduce it within `atol` (the evaluator's ground truth, not the
  attacker's)."""
  unit = _unit(class_rows)
  found = []
  for w in _unit(equivalents):
    near = np.argsort(-(unit @ w))[:group_size + search]
    match = None
    for group in itertools.combinations(near, group_size):
      if np.max(np.abs(_unit(unit[list(group)].mean(axis=0)) - w)) < atol:
        match = tuple(sorted(int(g) for g in group))
        break
    found.append(match)
  return found


def broadcast_as_is(equivalents, members) -> tuple[np.ndarray, np.ndarray, list]:
  """(templates, labels, the template's other members): each equivalent once per member."""
  rows, labels, others = [], [], []
  for w, group in zip(np.asarray(equivalents), members):
    for m in group or ():
      rows.append(w)
      labels.append(m)
      others.append(tuple(g for g in group if g != m))
  return np.asarray(rows).reshape(len(rows), -1), np.asarray(labels, np.int64), others


def broadcast_shared(equivalents, members, threshold: float) -> tuple[np.ndarray, np.ndarray,
                                                                      list, int]:
  """(templates, labels, other members, false links): the normalised sum of every pair of
  equivalents whose cosine reaches `threshold`, labelled by the one member they share; pairs
  sharing none or several are counted and dropped."""
  unit = _unit(equivalents)
  cos = unit @ unit.T
  rows, labels, others, false_links = [], [], [], 0
  for i, j in zip(*np.triu_indices(len(unit), 1)):
    if cos[i, j] < threshold:
      continue
    if members[i] is None or members[j] is None:
      continue
    shared = set(members[i]) & set(members[j])
    if len(shared) != 1:
      false_links += 1
      continue
    (m,) = shared
    rows.append(unit[i] + unit[j])
    labels.append(m)
    others.append(tuple(set(members[i]) ^ set(members[j])))
  return (np.asarray(rows).reshape(len(rows), -1), np.asarray(labels, np.int64), others,
          false_links)


def projection_update(sent, received) -> np.ndarray:
  """FedUV's decode: the top right singular vector `[d]` of W′_k − W′ (`[n, d]` each)."""
  delta = np.asarray(sent, np.float64) - np.asarray(received, np.float64)
  return np.linalg.svd(delta, full_matrices=False)[2][0]


def _limit(rows, labels, others, max_identities: int):
  """The templates of the `max_identities` lowest identities."""
  keep_ids = np.unique(labels)[:max_identities]
  keep = np.isin(labels, keep_ids)
  return rows[keep], labels[keep], [o for o, k in zip(others, keep) if k]


def _exclude(labels, others, probe_labels) -> np.ndarray | None:
  if not any(others):
    return None
  return np.array([np.isin(probe_labels, list(o)) for o in others]).reshape(
      len(labels), len(probe_labels))


# --- the evaluator ---------------------------------------------------------------------------

def make_leakage(config, section, setup) -> Evaluator | None:
  """The 'leakage' evaluator of replayed round `section.round`; None when it is 0 (off). It runs
  at the final evaluation (the one that gets `EvalInputs.replay`)."""
  if section.round == 0:
    return None
  source = sources.get(config.data.source)
  kinds = kinds_of(config, section)
  data, fed = setup.benchmark, setup.fed_view
  r = section.round
  window = range(r - section.get('rounds', 1) + 1, r + 1)   # the server's rounds, oldest first
  server_kinds = tuple(k for k in kinds if k in ('server_rows', 'projection_update'))

  def server_views(replay) -> dict:
    """The server's kinds over `window`: each round replayed once (one compiled client step), a
    client's latest message kept (`latest_per_identity`)."""
    per_round = {kind: [] for kind in server_kinds}
    for t in window:
      clients, received = replay.received(t)
      updates = replay(t)
      if 'server_rows' in server_kinds:
        per_round['server_rows'].append(server_rows(updates, clients, fed.identity_table,
                                                    replay.algorithm.client_rows))
      if 'projection_update' in server_kinds:
        rows = np.stack([projection_update(u['projection'], received.shared['projection'])
                         for u in updates])
        per_round['projection_update'].append((rows, np.asarray(fed.identity_table)[clients, 0]))
    out = {}
    for kind, found in per_round.items():
      rows, labels, repeats = latest_per_identity(found)
      notes = {'replayed_rounds': [window[0], window[-1]], 'repeats': repeats}
      out[kind] = (rows, labels, [()] * len(labels), notes)
    return out

  def templates_of(inputs) -> dict:
    """kind -> (templates, labels, other members, notes)."""
    replay = inputs.replay
    out = server_views(replay) if server_kinds else {}
    if {'broadcast_as_is', 'broadcast_shared'} & set(kinds):
      # One round: a client sees the broadcast of the rounds it takes part in (FedFV: 8 of
      # 1,000 clients a round), so several rounds' broadcasts would be a coalition's view.
      _, received = replay.received(r)
      eq = received.shared.get('W_eq')
      if eq is None:   # fedfv.draw='per_client': the first client's own draw
        eq = received.per_client['W_eq'][0]
      before = replay.algorithm.class_embeddings(replay.state_before(r))
      members = equivalent_members(eq, before, config.fedfv.group_size)
      unfound = sum(m is None for m in members)
      if 'broadcast_as_is' in kinds:
        rows, labels, others = broadcast_as_is(eq, members)
        out['broadcast_as_is'] = (rows, labels, others, {'equivalents': len(members),
                                                         'members_unfound': unfound})
      if 'broadcast_shared' in kinds:
        rows, labels, others, false_links = broadcast_shared(eq, members,
                                                             section.share_threshold)
        out['broadcast_shared'] = (rows, labels, others, {'links': len(labels),
                                                          'false_links': false_links})
    if 'released' in kinds and inputs.class_embeddings is not None:
      rows = np.asarray(inputs.class_embeddings, np.float64)
      labels = np.arange(len(rows))
      held = np.linalg.norm(rows, axis=1) > 0
      out['released'] = (rows[held], labels[held], [()] * int(held.sum()), {})
    return {kind: _limit(rows, labels, others, section.max_identities) + (notes,)
            for kind, (rows, labels, others, notes) in out.items() if len(labels)}

  def evaluate(inputs) -> EvalOutput | None:
    if inputs.replay is None and any(k != 'released' for k in kinds):
      return None   # mid-run evaluations: no replay
    found = templates_of(inputs)
    if not found:
      return None
    attacked = np.unique(np.concatenate([labels for _, labels, _, _ in found.values()]))
    images, probe_labels = source.identity_probes(config, data, attacked,
                                                  section.probes_per_identity,
                                                  section.num_distractors)
    embed = lambda x: verification.compute_embeddings(inputs.embed, x,
                                                      batch_size=config.eval.batch_size)
    probes = embed(images)
    train_labels = np.asarray(data.train_labels)
    trained = np.ones(len(train_labels), bool)   # the exact template: never a probe image
    if getattr(fed, 'test_indices', None) is not None:
      trained[np.asarray(fed.test_indices)] = False
    index = np.concatenate([np.flatnonzero(trained & (train_labels == i))[:section.exact_images]
                            for i in attacked])
    exact_images, ok = stores.take(data.train_images, index)   # a file source's store decodes
    exact, exact_ids = identification.templates(embed(exact_images[ok]),
                                                train_labels[index][ok])
    exact_rows = dict(zip(exact_ids.tolist(), exact))
    distractor = probe_labels >= data.num_identities
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, _RANDOM_STREAM]))
    results = {'round': r, 'rounds': len(window),
               'probes_per_identity': section.probes_per_identity,
               'distractors': int(np.unique(probe_labels[distractor]).size),
               'fars': [str(f) for f in FARS], 'kinds': {}}
    for kind, (rows, labels, others, notes) in found.items():
      probed = np.isin(labels, probe_labels)   # real data: some identities hold nothing out
      if not probed.all():
        notes = {**notes, 'without_probes': int(np.unique(labels[~probed]).size)}
        rows, labels = rows[probed], labels[probed]
        others = [o for o, p in zip(others, probed) if p]
      if not len(labels):
        continue
      ids = np.unique(labels)
      view = distractor | np.isin(probe_labels, ids)
      p_emb, p_lab = probes[view], probe_labels[view]
      row = {'party': PARTY[kind], **notes,
             **score(rows, labels, p_emb, p_lab, exclude=_exclude(labels, others, p_lab))}
      row['exact'] = score(np.stack([exact_rows[int(i)] for i in ids]), ids, p_emb, p_lab)
      row['random'] = score(rng.standard_normal(rows.shape), labels, p_emb, p_lab,
                            exclude=_exclude(labels, others, p_lab))
      results['kinds'][kind] = row
    scalars = {f'{kind}/{name}': row[name] for kind, row in results['kinds'].items()
               for name in ('rank1',)}
    return EvalOutput(results=results, scalars=scalars, figures={}, arrays={},
                      markdown=markdown(results))

  return Evaluator('leakage', evaluate)


def _pct(value) -> str:
  return '—' if value is None else f'{100 * value:.1f}'


def markdown(results: dict) -> list[str]:
  """report.md's section: one row per template kind, with its exact-template ceiling and chance."""
  fars = results['fars']
  head = ' | '.join(f'TAR@{f}' for f in fars)
  r, n = results['round'], results.get('rounds', 1)
  replayed = f'round {r}' if n == 1 else f"rounds {r - n + 1}-{r} (the server's views)"
  lines = [f"Identity leakage ({replayed} replayed; {results['distractors']} "
           f"distractors, {results['probes_per_identity']} probes per identity; %; "
           'docs/privacy.md):', '',
           f'| template | party | identities | candidates | rank-1 | {head} | exact rank-1 | '
           f'exact {head.replace(" | ", " | exact ")} | random rank-1 | '
           f'random {head.replace(" | ", " | random ")} | chance rank-1 |',
           '|' + ' --- |' * (4 + 3 * (1 + len(fars)) + 1)]
  for kind, row in results['kinds'].items():
    cells = [kind, row['party'], str(row['identities']), str(row['candidates']),
             _pct(row['rank1'])] + [_pct(row['tar_at_far'][f]) for f in fars]
    for ref in ('exact', 'random'):
      cells += [_pct(row[ref]['rank1'])] + [_pct(row[ref]['tar_at_far'][f]) for f in fars]
    cells.append(_pct(row['chance_rank1']))
    lines.append('| ' + ' | '.join(cells) + ' |')
  return lines + ['']
