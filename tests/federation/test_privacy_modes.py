"""The privacy modes over the bridge, against the simulator of the same folders and seed.

- `dp.enabled`: each holder clips its update (the engine's client program with the run's clip),
  the server draws the noise in the engine's own server step: the final server state, each
  holder's private state and the round metrics are bit for bit the simulator's, with a fixed clip
  and with adaptive clipping (C_t crosses in each message, each holder's bit in its update). The
  server's ε is the simulator's ledger of the same run.
- `secure_aggregation.enabled`: each holder masks its averaged keys with pair secrets XORed with
  a secret the holders share and the server does not: its ring vectors are other than the
  simulator's (the server cannot rebuild the masks from the round key), yet the decoded sum, and
  so the final state, are the simulator's bit for bit.
- Under either, a holder that does not reply stops the run in one line, and `min-replies` is
  refused; combinations not carried are refused in one line.

The bit-for-bit runs go through Flower's messages (tests/federation/loopback.py): FedPE, 3
holders, 2 rounds. The default suite runs the refusals (no training); the runs are behind
FEDJAX_FACE_FEDERATION=all.
"""

import os

import jax
import numpy as np
import pytest

pytest.importorskip('flwr')

from fedjax_face.core import checks, privacy   # pylint: disable=g-import-not-at-top
from fedjax_face.data import participation
from fedjax_face.federation import apps, export, holder, protocol, server, wire
from fedjax_face.run import hooks
from tests.federation import loopback
from tests.federation import test_equal_to_simulator as direct
from tests.federation import test_flower_messages as messages

ALL = pytest.mark.skipif(os.environ.get('FEDJAX_FACE_FEDERATION') != 'all',
                         reason='a federation under DP / secure aggregation: '
                         'FEDJAX_FACE_FEDERATION=all')

DP = 'dp.enabled=True dp.noise_multiplier=0.5 dp.clip_norm=0.05'
ADAPTIVE = DP + ' dp.clip_rule=adaptive dp.count_noise_multiplier=2.0'
SECURE = 'secure_aggregation.enabled=True'


def secret_file(folder, text: str) -> str:
  path = os.path.join(str(folder), 'mask_secret')
  with open(path, 'w') as f:
    f.write(text)
  return path


def grid_of(root: str, state_root: str, extra: str, secret_path: str = ''
            ) -> loopback.LoopbackGrid:
  grid = messages.grid_of(root, state_root)
  grid.run_config['overrides'] += ' ' + extra
  for context in grid.contexts.values():
    if secret_path:
      context.node_config['mask-secret-path'] = secret_path
  return grid


def federate_and_simulate(grid):
  """(the federation's Trained, its ledger, its round metrics, the simulator's final state and
  round metrics) of the grid's run config."""
  config = apps.load_config(grid.run_config['config'], grid.run_config['overrides'])
  sim_config = config.copy_and_resolve_references()
  del sim_config.evals.verification, sim_config.evals.identification
  simulated, sim_metrics = direct.simulate(sim_config)
  metrics = []
  hook = hooks.Hook(after_round=lambda end: metrics.append(jax.tree.map(np.asarray, end.metrics)))
  trained, ledger = apps.serve(grid, config, (hook,))
  return config, trained, ledger, metrics, simulated, sim_metrics


def assert_holders_kept_the_simulators_rows(grid, simulated):
  for k in range(direct.NUM_HOLDERS):
    h = apps.holder_of(grid.contexts[103 - k])
    kept = wire.load(holder.private_path(h.state_dir, direct.ROUNDS), h.agreement.private)
    direct.assert_trees_equal(kept, jax.tree.map(lambda x, k=k: x[k], simulated.clients))


@ALL
@pytest.mark.parametrize('extra', [DP, ADAPTIVE], ids=['fixed_clip', 'adaptive_clip'])
def test_dp_over_flower_ends_at_the_simulators_state_and_epsilon(holders_root, tmp_path, extra,
                                                                 capsys):
  grid = grid_of(holders_root, str(tmp_path / 'state'), extra)
  config, trained, ledger, metrics, simulated, sim_metrics = federate_and_simulate(grid)
  direct.assert_trees_equal(trained.state.server, simulated.server)
  assert trained.state.clients == {}
  assert_holders_kept_the_simulators_rows(grid, simulated)
  direct.assert_trees_equal(metrics, sim_metrics)
  assert metrics[0]['dp/clipped'] > 0   # the clip binds: the test would see a missing clip
  # Every reply is clipped at the holder: its difference from the broadcast is within the clip.
  adaptive = 'adaptive' in extra
  for reply in grid.received[direct.NUM_HOLDERS:]:
    update = reply.content.array_records['update']
    assert (privacy.COUNT_KEY in {k.split("'")[1] for k in update}) == adaptive
  # ε: the simulator's ledger of the same run (run/results.py's 'privacy' part).
  fed = apps.holder_of(grid.contexts[103]).agreement.fed
  cohort = participation.Cohorts(config.federated, fed.num_examples, config.seed).size
  spec = privacy.spec_from_config(config, protocol.agree(
      config, [apps.holder_of(c).describe() for c in grid.contexts.values()]
  ).algorithm.client_rows, fed.num_clients, cohort)
  final_clip = float(np.asarray(privacy.clip_of(simulated.server))) if adaptive else None
  assert ledger == privacy.ledger(config, spec, fed.num_clients, cohort, config.num_rounds,
                                  None, final_clip)
  assert ledger['epsilon'] > 0
  out = capsys.readouterr().out
  assert f"dp: epsilon={ledger['epsilon']:.4f} at delta=1e-05 after round 2" in out


