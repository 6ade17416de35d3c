"""(o) A federation over Flower (federation/, docs/federation.md) against the simulator: bytes and
seconds per round.

The config's clients are exported into holder folders (federation/export.py), then three runs of
the same rounds over them:

  simulator      the run's own round (run/simulation.py, loop backend) over the same folders
                 (`data.source='client_folders'`): seconds per compiled round.
  in process     the ServerApp's loop (`apps.serve`) and each holder's ClientApp in one
                 process (a child of the bench's), every message turned into Flower's protobuf bytes and parsed back (a
                 `Grid` that times it): bytes down and up per round beside the ledger's figure
                 (`core/communication.wire_bytes`); per round, the seconds of the protobuf bytes
                 (both ways), of the holders' ClientApp calls (their arrays read and written,
                 `client_update`, the private state's file) and of the server (the rest: the
                 broadcast, its arrays, the server step).
  real processes `launch.launch` with resident holders: a SuperLink and one SuperNode per holder
                 on loopback, Flower's HTTP between them: seconds per round from the ServerApp's
                 round lines. What the in-process round lacks is transport: HTTP, Flower's
                 object stores and its polling (a SuperNode asks for messages every 3 s, the
                 ServerApp for replies every 3 s in flwr 1.42), so `transport_s` is that
                 difference.

Rounds after the first (which compiles) are the steady state: the median over them. It starts
real processes and needs flwr (`pip install -e '.[flower]'`), so it runs only when
`bench.sections` names it, and is skipped, with the reason, without flwr.
"""

import importlib.machinery
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from fedjax_face import algorithms
from fedjax_face.core import communication
from fedjax_face.data import participation
from fedjax_face.run import hooks as hooks_lib, loop, setup as setup_lib, simulation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))


def run_overrides(section, root: str | None = None) -> str:
  """The overrides every run of the section reads ('a.b=v ...'); over `root` as the simulator's
  client folders."""
  text = (f'federated.num_clients={section.num_clients} num_rounds={section.rounds} '
          'engine.backend=loop engine.loop_threads=1')
  return text + (f' data.source=client_folders data.client_folders.root={root}' if root else '')


def steady(seconds: list[float]) -> float:
  """The steady-state figure: the median after the first round (which compiles)."""
  return float(statistics.median(seconds[1:]))


def round_ends_to_seconds(ends: list[float], start: float) -> list[float]:
  return [float(x) for x in np.diff([start] + list(ends))]


def simulator_seconds(config) -> list[float]:
  """Each round's seconds in the simulator (the driver's setup and round, no hooks)."""
  method = algorithms.get(config.algorithm)
  setup_lib.validate(config)
  setup = setup_lib.set_up(config, method, None)
  state = setup_lib.init_state(config, setup.algorithm, None)
  cohort = participation.Cohorts(config.federated, setup.fed.num_examples, config.seed).size
  eng, _ = setup_lib.plan_engine(config, setup.algorithm, state, setup.fed, cohort,
                                 setup.backend, None, setup.loop_threads)
  sim = simulation.simulation(config, eng, setup.fed, 0)
  ends = []
  def train_round(state, r):
    state, metrics = simulation.train_round(sim, state, r)
    jax.block_until_ready((state, metrics))
    ends.append(time.perf_counter())
    return state, metrics
  start = time.perf_counter()
  try:
    loop.run_rounds(train_round, state, 0, config.num_rounds, ())
  finally:
    sim.round_data.close()
  return round_ends_to_seconds(ends, start)


