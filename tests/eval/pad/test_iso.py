"""Tests of `fedjax_face.eval.pad.iso`: APCER per attack species and the worst, FLIP's pooled
APCER, BPCER, OULU-NPU's ACER and FLIP's TPR@FPR = 1 %, each against a hand computation, and
every refusal of bad input in one line.

Convention: score = probability of live, label 1 = live, 0 = attack, classified bona fide when
score >= threshold; species codes -1 live, 0.. an index into NAMES, -2 an unknown species.
"""

import json

import numpy as np
import pytest

from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.eval.pad import iso, metrics

NAMES = ('print', 'cut', 'display', 'replay')
PRINT, REPLAY, UNKNOWN = 0, 3, -2

# Live 0.9, 0.8, 0.3, 0.6; print 0.7, 0.2, 0.1; replay 0.85, 0.5.
SCORES = [0.9, 0.8, 0.3, 0.6, 0.7, 0.2, 0.1, 0.85, 0.5]
LABELS = [1, 1, 1, 1, 0, 0, 0, 0, 0]
SPECIES = [-1, -1, -1, -1, PRINT, PRINT, PRINT, REPLAY, REPLAY]


def test_every_rate_by_hand():
  result = iso.iso_metrics(SCORES, LABELS, SPECIES, NAMES, 0.55)
  # Accepted as bona fide (score >= 0.55): print 0.7 of 3 -> 1/3; replay 0.85 of 2 -> 1/2.
  assert result['apcer_species'] == {'print': 1 / 3, 'replay': 1 / 2}
  assert (result['worst_species'], result['apcer_worst']) == ('replay', 1 / 2)
  # Pooled: 2 of the 5 attacks. BPCER: live 0.3 < 0.55, 1 of 4.
  assert (result['apcer_pooled'], result['bpcer']) == (2 / 5, 1 / 4)
  # OULU-NPU: (1/2 + 1/4) / 2 = 3/8. FLIP's calculate: (2/5 + 1/4) / 2 = 13/40.
  assert result['acer'] == 3 / 8
  assert result['acer_pooled'] == pytest.approx(13 / 40, rel=0, abs=1e-16)
  # TPR@FPR=1 %: with 5 attacks any accepted attack is FPR 1/5 > 1 %, so the point is the last
  # before the highest attack (0.85): live 0.9 alone, TPR 1/4.
  assert result['tpr_at_fpr_1pct'] == 1 / 4
  assert result['attacks_by_species'] == {'print': 3, 'replay': 2}
  assert result['attacks_unknown_species'] == 0
  assert json.loads(json.dumps(result)) == result
  # The one-rate functions agree.
  assert iso.apcer_per_species(SCORES, LABELS, SPECIES, NAMES, 0.55) == result['apcer_species']
  assert iso.species_apcer(SCORES, LABELS, SPECIES, NAMES, 0.55, 'print') == 1 / 3
  assert iso.apcer_pooled(SCORES, LABELS, 0.55) == 2 / 5
  assert iso.bpcer(SCORES, LABELS, 0.55) == 1 / 4
  assert iso.tpr_at_fpr(SCORES, LABELS) == 1 / 4


def test_pooled_apcer_and_bpcer_are_far_and_frr_bit_for_bit():
  # Thirds, where 1 - 2/3 and 1/3 differ in the last bit: live 0.9, 0.4, 0.2 (2 of 3 rejected
  # at 0.5), attacks 0.6, 0.1, 0.3 (1 of 3 accepted).
  scores, labels = [0.9, 0.4, 0.2, 0.6, 0.1, 0.3], [1, 1, 1, 0, 0, 0]
  far, frr = metrics.error_rates(scores, labels, 0.5)
  assert (iso.apcer_pooled(scores, labels, 0.5), iso.bpcer(scores, labels, 0.5)) == (far, frr)
  assert (far, frr) == (1 / 3, 2 / 3)
  result = iso.iso_metrics(scores, labels, [-1, -1, -1, -2, -2, -2], NAMES, 0.5)
  assert (result['apcer_pooled'], result['bpcer']) == (far, frr)
  # FLIP's ACER is the HTER at that threshold.
  assert result['acer_pooled'] == metrics.hter(scores, labels, 0.5)


def test_unknown_species_leave_only_the_pooled_apcer():
  # One replay attack's species unknown: the per-species rates cover the known ones, the worst
  # and ACER are not defined.
  species = SPECIES[:-1] + [UNKNOWN]
  result = iso.iso_metrics(SCORES, LABELS, species, NAMES, 0.55)
  # Replay 0.85 alone: accepted, 1 of 1.
  assert result['apcer_species'] == {'print': 1 / 3, 'replay': 1.0}
  assert (result['apcer_worst'], result['worst_species'], result['acer']) == (None, None, None)
  assert (result['apcer_pooled'], result['bpcer']) == (2 / 5, 1 / 4)
  assert (result['attacks_by_species'], result['attacks_unknown_species']) == (
      {'print': 3, 'replay': 1}, 1)
  # No species at all (pad_lists' layouts that do not say): only the pooled rate.
  result = iso.iso_metrics(SCORES, LABELS, [-1] * 4 + [UNKNOWN] * 5, NAMES, 0.55)
  assert result['apcer_species'] == {} and result['apcer_worst'] is None
  assert result['attacks_unknown_species'] == 5


