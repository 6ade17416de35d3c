"""FedGC Fig. 3(a)(b) helper: pair selection and projection on constructed inputs."""

import numpy as np
import pytest

from fedjax_face.proj.fedgc import visualize


def test_pairs_are_the_most_similar_cross_client_ones_each_identity_once():
  # Identities 0, 1 on client 0; 2, 3 on client 1; 4 on client 2.
  owner = np.array([0, 0, 1, 1, 2])
  emb = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.05], [0.1, 1.0], [1.0, 0.02]])
  # Most similar overall is 0-4 (same direction), then 2-4 (used), 0-2 (used), then 1-3.
  assert visualize.most_similar_cross_client_pairs(emb, owner, 2) == [(0, 4), (1, 3)]


def test_same_client_pairs_are_never_chosen():
  owner = np.array([0, 0, 1])
  emb = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])   # 0 and 1 identical but same client
  assert visualize.most_similar_cross_client_pairs(emb, owner, 3) == [(0, 2)]


def test_pca_keeps_the_leading_directions():
  s = np.tile([1.0, -1.0, 1.0, -1.0], 50)    # zero-mean and orthogonal to t
  t = np.tile([1.0, 1.0, -1.0, -1.0], 50)
  x = np.zeros((200, 5))
  x[:, 3] = 10 * s
  x[:, 1] = 3 * t
  points = visualize.pca_2d(x)
  np.testing.assert_allclose(np.abs(points[:, 0]), np.abs(x[:, 3] - x[:, 3].mean()), atol=1e-9)
  np.testing.assert_allclose(np.abs(points[:, 1]), np.abs(x[:, 1] - x[:, 1].mean()), atol=1e-9)


def test_runs_on_different_data_are_refused():
  with pytest.raises(ValueError, match=r'b: data.synthetic.num_identities=20 but a has 10'):
    visualize.check_same_data([{'data': {'synthetic': {'num_identities': 10}}},
                               {'data': {'synthetic': {'num_identities': 20}}}],
                              ['a', 'b'])
