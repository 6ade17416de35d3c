"""TinyFace: closed-set rank-k identification of low-resolution probes (`config.evals.tinyface`).

TinyFace (Cheng et al., "Low-Resolution Face Recognition", ACCV 2018) searches each probe face in
one gallery made of the probes' identities' faces (Gallery_Match) and distractor faces of other
people (Gallery_Distractor); `data/formats/tinyface.py` gives the layout and its public sources.
The protocol, as the evaluation code shipped with TinyFace's download computes it (the gallery
built from the match and distractor features, distractors labelled -100, the CMC read at ranks
1, 5, 10, 20, 50) and as mk-minchul/AdaFace `validation_lq/tinyface_helper.py` reports it (ranks
1, 5, 20):

1. Every image is fitted to the model's input by resizing the whole image (`stretch`: no crop,
   as bioidiap/bob.bio.face `database/tinyface.py` resizes TinyFace's faces to 112 x 112) and
   embedded as the 1:1 protocol embeds (`verification.compute_embeddings`: with `flip` the
   image's and its mirror's embeddings summed, then L2-normalised).
2. The gallery is IMAGES, not one template per identity: a probe's score against each gallery
   image is their cosine; on unit embeddings this orders the gallery as the Euclidean distance of
   TinyFace's script does.
3. Rank-k (the CMC at k): the fraction of probes for which an image of their own identity is
   among the k highest-scoring gallery images. Every probe is mated (the reader refuses one that
   is not), so this is closed set; distractors only push the mates down.

`identification.rank_n` is not reused: it first merges each gallery identity's images into one
template (the MegaFace / IJB convention), where TinyFace ranks the gallery's images themselves.

Ties, our reading (the scripts sort, so a tie falls as their sort places it): as in
`identification.py`, a tie counts against the probe. The probe's rank is 1 + the number of
gallery images of OTHER identities scoring at least as high as its best-scoring mate; a degenerate
model (every score equal) then has rank-1 accuracy 0, not a lucky sort order.
"""

from __future__ import annotations

from typing import Sequence

import ml_collections
import numpy as np

from fedjax_face.core.checks import check_bool, check_int
from fedjax_face.data.formats import tinyface as tinyface_format
from fedjax_face.eval import EvalOutput, Evaluator
from fedjax_face.eval.recognition import image_files

RANKS = (1, 5, 20)
BLOCK_ELEMENTS = 1 << 24   # probe x gallery scores held at once (float64: 128 MB)
DISTRACTOR = -1            # the gallery label of a distractor: no probe's identity (ids are >= 0)


def stretch(image: np.ndarray, size: int) -> np.ndarray:
  """The whole image resized to size x size (PIL bilinear), whatever its aspect."""
  if image.shape[:2] == (size, size):
    return np.ascontiguousarray(image)
  from PIL import Image  # pylint: disable=g-import-not-at-top
  return np.asarray(Image.fromarray(np.ascontiguousarray(image)).resize(
      (size, size), Image.Resampling.BILINEAR))