@ALL
def test_secure_aggregation_over_flower_masks_with_the_holders_secret_and_sums_to_the_simulator(
    holders_root, tmp_path):
  grid = grid_of(holders_root, str(tmp_path / 'state'), SECURE,
                 secret_file(tmp_path, 'known to the holders alone'))
  config, trained, _, metrics, simulated, sim_metrics = federate_and_simulate(grid)
  direct.assert_trees_equal(trained.state.server, simulated.server)
  assert_holders_kept_the_simulators_rows(grid, simulated)
  direct.assert_trees_equal(metrics, sim_metrics)
  # What a holder sent in round 0 is masked with the holders' secret: the same holder with
  # another secret (the simulator's masks: XOR 0) sends other ring vectors, from the same
  # training (its metrics are equal).
  srv = server.Server(config, [apps.holder_of(c).describe() for c in grid.contexts.values()])
  request = srv.requests(srv.initial_state(), 0)[0]
  sent = [r for r in grid.received if 'update' in r.content.array_records][0]
  sent = {k: a.numpy() for k, a in sent.content.array_records['update'].items()}
  plain = holder.Holder(config, request.client, export.holder_folder(holders_root, request.client),
                        str(tmp_path / 'plain'), np.zeros(2, np.uint32))
  plain.join(srv.descriptions)
  again = wire.to_arrays(plain.train(0, request.shared, request.per_client, request.key, None,
                                     request.position, request.share, request.cohort).update)
  assert sorted(again) == sorted(sent)
  assert all(a.dtype == np.uint32 for a in sent.values())
  assert all(not np.array_equal(again[k], sent[k]) for k in sent)


@ALL
@pytest.mark.parametrize('extra,why', [
    (DP, r'dp\.enabled \(the mean divides by the fixed cohort size m, and the accountant '
         r'composes the sampling of exactly m clients\)'),
    (SECURE, r"secure_aggregation\.enabled \(a missing holder's masks do not cancel: no dropout "
             r'recovery\)'),
], ids=['dp', 'secure_aggregation'])
def test_a_holder_gone_under_a_privacy_mode_stops_the_run_in_one_line(holders_root, tmp_path,
                                                                     extra, why):
  grid = grid_of(holders_root, str(tmp_path / 'state'), extra, secret_file(tmp_path, 'x'))
  config = apps.load_config(grid.run_config['config'], grid.run_config['overrides'])
  grid.silent.add(('1', 103 - 2))   # client 2's node never answers round 1
  with pytest.raises(RuntimeError, match=rf'^round 1: clients \[2\] did not reply; under {why} '
                     r'the cohort of 3 is fixed, so the run stops \(expected every reply\)\.$'):
    apps.serve(grid, config, round_timeout=1.0)


@pytest.fixture(scope='module')
def described(holders_root):
  config = direct.folder_config('fedpe', holders_root)
  return [holder.Holder(config, k, export.holder_folder(holders_root, k), '/nonexistent')
          .describe() for k in range(direct.NUM_HOLDERS)]


def test_min_replies_under_dp_is_refused_in_one_line(holders_root, described):
  config = direct.folder_config('fedpe', holders_root)
  config.dp.enabled = True
  with pytest.raises(checks.UsageError, match=r'^min-replies=2 with dp\.enabled \(the mean '
                     r'divides by the fixed cohort size m, .*\): the cohort is fixed, so a round '
                     r'without every reply stops; expected min-replies=0\.$'):
    server.Server(config, described, min_replies=2)


def test_what_the_method_refuses_is_refused_over_flower_in_one_line():
  config = direct.config_files.load_config('pad/fedpad')
  config.engine.backend = 'loop'
  config.secure_aggregation.enabled = True
  with pytest.raises(checks.UsageError, match=r"^secure_aggregation\.enabled=True with fedpad: "
                     r"secure_aggregation\.enabled with fedgpad\.weighting='uniform': the server "
                     r"sees only the sum, which clients weight by the engine's n_k; set "
                     r"fedgpad\.weighting='examples'\.$"):
    protocol.check_federable(config)


def test_a_holder_without_the_mask_secret_is_refused_in_one_line(holders_root):
  config = direct.folder_config('fedpe', holders_root)
  config.secure_aggregation.enabled = True
  with pytest.raises(checks.UsageError, match=r'^data holder of client 1: '
                     r'secure_aggregation\.enabled=True but no mask secret; expected the file the '
                     r'holders share and the server does not '
                     r"\(node config 'mask-secret-path'\)\.$"):
    holder.Holder(config, 1, export.holder_folder(holders_root, 1), '/nonexistent')
  with pytest.raises(checks.UsageError, match=r"^mask-secret-path='/nonexistent/secret' is no "
                     r'file; expected the secret the data holders share \(and the server does '
                     r'not\)\.$'):
    holder.read_mask_secret('/nonexistent/secret')


