"""The face-recognition evaluators of `config.evals`: 'verification' (1:1) and 'identification'
(1:N), over the protocols of `verification.py` and `identification.py`."""

import numpy as np

from fedjax_face import config_lib
from fedjax_face.data import identification_set, synthetic
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.recognition import identification, verification
from fedjax_face.io import report

def pair_set_names(config) -> tuple[str, ...]:
  """The pair sets a run loads: those of its verification evaluator (none without one)."""
  return tuple(config.evals.verification.pair_sets) if 'verification' in config.evals else ()


def check_verification(config, section) -> None:
  """Pair-set names (any file stem for real data; the synthetic benchmark renders six)."""
  pair_sets = section.pair_sets
  if not pair_sets or isinstance(pair_sets, str):
    raise ValueError(f'config.evals.verification.pair_sets={pair_sets!r}; expected a non-empty '
                     'tuple of names, e.g. "(\'lfw\', \'cfp_fp\')".')
  for name in pair_sets:
    if config.data.source == 'synthetic':
      config_lib.check_choice('evals.verification.pair_sets[...]', name,
                              synthetic.ALL_PAIR_SET_NAMES)
    elif not isinstance(name, str) or not name or any(ch in name for ch in ',/\\ '):
      raise ValueError(f'config.evals.verification.pair_sets has {name!r}; expected the file '
                       'stem of a <name>.bin or <name>.txt pair set, one name per tuple item, '
                       'e.g. "(\'lfw\', \'calfw\')".')
  config_lib.check_fraction('evals.verification.far_target', section.far_target)


def make_verification(config, section, setup) -> Evaluator:
  """1:1 verification (insightface 10-fold protocol) on every pair set; ROC curves in roc.png."""
  synthetic_data = config.data.source == 'synthetic'
  pair_sets = {name: setup.benchmark.pair_sets[name] for name in section.pair_sets}

  def evaluate(inputs) -> EvalOutput:
    results, curves = {}, {}
    for name, pairs in pair_sets.items():
      res = verification.verify(inputs.embed, pairs.images, pairs.issame,
                                batch_size=config.eval.batch_size, far_target=section.far_target)
      res['title'] = report.pair_set_title(name, synthetic_data)
      curves[res['title']] = (np.asarray(res.pop('roc_fpr')), np.asarray(res.pop('roc_tpr')))
      results[name] = res
    return EvalOutput(results=results,
                      scalars={f'{name}/accuracy': r['accuracy'] for name, r in results.items()},
                      figures={'roc.png': plots.roc_figure(curves, title=config.algorithm)},
                      arrays={})

  return Evaluator('verification', evaluate)


def check_identification(config, section) -> None:
  del config
  for name in ('num_enrolled', 'num_non_mated', 'probes_per_identity'):
    config_lib.check_int(f'evals.identification.{name}', section[name])
  config_lib.check_int('evals.identification.num_distractors', section.num_distractors,
                       allow_zero=True)


def make_identification(config, section, setup) -> Evaluator | None:
  """1:N identification (rank-N, TPIR@FPIR) on a gallery of held-out synthetic identities plus
  distractors; None for real data, which has no such set yet."""
  del setup
  if config.data.source != 'synthetic':
    return None
  id_set = identification_set.make_identification_set(
      config.seed, image_size=config.data.image_size, num_enrolled=section.num_enrolled,
      num_distractors=section.num_distractors, num_non_mated=section.num_non_mated,
      probes_per_identity=section.probes_per_identity, difficulty=config.data.difficulty)

  def evaluate(inputs) -> EvalOutput:
    res = identification.identify(inputs.embed, id_set, batch_size=config.eval.batch_size)
    scalars = {f'rank_{n}': res[f'rank_{n}'] for n in identification.RANKS
               if res.get(f'rank_{n}') is not None}
    return EvalOutput(results=res, scalars=scalars, figures={}, arrays={})

  return Evaluator('identification', evaluate)
