"""FedBN: federated learning with local batch normalization (Li, Jiang, Zhang, Kamp, Dou, ICLR
2021, "FedBN: Federated Learning on Non-IID Features via Local Batch Normalization").

Every client trains the whole model on its own data (FedAvg's local epochs); the server averages
every layer except the BatchNorm layers, which each client keeps (Algorithm 1, its aggregation
step: a layer l that is not BatchNorm is averaged, a BatchNorm layer is not). The public code
(med-air/FedBN, federated/fed_digits.py, `communication`) averages every state-dict entry whose
name lacks 'bn' and leaves the rest with the client: a BatchNorm's weight, bias, running mean and
running variance alike.

Face recognition: the class embeddings W_k are private anyway (FedPE, algorithms/fedpe.py), so a
client sends the backbone without its BatchNorm layers and keeps W_k and its BatchNorm layers.
Readings:
  * "BatchNorm layer": a layer with running statistics (`partial_sharing.batch_norm_layers`). Its
    learned scale and shift and its running mean and variance all stay on the client. The small
    CNN has one after each convolution and the 'features' BatchNorm of the embedding (shift only);
    the IResNets have theirs in every block. The GroupNorm CNN (`gn_cnn`) has none: refused.
  * The average is weighted by the clients' image counts n_k (FedAvg's, as FedPE's); the public
    code's digits experiment weighs its equally sized clients equally, which is the same there.
  * Each client's BatchNorm layers start as the starting model's (the pre-trained model with
    `config.init_from`, FedFR's setting; else the random initialisation).
  * Which BatchNorm the shared model uses: the server never receives one, so the model it
    evaluates (the generic protocols, an unseen domain) is the averaged layers with the starting
    model's BatchNorm parameters and running statistics, kept unchanged on the server. Each
    client's personalized model (`Algorithm.personalized`, FedFR's personalized protocol) is the
    averaged layers with that client's own BatchNorm layers.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from fedjax_face.algorithms import common, partial_sharing
from fedjax_face.core import aggregation, checks, class_tables
from fedjax_face.core.algorithm import (Algorithm, ClientInput, ClientResult, RoundState,
                                        origin_by_key)
from fedjax_face.data import sources

ONE_CLIENT = False
NO_BATCH_NORM = ('gn_cnn',)   # backbones without BatchNorm (GroupNorm)


def config_section() -> ml_collections.ConfigDict | None:
  """FedBN has no settings of its own: what it keeps is every BatchNorm layer."""
  return None


def check_recognition(config, method: str) -> None:
  """Refuses a source that is not face recognition: the method trains with the recognition
  heads' losses (`common.local_trainer`)."""
  if sources.task_of(config) != 'recognition':
    raise ValueError(f'config.data.source={config.data.source!r}; {method} trains a face '
                     'recognition backbone here: expected a recognition source '
                     f'{sources.of_task("recognition")}.')


def check_config(config) -> None:
  check_recognition(config, 'fedbn')
  if config.model.name in NO_BATCH_NORM:
    raise ValueError(f'config.model.name={config.model.name!r} has no BatchNorm (GroupNorm); '
                     'FedBN keeps each client\'s BatchNorm layers: expected a backbone with '
                     "BatchNorm ('small_cnn', an 'iresnet').")


def variant_name(config) -> str:
  del config
  return 'fedbn'


def _personalized(apply, state: RoundState):
  """Client k's model: the averaged layers with its own BatchNorm layers."""
  def for_client(k: int):
    own = jax.tree.map(lambda x: jnp.asarray(x[k]), state.clients['bn'])
    variables = partial_sharing.merge(state.server['model'], own)
    return lambda images: apply(variables, images)
  return for_client


def batch_norm_layers(config, model, fed) -> frozenset:
  """The backbone's BatchNorm layers, from its variables' shapes (nothing is computed)."""
  shapes = jax.eval_shape(lambda: common.init_backbone(model, jax.random.PRNGKey(0),
                                                       fed.images.shape[1:]))
  layers = partial_sharing.batch_norm_layers(shapes)
  if not layers:
    raise ValueError(f'config.model.name={config.model.name!r} has no BatchNorm layer; FedBN '
                     "keeps each client's: expected a backbone with BatchNorm.")
  return layers


def build(config, model, fed, *, step_mode: str) -> Algorithm:
  """FedBN over the partition `fed` (a `data.federated.FederatedData`)."""
  train = common.local_trainer(model, head_kwargs=common.head_kwargs(config),
                               optimizer=common.make_optimizer(config.optimizer),
                               step_mode=step_mode)
  lr_schedule = common.lr_scale_schedule(config)
  identity_table = np.asarray(fed.identity_table)
  is_kept = partial_sharing.in_layers(batch_norm_layers(config, model, fed))

  def init(rng, start=None):
    variables, w = common.init_federated(config, model, fed, rng)
    if start is not None:
      variables, _ = common.start_from(start, variables, method='fedbn')
    shared, bn = partial_sharing.split(variables, is_kept)
    stack = lambda x: jnp.broadcast_to(x, (fed.num_clients,) + x.shape)
    return RoundState(server={'model': shared, 'start_bn': bn},
                      clients={'W': w, 'bn': jax.tree.map(stack, bn)},
                      round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del client_ids, rng   # every client receives the same averaged layers, never a BatchNorm
    shared = common.with_lr_scale({'model': server['model']}, lr_schedule, round_index)
    return ClientInput(shared=shared, per_client={})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    variables = partial_sharing.merge(client_input.shared['model'], private['bn'])
    trained, w, _, metrics = train(variables, private['W'], data, rng,
                                   lr_scale=client_input.shared.get('lr_scale'))
    shared, bn = partial_sharing.split(trained, is_kept)
    return ClientResult(update={'model': shared}, private={'W': w, 'bn': bn}, metrics=metrics)

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del client_ids, round_index, rng
    # Algorithm 1's aggregation: every layer but the BatchNorm layers, which never arrive.
    return {**server, 'model': aggregation.weighted_mean(updates['model'], weights)}

  def class_embeddings(state: RoundState):
    return class_tables.to_identity_rows(state.clients['W'], identity_table, fed.num_identities)

  apply = jax.jit(lambda variables, x: model.apply(variables, x, train=False))
  return Algorithm(
      name='fedbn', init=init, broadcast=broadcast, client_update=client_update,
      server_update=server_update,
      eval_variables=lambda server: partial_sharing.merge(server['model'], server['start_bn']),
      class_embeddings=class_embeddings,
      personalized=lambda state: _personalized(apply, state),
      update_origin=lambda ci: origin_by_key(ci, ('model',)))