def test_the_mask_secret_is_the_files_digest(tmp_path):
  first = holder.read_mask_secret(secret_file(tmp_path, 'a'))
  assert first.dtype == np.uint32 and first.shape == (2,)
  np.testing.assert_array_equal(first, holder.read_mask_secret(secret_file(tmp_path, 'a')))
  assert not np.array_equal(first, holder.read_mask_secret(secret_file(tmp_path, 'b')))


class Stop(Exception):
  """The server stopped after a round, as a killed ServerApp would be."""


@ALL
def test_a_restarted_server_under_dp_plans_from_its_checkpoints_noise_history(holders_root,
                                                                              tmp_path):
  config = direct.folder_config('fedpe', holders_root)
  config.dp.enabled, config.dp.noise_multiplier, config.dp.clip_norm = True, 0.5, 0.05
  config.checkpoint_every = 1
  descriptions, exchange = direct.join_all(
      config, direct.holders_of(config, holders_root, str(tmp_path / 'state')))
  def stop_after_round_1(end):
    if end.done == 1:
      raise Stop()
  workdir = str(tmp_path / 'server')
  with pytest.raises(Stop):
    server.serve(server.Server(config, descriptions), exchange, workdir,
                 (hooks.Hook(after_round=stop_after_round_1),))
  srv = server.Server(config, descriptions)
  resumed = server.serve(srv, exchange, workdir)
  assert srv.noise_plan.start_round == 1 and srv.noise_plan.history == [[1, 0.5]]
  simulated, _ = direct.simulate(config)
  direct.assert_trees_equal(resumed.state.server, simulated.server)
  ledger = srv.privacy_ledger(resumed.state)
  assert ledger['noise_history'] == [{'rounds': direct.ROUNDS, 'noise_multiplier': 0.5}]
  assert ledger['epsilon'] == srv.noise_plan.epsilons[-1]
  # The same run without a stop reports the same ε.
  fresh = server.Server(config, descriptions)
  assert fresh.privacy_ledger(resumed.state)['epsilon'] == ledger['epsilon']


# Beyond FedPE, in process (the holders called directly; the message path is FedPE's above):
# FedGC's W_k rows cross beside the clipped / masked model (under DP its rows are noised per row
# by the server, `dp.class_rows='private'`; under secure aggregation they pass unmasked, as in
# the simulator), and FedPAD's data centers under secure aggregation (weighted by n_k: the
# method refuses its uniform weighting there, `algorithms.check_config`).
OTHERS = [
    ('fedgc', {'dp': {'enabled': True, 'noise_multiplier': 0.5, 'clip_norm': 0.05}}),
    ('fedgc', {'secure_aggregation': {'enabled': True}}),
    ('pad/fedpad', {'secure_aggregation': {'enabled': True}, 'fedgpad': {'weighting': 'examples'}}),
]


@ALL
@pytest.mark.parametrize('name,sections', OTHERS, ids=['fedgc_dp', 'fedgc_secure', 'fedpad_secure'])
def test_other_methods_under_a_privacy_mode_end_at_the_simulators_state(
    request, tmp_path, name, sections):
  if name.startswith('pad/'):
    fields = request.getfixturevalue('pad_lists_fields')
    config = direct.pad_config(name.split('/')[1], fields)
    folders = fields['roots']
  else:
    root = request.getfixturevalue('holders_root')
    config = direct.folder_config(name, root)
    folders = [export.holder_folder(root, k) for k in range(direct.NUM_HOLDERS)]
  for section, values in sections.items():
    config[section].update(values)
  simulated, sim_metrics = direct.simulate(config)
  secret = holder.read_mask_secret(secret_file(tmp_path, 'the holders alone'))
  holders = [holder.Holder(config, k, folder, str(tmp_path / 'state' / str(k)), secret)
             for k, folder in enumerate(folders)]
  descriptions = [h.describe() for h in holders]
  srv = server.Server(config, descriptions)
  agreement = protocol.agree(config, descriptions)
  for h in holders:
    h.join(descriptions, agreement)
  exchange = lambda requests: [
      holders[q.client].train(q.round, q.shared, q.per_client, q.key, q.clip, q.position,
                              q.share, q.cohort) for q in requests]
  metrics = []
  trained = server.serve(srv, exchange, None, (hooks.Hook(after_round=lambda end: metrics.append(
      jax.tree.map(np.asarray, end.metrics))),))
  direct.assert_trees_equal(trained.state.server, simulated.server)
  for k, h in enumerate(holders):
    direct.assert_trees_equal(h.private_at(config.num_rounds),
                              jax.tree.map(lambda x, k=k: x[k], simulated.clients))
  direct.assert_trees_equal(metrics, sim_metrics)