def num_ahead(probes: np.ndarray, probe_ids: np.ndarray, gallery: np.ndarray,
              gallery_ids: np.ndarray, block: int = BLOCK_ELEMENTS) -> np.ndarray:
  """int64 [P]: per probe, the gallery images of other identities scoring >= its best mate
  (module docstring, step 3 and ties); its rank is 1 + this. Unit embeddings in, float64 scores,
  `block` scores at a time."""
  probes, gallery = np.asarray(probes, np.float64), np.asarray(gallery, np.float64)
  ahead = np.empty(len(probes), np.int64)
  rows = max(1, block // max(1, len(gallery)))
  for lo in range(0, len(probes), rows):
    scores = probes[lo:lo + rows] @ gallery.T
    mate = probe_ids[lo:lo + rows, None] == gallery_ids[None, :]
    best_mate = np.where(mate, scores, -np.inf).max(axis=1)
    ahead[lo:lo + rows] = np.sum(~mate & (scores >= best_mate[:, None]), axis=1)
  return ahead


def rank_accuracy(ahead: np.ndarray, ranks: Sequence[int] = RANKS) -> dict[str, float]:
  """{'rank_<k>': fraction of probes with rank <= k}: the CMC at `ranks`."""
  return {f'rank_{k}': float(np.mean(ahead < k)) for k in ranks}


def identify(probes: np.ndarray, probe_ids: np.ndarray, matches: np.ndarray,
             match_ids: np.ndarray, distractors: np.ndarray,
             ranks: Sequence[int] = RANKS) -> dict:
  """The protocol's numbers from unit embeddings: probes against matches + distractors."""
  gallery = np.concatenate([matches, distractors])
  gallery_ids = np.concatenate([match_ids, np.full(len(distractors), DISTRACTOR, np.int64)])
  result = {'probes': int(len(probes)), 'gallery_match': int(len(matches)),
            'distractors': int(len(distractors))}
  result.update(rank_accuracy(num_ahead(probes, probe_ids, gallery, gallery_ids), ranks))
  return result


def markdown(results: dict, ranks: Sequence[int]) -> list[str]:
  """The report section: the set's sizes and the CMC at `ranks`."""
  return [f'## TinyFace (closed set: {results["probes"]:,} probes against '
          f'{results["gallery_match"]:,} mated gallery images and {results["distractors"]:,} '
          'distractors)', '',
          '| ' + ' | '.join(f'rank-{k} (%)' for k in ranks) + ' |',
          '|' + ' ---: |' * len(ranks),
          '| ' + ' | '.join(f'{100 * results[f"rank_{k}"]:.2f}' for k in ranks) + ' |', '']


def config_tinyface() -> ml_collections.ConfigDict:
  """TinyFace rank-k: off until `root` names a Testing_Set (Probe/, Gallery_Match/,
  Gallery_Distractor/)."""
  c = ml_collections.ConfigDict()
  c.root = ''          # Testing_Set, or an aligned copy holding the same three folders
  c.ranks = RANKS      # the CMC's ranks reported
  c.flip = True        # embed image + mirror, summed (the 1:1 protocol)
  return c


def check_tinyface(config, section) -> None:
  """`evals.tinyface` (`config_tinyface`); `root` '' turns it off (the folders are listed by
  `make_tinyface`)."""
  if not isinstance(section.root, str):
    raise ValueError(f'config.evals.tinyface.root={section.root!r}; expected TinyFace\'s '
                     "Testing_Set (Probe/, Gallery_Match/, Gallery_Distractor/), or '' for no "
                     'TinyFace evaluation.')
  ranks = section.ranks
  if (not isinstance(ranks, (tuple, list)) or not ranks
      or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ranks)):
    raise ValueError(f'config.evals.tinyface.ranks={ranks!r}; expected positive integers, e.g. '
                     f'{RANKS}.')
  check_bool('evals.tinyface.flip', section.flip)
  check_int('eval.batch_size', config.eval.batch_size)


def make_tinyface(config, section, setup) -> Evaluator | None:
  """Lists and labels the Testing_Set once, here: a missing folder, a name without an identity or
  an unmated probe raises `TinyFaceFormatError` while the evaluator is made, before the run writes
  anything. Each evaluation embeds every image and ranks the probes. None when `root` is ''."""
  del setup
  if not section.root:
    return None
  testing = tinyface_format.read_testing_set(section.root)
  size, ranks = config.data.image_size, tuple(section.ranks)
  fit = lambda image: stretch(image, size)

  def evaluate(inputs) -> EvalOutput:
    embed = lambda paths: image_files.embed_files(inputs.embed, testing.root, paths, fit,
                                                  batch_size=config.eval.batch_size,
                                                  flip=section.flip)
    results = identify(embed(testing.probes), testing.probe_ids, embed(testing.matches),
                       testing.match_ids, embed(testing.distractors), ranks)
    results['flip'] = section.flip
    return EvalOutput(results=results,
                      scalars={f'rank_{k}': results[f'rank_{k}'] for k in ranks},
                      figures={}, arrays={}, markdown=markdown(results, ranks))

  return Evaluator('tinyface', evaluate)