def test_worst_species_tie_goes_to_the_first_name():
  # Print 0.7, 0.2 and replay 0.85, 0.5 at 0.6: 1 of 2 each; print comes first in NAMES.
  scores, labels = [0.9, 0.7, 0.2, 0.85, 0.5], [1, 0, 0, 0, 0]
  result = iso.iso_metrics(scores, labels, [-1, PRINT, PRINT, REPLAY, REPLAY], NAMES, 0.6)
  assert result['apcer_species'] == {'print': 0.5, 'replay': 0.5}
  assert (result['worst_species'], result['apcer_worst'], result['acer']) == ('print', 0.5, 0.25)


def test_tpr_at_fpr_takes_the_last_point_sklearn_keeps():
  # 4 live 0.9, 0.8, 0.7, 0.1; 200 attacks: 0.9, 0.8, 0.7 and 197 at 0.2 (1 % = 2 attacks).
  # (attacks, live) accepted at each distinct score, descending: 0.9 (1, 1), 0.8 (2, 2),
  # 0.7 (3, 3), 0.2 (200, 3), 0.1 (200, 4). 0.8 sits between two equal (+1, +1) steps: sklearn
  # drops it. Kept with FPR <= 1 %: (0, 0) and 0.9 (FPR 1/200): TPR 1/4. Over every point,
  # 0.8 (FPR 2/200 = 1 %, TPR 2/4) would count, and 0.7 (3/200) would not.
  scores = [0.9, 0.8, 0.7, 0.1] + [0.9, 0.8, 0.7] + [0.2] * 197
  labels = [1] * 4 + [0] * 200
  fpr, tpr, thresholds = metrics.sklearn_roc(scores, labels)
  np.testing.assert_array_equal(thresholds[1:], [0.9, 0.7, 0.2, 0.1])
  assert iso.tpr_at_fpr(scores, labels) == 1 / 4
  full_fpr, full_tpr, _ = metrics.roc(scores, labels)
  assert full_tpr[full_fpr <= 0.01][-1] == 2 / 4
  # At FPR <= 2 % (4 attacks) the last kept point within is 0.7 (3/200): TPR 3/4.
  assert iso.tpr_at_fpr(scores, labels, fpr=0.02) == 3 / 4


def test_tpr_at_fpr_is_zero_when_an_attack_scores_highest():
  # Attack 0.95 above every live score: only sklearn's (0, 0) point has FPR <= 1 %.
  assert iso.tpr_at_fpr([0.95, 0.9, 0.8, 0.1], [0, 1, 1, 0]) == 0.0


def test_video_species_per_sorted_video_id():
  # Videos 'b' (replay), 'a' (live), 'c' (print), frames interleaved; rows in sorted id order.
  species = iso.video_species([3, -1, 3, -1, 0], ['b', 'a', 'b', 'a', 'c'])
  np.testing.assert_array_equal(species, [-1, 3, 0])


def test_live_code_is_the_benchmarks():
  assert iso.LIVE_SPECIES == pad_benchmark.LIVE
  assert NAMES == pad_benchmark.ATTACKS


@pytest.mark.parametrize('call, match', [
    (lambda: iso.iso_metrics(SCORES, LABELS, SPECIES[:-1], NAMES, 0.5),
     r'^scores and labels and species differ in length: 9 scores, 9 labels, 8 species; '
     r'expected one of each per sample$'),
    (lambda: iso.iso_metrics(SCORES, LABELS, [0] + SPECIES[1:], NAMES, 0.5),
     r'^sample 0 is live \(label 1\) but its species is 0; expected -1 on every live sample '
     r'\(samples 0\)$'),
    (lambda: iso.iso_metrics(SCORES, LABELS, SPECIES[:4] + [-1] + SPECIES[5:], NAMES, 0.5),
     r'^sample 4 is an attack \(label 0\) but its species is -1 \(live\); expected a species '
     r'index or a negative unknown code other than -1 \(samples 4\)$'),
    (lambda: iso.iso_metrics(SCORES, LABELS, SPECIES[:8] + [4], NAMES, 0.5),
     r"^species 4 at sample 8 is not an index into the 4 species names \('print', 'cut', "
     r"'display', 'replay'\)$"),
    (lambda: iso.iso_metrics(SCORES, LABELS, np.asarray(SPECIES, float), NAMES, 0.5),
     r'^species must be integer codes .* got dtype float64$'),
    (lambda: iso.iso_metrics(SCORES, LABELS, SPECIES, ('print', 'print'), 0.5),
     r"^species names must be distinct, got 'print', 'print'$"),
    (lambda: iso.species_apcer(SCORES, LABELS, SPECIES, NAMES, 0.5, 'cut'),
     r"^species 'cut' has no attack samples in this set \(it holds 'print', 'replay'\); its "
     r'APCER would divide by zero$'),
    (lambda: iso.species_apcer(SCORES, LABELS, SPECIES, NAMES, 0.5, 'mask'),
     r"^species 'mask' is not one of the species names 'print', 'cut', 'display', 'replay'$"),
    (lambda: iso.iso_metrics(SCORES, LABELS, SPECIES, NAMES, float('nan')),
     r'^threshold must be a finite real number, got nan$'),
    (lambda: iso.tpr_at_fpr(SCORES, LABELS, fpr=1.5),
     r'^fpr must be a real number in \[0, 1\], got 1.5$'),
    (lambda: iso.bpcer([0.1, 0.2], [0, 0], 0.5),
     r'^the set is all-one-class: 0 live and 2 spoof samples, no live'),
    (lambda: iso.video_species([3, 0, -1], [7, 7, 8]),
     r'^video 7 has frames of species 0, 3; expected one species per video$'),
])
def test_bad_input_is_refused_in_one_line(call, match):
  with pytest.raises(ValueError, match=match) as error:
    call()
  assert '\n' not in str(error.value)
