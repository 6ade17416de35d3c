"""A Flower `Grid` in one process, for tests: every message the ServerApp sends is serialized to
Flower's protobuf bytes (what gRPC carries between SuperLink and SuperNode), parsed back, handled
by the ClientApp with its node's `Context`, and its reply goes back the same way. It stands in
for the SuperLink and the SuperNodes; the processes and the network are the launcher's test."""

import uuid

from flwr.app import Context, Error, Message, RecordDict
from flwr.common import serde
from flwr.common.constant import ErrorCode
from flwr.proto.message_pb2 import Message as ProtoMessage
from flwr.server.superlink.linkstate.utils import NODE_UNAVAILABLE_ERROR_REASON
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


def over_the_wire(message: Message) -> tuple[Message, int]:
  """`message` after protobuf serialization and parsing, and the bytes it took."""
  data = serde.message_to_proto(message).SerializeToString()
  proto = ProtoMessage()
  proto.ParseFromString(data)
  return serde.message_from_proto(proto), len(data)


class LoopbackGrid(Grid):
  """Nodes `node_configs` (node id -> node config), each running `client_app`."""

  def __init__(self, client_app, node_configs: dict[int, dict], run_config: dict):
    self.client_app, self.run_config = client_app, run_config
    # What the ServerApp's process is told by its SuperLink: a message takes its sender from it.
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    self.contexts = {node: Context(run_id=1, node_id=node, node_config=config,
                                   state=RecordDict(), run_config=run_config)
                     for node, config in node_configs.items()}
    self.replies, self.bytes_sent, self.bytes_received = {}, 0, 0
    self.received = []   # every reply as the server got it, in order
    self.silent = set()   # (group id, node id) pairs never answered
    # (group id, node id) pairs its SuperLink answers for: the node stopped its heartbeats
    # (flwr's NODE_UNAVAILABLE error reply, from the SuperLink's node id 0)
    self.gone = set()

  def set_run(self, run) -> None:
    del run

  @property
  def run(self):
    return None

  def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
    return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

  def get_node_ids(self):
    return list(self.contexts)

  def push_messages(self, messages):
    ids = []
    for message in messages:
      message.metadata.__dict__['_message_id'] = str(uuid.uuid4())
      if (message.metadata.group_id, message.metadata.dst_node_id) in self.silent:
        ids.append(message.metadata.message_id)   # pushed to a SuperNode that went away:
        continue                                  # never answered
      if (message.metadata.group_id, message.metadata.dst_node_id) in self.gone:
        reply = Message(Error(ErrorCode.NODE_UNAVAILABLE, NODE_UNAVAILABLE_ERROR_REASON),
                        reply_to=message)
        reply.metadata.__dict__['_src_node_id'] = 0
        self.replies[message.metadata.message_id] = reply
        ids.append(message.metadata.message_id)
        continue
      received, size = over_the_wire(message)
      self.bytes_sent += size
      reply = self.client_app(received, self.contexts[message.metadata.dst_node_id])
      reply.metadata.__dict__['_src_node_id'] = message.metadata.dst_node_id
      reply, size = over_the_wire(reply)
      self.bytes_received += size
      self.received.append(reply)
      self.replies[message.metadata.message_id] = reply
      ids.append(message.metadata.message_id)
    return ids

  def pull_messages(self, message_ids):
    return [self.replies.pop(i) for i in message_ids if i in self.replies]

  def send_and_receive(self, messages, *, timeout=None):
    messages = list(messages)
    if timeout is None and any((m.metadata.group_id, m.metadata.dst_node_id) in self.silent
                               for m in messages):
      raise RuntimeError('a silent node with no timeout: Flower would wait for ever.')
    return self.pull_messages(self.push_messages(messages))
