"""RFW: 1:1 verification accuracy per race, and its spread over the races (`config.evals.rfw`).

RFW (Wang et al., "Racial Faces in-the-Wild", ICCV 2019) measures a model on four test subsets of
LFW-style pair lists, African, Asian, Caucasian and Indian, and compares their accuracies
(`data/formats/rfw.py`: the layout, with its public sources). Per race:

1. Every image of the race's list is read, fitted to the model's input (`data.stores.fit_image`:
   the central `center_crop` of the shorter side, resized) and embedded as the 1:1 protocol embeds
   (`verification.compute_embeddings`: with `flip`, the image's and its mirror's embeddings
   summed, then L2-normalised).
2. Accuracy is the LFW / insightface 10-fold protocol of `verification.evaluate_pairs`: the list's
   10 contiguous folds (RFW's 10 splits of 300 genuine and 300 impostor pairs), each fold scored at
   the threshold that is best on the other nine; the race's accuracy is the mean over the folds.

Over the races (`spread`): the mean of the races' accuracies and their standard deviation. Our
reading of "standard deviation": the POPULATION one (ddof = 0, `std`), because the races measured
are the whole set the spread describes, not a sample of races, and because the folds' spread
(`verification.evaluate_pairs`' 'accuracy_std') is a population one too; the sample one (ddof = 1,
`std_sample`, larger by sqrt(4/3) over four races) is reported beside it for papers that use it.
Both are None where they are undefined (a sample std of one race).
"""

from __future__ import annotations

import math
import os

import ml_collections
import numpy as np

from fedjax_face.core.checks import check_bool, check_fraction, check_int
from fedjax_face.data import stores
from fedjax_face.data.formats import rfw as rfw_format
from fedjax_face.eval import EvalOutput, Evaluator
from fedjax_face.eval.recognition import image_files, verification

NUM_FOLDS = 10   # RFW's 10 splits


def spread(accuracies: dict[str, float]) -> dict[str, float | None]:
  """{'mean', 'std' (population, ddof 0), 'std_sample' (ddof 1)} of the races' accuracies
  (module docstring); 'std_sample' is None for one race."""
  values = np.asarray(list(accuracies.values()), np.float64)
  return {'mean': float(values.mean()), 'std': float(values.std()),
          'std_sample': float(values.std(ddof=1)) if len(values) > 1 else None}


def evaluate_race(embeddings: np.ndarray, pairs: rfw_format.RacePairs) -> dict:
  """The 10-fold verification metrics of one race (`verification.evaluate_pairs`, without its
  ROC arrays), from the unit embeddings [2P, d] of its pairs' images in list order."""
  result = verification.evaluate_pairs(embeddings, pairs.issame, num_folds=NUM_FOLDS)
  return {k: v for k, v in result.items() if k not in ('roc_fpr', 'roc_tpr')}


def _percent(value) -> str:
  return '-' if value is None else f'{100 * value:.2f}'


def markdown(results: dict) -> list[str]:
  """The report section: one row per race, then the mean and the spread."""
  races = list(results['races'])
  lines = [f'## RFW (accuracy %, {NUM_FOLDS}-fold per race; std over races: population, and '
           'sample in brackets)', '',
           '| ' + ' | '.join(races) + ' | mean | std (sample) |',
           '|' + ' ---: |' * (len(races) + 2),
           '| ' + ' | '.join(_percent(results['races'][r]['accuracy']) for r in races)
           + f' | {_percent(results["mean"])} | {_percent(results["std"])} '
           f'({_percent(results["std_sample"])}) |', '']
  return lines


def config_rfw() -> ml_collections.ConfigDict:
  """RFW per-race verification: off until `root` names RFW's test/ folder (txts/ and data/)."""
  c = ml_collections.ConfigDict()
  c.root = ''                          # RFW's test/ folder: txts/<Race>/<Race>_pairs.txt
  c.images = ''                        # the images' folder of <Race>/<identity>/ ('' = <root>/
                                       # data); an aligned copy in the same layout
  c.races = rfw_format.RACES           # the subsets evaluated
  c.center_crop = 1.0                  # fraction of the shorter side kept before resizing
  c.flip = True                        # embed image + mirror, summed (the 1:1 protocol)
  c.check_pair_count = True            # each list holds the released 6,000 pairs (False: a
                                       # protocol of other pairs)
  return c


def check_rfw(config, section) -> None:
  """`evals.rfw` (`config_rfw`); `root` '' turns it off (the files are read by `make_rfw`)."""
  for field, what in (('root', "RFW's test/ folder (txts/ and data/), or '' for no RFW "
                               'evaluation'),
                      ('images', "the images' folder (<Race>/<identity>/...), or '' for "
                                 '<root>/data')):
    if not isinstance(section[field], str):
      raise ValueError(f'config.evals.rfw.{field}={section[field]!r}; expected {what}.')
  races = tuple(section.races) if isinstance(section.races, (tuple, list)) else None
  if not races or set(races) - set(rfw_format.RACES) or len(set(races)) != len(races):
    raise ValueError(f'config.evals.rfw.races={section.races!r}; expected distinct names among '
                     f'{rfw_format.RACES}.')
  check_fraction('evals.rfw.center_crop', section.center_crop)
  check_bool('evals.rfw.flip', section.flip)
  check_bool('evals.rfw.check_pair_count', section.check_pair_count)
  check_int('eval.batch_size', config.eval.batch_size)


def make_rfw(config, section, setup) -> Evaluator | None:
  """Reads every race's pair list once, here: a missing list, a bad line, an unknown identity or
  a missing image raises `RFWFormatError` while the evaluator is made, before the run writes
  anything. Each evaluation embeds the races' images and scores them. None when `root` is ''."""
  del setup
  if not section.root:
    return None
  images_dir = section.images or os.path.join(section.root, 'data')
  expected = rfw_format.PUBLISHED_PAIRS if section.check_pair_count else None
  lists = [rfw_format.read_pairs(section.root, race, images_dir, expected_pairs=expected)
           for race in section.races]
  size, crop = config.data.image_size, section.center_crop
  fit = lambda image: stores.fit_image(image, size, crop)

  def evaluate(inputs) -> EvalOutput:
    per_race = {}
    for pairs in lists:
      unique, rows = np.unique(pairs.images, return_inverse=True)
      embeddings = image_files.embed_files(inputs.embed, images_dir, list(unique), fit,
                                           batch_size=config.eval.batch_size, flip=section.flip)
      per_race[pairs.race] = evaluate_race(embeddings[rows.reshape(-1)], pairs)
    summary = spread({race: r['accuracy'] for race, r in per_race.items()})
    results = {'races': per_race, **summary, 'std_reading': 'population (ddof 0); std_sample: '
               'ddof 1', 'flip': section.flip, 'center_crop': crop}
    scalars = {f'accuracy_{race}': r['accuracy'] for race, r in per_race.items()}
    scalars.update({f'accuracy_{k}': v for k, v in summary.items()
                    if v is not None and math.isfinite(v)})
    return EvalOutput(results=results, scalars=scalars, figures={}, arrays={},
                      markdown=markdown(results))

  return Evaluator('rfw', evaluate)
