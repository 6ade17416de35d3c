"""Centralized training: the upper bound of every federated method (FedGC Table 5, rows "*").

The same backbone and head trained with SGD on all training identities at once: one global class
matrix over every identity, a softmax over the global class space ("global optimization" in the
FedGC paper). It runs through the same round engine as a single client holding all the data, so a
"round" is `federated.local_steps` optimizer steps; the optimizer's momentum is carried across
rounds (it is one continuous SGD run), unlike the federated clients'.

`head.sample_rate` < 1 trains the class matrix with Partial FC (models/partial_fc.py): each step
the batch's classes and a uniform sample of the others, the rest of W and of its momentum left as
they were; the server state is the same (W and its optimizer state whole), so a run resumes,
evaluates and starts FedFR the same way (configs/fedfr/pretrain.py:partial_fc=0.1).

`centralized.class_shards = S` splits W and its optimizer state into S shards over a `classes`
device mesh, as arcface_torch shards its head over ranks (algorithms/sharded_classes.py; with
`head.sample_rate` < 1, Partial FC sampled per shard). The server state keeps the same tree, its
class rows placed over the mesh, so checkpoints, evaluation and FedFR's start read it as before.
"""

import jax
import jax.numpy as jnp

import ml_collections

from fedjax_face.algorithms import common, sharded_classes
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.models import heads

ONE_CLIENT = True


def config_section():
  c = ml_collections.ConfigDict()
  # > 0: W and its optimizer state split into this many equal shards over a `classes` device
  # mesh (algorithms/sharded_classes.py; needs engine.backend='loop'); 0: W whole on one device.
  c.class_shards = 0
  return c


def check_config(config) -> None:
  sharded_classes.check_config(config)


def variant_name(config) -> str:
  del config
  return 'centralized'


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """Centralized training over `fed`, which must hold all identities on one client."""
  if fed.num_clients != 1:
    raise ValueError(f'centralized training expects all data on one client, got {fed.num_clients}.')
  num_shards = config.get('centralized', {}).get('class_shards', 0)
  mesh = None
  if num_shards:
    mesh = sharded_classes.class_mesh(num_shards, config.engine.num_devices)
    train = sharded_classes.sharded_trainer(
        model, head_kwargs=common.head_kwargs(config),
        optimizer=common.make_optimizer(config.optimizer), step_mode=step_mode, mesh=mesh,
        num_classes=fed.max_classes, num_shards=num_shards,
        sample_rate=config.head.get('sample_rate', 1.0), batch_size=config.federated.batch_size)
  else:
    train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                                 optimizer=common.make_optimizer(config.optimizer),
                                 step_mode=step_mode,
                                 sample_rate=config.head.get('sample_rate', 1.0))
  # Where the server state lives: the class rows split over the mesh, the rest replicated on it
  # (one program takes them together); without shards, wherever JAX puts it.
  placed = (lambda server: server) if mesh is None else (
      lambda server: sharded_classes.place(server, mesh))
  constrained = (lambda server: server) if mesh is None else (
      lambda server: sharded_classes.constrain(server, mesh))
  lr_schedule = common.lr_scale_schedule(config)
  image_shape = fed.images.shape[1:]

  def init(rng, start=None):
    backbone_rng, w_rng = jax.random.split(rng)
    variables = common.init_backbone(model, backbone_rng, image_shape)
    if start is not None:
      variables, _ = common.start_from(start, variables, method=config.algorithm)
    w = heads.init_class_embeddings(w_rng, fed.max_classes, config.model.embedding_dim,
                                    config.head.loss, config.head.init_std)
    server = {'model': variables, 'W': w, 'opt_state': train.init_opt_state(variables, w)}
    return RoundState(server=placed(server), clients={}, round=placed(jnp.zeros((), jnp.int32)))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng
    return ClientInput(shared=common.with_lr_scale(server, lr_schedule, round_index),
                       per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    server = client_input.shared
    model_vars, w, opt_state, metrics = train(server['model'], server['W'], data, rng,
                                              opt_state=server['opt_state'],
                                              lr_scale=server.get('lr_scale'))
    update = {'model': model_vars, 'W': w, 'opt_state': opt_state}
    return ClientResult(update=update, private=private, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del server, client_ids, round_index, rng
    # The one real client is the row with weight; padding rows (weight 0) are ignored.
    return constrained(jax.tree.map(lambda x: x[jnp.argmax(weights)], updates))

  return Algorithm(name='centralized', init=init, broadcast=broadcast,
                   client_update=client_update, server_update=server_update,
                   eval_variables=lambda server: server['model'],
                   class_embeddings=lambda state: state.server['W'])
