"""Flower's ClientApp and ServerApp over the bridge (flwr 1.42, the Message API: docs/federation.md
says what this relies on). With resident.py (a holder's long-lived ClientApp process) and the
cost bench (tools/bench/federation.py), the only modules of the package that import `flwr`.

Messages (`Message.metadata.message_type`; every array an `Array` of its exact bytes, named by its
path in the method's tree: federation/wire.py):

  query.describe  server -> holder: nothing.  holder -> server: ConfigRecord 'description'
                  (client index, n_k, C_k, image shape).
  train           server -> holder: ConfigRecord 'round' (round, client), ConfigRecord 'roster'
                  (every holder's description: the class tables' shape and `init`'s draw),
                  ArrayRecords 'shared', 'per_client', 'key'; under adaptive clipping
                  'clip' (the round's C_t); under secure aggregation ConfigRecord 'secure'
                  (position, cohort) and ArrayRecord 'share'.  holder -> server: ArrayRecords
                  'update' (exactly `ClientResult.update`: clipped under DP, its averaged keys
                  masked ring vectors under secure aggregation) and 'metrics'.

Configuration: the run config (`flwr run`'s, pyproject.toml's `[tool.flwr.app.config]`) names
the config file every party reads, `config` ('configs/fedgc/fedpe.py:runlocal'), and
`overrides` ('num_rounds=2 federated.num_clients=3', as `--config.<field>=` would set them);
`workdir` (the server's checkpoints and final state), `round-timeout-s` (how long a round waits
for the holders' replies; 0: for all) and `min-replies` (the fewest replies a round goes on
with; 0: all). Each
SuperNode's node config names its holder: `client-index`, `data-path` (its own folder),
`state-path` (where it keeps its private state) and, under secure aggregation,
`mask-secret-path` (a file the holders share and the server does not: the masks' secret).
Under DP the server writes `<workdir>/privacy.json` (results.json's 'privacy' part: ε) and says
ε after each round.
"""

import functools
import json
import os
import re
import time

import jax
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedjax_face.core import checks
from fedjax_face.core.algorithm import ClientResult
from fedjax_face.federation import holder as holder_lib
from fedjax_face.federation import roster, server as server_lib, wire
from fedjax_face.run import hooks as hooks_lib

DESCRIBE = 'query.describe'
TRAIN = 'train'


# -- configuration ------------------------------------------------------------------------------


def parse_value(field: str, current, text: str):
  """`text` as the type of the config field's current value (bools spelled True / False)."""
  if isinstance(current, bool):
    if text not in ('True', 'False', 'true', 'false'):
      raise checks.UsageError(f'overrides: {field}={text!r}; expected True or False.')
    return text.lower() == 'true'
  return type(current)(text)


@functools.lru_cache(maxsize=8)
def load_config(spec: str, overrides: str = ''):
  """The config file `spec` ('path.py:arg') names, with `overrides` ('a.b=v c=w') applied."""
  from fedjax_face import main   # pylint: disable=import-outside-toplevel
  config = main.load_config_file(spec)
  for item in overrides.split():
    field, _, text = item.partition('=')
    *path, key = field.split('.')
    section = config
    for part in path:
      section = section[part]
    if key not in section:
      raise checks.UsageError(f'overrides: {field} is no field of {spec}; expected one of '
                              f'{sorted(section.keys())}.')
    section[key] = parse_value(field, section[key], text)
  return config


def run_config_of(context: Context):
  return load_config(str(context.run_config['config']),
                     str(context.run_config.get('overrides', '')))


# -- records --------------------------------------------------------------------------------------


def array_record(tree) -> ArrayRecord:
  return ArrayRecord({name: Array(value) for name, value in wire.to_arrays(tree).items()})


def from_record(record: ArrayRecord, template, what: str):
  return wire.from_arrays({name: array.numpy() for name, array in record.items()}, template, what)


def roster_record(descriptions: list[roster.Description]) -> ConfigRecord:
  return ConfigRecord({
      'num_examples': [d.num_examples for d in descriptions],
      'num_classes': [d.num_classes for d in descriptions],
      'image_shape': list(descriptions[0].image_shape),
      'code': [d.code for d in descriptions],
      # each holder's per-sample targets (PAD's depth maps), comma-joined: '' for none
      'targets': [','.join(d.targets) for d in descriptions]})


