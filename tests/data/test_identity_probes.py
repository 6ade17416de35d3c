"""The identity-leakage probes of the real-data sources (`identity_probes`): FedFR's split gives
its verification set's held-out images (on tests/fedfr_split_files.py's fixture), the file
sources the held-out images of `data.private_test_fraction`'s split (the personalized
evaluation's), distractors are the lowest identities no template names, each sliced from what the
source holds out and never a training image; the leakage evaluator on FedFR's split keeps its
exact template off the probes; and the one-line refusals where nothing is held out."""

import types

import numpy as np
import pytest

from fedjax_face import eval as eval_lib
from fedjax_face.data import sources, stores, views
from fedjax_face.data.sources import files
from fedjax_face.eval.privacy import leakage
from tests import config_files, fedfr_split_files

PUBLIC = 3   # the fixture's public identities: the clients' are 3..8, client k holds 3+2k, 4+2k


@pytest.fixture(scope='module')
def fedfr(tmp_path_factory):
  """(config, data, what was written): 3 clients of 2 identities, 4 training and 2 held-out
  images each."""
  root = tmp_path_factory.mktemp('fedfr_probes')
  written = fedfr_split_files.write_split(root)
  config = config_files.load_config('fedfr/fedfr')
  config.data.source = 'fedfr_split'
  config.data.fedfr_split.root = str(root)
  config.data.public_identities, config.data.private_test_fraction = PUBLIC, 0.0
  config.federated.num_clients = 3
  return config, sources.load(config), written


def _veri(written, identity):
  return written.veri_images[written.veri_labels == identity - PUBLIC]


def test_fedfr_probes_are_the_verification_images_and_distractors_the_lowest_others(fedfr):
  config, data, written = fedfr
  images, labels = sources.get('fedfr_split').identity_probes(config, data, [4, 7], 5, 2)
  # 2 held out per identity (fewer than the 5 asked); distractors 3 and 5, labelled 9 and 10.
  np.testing.assert_array_equal(labels, [4, 4, 7, 7, 9, 9, 10, 10])
  np.testing.assert_array_equal(images, np.concatenate(
      [_veri(written, i) for i in (4, 7, 3, 5)]))             # PNG: lossless
  alone, _ = sources.get('fedfr_split').identity_probes(config, data, [7], 1, 0)
  np.testing.assert_array_equal(alone, _veri(written, 7)[:1])


def test_file_source_probes_are_the_personalized_splits_held_out_images():
  rng = np.random.default_rng(0)
  labels = np.repeat(np.arange(6), 5).astype(np.int32)
  images = rng.integers(0, 256, (30, 4, 4, 3), dtype=np.uint8)
  data = types.SimpleNamespace(train_images=images, train_labels=labels, num_identities=6,
                               train_families=None)
  config = config_files.load_config('fedgc/fedgc', 'runlocal')
  config.seed, config.data.source, config.federated.num_clients = 3, 'image_folder', 5
  config.data.public_identities, config.data.private_test_fraction = 1, 0.4
  got, got_labels = files.identity_probes(config, data, [2, 5], 3, 10)
  fed_view, _ = views.identity_views(config, data, False)
  held = np.asarray(fed_view.test_indices)                  # 2 of each private identity's 5
  held_of = lambda i: held[labels[held] == i]
  # Identities 2 and 5, then distractors 1, 3, 4 (private identities with held-out images).
  np.testing.assert_array_equal(got_labels, [2, 2, 5, 5, 6, 6, 7, 7, 8, 8])
  np.testing.assert_array_equal(got, images[np.concatenate(
      [held_of(i) for i in (2, 5, 1, 3, 4)])])
  trained = np.concatenate(fed_view.client_indices)
  assert not set(np.concatenate([held_of(i) for i in range(1, 6)]).tolist()) & set(
      trained.tolist())


def test_the_leakage_evaluator_on_fedfr_keeps_its_exact_template_off_the_probes(fedfr,
                                                                                monkeypatch):
  config, data, written = fedfr
  config = config.copy_and_resolve_references()
  config.algorithm = 'fedgc'
  config.evals.leakage = leakage.config_leakage()
  config.evals.leakage.update(round=1, num_distractors=10, probes_per_identity=2,
                              kinds=('server_rows',))
  fed_view, _ = sources.get('fedfr_split').training_views(config, data, False)
  proj = np.random.default_rng(1).standard_normal((16 * 16 * 3, 8))
  embedded = []

  def fake_embeddings(embed_fn, images, batch_size):   # the pixels projected, recorded
    del embed_fn, batch_size
    embedded.append(np.asarray(images))
    return np.asarray(images, np.float64).reshape(len(images), -1) @ proj

  monkeypatch.setattr(leakage.verification, 'compute_embeddings', fake_embeddings)
  # Client 1 (identities 5, 6) sends as rows the templates of their own probes: rank-1 exactly.
  probe_rows = {i: fake_embeddings(None, _veri(written, i), 0) for i in (5, 6)}
  rows = np.stack([leakage._unit(probe_rows[i]).mean(axis=0) for i in (5, 6)])
  replay = _Replay(rows)
  evaluator = leakage.make_leakage(config, config.evals.leakage,
                                   eval_lib.EvalSetup(config, data, fed_view))
  out = evaluator.evaluate(eval_lib.EvalInputs(embed=None, class_embeddings=None, replay=replay))
  server = out.results['kinds']['server_rows']
  assert server['identities'] == 2 and server['rank1'] == 1.0
  assert out.results['distractors'] == 4                   # identities 3, 4, 7, 8: all there are
  assert server['candidates'] == 6
  probes, exact = embedded[2], embedded[3]                # after the two calls above
  np.testing.assert_array_equal(probes[:4], np.concatenate([_veri(written, i) for i in (5, 6)]))
  held_out, _ = stores.take(data.train_images, np.asarray(fed_view.test_indices))
  assert len(exact) == 2 * 4                               # each identity's 4 training images
  assert not any(np.array_equal(e, h) for e in exact for h in held_out)


class _Replay:
  """Round 1 of a fake run: client 1 alone, sending `rows` as its W."""

  def __init__(self, rows):
    self.rows, self.algorithm = rows, types.SimpleNamespace(client_rows=('W',))

  def __call__(self, r):
    assert r == 1
    return [{'W': self.rows}]

  def received(self, r):
    assert r == 1
    return np.array([1]), None


def test_sources_that_hold_nothing_out_are_refused_in_one_line(fedfr):
  config, _, _ = fedfr

  def refused(c, match):
    c.evals.leakage = leakage.config_leakage()
    c.evals.leakage.round = 1
    c.algorithm = 'fedgc'
    with pytest.raises(ValueError, match=match):
      leakage.check_leakage(c, c.evals.leakage)

  c = config.copy_and_resolve_references()
  c.data.fedfr_split.veri = 'none'
  refused(c, r"^config.evals.leakage with data.fedfr_split.veri='none': the probes are the "
             r"verification set's held-out images .*; expected a local_veri_\* directory.$")
  c = config_files.load_config('fedgc/fedgc', 'runlocal')
  c.data.source = 'image_folder'
  refused(c, r"^config.evals.leakage with data.source='image_folder' and "
             r'data.private_test_fraction=0.0: the probes are held-out images .*; expected a '
             r'fraction > 0 \(FedFR: 0.4\).$')
  c.data.source = 'client_folders'
  refused(c, r"^config.evals.leakage with data.source='client_folders': that source has no "
             r'identity_probes; expected a source that has \(synthetic, insightface, '
             r'image_folder, tfds, fedfr_split\).$')
