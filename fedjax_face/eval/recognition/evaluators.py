"""The face-recognition evaluators of `config.evals`: 'verification' (1:1), 'identification' (1:N)
and 'personalized' (FedFR's per-client 1:1 and 1:N), over the protocols of `verification.py`,
`identification.py` and `personalized.py`."""

import ml_collections
import numpy as np

from fedjax_face.core import checks
from fedjax_face.data import sources, stores
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.recognition import identification, personalized, report, verification


def config_verification() -> ml_collections.ConfigDict:
  """1:1 verification, the insightface 10-fold protocol, on each pair set."""
  c = ml_collections.ConfigDict()
  c.pair_sets = ('lfw', 'cfp_fp', 'agedb_30')   # the synthetic benchmark renders these; real
                                                # data: <name>.bin / .txt stems
  c.far_target = 1e-3
  return c


def check_verification(config, section) -> None:
  """Pair-set names: those the data source renders, or any file stem (`<name>.bin`)."""
  source = sources.require(config, 'pair_sets', 'config.evals.verification')
  pair_sets = section.pair_sets
  if not pair_sets or isinstance(pair_sets, str):
    raise ValueError(f'config.evals.verification.pair_sets={pair_sets!r}; expected a non-empty '
                     'tuple of names, e.g. "(\'lfw\', \'cfp_fp\')".')
  for name in pair_sets:
    if source.PAIR_SET_NAMES is not None:
      checks.check_choice('evals.verification.pair_sets[...]', name, source.PAIR_SET_NAMES)
    elif not isinstance(name, str) or not name or any(ch in name for ch in ',/\\ '):
      raise ValueError(f'config.evals.verification.pair_sets has {name!r}; expected the file '
                       'stem of a <name>.bin or <name>.txt pair set, one name per tuple item, '
                       'e.g. "(\'lfw\', \'calfw\')".')
  checks.check_fraction('evals.verification.far_target', section.far_target)


def make_verification(config, section, setup) -> Evaluator:
  """1:1 verification (insightface 10-fold protocol) on every pair set; ROC curves in roc.png."""
  source = sources.get(config.data.source)
  pair_sets = source.pair_sets(config, setup.benchmark, section.pair_sets)

  def evaluate(inputs) -> EvalOutput:
    results, curves = {}, {}
    for name, pairs in pair_sets.items():
      res = verification.verify(inputs.embed, pairs.images, pairs.issame,
                                batch_size=config.eval.batch_size, far_target=section.far_target)
      res['title'] = source.pair_set_title(name)
      curves[res['title']] = (np.asarray(res.pop('roc_fpr')), np.asarray(res.pop('roc_tpr')))
      results[name] = res
    return EvalOutput(results=results,
                      scalars={f'{name}/accuracy': r['accuracy'] for name, r in results.items()},
                      figures={'roc.png': plots.roc_figure(curves, title=config.algorithm)},
                      arrays={}, markdown=report.verification_lines(results))

  return Evaluator('verification', evaluate)


def config_identification() -> ml_collections.ConfigDict:
  """1:N identification (the MegaFace / IJB-C 1:N analogue, FedGC Tables 6-7) on held-out
  synthetic identities (a source without a gallery skips it)."""
  return ml_collections.ConfigDict(dict(num_enrolled=100, num_distractors=1000,
                                        num_non_mated=200, probes_per_identity=2))


def check_identification(config, section) -> None:
  del config
  for name in ('num_enrolled', 'num_non_mated', 'probes_per_identity'):
    checks.check_int(f'evals.identification.{name}', section[name])
  checks.check_int('evals.identification.num_distractors', section.num_distractors,
                       allow_zero=True)


def make_identification(config, section, setup) -> Evaluator | None:
  """1:N identification (rank-N, TPIR@FPIR) on the data source's gallery of held-out identities
  plus distractors; None (skipped) for a source that has none."""
  del setup
  source = sources.get(config.data.source)
  if not hasattr(source, 'identification_gallery'):
    return None
  id_set = source.identification_gallery(config, section)

  def evaluate(inputs) -> EvalOutput:
    res = identification.identify(inputs.embed, id_set, batch_size=config.eval.batch_size)
    scalars = {f'rank_{n}': res[f'rank_{n}'] for n in identification.RANKS
               if res.get(f'rank_{n}') is not None}
    return EvalOutput(results=res, scalars=scalars, figures={}, arrays={},
                      markdown=report.identification_lines(res, config.algorithm))

  return Evaluator('identification', evaluate)


