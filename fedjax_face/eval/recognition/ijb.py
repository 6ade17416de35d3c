"""IJB-B / IJB-C template-based 1:1 verification and 1:N identification (`config.evals.ijb`).

The protocol of insightface's IJB scripts (`recognition/_evaluation_/ijb/`; FedFR's `ijbc_all.py`
runs the same with its own switches):

1. Each image of `loose_crop/` is aligned to 112 x 112 by its five landmarks (`data/align.py`) and
   embedded in batches (a progress line with its rate and ETA).
2. Switches, letters of 'FND': F sums the embeddings of the image and of its mirror; N keeps each
   image's norm (without N every image embedding is L2-normalised first); D multiplies it by the
   detector's faceness score. insightface's default is all three ('insightface' = 'FND'); FedFR
   turns the flip off ('fedfr' = 'ND').
3. A template is the sum over its medias of the mean of each media's image features, then
   L2-normalised; a pair's score is the dot product of its two templates (in blocks of pairs, so no
   pairs x d matrix is ever held).
4. TAR at FAR 1e-6 ... 1e-1 (`tar_rule`): 'nearest_roc_point', the scripts' rule and the default,
   takes the ROC point (sklearn's `roc_curve`, collinear points dropped) whose FPR is nearest each
   FAR, the highest TPR among equally near ones; 'far_at_most' is this project's pooled rule
   (`verification.tar_at_far`: the FAR reached never exceeds the target).
5. 1:N over the galleries G1 and G2 and the mixed probes:
   - 'mixed' (G1 u G2, every probe mated), as FedFR's script measures it: rank-1/5/10, and TPIR
     at "FPIR" f as that script defines it: the threshold is the ceil(Q f)-th highest of all
     Q x (G - 1) non-mate similarities, and a probe counts when its mate scores above it;
   - 'G1' and 'G2' alone, the open-set protocol (`identification.py`): probes of the other
     gallery's subjects are non-mated, TPIR at FPIR with the threshold on their top scores, ranks
     over the mated probes.

Memory, for N images, T templates, P pairs and d-dimensional embeddings: the image features
(4 N d bytes: 0.96 GB for IJB-C's 469,375 images at d = 512), the pair scores and labels
(9 P bytes: 0.14 GB for its 15.6 M pairs), the ROC's sort of the scores (~24 P: 0.4 GB) and one
block of pair features (2 x 50,000 x d x 8 bytes: 0.4 GB).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Iterator, Sequence

import ml_collections
import numpy as np

from fedjax_face.core import arrays
from fedjax_face.core.checks import check_bool, check_choice, check_int
from fedjax_face.core.policy import usable_cpus
from fedjax_face.data.formats import ijb as ijb_format
from fedjax_face.eval import EvalOutput, Evaluator, plots
from fedjax_face.eval.recognition import identification, verification
from fedjax_face.io import metrics

SWITCH_PRESETS = {'insightface': 'FND', 'fedfr': 'ND'}
TAR_RULES = ('nearest_roc_point', 'far_at_most')
FARS = verification.TAR_FARS
FPIRS = (1e-2, 1e-1)
RANKS = (1, 5, 10)
CHUNK_BATCHES = 16    # embedding batches loaded at once (the next chunk loads during this one)
TASK_IMAGES = 64      # images a host worker process reads and aligns per task
PAIR_BLOCK = 50_000   # pairs scored at once: 2 x 50,000 x d float64 features (0.4 GB at d = 512)
PARENT_POLL_S = 0.5   # how often a worker without PR_SET_PDEATHSIG looks for its parent
_PR_SET_PDEATHSIG = 1   # <linux/prctl.h>


def parse_switches(value: str) -> str:
  """'FND' letters (in that order) of a preset name or of letters given directly ('' = none)."""
  letters = SWITCH_PRESETS.get(value, value)
  if not isinstance(letters, str) or set(letters) - set('FND') or len(set(letters)) != len(
      letters):
    raise ValueError(f'config.evals.ijb.switches={value!r}; expected a preset '
                     f'{sorted(SWITCH_PRESETS)} or letters of FND (F flip, N keep norms, D '
                     "faceness), e.g. 'ND', or '' for none.")
  return ''.join(c for c in 'FND' if c in letters)


# -- images -> features ------------------------------------------------------------------------

def die_with_parent(parent: int, use_prctl: bool = True) -> None:
  """Ends this worker process when `parent` (the process that made the pool) dies: the pool
  initializer of `aligned_chunks`.

  A worker blocked on the pool's call queue never sees its parent go (it holds the queue's write
  end itself, so no EOF comes), and a kill -9 of the evaluation left every worker running at
  ~220 MB each (issue 56). On Linux the kernel sends SIGKILL when the parent dies
  (prctl(PR_SET_PDEATHSIG)); strictly, when the parent's thread that started the worker ends,
  which here is the thread that runs the evaluation, for its whole length. Elsewhere, or where
  prctl fails, a daemon thread polls os.getppid() every PARENT_POLL_S seconds and ends the worker
  once it is no longer `parent`.
  """
  if use_prctl and sys.platform.startswith('linux'):
    try:
      libc = ctypes.CDLL(None, use_errno=True)
      armed = libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
      armed = False
    if armed:
      if os.getppid() != parent:   # the parent died before the signal was armed
        os._exit(1)   # pylint: disable=protected-access
      return

  def watch():
    while os.getppid() == parent:
      time.sleep(PARENT_POLL_S)
    os._exit(1)   # pylint: disable=protected-access

  threading.Thread(target=watch, name='die_with_parent', daemon=True).start()


def aligned_chunks(protocol: ijb_format.Protocol, size: int, *, chunk: int, workers: int
                   ) -> Iterator[np.ndarray]:
  """Every image of the protocol read, decoded and aligned (`ijb_format.read_aligned`), as uint8
  [<= chunk, size, size, 3] arrays in order, the next chunk loading while the caller works on
  this one.

  The host work runs in `workers` spawned processes (0: the usable CPUs), TASK_IMAGES images a
  task: it is NumPy and PIL calls that mostly hold the GIL, so threads do not scale. One worker,
  or a set of one chunk, loads in this process. The workers end with this process, however it
  ends (`die_with_parent`).
  """
  num = len(protocol.names)
  spans = [(lo, min(lo + chunk, num)) for lo in range(0, num, chunk)]
  task = lambda lo, hi: (protocol.root, protocol.names[lo:hi], protocol.landmarks[lo:hi], size)
  workers = workers or usable_cpus()
  if workers == 1 or len(spans) <= 1:
    for lo, hi in spans:
      yield ijb_format.read_aligned(*task(lo, hi))
    return
  pool = concurrent.futures.ProcessPoolExecutor(
      workers, mp_context=multiprocessing.get_context('spawn'), initializer=die_with_parent,
      initargs=(os.getpid(),))
  submit = lambda lo, hi: [pool.submit(ijb_format.read_aligned, *task(a, min(a + TASK_IMAGES, hi)))
                           for a in range(lo, hi, TASK_IMAGES)]
  try:
    pending = submit(*spans[0])
    for following in spans[1:] + [None]:
      ready, pending = pending, submit(*following) if following else []
      yield np.concatenate([f.result() for f in ready])
  finally:
    pool.shutdown(cancel_futures=True)


def image_features(embed, protocol: ijb_format.Protocol, image_size: int, *, batch_size: int,
                   flip: bool, workers: int = 0, log=print, log_every_s: float = 30.0
                   ) -> np.ndarray:
  """float32 [N, d] embedding of every image (with F, plus that of its mirror), unnormalised.

  The images are loaded by `aligned_chunks` on `workers` host processes, CHUNK_BATCHES batches a
  chunk, while the device embeds the previous chunk.
  """
  num = len(protocol.names)
  features, start_time, last_log = [], time.perf_counter(), time.perf_counter()
  for images in aligned_chunks(protocol, image_size, chunk=CHUNK_BATCHES * batch_size,
                               workers=workers):
    features.append(verification.raw_embeddings(embed, images, batch_size=batch_size, flip=flip))
    done, now = sum(map(len, features)), time.perf_counter()
    if now - last_log >= log_every_s or done == num:
      rate = done / max(now - start_time, 1e-9)
      log(f'ijb: {done:,}/{num:,} images embedded ({rate:,.0f} images/s, ETA '
          f'{metrics.format_duration((num - done) / rate)})', flush=True)
      last_log = now
  return np.concatenate(features) if features else np.zeros((0, 0), np.float32)


def switched(features: np.ndarray, faceness: np.ndarray, switches: str) -> np.ndarray:
  """Image features under N and D (F was applied when embedding), float64."""
  features = np.asarray(features, np.float64)
  if 'N' not in switches:
    features = arrays.l2_normalize(features)
  if 'D' in switches:
    features = features * np.asarray(faceness, np.float64)[:, None]
  return features


def template_features(features: np.ndarray, templates: np.ndarray,
                      medias: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(template ids ascending, float64 [T, d] unit templates): per template, the sum over its
  medias of each media's mean image feature, L2-normalised."""
  keys, media_of, counts = np.unique(np.stack([templates, medias], 1), axis=0,
                                     return_inverse=True, return_counts=True)
  media_sums = np.zeros((len(keys), features.shape[1]))
  np.add.at(media_sums, media_of.reshape(-1), features)
  ids, template_of = np.unique(keys[:, 0], return_inverse=True)
  sums = np.zeros((len(ids), features.shape[1]))
  np.add.at(sums, template_of.reshape(-1), media_sums / counts[:, None])
  return ids, arrays.l2_normalize(sums)


