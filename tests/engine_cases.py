"""A small federated problem shared by the engine tests (also run in a subprocess with 8 devices)."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_face import algorithms, config_lib, models
from fedjax_face.core import blocks as blocks_lib
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import federated


def tiny_config(algorithm: str = 'fedgc'):
  c = config_lib.runlocal(config_lib.base_config())
  c.algorithm = algorithm
  section = algorithms.get(algorithm).config_section()
  if section is not None:
    c[algorithm] = section
  c.data.image_size = 8
  c.model.width = 2
  c.model.embedding_dim = 8
  return c


def tiny_problem(num_clients: int = 5, seed: int = 0):
  rng = np.random.default_rng(seed)
  num_identities = 2 * num_clients + 1
  labels = np.repeat(np.arange(num_identities), 4).astype(np.int32)
  images = rng.integers(0, 256, size=(len(labels), 8, 8, 3), dtype=np.uint8)
  ids = np.array_split(rng.permutation(num_identities), num_clients)   # uneven: one has 3
  return federated.build(images, labels, [np.sort(i).astype(np.int32) for i in ids])


def traced_client_update(algorithm, data):
  """(round state, one client's `ClientResult`) by shapes alone (`jax.eval_shape`: traced, not
  compiled): the method's round 0, its broadcast to client 0, a client's own private state and
  its update on `data`."""
  state = jax.eval_shape(algorithm.init, jax.random.PRNGKey(0))
  client_input = jax.eval_shape(lambda s: algorithm.broadcast(
      s, jnp.zeros(1, jnp.int32), jnp.zeros((), jnp.int32), jax.random.PRNGKey(1)), state.server)
  private = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), state.clients)
  return state, jax.eval_shape(algorithm.client_update, client_input, private, data,
                               jax.random.PRNGKey(0))


def set_fields(**fields):
  """A `configure` for `run_rounds`: `section__key=value` sets `config.section.key`."""
  def configure(config):
    for name, value in fields.items():
      section, key = name.split('__')
      config[section][key] = value
  return configure


def run_rounds(algorithm_name: str, backend: str, *, step_mode: str = 'scan',
               map_width: int | None = None,
               mesh=None, cohorts=((0, 1, 2, 3, 4), (1, 3, 4)), pad_to: int = 1,
               reg_lambda: float | None = None, loop_threads: int = 1, dp=None,
               client_state: str = 'device', configure=None, secure=None, noise_secret=None):
  """Runs one round per cohort; returns the final RoundState as numpy and the engine.

  `map_width` None: chunks of 2 for 'map', the whole cohort at once for 'vmap'. `configure`
  changes the config in place (the federated blocks it switches on wrap the method, as a run
  does); `secure` is the engine's secure-aggregation spec, `noise_secret` its DP noise secret.
  """
  if map_width is None:
    map_width = 2 if backend == 'map' else 0
  config = tiny_config(algorithm_name)
  if reg_lambda is not None:
    config.fedgc.reg_lambda = reg_lambda
  if configure is not None:
    configure(config)
  fed = tiny_problem()
  model = models.build_backbone(config.model)
  algorithm = algorithms.get(algorithm_name).build(config, model, fed, step_mode=step_mode)
  blocks = blocks_lib.from_config(config)
  if blocks.active:
    algorithm = blocks_lib.wrap(algorithm, blocks, fed.num_clients)
  eng = engine_lib.RoundEngine(algorithm, backend=backend, map_width=map_width, mesh=mesh,
                               loop_threads=loop_threads, dp=dp, client_state=client_state,
                               secure=secure, noise_secret=noise_secret)
  state = algorithm.init(jax.random.PRNGKey(0))
  if client_state == 'host':
    state = state.replace(clients=engine_lib.host_clients(state.clients))
  for r, cohort in enumerate(cohorts):
    multiple = int(np.lcm(eng.cohort_multiple(), pad_to))
    ids = federated.pad_cohort(np.asarray(cohort, np.int32), multiple, fed.num_clients)
    weights = np.where(ids < fed.num_clients,
                       fed.num_examples[np.minimum(ids, fed.num_clients - 1)], 0).astype(np.float32)
    data = federated.sample_round(fed, ids, round_index=r, seed=0, steps=2, batch_size=4)
    state, _ = eng.run_round(state, ids, weights, data, jax.random.PRNGKey(r + 1))
  return jax.tree.map(np.asarray, state), eng