def config_personalized() -> ml_collections.ConfigDict:
  """FedFR's per-client 1:1 and 1:N at these FARs and FPIRs (Tables 1-2's columns)."""
  return ml_collections.ConfigDict(dict(fars=personalized.FARS, fpirs=personalized.FPIRS))


def check_personalized(config, section) -> None:
  """FAR / FPIR lists; the run must hold out images of the clients' identities."""
  given = getattr(sources.get(config.data.source), 'GIVES_HELD_OUT_IMAGES', False)
  if not config.data.private_test_fraction and not given:
    raise ValueError('config.evals.personalized needs held-out images of the clients\' '
                     'identities: set data.private_test_fraction (FedFR: 0.4).')
  for name in ('fars', 'fpirs'):
    values = section[name]
    if (not isinstance(values, (tuple, list)) or not values
        or not all(isinstance(v, float) and 0.0 < v <= 1.0 for v in values)):
      raise ValueError(f'config.evals.personalized.{name}={values!r}; expected a non-empty '
                       'tuple of rates in (0, 1], e.g. (1e-4, 1e-3).')


def make_personalized(config, section, setup) -> Evaluator:
  """FedFR's personalized 1:1 and 1:N protocol (`personalized.py`), per client with its own model,
  averaged over clients; 'spread' holds, per rate, the worst 10 % of the clients, the lowest one and
  every client's value (`personalized.spread_over_clients`), 'worst_clients' how many clients the
  worst 10 % averages."""
  fed, benchmark = setup.fed_view, setup.benchmark
  labels = np.asarray(benchmark.train_labels)
  test_indices = np.asarray(fed.test_indices)
  test_images, _ = stores.take(benchmark.train_images, test_indices)
  test_labels = labels[test_indices]
  owner = np.full(fed.num_identities, -1)
  for k, ids in enumerate(fed.identity_table):
    owner[ids[ids >= 0]] = k
  test_owner = owner[test_labels]
  train = []
  for k in range(fed.num_clients):
    images, _ = stores.take(benchmark.train_images, fed.client_indices[k])
    train.append((images, fed.identity_table[k][fed.client_local_labels[k]]))
  embeddings = lambda embed_fn, images: verification.compute_embeddings(
      embed_fn, images, batch_size=config.eval.batch_size)

  def evaluate(inputs) -> EvalOutput:
    shared_test = None if inputs.personal_embed else embeddings(inputs.embed, test_images)
    ver, ident = [], []
    for k in range(fed.num_clients):
      embed_fn = inputs.personal_embed(k) if inputs.personal_embed else inputs.embed
      test = shared_test if shared_test is not None else embeddings(embed_fn, test_images)
      own = test_owner == k
      ver.append(personalized.client_verification(test, test_labels, own, section.fars))
      ident.append(personalized.client_identification(
          embeddings(embed_fn, train[k][0]), train[k][1], test, test_labels, own, section.fpirs))
    results = {
        'model': 'personalized' if inputs.personal_embed else 'global',
        'clients': fed.num_clients,
        'tar': personalized.mean_over_clients([v['tar'] for v in ver]),
        'tpir': personalized.mean_over_clients([i['tpir'] for i in ident]),
        'genuine_pairs': float(np.mean([v['genuine_pairs'] for v in ver])),
        'impostor_pairs': float(np.mean([v['impostor_pairs'] for v in ver])),
        'non_mated_probes': float(np.mean([i['non_mated_probes'] for i in ident])),
        'spread': {'worst_clients': personalized.worst_count(fed.num_clients),
                   'tar': personalized.spread_over_clients([v['tar'] for v in ver]),
                   'tpir': personalized.spread_over_clients([i['tpir'] for i in ident])},
    }
    scalars = {f'{kind}@{rate}': value for kind in ('tar', 'tpir')
               for rate, value in results[kind].items() if value is not None}
    scalars.update({f'{kind}_worst10@{rate}': value for kind in ('tar', 'tpir')
                    for rate, value in results['spread'][kind]['worst_10pct'].items()
                    if value is not None})
    return EvalOutput(results=results, scalars=scalars, figures={}, arrays={},
                      markdown=report.personalized_lines(results))

  return Evaluator('personalized', evaluate)
