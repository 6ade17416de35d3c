"""Workdirs on object stores: every output of a run goes through `io.files` (etils.epath).

No test here reaches a real bucket (this machine has no network): `fake_gcs` routes gs:// paths
to a local folder through `etils.epath.testing.mock_epath`, and the run's cwd is an empty folder
that must stay empty, so any write that bypasses epath (a plain `open` of 'gs://...' makes a local
'gs:' folder) fails the test. Orbax writes gs:// checkpoints through TensorStore's own GCS driver,
which the mock cannot reach: the end-to-end test swaps orbax's CheckpointManager for an in-memory
one and checks the directory it is given.
"""

import json
import os

import jax
import numpy as np
import pytest
from etils import epath
from etils.epath import gpath
from etils.epath import testing as epath_testing

from fedjax_face import experiment
from fedjax_face.io import checkpoint, files, metrics
from tests.test_experiment import load_config


@pytest.fixture
def fake_gcs(tmp_path, monkeypatch):
  """gs://<path> -> <tmp>/gcs/<path>; yields that folder. The cwd is <tmp>/cwd and stays empty."""
  bucket_root = tmp_path / 'gcs'
  bucket_root.mkdir()
  cwd = tmp_path / 'cwd'
  cwd.mkdir()
  monkeypatch.chdir(cwd)

  def local(path):
    path = os.fspath(path)
    return str(bucket_root / path[len('gs://'):]) if path.startswith('gs://') else path

  def routed(fn, path, *args, **kwargs):
    args = [local(a) if isinstance(a, (str, os.PathLike)) else a for a in args]
    return fn(local(path), *args, **kwargs)

  def opened(fn, path, mode):   # an object store has no folders: writing a key makes its parents
    if 'w' in mode or 'a' in mode:
      os.makedirs(os.path.dirname(local(path)), exist_ok=True)
    return routed(fn, path, mode)

  # With TensorFlow installed epath sends gs:// to tf.io.gfile, past the mock: turn that off.
  monkeypatch.setattr(gpath, '_is_tf_installed', lambda: False)
  names = ('exists', 'isdir', 'listdir', 'glob', 'makedirs', 'mkdir', 'remove', 'rename',
           'replace', 'rmtree', 'copy', 'stat')
  with epath_testing.mock_epath(open=opened, **{name: routed for name in names}):
    yield bucket_root
  assert not os.listdir(cwd), f'wrote outside the bucket: {os.listdir(cwd)}'


def test_uri_paths_are_joined_and_kept_as_given():
  assert files.join('gs://b/runs', 'x', 'results.json') == 'gs://b/runs/x/results.json'
  assert files.absolute('gs://b/runs') == 'gs://b/runs'   # os.path.abspath gives '<cwd>/gs:/b/runs'
  assert files.absolute('runs') == os.path.abspath('runs')
  assert files.is_uri('s3://b/x') and not files.is_uri('/tmp/x')


def test_json_is_written_whole_with_numpy_values(fake_gcs):
  files.write_json_atomic('gs://b/run/results.json', {'acc': np.float32(0.5), 'n': np.arange(2)})
  assert json.loads((fake_gcs / 'b/run/results.json').read_text()) == {'acc': 0.5, 'n': [0, 1]}
  assert sorted(os.listdir(fake_gcs / 'b/run')) == ['results.json']   # no .tmp left behind
  assert files.read_json('gs://b/run/results.json')['n'] == [0, 1]


def test_tensorboard_events_go_to_the_bucket(fake_gcs):
  writer = metrics.MetricWriter('gs://b/run/tensorboard')
  writer.write_scalars(1, {'loss': 2.5})
  writer.close()
  (event_file,) = os.listdir(fake_gcs / 'b/run/tensorboard')
  assert event_file.startswith('events.out.tfevents')
  data = (fake_gcs / 'b/run/tensorboard' / event_file).read_bytes()
  assert b'loss' in data


class InMemoryCheckpointManager:
  """Stands in for orbax's CheckpointManager (whose arrays go through TensorStore's GCS driver)."""

  saved: dict = {}   # directory -> {step: state dict}, shared across instances like a bucket

  def __init__(self, directory, options=None):
    del options
    self.directory = os.fspath(directory)
    self.steps = self.saved.setdefault(self.directory, {})

  def latest_step(self):
    return max(self.steps, default=None)

  def all_steps(self):
    return sorted(self.steps)

  def check_for_errors(self):
    pass

  def reload(self):
    pass

  def save(self, step, args, force=False):
    del force
    self.steps[step] = jax.tree.map(np.array, args.item)

  def restore(self, step, args):
    del args
    return self.steps[step]

  def wait_until_finished(self):
    pass

  def close(self):
    pass


def test_run_with_a_gs_workdir_writes_every_output_there(fake_gcs, monkeypatch):
  monkeypatch.setattr(checkpoint.ocp, 'CheckpointManager', InMemoryCheckpointManager)
  monkeypatch.setattr(InMemoryCheckpointManager, 'saved', {})
  config = load_config('fedgc')
  config.num_rounds = 2
  results = experiment.train_and_evaluate(config, 'gs://bucket/runs/fedgc')
  run = fake_gcs / 'bucket/runs/fedgc'
  for name in ('config.json', 'results.json', 'report.md', 'roc.png', 'samples.png',
               'class_embedding_similarity.png', 'class_embedding_similarity.npz'):
    assert (run / name).stat().st_size > 0, name
  assert not [n for n in os.listdir(run) if n.endswith('.tmp')]
  assert os.listdir(run / 'tensorboard')
  assert (run / 'roc.png').read_bytes().startswith(b'\x89PNG')
  assert np.load(run / 'class_embedding_similarity.npz')['cross'].size > 0
  # Orbax is handed the URI itself, not '<cwd>/gs:/bucket/...'.
  assert list(InMemoryCheckpointManager.saved) == ['gs://bucket/runs/fedgc/checkpoints']
  assert files.read_json('gs://bucket/runs/fedgc/results.json')['rounds'] == 2
  assert json.loads((run / 'results.json').read_text())['verification'].keys() == results[
      'verification'].keys()

  # Resuming reads config.json from the bucket: another config is refused, naming the field.
  config.optimizer.learning_rate = 0.05
  with pytest.raises(ValueError, match='optimizer.learning_rate'):
    experiment.train_and_evaluate(config, 'gs://bucket/runs/fedgc')


def test_epath_is_what_routes_the_uri(fake_gcs):
  """The fixture itself: a gs:// path written through epath lands in the fake bucket."""
  epath.Path('gs://b/x.txt').write_text('hi')
  assert (fake_gcs / 'b/x.txt').read_text() == 'hi'