def roster_from_record(record: ConfigRecord) -> list[roster.Description]:
  shape = tuple(int(x) for x in record['image_shape'])
  return [roster.Description(k, int(n), int(c), shape, str(code),
                             tuple(t for t in str(targets).split(',') if t))
          for k, (n, c, code, targets) in enumerate(zip(
              record['num_examples'], record['num_classes'], record['code'],
              record['targets']))]


# -- the data holder's side -----------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _holder(spec: str, overrides: str, client: int, data_path: str, state_path: str,
            mask_secret_path: str = ''):
  """One holder per SuperNode process (its data listed and its method compiled once)."""
  secret = holder_lib.read_mask_secret(mask_secret_path) if mask_secret_path else None
  return holder_lib.Holder(load_config(spec, overrides), client, data_path, state_path, secret)


def keep_compiled(folder: str) -> None:
  """XLA's compiled programs kept in `folder`, unless a cache is set already (the test session's,
  which this must not move): a SuperNode starts one ClientApp process per message, and each
  would otherwise compile the client program again. The programs are the same either way (a
  cache of what was compiled, not another computation)."""
  if jax.config.jax_compilation_cache_dir:
    return
  jax.config.update('jax_compilation_cache_dir', folder)
  jax.config.update('jax_persistent_cache_min_compile_time_secs', 0.0)


def holder_of(context: Context) -> holder_lib.Holder:
  node = context.node_config
  for key in ('client-index', 'data-path', 'state-path'):
    if key not in node:
      raise checks.UsageError(f'SuperNode node config has no {key!r}; expected client-index, '
                              'data-path and state-path (docs/federation.md).')
  keep_compiled(os.path.join(str(node['state-path']), 'compiled'))
  return _holder(str(context.run_config['config']), str(context.run_config.get('overrides', '')),
                 int(node['client-index']), str(node['data-path']), str(node['state-path']),
                 str(node.get('mask-secret-path', '')))


client_app = ClientApp()


@client_app.query('describe')
def describe(message: Message, context: Context) -> Message:
  description = holder_of(context).describe()
  return Message(RecordDict({'description': ConfigRecord(description.to_config())}),
                 reply_to=message)


@client_app.train()
def train(message: Message, context: Context) -> Message:
  holder = holder_of(context)
  content = message.content
  holder.join(roster_from_record(content.config_records['roster']))
  agreement = holder.agreement
  r = int(content.config_records['round']['round'])
  what = f'round {r} message to client {holder.client}'
  scalar = lambda name: (content.array_records[name][name].numpy()
                         if name in content.array_records else None)
  clip, share = scalar('clip'), scalar('share')   # adaptive clipping; secure aggregation
  secure = content.config_records.get('secure', {})
  result = holder.train(
      r, from_record(content.array_records['shared'], agreement.shared, what),
      from_record(content.array_records['per_client'], agreement.per_client, what),
      content.array_records['key']['key'].numpy(), clip, int(secure.get('position', 0)), share,
      int(secure.get('cohort', 0)))
  return Message(RecordDict({'update': array_record(result.update),
                             'metrics': array_record(result.metrics)}), reply_to=message)


# -- the server's side ----------------------------------------------------------------------------


# Replies Flower's SuperLink makes itself, not the holder's: the node stopped its heartbeats
# (flwr 1.42: none for 2 x 30 s), or the message or its reply expired. They count as no reply
# (`server.Server.train_round` decides whether the round goes on without it).
UNANSWERED = (ErrorCode.NODE_UNAVAILABLE, ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
              ErrorCode.MESSAGE_UNAVAILABLE)
POLL_SECONDS = 0.5   # between two pulls of the replies (flwr's own send_and_receive: 3 s)
SAY_EVERY_SECONDS = 30.0   # a line naming the nodes still awaited


# flwr 1.42 answers for a ClientApp that raised with the reason "<class 'T'>:<'message'>". A
# holder's refusals: its usage errors, and a record of its data that cannot be decoded (named
# when a round first reads it, as the simulator's stores do).
HOLDER_REFUSAL = re.compile(r"<class '[\w.]*\.(?:UsageError|BadRecordError)'>:<'(.*)'>",
                            re.DOTALL)
REFUSED = 'refused.txt'   # the server's one-line refusal, in its workdir (launch.py reads it)


