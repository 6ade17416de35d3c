r"""A data holder's ClientApp process that stays up for the whole run (`launch --resident`).

Under flwr 1.42's default isolation (`subprocess`) a SuperNode's SuperExec starts one
`flwr-clientapp` per message, and that process exits after its one reply: every round pays for a
Python start, the imports of flwr, JAX and this package, the holder's folder listed again and its
client program loaded again. Under `--isolation process` the SuperNode starts no SuperExec and
waits for one to connect to its Runtime API. This is that process, for one SuperNode:

    python -m fedjax_face.federation.resident --runtime-api-address=127.0.0.1:<its --port>

It asks the Runtime API for the node's ClientApp tasks and runs each here, by flwr's own steps
(flwr.supernode.runtime.run_clientapp's: the task's input pulled, the app loaded from its
FAB, `push_message`, `push_task_output`), so the message, the context and the reply are the ones
`flwr-clientapp` would exchange. What it keeps between messages is what `apps._holder` caches: the
holder's listed data and its compiled client program. Its private state still goes through its
folder every round (holder.py reads the state it enters a round with from disk and writes the
next before replying), so a resident holder and a per-message one write the same files.

It relies on flwr 1.42.0's Runtime API and run_clientapp's module functions (the pinned version,
requirements.txt), not on a published interface. A task that raises replies with Flower's error
message, as `flwr-clientapp` does, and the process goes on to the next task.
"""

import argparse
import time
from logging import ERROR

from flwr.app import Message
from flwr.app.error import Error
from flwr.cli.install import install_from_fab
from flwr.clientapp.utils import get_load_client_app_fn
from flwr.common import serde
from flwr.common.constant import ErrorCode, SubStatus
from flwr.proto.node_pb2 import Node   # pylint: disable=no-name-in-module
from flwr.proto.runtime_pb2 import (   # pylint: disable=no-name-in-module
    AcquireTaskRequest, PullAppMessagesRequest, PullTaskInputRequest)
from flwr.supercore import log
from flwr.supercore.constant import TaskType
from flwr.supercore.heartbeat import HeartbeatSender, make_task_heartbeat_fn_http
from flwr.supercore.inflatable.inflatable_protobuf_utils import (
    make_confirm_message_received_fn_protobuf, make_pull_object_fn_protobuf)
from flwr.supercore.inflatable.inflatable_utils import pull_and_inflate_object_from_tree
from flwr.supercore.interceptors import (RuntimeTokenHttpInterceptor,
                                         RuntimeVersionHttpInterceptor)
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.task_identity import TaskIdentity
from flwr.supernode.runtime import run_clientapp

# How often an idle process asks for a task (flwr's own SuperExec asks every 1 s), and the first
# wait before it asks again for a message's object its node has not pulled yet.
POLL_SECONDS = 0.05
PULL_CAP_SECONDS = 1.0   # the longest wait between two tries of one object (flwr's: 10 s)


def runtime_client(address: str, *interceptors) -> RuntimeHttpClient:
  """An HTTP client of the SuperNode's Runtime API on loopback (the launcher's, no TLS)."""
  return RuntimeHttpClient.from_server_address(
      server_address=address, insecure=True, root_certificates=None,
      interceptors=[RuntimeVersionHttpInterceptor(component_name='flwr-clientapp'),
                    *interceptors],
      retry_invoker=make_simple_http_retry_invoker())


def pull_task_input(client: RuntimeHttpClient):
  """(message, context, run, FAB) of the acquired task: `run_clientapp.pull_task_input`'s calls,
  with a short wait between the tries of an object not there yet. This process takes a task as
  soon as its SuperNode opens it, and the node opens it before it has pulled the message's
  objects from the SuperLink; flwr's own first wait (1 s, doubling) is sized for a process that
  has only just started. Here the wait starts at POLL_SECONDS and doubles up to
  PULL_CAP_SECONDS, so that a node still fetching many objects (one puller thread each) is not
  asked twenty times a second for each. The tries are not counted (flwr's 500 lasted ~25 s at a
  0.05 s wait, which a loaded node took: at load 18 every FedPAD holder's round 1 failed); flwr's
  time limit alone bounds the wait."""
  res = client.PullTaskInput(PullTaskInputRequest())
  TaskIdentity.task_id = res.task_id
  TaskIdentity.run_id = res.run.run_id
  TaskIdentity.node_id = res.context.node_id
  context, run = serde.context_from_proto(res.context), serde.run_from_proto(res.run)
  fab = serde.fab_from_proto(res.fab)
  pulled = client.PullMessages(PullAppMessagesRequest())
  if not pulled.messages_list:
    raise RuntimeError('No messages received from Runtime API')
  node, tree = Node(node_id=context.node_id), pulled.message_object_trees[0]
  message = pull_and_inflate_object_from_tree(
      tree, make_pull_object_fn_protobuf(client.PullObject, node, context.run_id),
      make_confirm_message_received_fn_protobuf(client.ConfirmMessageReceived, node,
                                                context.run_id),
      return_type=Message, initial_backoff=POLL_SECONDS, backoff_cap=PULL_CAP_SECONDS,
      max_tries_per_object=None)   # bounded by flwr's own PULL_MAX_TIME (2 h), as flwr's are
  message.metadata.__dict__['_message_id'] = tree.object_id   # as flwr sets it
  return message, context, run, fab


def run_task(address: str, token: str) -> str:
  """One ClientApp task, as `flwr-clientapp --token <token>` runs it, in this process; returns
  its message type and how it ended ('train completed')."""
  client = runtime_client(address, RuntimeTokenHttpInterceptor(token))
  heartbeat = HeartbeatSender(make_task_heartbeat_fn_http(client))
  heartbeat.start()
  message = context = reply = None
  status, details = SubStatus.FAILED, 'ClientApp task failed'
  try:
    message, context, run, fab = pull_task_input(client)
    install_from_fab(fab.content, skip_prompt=True)
    load = get_load_client_app_fn(default_app_ref='', app_path=None, multi_app=True)
    client_app = load(run.fab_id, run.fab_version, fab.hash_str)   # imported once, then cached
    reply = client_app(message=message, context=context)
    status, details = SubStatus.COMPLETED, ''
  except Exception as error:   # pylint: disable=broad-exception-caught
    log(ERROR, 'ClientApp raised an exception', exc_info=error)   # the reply says it, as flwr's
    details = f"{type(error)}:<'{error}'>"
    if message is not None:
      reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=details),
                      reply_to=message)
  finally:
    try:
      if reply is not None and context is not None:
        run_clientapp.push_message(client, reply, context)
    finally:
      heartbeat.stop()   # before the task ends: a heartbeat after it would be refused
      run_clientapp.push_task_output(client, context, status, details)
      client.close()
  return f'{message.metadata.message_type if message else "no message"} {status}'


def serve(address: str, poll: float = POLL_SECONDS) -> None:
  """Runs the SuperNode's ClientApp tasks, one at a time, until this process is stopped; one
  line per task in its log (the launcher's `clientapp_<k>.log`)."""
  client = runtime_client(address)
  request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
  served = 0
  while True:
    acquired = client.AcquireTask(request)
    if acquired.HasField('task') and acquired.token:
      start = time.perf_counter()
      ended = run_task(address, acquired.token)
      served += 1
      print(f'task {served}: {ended} in {time.perf_counter() - start:.3f} s', flush=True)
    else:
      time.sleep(poll)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--runtime-api-address', required=True,
                      help="The SuperNode's Runtime API, host:port (its --host and --port).")
  serve(parser.parse_args().runtime_api_address)


if __name__ == '__main__':
  main()
