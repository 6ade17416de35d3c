"""FedPE over Flower's own messages equals the simulator bit for bit: the ServerApp's rounds
(`apps.serve`, the run loop of run/loop.py) and three holders' ClientApp, each message serialized
to Flower's protobuf bytes and parsed back (tests/federation/loopback.py), each holder reading its
own exported folder alone; the server's final state, each holder's private W_k and the round
metrics against the simulator of the same folders and seed. A message of the wrong shape is
refused in one line naming the array."""

import os
import re

import jax
import numpy as np
import pytest

pytest.importorskip('flwr')

from fedjax_face.core import checks, communication   # pylint: disable=g-import-not-at-top
from fedjax_face.federation import apps, export, holder, roster, wire
from fedjax_face.run import hooks
from tests.federation import loopback
from tests.federation import test_equal_to_simulator as direct

CONFIG = 'configs/fedgc/fedpe.py:runlocal'


def overrides(root: str) -> str:
  return (f'data.source=client_folders data.client_folders.root={root} '
          f'federated.num_clients={direct.NUM_HOLDERS} num_rounds={direct.ROUNDS} '
          'engine.backend=loop engine.loop_threads=1')


def grid_of(root: str, state_root: str) -> loopback.LoopbackGrid:
  """Three SuperNodes (node ids 101..103 in reverse client order: the server maps each client
  index to its node from the holders' descriptions, not from the node ids)."""
  nodes = {103 - k: {'client-index': k, 'data-path': export.holder_folder(root, k),
                     'state-path': os.path.join(state_root, str(k))}
           for k in range(direct.NUM_HOLDERS)}
  return loopback.LoopbackGrid(apps.client_app, nodes,
                               {'config': os.path.join(direct.config_files.ROOT, CONFIG.split(':')[0])
                                + ':runlocal', 'overrides': overrides(root)})


def served_as_simulated(grid):
  """Serves `grid`'s run and simulates the same config file with the same overrides; asserts
  they end at the same server state, metrics and holders' private files. Returns (the served
  run's privacy ledger, the simulated run, its metrics)."""
  config = apps.load_config(grid.run_config['config'], grid.run_config['overrides'])
  # The simulator's evaluators need pair sets.
  sim_config = config.copy_and_resolve_references()
  del sim_config.evals.verification, sim_config.evals.identification
  simulated, sim_metrics = direct.simulate(sim_config)
  metrics = []
  hook = hooks.Hook(after_round=lambda end: metrics.append(
      jax.tree.map(np.asarray, end.metrics)))
  trained, ledger = apps.serve(grid, config, (hook,))
  direct.assert_trees_equal(trained.state.server, simulated.server)
  assert trained.state.clients == {}   # what a holder keeps stays with it
  for k in range(direct.NUM_HOLDERS):
    h = apps.holder_of(grid.contexts[103 - k])
    kept = wire.load(holder.private_path(h.state_dir, direct.ROUNDS), h.agreement.private)
    direct.assert_trees_equal(kept, jax.tree.map(lambda x, k=k: x[k], simulated.clients))
  direct.assert_trees_equal(metrics, sim_metrics)
  return ledger, simulated, sim_metrics


def test_fedpe_over_flower_messages_ends_at_the_simulators_state(holders_root, tmp_path):
  grid = grid_of(holders_root, str(tmp_path / 'state'))
  ledger, simulated, sim_metrics = served_as_simulated(grid)
  assert ledger is None   # no DP: no privacy part
  # What crossed to the server: per holder and round the model's arrays, every byte of them (the
  # ledger's figure), and the training metrics; no W_k (FedPE's "what crosses" test).
  model = wire.to_arrays({'model': simulated.server['model']})
  agreement = apps.holder_of(grid.contexts[103]).agreement
  ledger_up = sum(communication.wire_bytes(agreement.shared, agreement.per_client,
                                           agreement.update)['up'].values())
  # The descriptions, then one reply per holder and round.
  assert len(grid.received) == direct.NUM_HOLDERS * (1 + direct.ROUNDS)
  for reply in grid.received[direct.NUM_HOLDERS:]:
    update = reply.content.array_records['update']
    assert sorted(update) == sorted(model)
    assert sum(a.numpy().nbytes for a in update.values()) == ledger_up == sum(
        a.nbytes for a in model.values())   # the ledger's figure (core/communication.py)
    assert sorted(reply.content.array_records['metrics']) == sorted(
        wire.to_arrays(sim_metrics[0]))


def test_a_message_of_the_wrong_shape_is_refused_naming_the_array(holders_root, tmp_path):
  config = apps.load_config(os.path.join(direct.config_files.ROOT, 'configs/fedgc/fedpe.py')
                            + ':runlocal', overrides(holders_root))
  descriptions = [holder.Holder(config, k, export.holder_folder(holders_root, k),
                                str(tmp_path / str(k))).describe()
                  for k in range(direct.NUM_HOLDERS)]
  template = {'model': {'params': {'w': jax.ShapeDtypeStruct((2, 3), np.float32)}}}
  record = apps.array_record({'model': {'params': {'w': np.zeros((3, 2), np.float32)}}})
  with pytest.raises(checks.UsageError, match=r"^round 0 message to client 1: \['model'\]\['params'\]"
                     r"\['w'\] is float32\[3, 2\]; expected float32\[2, 3\]\.$"):
    apps.from_record(record, template, 'round 0 message to client 1')
  assert roster.check_roster(config, descriptions) == descriptions


@pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                    reason='a SuperNode gone mid-run: FEDJAX_FACE_FEDERATION=all')
def test_a_holder_gone_mid_run_stops_the_round_or_it_goes_on_with_min_replies(
    holders_root, tmp_path, capsys):
  grid = grid_of(holders_root, str(tmp_path / 'stop'))
  config = apps.load_config(grid.run_config['config'], grid.run_config['overrides'])
  grid.silent.add(('1', 103 - 2))   # client 2's node never answers round 1
  with pytest.raises(RuntimeError, match=r'^round 1: clients \[2\] did not reply; 2 of 3 did, '
                     r'expected 3 \(min-replies\) to go on\.$'):
    apps.serve(grid, config, round_timeout=1.0)
  grid = grid_of(holders_root, str(tmp_path / 'goes_on'))
  grid.silent.add(('1', 103 - 2))
  trained, _ = apps.serve(grid, config, round_timeout=1.0, min_replies=2)
  assert 'round 1: clients [2] did not reply; going on with the 2 others (min-replies=2).' in (
      capsys.readouterr().out)
  # Waiting for every reply (no round timeout), a node whose heartbeats stopped is answered for
  # by its SuperLink (NODE_UNAVAILABLE): no reply, said in one line; the round goes on the same.
  gone = grid_of(holders_root, str(tmp_path / 'gone'))
  gone.gone.add(('1', 103 - 2))
  after_gone, _ = apps.serve(gone, config, min_replies=2)
  out = capsys.readouterr().out
  assert 'round 1: node 101 gave no reply: Error: Node Unavailable' in out
  assert 'round 1: clients [2] did not reply; going on with the 2 others (min-replies=2).' in out
  direct.assert_trees_equal(after_gone.state.server, trained.state.server)
  # Round 1's model is the mean of clients 0 and 1's updates weighted by their n_k alone.
  n = apps.holder_of(grid.contexts[103]).agreement.fed.num_examples[:2].astype(np.float64)
  updates = [{name: a.numpy() for name, a in r.content.array_records['update'].items()}
             for r in grid.received[-2:]]
  expected = {name: (n[0] * updates[0][name] + n[1] * updates[1][name]) / (n[0] + n[1])
              for name in updates[0]}
  got = wire.to_arrays({'model': trained.state.server['model']})
  assert sorted(got) == sorted(expected)
  for name in got:
    np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-7)


def test_a_round_waiting_for_a_node_says_which_and_gives_up_at_its_timeout(holders_root, tmp_path,
                                                                          capsys):
  grid = grid_of(holders_root, str(tmp_path / 'state'))
  grid.silent.add(('', 102))   # client 1's node never answers
  asked = [apps.Message(apps.RecordDict(), node, apps.DESCRIBE) for node in (101, 102, 103)]
  replies = apps.ask_all(grid, asked, 'describe', timeout=1.5, say_every=0.1)
  assert [r is None for r in replies] == [False, True, False]
  assert [r.content.config_records['description']['client'] for r in replies if r] == [2, 0]
  lines = capsys.readouterr().out.splitlines()
  assert lines and all(re.fullmatch(r'describe: waiting for nodes \[102\] after \d+ s \(until '
                                    r'round-timeout-s=1\.5\)', line) for line in lines)


@pytest.mark.parametrize('kind', ['fedjax_face.core.checks.UsageError',
                                  'fedjax_face.data.stores.BadRecordError'])
def test_a_holders_refusal_is_its_own_line_and_another_error_names_its_node(kind):
  # flwr 1.42's reason for a ClientApp that raised: "<class 'T'>:<'message'>".
  line = "data holder of client 1: /d/id_0/0.png: cannot decode image; expected a JPEG or PNG"
  error = apps.holder_error('round 0', 7, f"<class '{kind}'>:<'{line}'>")
  assert isinstance(error, checks.UsageError) and str(error) == f'round 0: {line}'
  other = apps.holder_error('round 0', 7, "<class 'KeyError'>:<'x'>")
  assert type(other) is RuntimeError
  assert str(other) == "round 0: node 7: <class 'KeyError'>:<'x'>"


@pytest.mark.full   # FedPE's float32 case above checks the messages; this one the kept scale
def test_a_float16_run_over_flower_messages_keeps_each_holders_loss_scale(holders_root,
                                                                          tmp_path):
  # Under float16 each holder keeps its loss scale in its private file between rounds
  # (core/loss_scale.py), never sent: the run ends at the simulator's state, scales included.
  float32 = grid_of(holders_root, str(tmp_path / 'state'))
  run_config = dict(float32.run_config,
                    overrides=float32.run_config['overrides'] + ' model.dtype=float16')
  grid = loopback.LoopbackGrid(apps.client_app, {node: dict(context.node_config) for node, context
                                                 in float32.contexts.items()}, run_config)
  assert apps.load_config(grid.run_config['config'],
                          grid.run_config['overrides']).model.dtype == 'float16'
  _, simulated, sim_metrics = served_as_simulated(grid)
  assert set(jax.tree.map(lambda x: x[0], simulated.clients)) == {'W', 'loss_scale'}
  assert {'loss_scale/skipped_steps', 'loss_scale/scale'} <= set(sim_metrics[0])
  for reply in grid.received[direct.NUM_HOLDERS:]:   # no scale in what a holder sends
    assert not any('loss_scale' in name for name in reply.content.array_records['update'])