def holder_error(what: str, node: int, reason: str) -> Exception:
  """A holder's refusal (`HOLDER_REFUSAL`) as its one line, after `what`; any other error of a
  holder as a RuntimeError naming its node."""
  refusal = HOLDER_REFUSAL.fullmatch(reason)
  if refusal:
    return checks.UsageError(f'{what}: {refusal.group(1)}')
  return RuntimeError(f'{what}: node {node}: {reason}')


def ask_all(grid: Grid, messages: list[Message], what: str, timeout: float | None = None,
            say_every: float = SAY_EVERY_SECONDS) -> list[Message | None]:
  """The replies to `messages`, in their order; None where a node did not reply within
  `timeout` seconds (None: wait for every one, saying every `say_every` seconds which nodes are
  awaited) or its SuperLink answered for it that it is gone (`UNANSWERED`, said in one line). A
  reply that is the holder's error is one line naming its node."""
  sent = list(messages)   # one message per node: a reply is found by the message it answers
  waiting = {i: m for i, m in zip(grid.push_messages(sent), sent) if i}
  replies, start = {}, time.time()
  said = start
  while waiting and (timeout is None or time.time() - start < timeout):
    for reply in grid.pull_messages(list(waiting)):
      asked = waiting.pop(reply.metadata.reply_to_message_id, None)
      if asked is None:
        continue
      node = asked.metadata.dst_node_id
      if reply.has_error() and reply.error.code in UNANSWERED:
        print(f'{what}: node {node} gave no reply: {reply.error.reason}', flush=True)
      elif reply.has_error():
        raise holder_error(what, node, reply.error.reason)
      else:
        replies[node] = reply
    if waiting:
      if time.time() - said >= say_every:
        said = time.time()
        awaited = sorted(m.metadata.dst_node_id for m in waiting.values())
        print(f'{what}: waiting for nodes {awaited} after {said - start:.0f} s ('
              + ('for every reply: round-timeout-s=0' if timeout is None else
                 f'until round-timeout-s={timeout:g}') + ')', flush=True)
      time.sleep(POLL_SECONDS)
  return [replies.get(m.metadata.dst_node_id) for m in sent]


def wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
  """The connected SuperNodes once `expected` have connected; one line if they do not in time."""
  end = time.time() + timeout
  while True:
    nodes = sorted(grid.get_node_ids())
    if len(nodes) >= expected or time.time() > end:
      break
    time.sleep(0.5)
  if len(nodes) != expected:
    raise checks.UsageError(f'{len(nodes)} SuperNodes connected after {timeout:.0f} s; expected '
                            f'federated.num_clients={expected}, one per data holder.')
  return nodes


def gather_roster(grid: Grid, config, timeout: float = 300.0
                  ) -> tuple[list[roster.Description], dict[int, int]]:
  """Every holder's description and the node each client index is on."""
  nodes = wait_for_nodes(grid, config.federated.num_clients, timeout)
  replies = ask_all(grid, [Message(RecordDict(), node, DESCRIBE) for node in nodes], 'describe')
  if None in replies:
    raise RuntimeError(f'describe: node {nodes[replies.index(None)]} did not reply.')
  descriptions = [roster.Description.from_config(r.content.config_records['description'])
                  for r in replies]
  descriptions = roster.check_roster(config, descriptions, roster.code_label())
  node_of = {roster.Description.from_config(r.content.config_records['description']).client: n
             for r, n in zip(replies, nodes)}
  return descriptions, node_of


def train_content(q: server_lib.Request, record: ConfigRecord) -> dict:
  """A `train` message's records: what `q` holds, the privacy modes' parts only when on."""
  content = {'round': ConfigRecord({'round': q.round, 'client': q.client}),
             'roster': record,
             'shared': array_record(q.shared),
             'per_client': array_record(q.per_client),
             'key': ArrayRecord({'key': Array(np.asarray(q.key))})}
  if q.clip is not None:
    content['clip'] = ArrayRecord({'clip': Array(np.asarray(q.clip))})
  if q.share is not None:
    content['secure'] = ConfigRecord({'position': q.position, 'cohort': q.cohort})
    content['share'] = ArrayRecord({'share': Array(np.asarray(q.share))})
  return content


