"""The algorithm contract: a federated method is a handful of pure functions over pytrees.

`build(config, ...)` in each `fedjax_face/algorithms/<name>.py` returns an `Algorithm`. The round
engine (`core/engine.py`) calls its functions in this order every round:

    client_input        = broadcast(state.server, client_ids, state.round, broadcast_rng)
    result_k            = client_update(client_input_k, private_k, data_k, rng_k)   # per client
    state.server        = server_update(state.server, results.update, weights, client_ids,
                                        state.round, update_rng)
    state.clients[ids]  = results.private

Privacy is structural: what a client keeps (`ClientResult.private`, e.g. FedPE's class embeddings)
is scattered back into `RoundState.clients` by the engine and never reaches `server_update`, which
sees only `ClientResult.update`. Tests assert, per algorithm, what `update` contains.

`state.round` (rounds completed) drives schedules; `broadcast_rng` and `update_rng` are the
server's keys of the round (`core.engine.server_keys`), for what the server draws (FedFV's
equivalent class embeddings, noise). A draw meant for one client folds in its id, so that it does
not depend on the client's position in the cohort.
"""

from typing import Any, Callable, NamedTuple

import flax
import jax

PyTree = Any


@flax.struct.dataclass
class RoundState:
  """Everything that persists between rounds.

  Attributes:
    server: what the server holds (global model, server-side class embeddings, ...).
    clients: every client's persistent private state stacked on a leading axis of size
      num_clients (a simulation stores it centrally; the engine gathers the selected rows and
      scatters them back: on the device, or numpy arrays on the host with the engine's
      `client_state='host'`). An empty dict when the method keeps nothing on clients.
    round: rounds completed so far (int32 scalar).
  """
  server: PyTree
  clients: PyTree
  round: jax.Array


class ClientInput(NamedTuple):
  """What the server sends to the selected clients.

  `shared` is the same for every client of the round (e.g. the global backbone: never copied per
  client); `per_client` is stacked along the cohort axis (e.g. FedGC's W_k).
  """
  shared: PyTree
  per_client: PyTree


class ClientResult(NamedTuple):
  """What one client's local training produces.

  Attributes:
    update: what the client sends to the server (the only thing `server_update` sees).
    private: the client's new persistent state (kept on the client).
    metrics: scalars for logging (mean training loss, ...), averaged by the engine.
  """
  update: PyTree
  private: PyTree
  metrics: dict[str, jax.Array]


class Algorithm(NamedTuple):
  """A federated method as pure functions (see the module docstring for the call order).

  Attributes:
    name: registry name.
    init: (rng, start) -> RoundState. `start` is the final state of a finished run that
      `config.init_from` names, read by the driver (nested dicts: 'server', 'clients', 'round'),
      or None; the method takes from it what it starts from (the backbone, FedFR's public class
      matrix) or refuses it. No method reads a checkpoint itself.
    broadcast: (server, client_ids [m], round (int32: rounds completed), server_rng) ->
      ClientInput.
    client_update: (ClientInput for one client, private, data, rng) -> ClientResult. `data` is a
      dict of `[steps, batch, ...]` arrays (`images` uint8, `labels` int32 local class ids, `mask`
      bool). Pure, fixed shapes, no host callbacks: the engine vmaps, maps or loops it.
    server_update: (server, updates stacked [m, ...], weights [m], client_ids [m], round,
      update_rng) -> server. Padding clients have weight 0 and an out-of-range id
      (num_clients).
    eval_variables: server -> backbone variables used for evaluation.
    class_embeddings: RoundState -> ([num_identities, d] class embeddings in global identity
      order, or None when the method has none), for diagnostics.
    personalized: RoundState -> (client index -> its personalized model's embedding function,
      float images [B, H, W, C] -> [B, d]), for the personalized evaluation (FedFR); None when
      the method has no per-client model (the global one is evaluated for every client).
    update_origin: ClientInput of one client -> what its `update` would be had it not trained
      (the same structure), the point its update's difference is taken from for differential
      privacy (`core/privacy.py`); None: the method cannot run with `dp.enabled`.
    client_rows: the keys of `update` that hold the client's own rows, written by the server
      into a matrix rather than averaged (FedGC's 'W').
    sent_once: keys of `ClientInput.shared` a client keeps after its first download (FedFR's
      public images), counted once per client by `core/communication.py`.
    summary: final RoundState -> a JSON-able dict of what the method's own state reached (FedMA's
      matched widths), written to results.json as 'method_state', so that an archive of
      results.json alone keeps it; None: nothing to record.
  """
  name: str
  init: Callable[..., RoundState]   # (rng, start=None)
  broadcast: Callable[[PyTree, jax.Array], ClientInput]
  client_update: Callable[[ClientInput, PyTree, dict, jax.Array], ClientResult]
  server_update: Callable[[PyTree, PyTree, jax.Array, jax.Array], PyTree]
  eval_variables: Callable[[PyTree], PyTree]
  class_embeddings: Callable[[RoundState], jax.Array | None]
  personalized: Callable[[RoundState], Callable[[int], Callable]] | None = None
  update_origin: Callable[[ClientInput], PyTree] | None = None
  client_rows: tuple[str, ...] = ()
  sent_once: tuple[str, ...] = ()
  summary: Callable[[RoundState], dict] | None = None


def origin_by_key(client_input: ClientInput, keys) -> dict:
  """The usual `update_origin`: each key of the update as received, from `per_client` when the
  client got its own copy (its class rows) and from `shared` otherwise."""
  return {k: client_input.per_client[k] if k in client_input.per_client else client_input.shared[k]
          for k in keys}