def pair_scores(ids: np.ndarray, feats: np.ndarray, pairs: np.ndarray,
                block: int = PAIR_BLOCK) -> np.ndarray:
  """float64 [P] dot products of the pairs' templates, `block` pairs at a time."""
  rows = np.searchsorted(ids, pairs)
  scores = np.empty(len(pairs))
  for lo in range(0, len(pairs), block):
    r = rows[lo:lo + block]
    scores[lo:lo + block] = np.einsum('ij,ij->i', feats[r[:, 0]], feats[r[:, 1]])
  return scores


# -- 1:1 --------------------------------------------------------------------------------------

def roc_points(scores: np.ndarray, genuine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(fpr, tpr) of accepting `score >= t` at every distinct score, as sklearn's `roc_curve`
  gives them: from (0, 0) up, the points collinear with both neighbours dropped."""
  order = np.argsort(-np.asarray(scores, np.float64), kind='stable')
  sorted_scores, sorted_genuine = np.asarray(scores)[order], np.asarray(genuine, bool)[order]
  last = np.r_[np.flatnonzero(np.diff(sorted_scores)), len(order) - 1]
  tps = np.cumsum(sorted_genuine)[last]
  fps = 1 + last - tps
  if len(fps) > 2:
    keep = np.flatnonzero(np.r_[True, np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), True])
    fps, tps = fps[keep], tps[keep]
  fps, tps = np.r_[0, fps], np.r_[0, tps]
  return fps / fps[-1], tps / tps[-1]


def tar_at_far(scores: np.ndarray, genuine: np.ndarray, fars: Sequence[float] = FARS,
               rule: str = 'nearest_roc_point') -> dict[str, float | None]:
  """{str(far): TAR} under `rule` (module docstring, step 4)."""
  if rule == 'far_at_most':
    return verification.tar_at_far(-np.asarray(scores, np.float64), genuine, fars)[0]
  fpr, tpr = roc_points(scores, genuine)
  fpr, tpr = fpr[::-1], tpr[::-1]   # from the top: among equally near FPRs, the highest TPR
  return {str(far): float(tpr[np.argmin(np.abs(fpr - far))]) for far in fars}


# -- 1:N --------------------------------------------------------------------------------------

def _subject_rows(ids: np.ndarray, feats: np.ndarray, templates: np.ndarray) -> np.ndarray:
  return feats[np.searchsorted(ids, templates)]


def identify_mixed(probe_feats: np.ndarray, probe_subjects: np.ndarray, gallery_feats: np.ndarray,
                   gallery_subjects: np.ndarray, fpirs: Sequence[float] = FPIRS,
                   ranks: Sequence[int] = RANKS) -> dict:
  """FedFR's script's 1:N over one gallery holding every probe's subject (module docstring)."""
  order = np.argsort(gallery_subjects)
  sorted_subjects = gallery_subjects[order]
  mate = order[np.searchsorted(sorted_subjects, probe_subjects).clip(0, len(order) - 1)]
  if not np.array_equal(gallery_subjects[mate], probe_subjects):
    missing = probe_subjects[gallery_subjects[mate] != probe_subjects]
    raise ValueError(f'{missing.size} probes of subjects the gallery lacks (first: {missing[:5]})')
  num_probes = len(probe_feats)
  need = max(math.ceil(num_probes * f) for f in fpirs)
  top_negatives = np.empty(0)
  mate_scores = np.empty(num_probes)
  num_ahead = np.empty(num_probes, np.int64)
  block = max(1, 2 ** 24 // max(1, len(gallery_feats)))
  for lo in range(0, num_probes, block):
    scores = probe_feats[lo:lo + block] @ gallery_feats.T
    rows = np.arange(len(scores))
    own = scores[rows, mate[lo:lo + block]]
    mate_scores[lo:lo + block] = own
    num_ahead[lo:lo + block] = np.sum(scores >= own[:, None], axis=1) - 1
    scores[rows, mate[lo:lo + block]] = -np.inf
    negatives = np.concatenate([top_negatives, scores.reshape(-1)])
    top_negatives = -np.sort(-negatives)[:need] if len(negatives) > need else -np.sort(-negatives)
  result = {f'rank_{n}': float(np.mean(num_ahead < n)) for n in ranks}
  for f in fpirs:
    k = math.ceil(num_probes * f)
    result[f'tpir_{f}'] = (float(np.mean(mate_scores > top_negatives[k - 1]))
                           if 1 <= k <= len(top_negatives) else None)
  result['probes'] = num_probes
  return result


def identify_open_set(probe_feats: np.ndarray, probe_subjects: np.ndarray,
                      gallery_feats: np.ndarray, gallery_subjects: np.ndarray,
                      fpirs: Sequence[float] = FPIRS, ranks: Sequence[int] = RANKS) -> dict:
  """The open-set protocol over one gallery (`identification.py`): ranks over the mated probes,
  TPIR at FPIR with the non-mated probes' top scores."""
  is_mated = np.isin(probe_subjects, gallery_subjects)
  result = {'probes': int(len(probe_subjects)), 'mated': int(is_mated.sum())}
  if is_mated.any():
    result.update({f'rank_{n}': v for n, v in identification.rank_n(
        probe_feats[is_mated], probe_subjects[is_mated], gallery_feats, gallery_subjects,
        ranks).items()})
  if is_mated.any() and (~is_mated).any():
    tpir, _ = identification.tpir_at_fpir(probe_feats, probe_subjects, is_mated, gallery_feats,
                                          gallery_subjects, fpirs)
    result.update({f'tpir_{f}': tpir[str(f)] for f in fpirs})
  return result


# -- the evaluator ----------------------------------------------------------------------------

def evaluate_protocol(features: np.ndarray, protocol: ijb_format.Protocol, switches: str,
                      tar_rule: str = 'nearest_roc_point') -> tuple[dict, tuple]:
  """(results, (fpr, tpr) of the ROC) from the image features of every image of `protocol`."""
  ids, feats = template_features(switched(features, protocol.faceness, switches),
                                 protocol.templates, protocol.medias)
  scores = pair_scores(ids, feats, protocol.pairs)
  fpr, tpr = roc_points(scores, protocol.labels)
  results = {'switches': switches, 'tar_rule': tar_rule, 'images': int(len(features)),
             'templates': int(len(ids)), 'genuine_pairs': int(protocol.labels.sum()),
             'impostor_pairs': int((~protocol.labels).sum()),
             'tar': tar_at_far(scores, protocol.labels, FARS, tar_rule),
             'auc': verification.roc_auc(-scores, protocol.labels)}
  if protocol.probes is not None:
    probe_templates, probe_subjects = protocol.probes
    probes = _subject_rows(ids, feats, probe_templates)
    galleries = {g: (_subject_rows(ids, feats, t), s) for g, (t, s) in protocol.galleries.items()}
    identified = {g: identify_open_set(probes, probe_subjects, *galleries[g])
                  for g in ijb_format.GALLERIES}
    identified['mixed'] = identify_mixed(
        probes, probe_subjects, np.concatenate([galleries[g][0] for g in ijb_format.GALLERIES]),
        np.concatenate([galleries[g][1] for g in ijb_format.GALLERIES]))
    results['identification'] = identified
  return results, (fpr, tpr)


def _percent(value) -> str:
  return '-' if value is None else f'{100 * value:.2f}'


def markdown(results: dict, ijb_set: str) -> list[str]:
  """The report section: the TAR@FAR row and the 1:N table."""
  fars = list(results['tar'])
  lines = [f'## {ijb_set} 1:1 ({results["templates"]:,} templates, {results["genuine_pairs"]:,} '
           f'genuine and {results["impostor_pairs"]:,} impostor pairs; switches '
           f'{results["switches"] or "none"}, TAR rule {results["tar_rule"]})', '',
           '| TAR (%) at FAR | ' + ' | '.join(fars) + ' |',
           '| --- |' + ' ---: |' * len(fars),
           f'| {ijb_set} | ' + ' | '.join(_percent(results['tar'][f]) for f in fars) + ' |', '']
  if 'identification' in results:
    keys = [f'rank_{n}' for n in RANKS] + [f'tpir_{f}' for f in FPIRS]
    lines += [f'## {ijb_set} 1:N (mixed: G1 u G2 as FedFR\'s script measures it; G1, G2: '
              'open set)', '',
              '| gallery | probes | ' + ' | '.join(k.replace('_', ' ') for k in keys) + ' |',
              '| --- | ---: |' + ' ---: |' * len(keys)]
    for name, r in results['identification'].items():
      lines.append(f'| {name} | {r["probes"]:,} | ' + ' | '.join(_percent(r.get(k)) for k in keys)
                   + ' |')
    lines.append('')
  return lines


def config_ijb() -> ml_collections.ConfigDict:
  """IJB-B / IJB-C 1:1 and 1:N: off until `root` names a set's root (meta/ and loose_crop/)."""
  c = ml_collections.ConfigDict()
  c.root = ''
  c.set = 'IJBC'                       # ijb_format.SETS
  c.layout = 'insightface'             # | 'fedfr' (meta/<SET>_meta/)
  c.switches = 'insightface'           # (= 'FND') | 'fedfr' (= 'ND') | letters of F (flip),
                                       # N (norms), D (faceness): parse_switches
  c.tar_rule = 'nearest_roc_point'     # the IJB scripts' | 'far_at_most'
  c.workers = 0                        # host processes that read and align the images; 0 = the
                                       # usable CPUs
  c.check_pair_count = True            # the root is the released set, so its pair list holds
                                       # the published count (False: a protocol of other pairs)
  return c


def check_ijb(config, section) -> None:
  """`evals.ijb` (`config_ijb`): set, layout, switches, tar_rule, workers,
  check_pair_count; `root` '' turns the evaluator off (the root's files are read at the run's
  start, by `make_ijb`)."""
  if not isinstance(section.root, str):
    raise ValueError(f"config.evals.ijb.root={section.root!r}; expected the IJB set's root "
                     "(meta/ and loose_crop/), or '' for no IJB evaluation.")
  check_choice('evals.ijb.set', section.set, ijb_format.SETS)
  check_choice('evals.ijb.layout', section.layout, ijb_format.LAYOUTS)
  check_choice('evals.ijb.tar_rule', section.tar_rule, TAR_RULES)
  parse_switches(section.switches)
  check_int('evals.ijb.workers', section.workers, allow_zero=True)
  check_bool('evals.ijb.check_pair_count', section.check_pair_count)
  check_int('eval.batch_size', config.eval.batch_size)


def make_ijb(config, section, setup) -> Evaluator | None:
  """Reads and cross-checks the set's meta files once, here: every missing file or image, bad
  line or disagreement between the files raises `IJBFormatError` while the evaluator is made,
  before the run writes anything (only an image's bytes are read later, by the evaluation).
  Each evaluation embeds every image and scores both protocols. None when `root` is ''.

  With `check_pair_count` on (the default) the root is taken for the released set that `set`
  names, IJB-B or IJB-C: its pair list must hold that set's published number of pairs
  (`ijb_format.PUBLISHED_PAIRS`), so a list cut short at a line boundary is refused. A protocol
  of other pairs turns it off.
  """
  del setup
  if not section.root:
    return None
  protocol = ijb_format.read_protocol(
      section.root, section.set, section.layout,
      expected_pairs=ijb_format.PUBLISHED_PAIRS[section.set] if section.check_pair_count else None)
  switches = parse_switches(section.switches)

  def evaluate(inputs) -> EvalOutput:
    t0 = time.perf_counter()
    features = image_features(inputs.embed, protocol, config.data.image_size,
                              batch_size=config.eval.batch_size, flip='F' in switches,
                              workers=section.workers)
    embed_s = time.perf_counter() - t0
    results, (fpr, tpr) = evaluate_protocol(features, protocol, switches, section.tar_rule)
    results.update(set=section.set, layout=section.layout, embed_s=embed_s,
                   images_per_s=len(features) / max(embed_s, 1e-9))
    scalars = {f'tar_{far}': v for far, v in results['tar'].items() if v is not None}
    fpr, tpr = verification.downsample_roc(fpr, tpr)
    return EvalOutput(results=results, scalars=scalars,
                      figures={'ijb_roc.png': plots.roc_figure({section.set: (fpr, tpr)},
                                                               title=config.algorithm)},
                      arrays={}, markdown=markdown(results, section.set))

  return Evaluator('ijb', evaluate)