def timed_grid(client_app, node_configs: dict, run_config: dict):
  """A Flower `Grid` in this process whose nodes run `client_app`; every message and reply is
  serialized to protobuf bytes and parsed back, and the grid counts the bytes and the seconds."""
  from flwr.app import Context, Message, RecordDict   # pylint: disable=import-outside-toplevel
  from flwr.common import serde   # pylint: disable=import-outside-toplevel
  # pylint: disable-next=import-outside-toplevel,no-name-in-module
  from flwr.proto.message_pb2 import Message as ProtoMessage
  from flwr.serverapp import Grid   # pylint: disable=import-outside-toplevel
  from flwr.supercore.task_identity import TaskIdentity   # pylint: disable=import-outside-toplevel

  class TimedGrid(Grid):
    """The counters: `log`, one (down bytes, up bytes, protobuf s, ClientApp s) per message."""

    def __init__(self):
      TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
      self.contexts = {node: Context(run_id=1, node_id=node, node_config=config,
                                     state=RecordDict(), run_config=run_config)
                       for node, config in node_configs.items()}
      self.log, self.replies, self.next_id = [], {}, 0

    def set_run(self, run):
      del run

    @property
    def run(self):
      return None

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):
      return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self):
      return list(self.contexts)

    def over_the_wire(self, message):
      data = serde.message_to_proto(message).SerializeToString()
      proto = ProtoMessage()
      proto.ParseFromString(data)
      return serde.message_from_proto(proto), len(data)

    def push_messages(self, messages):
      ids = []
      for message in messages:
        self.next_id += 1
        message.metadata.__dict__['_message_id'] = str(self.next_id)
        t0 = time.perf_counter()
        received, down = self.over_the_wire(message)
        t1 = time.perf_counter()
        reply = client_app(received, self.contexts[message.metadata.dst_node_id])
        reply.metadata.__dict__['_src_node_id'] = message.metadata.dst_node_id
        t2 = time.perf_counter()
        reply, up = self.over_the_wire(reply)
        t3 = time.perf_counter()
        self.log.append((message.metadata.message_type, down, up, (t1 - t0) + (t3 - t2), t2 - t1))
        self.replies[message.metadata.message_id] = reply
        ids.append(message.metadata.message_id)
      return ids

    def pull_messages(self, message_ids):
      return [self.replies.pop(i) for i in message_ids if i in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
      del timeout
      return self.pull_messages(self.push_messages(list(messages)))

  return TimedGrid()


def in_process(spec: str, overrides: str, folders: list[str], state_root: str) -> dict:
  """The ServerApp's loop and the holders' ClientApps over the timed grid (module docstring)."""
  from fedjax_face.federation import apps   # pylint: disable=import-outside-toplevel
  nodes = {100 + k: {'client-index': k, 'data-path': folder,
                     'state-path': os.path.join(state_root, str(k))}
           for k, folder in enumerate(folders)}
  grid = timed_grid(apps.client_app, nodes, {'config': spec, 'overrides': overrides})
  config = apps.load_config(spec, overrides)
  ends, marks = [], []
  def after_round(end):
    del end
    ends.append(time.perf_counter())
    marks.append(len(grid.log))
  cache = (jax.config.jax_compilation_cache_dir,
           jax.config.jax_persistent_cache_min_compile_time_secs)
  start = time.perf_counter()
  try:
    apps.serve(grid, config, (hooks_lib.Hook(after_round=after_round),))
  finally:   # a holder keeps its compiled programs in its (temporary) folder when none is set
    jax.config.update('jax_compilation_cache_dir', cache[0])
    jax.config.update('jax_persistent_cache_min_compile_time_secs', cache[1])
  rounds, first = [], len(folders)   # the describe messages come first
  for r, (mark, seconds) in enumerate(zip(marks, round_ends_to_seconds(ends, start))):
    own = [m for m in grid.log[(marks[r - 1] if r else first):mark] if m[0] == 'train']
    rounds.append({'seconds': seconds, 'bytes_down': sum(m[1] for m in own),
                   'bytes_up': sum(m[2] for m in own), 'protobuf_s': sum(m[3] for m in own),
                   'holders_s': sum(m[4] for m in own), 'messages': len(own)})
  agreement = apps.holder_of(grid.contexts[100]).agreement
  ledger = communication.wire_bytes(agreement.shared, agreement.per_client, agreement.update)
  return {'rounds': rounds, 'ledger_per_holder': {side: int(sum(ledger[side].values()))
                                                  for side in ('down', 'up')}}


def in_child_process(spec: str, overrides: str, folders: list[str], state_root: str) -> dict:
  """`in_process` in a Python of its own: the ClientApp reads the config file through
  `fedjax_face.main`, whose flags would clash with the bench command's own `--config`."""
  done = subprocess.run(
      [sys.executable, '-m', 'fedjax_face.tools.bench.federation', spec, overrides,
       json.dumps(folders), state_root], capture_output=True, text=True, check=False)
  if done.returncode:
    raise RuntimeError(f'the in-process federation exited with status {done.returncode}: '
                       f'{done.stderr.strip().splitlines()[-1:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def read_config(spec: str, overrides: str):
  """The config file `spec` names with `overrides`, as every party of the federation reads it
  (`apps.load_config`'s overrides), without importing `fedjax_face.main` (see above)."""
  from fedjax_face.federation import apps   # pylint: disable=import-outside-toplevel
  path, _, arg = spec.partition(':')
  loader = importlib.machinery.SourceFileLoader('fedjax_face_bench_federation_config', path)
  module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
  loader.exec_module(module)
  config = module.get_config(arg or None)
  for item in overrides.split():
    field, _, text = item.partition('=')
    *parents, key = field.split('.')
    section = config
    for part in parents:
      section = section[part]
    section[key] = apps.parse_value(field, section[key], text)
  return config


def real_processes(spec: str, overrides: str, holders: str, workdir: str) -> dict:
  """`launch.launch` with resident holders; each round's seconds from the ServerApp's lines."""
  from fedjax_face.federation import launch   # pylint: disable=import-outside-toplevel
  start = time.perf_counter()
  launch.launch(spec, overrides, holders, workdir, resident=True, timeout=1800)
  ends = launch.round_seconds(workdir)   # after `flwr run` started: round 1's holds the start
  return {'total_s': time.perf_counter() - start,
          'round_s': round_ends_to_seconds([ends[r] for r in sorted(ends)], 0.0)}


def bench_federation(config, log=print) -> dict:
  """Section (o): the figures of the module docstring, or why it was skipped."""
  try:
    import flwr   # pylint: disable=import-outside-toplevel,unused-import
  except ImportError:
    return {'status': 'skipped',
            'reason': "flwr is not installed; expected pip install -e '.[flower]'"}
  from fedjax_face.federation import export   # pylint: disable=import-outside-toplevel
  f = config.bench.federation
  path, _, arg = f.config.partition(':')
  spec = os.path.join(REPO, path) + (f':{arg}' if arg else '')
  with tempfile.TemporaryDirectory(prefix='bench_federation_') as tmp:
    holders = os.path.join(tmp, 'holders')
    folders = export.export(read_config(spec, run_overrides(f)), holders)
    sim_config = read_config(spec, run_overrides(f, holders))
    for name in list(sim_config.evals.keys()):   # rounds only: the folders hold no pair sets
      del sim_config.evals[name]
    sim = simulator_seconds(sim_config)
    log(f'(o) simulator: {steady(sim):.4f} s per round')
    inproc = in_child_process(spec, run_overrides(f), folders, os.path.join(tmp, 'in_process'))
    log(f"(o) in process: {steady([r['seconds'] for r in inproc['rounds']]):.4f} s per round")
    real = real_processes(spec, run_overrides(f), holders, os.path.join(tmp, 'real'))
    log(f"(o) real processes: {steady(real['round_s']):.3f} s per round")
  last = inproc['rounds'][-1]
  in_round = steady([r['seconds'] for r in inproc['rounds']])
  protobuf = steady([r['protobuf_s'] for r in inproc['rounds']])
  holders_s = steady([r['holders_s'] for r in inproc['rounds']])
  return {'status': 'measured', 'config': f.config, 'holders': f.num_clients,
          'rounds': f.rounds,
          'bytes': {'down': last['bytes_down'], 'up': last['bytes_up'],
                    'ledger_down': inproc['ledger_per_holder']['down'] * last['messages'],
                    'ledger_up': inproc['ledger_per_holder']['up'] * last['messages']},
          'seconds': {'simulator': steady(sim), 'in_process': in_round,
                      'real_processes': steady(real['round_s']), 'protobuf': protobuf,
                      'holders': holders_s, 'server': in_round - protobuf - holders_s,
                      'transport': steady(real['round_s']) - in_round},
          'simulator_round_s': sim, 'in_process_rounds': inproc['rounds'], 'real': real}


def markdown_table(result: dict) -> str:
  """The section's two tables: bytes per round, seconds per round and where they go."""
  if result['status'] != 'measured':
    return f"skipped: {result['reason']}"
  b, s = result['bytes'], result['seconds']
  return '\n'.join([
      f"{result['config']}, {result['holders']} holders, {result['rounds']} rounds; steady "
      'state = median of the rounds after the first',
      '| bytes per round | serialized messages | ledger (arrays) |', '| --- | ---: | ---: |',
      f"| down | {b['down']:,} | {b['ledger_down']:,} |",
      f"| up | {b['up']:,} | {b['ledger_up']:,} |", '',
      '| seconds per round | s |', '| --- | ---: |',
      f"| simulator (loop backend) | {s['simulator']:.4f} |",
      f"| in process, Flower messages | {s['in_process']:.4f} |",
      f"| - protobuf bytes, both ways | {s['protobuf']:.4f} |",
      f"| - holders' ClientApps (arrays, training, private state file) | {s['holders']:.4f} |",
      f"| - server (broadcast, arrays, server step) | {s['server']:.4f} |",
      f"| real processes over loopback | {s['real_processes']:.3f} |",
      f"| - transport (HTTP, Flower's stores and polling) | {s['transport']:.3f} |"])


if __name__ == '__main__':   # in_child_process's child: spec, overrides, folders (JSON), state root
  print(json.dumps(in_process(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4])))