def grid_exchange(grid: Grid, srv: server_lib.Server, node_of: dict[int, int], requests,
                  timeout: float | None = None):
  """A round's requests as Flower messages, the replies decoded on the method's templates; None
  for a holder that did not reply within `timeout` seconds (`server.Server.train_round` decides
  whether the round goes on without it)."""
  agreement, record = srv.agreement, roster_record(srv.descriptions)
  messages = [Message(RecordDict(train_content(q, record)), node_of[q.client], TRAIN,
                      group_id=str(q.round)) for q in requests]
  replies = ask_all(grid, messages, f'round {requests[0].round}' if requests else 'round',
                    timeout)
  return [None if r is None else ClientResult(
      update=from_record(r.content.array_records['update'], agreement.update,
                         f'client {q.client} update'),
      private={},
      metrics=from_record(r.content.array_records['metrics'], agreement.metrics,
                          f'client {q.client} metrics'))
          for q, r in zip(requests, replies)]


def serve(grid: Grid, config, hooks=(), workdir: str | None = None, *,
          round_timeout: float | None = None, min_replies: int = 0):
  """The federation's rounds on `grid`: the roster, then `server.serve` (run/loop.run_rounds
  over the server's `train_round`; with `workdir`, the run's checkpointing there and a resume
  from its newest checkpoint), with `hooks`. A round waits `round_timeout` seconds for the
  holders' replies (None: for every one) and goes on with those that replied if at least
  `min_replies` did (0: all of them must). Returns (the loop's `Trained`, the privacy ledger
  or None without DP: results.json's 'privacy' part)."""
  descriptions, node_of = gather_roster(grid, config)
  srv = server_lib.Server(config, descriptions, min_replies=min_replies)
  exchange = functools.partial(grid_exchange, grid, srv, node_of, timeout=round_timeout)
  trained = server_lib.serve(srv, exchange, workdir, tuple(hooks) + (say_epsilon(srv),))
  return trained, srv.privacy_ledger(trained.state)


server_app = ServerApp()


def say_round(end) -> None:
  """One line per round in the run's log (`flwr run --stream` shows it)."""
  values = ', '.join(f'{k}={float(v):.4f}' for k, v in sorted(end.metrics.items()))
  print(f'round {end.done}: {values}', flush=True)


def say_epsilon(srv: server_lib.Server) -> hooks_lib.Hook:
  """Under DP, ε after each round in the run's log, from the server's noise plan (the
  accountant's curve the simulator logs); nothing without DP."""
  def after_round(end):
    plan = srv.noise_plan
    if plan.dp is not None and plan.epsilons:
      print(f'dp: epsilon={plan.epsilons[end.done - 1]:.4f} at delta={plan.delta:g} after round '
            f'{end.done}', flush=True)
  return hooks_lib.Hook(after_round=after_round)


def refuse(workdir: str, line: str) -> None:
  """The server's refusal: its one line in the run's log and, with a workdir, in REFUSED there."""
  print(f'refused: {line}', flush=True)
  if workdir:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, REFUSED), 'w') as f:
      f.write(line + '\n')


@server_app.main()
def main(grid: Grid, context: Context) -> None:
  config = run_config_of(context)
  workdir = str(context.run_config.get('workdir', ''))
  if workdir:
    keep_compiled(os.path.join(workdir, 'compiled'))
  timeout = float(context.run_config.get('round-timeout-s', 0)) or None
  try:
    trained, ledger = serve(grid, config, (hooks_lib.Hook(after_round=say_round),),
                            os.path.join(workdir, 'run') if workdir else None,
                            round_timeout=timeout,
                            min_replies=int(context.run_config.get('min-replies', 0)))
  except checks.UsageError as error:   # one line, not flwr's traceback of the ServerApp
    refuse(workdir, str(error))
    return
  if ledger is not None:
    print(f"dp: epsilon={ledger['epsilon']:.4f} at delta={ledger['delta']:g} after "
          f"{ledger['rounds']} rounds (RDP; PLD: {ledger['epsilon_pld']})", flush=True)
  if workdir:   # the final server state as named arrays, beside the run's checkpoints
    wire.save(os.path.join(workdir, f'server_{config.num_rounds:06d}.npz'),
              jax.tree.map(np.asarray, trained.state.server))
    if ledger is not None:
      with open(os.path.join(workdir, 'privacy.json'), 'w') as f:
        json.dump(ledger, f, indent=1, sort_keys=True, default=float)
