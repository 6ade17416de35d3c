"""The throughput bench on a tiny config: structure and same-work checks, never timings.

Timings depend on the machine and its other jobs, so nothing here compares seconds or ratios; what
is checked is that every configured figure exists and is a positive finite number, that each round
counts the images it trains on, and that the sequential baseline does exactly the engine's work.
"""

import json
import math

import jax
import numpy as np
import pytest

from fedjax_face import algorithms, models
from fedjax_face.algorithms.fedma import layers as fedma_layers
from fedjax_face.tools import timing
from fedjax_face.tools.bench import common as bench_common
from fedjax_face.tools.bench import report as bench_report
from fedjax_face.tools.bench import rounds as bench_rounds
from fedjax_face.tools.bench import scaling as bench_scaling
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import stores
from tests import config_files, forced_devices


def load_config(arg: str | None = 'runlocal'):
  return config_files.load_config('bench', arg)


# runlocal on its FedFV-like cohort (3 clients: the map width 2 pads them to 4) with one class
# count. Every combination stays listed, but only one per backend compiles (scan and unroll both
# among them); the rest are skipped by pattern, which keeps the run in seconds. Every client
# trains one local step (runlocal: 2), in (a)-(c) and (f), (g) and (h) alike: the unrolled
# programs compile half the steps (~10 s less of the fixture), and what is checked counts steps
# from the config.
TINY = {
    'bench.run_cohorts': ('fedfv',),
    'bench.scaling.cohort': 'fedfv',
    'bench.repeats': 1,
    'bench.regularizer.classes': (40,),
    'bench.skip_on_cpu': (),
    'bench.skip': ('fedfv/vmap/unroll', 'fedfv/map2/scan', 'fedfv/loop/scan', 'fedfv/loop2/scan'),
    'bench.cohorts.fedfv.local_steps': 1,
    # (g): 2 of FedFV runlocal's 16 clients per round, so its one jitted loop unrolls 2 steps.
    'bench.one_per_client.run.federated.participation': 0.125,
    'bench.one_per_client.run.federated.local_steps': 1,
    'bench.fedavg_cnn.cohort.local_steps': 1,
    # (n) without its PAD rows: the detector's compilation alone is ~8 s on a loaded 2-core
    # machine (`python -m fedjax_face.tools.bench --config=configs/bench.py:runlocal` has them).
    'bench.membership.pad_frames': (),
    # The bench model and (g)'s FedFV run on a one-stage CNN (runlocal: 3 stages). What is
    # checked (rows, counts, names, the sequential baseline's equality) holds at any depth, and
    # the programs of (a)-(c), (e)-(g) and (l)-(n) compile in about 40 % less CPU.
    'model.num_stages': 1,
    'bench.one_per_client.run.model.num_stages': 1,
}
NUM_DEVICES = 2

_RUN_CLI = """
import sys
from absl import app
from fedjax_face.tools.bench import __main__ as bench_main
sys.argv = ['bench'] + {argv!r}
bench_main.define_flags()
app.run(bench_main.main)
"""


def override(config, field: str, value):
  """`config.<field> = value` for a dotted field name, as `--config.<field>=` does."""
  *parents, leaf = field.split('.')
  node = config
  for parent in parents:
    node = node[parent]
  node[leaf] = value


def tiny_config():
  config = load_config('runlocal')
  for field, value in TINY.items():
    override(config, field, value)
  return config


@pytest.fixture(scope='module')
def tiny_run(tmp_path_factory):
  """The command line end to end (flags, `--config.` overrides, bench.json, bench.md) with 2
  forced CPU devices, so that section (f) shards the clients axis over 1 and 2 devices."""
  out = tmp_path_factory.mktemp('bench')
  argv = ['--config=configs/bench.py:runlocal', f'--out={out}']
  argv += [f'--config.{k}={v if isinstance(v, str) else repr(v)}' for k, v in TINY.items()]
  stdout = forced_devices.run(_RUN_CLI.format(argv=argv), num_devices=NUM_DEVICES)
  saved = json.loads((out / 'bench.json').read_text())
  return tiny_config(), saved, out, stdout


def positive_finite(x) -> bool:
  return isinstance(x, float) and math.isfinite(x) and x > 0


def test_bench_json_has_every_section_and_combination(tiny_run):
  config, saved, out, _ = tiny_run
  b = config.bench
  assert saved['config'] == json.loads(json.dumps(config.to_dict()))   # the overrides arrived
  for key in ('platform', 'config', 'total_s', *b.sections):
    assert key in saved, key
  for field in ('backend', 'device_kind', 'device_count', 'jax_version'):
    assert saved['platform'][field] not in (None, ''), field
  assert saved['platform']['device_count'] == NUM_DEVICES
  assert set(saved['rounds']) == set(b.run_cohorts)
  for cohort, res in saved['rounds'].items():
    expected = {bench_common.combination_name(cohort, backend, width, mode)
                for backend, width in bench_common.backend_variants(b) for mode in b.step_modes}
    names = [r['name'] for r in res['backends']]
    assert sorted(names) == sorted(expected)
    for row in res['backends']:
      if row['status'] == 'skipped':
        assert 'bench.skip' in row['reason'] and 'images_per_s' not in row
      else:
        assert row['status'] == 'measured'
      # As a run on CPU picks it: the canonical conv gradient inside while loops only.
      in_loops = row['step_mode'] == 'scan' or row['backend'] == 'map'
      assert row['conv_gradient'] == ('canonical' if in_loops else 'xla'), row['name']
    assert res['best']['name'] in expected
  assert [r['R'] for r in saved['regularizer']] == list(b.regularizer.classes)
  assert saved['eval']['verification']['num_pairs'] == b.eval.num_pairs
  assert saved['scaling']['visible_devices'] == NUM_DEVICES
  assert saved['scaling']['combination'] == bench_scaling.best_parallel_combination(
      saved['rounds'][b.scaling.cohort])
  rows = saved['scaling']['rows']
  assert [r['devices'] for r in rows] == [1, 2]
  assert all(r['status'] == 'measured' for r in rows)
  f = saved['fedavg_cnn']
  assert [(r['name'], r['backend'], r['loop_threads']) for r in f['engine']] == (
      [('auto', 'loop', stores.usable_cpus())] + [('loop', 'loop', t) for t in
                                                  b.fedavg_cnn.loop_threads])
  assert f['pytorch'] == [] and f['auto_over_best_pytorch'] is None   # torch off in runlocal
  i = saved['ijb']
  assert i['model'] == 'small_cnn 16x16 d=8' and i['num_pairs'] == b.ijb.num_pairs
  host = i['host_workers']
  assert set(host) == {'1', str(stores.usable_cpus())}
  assert all(h['images'] == b.ijb.crops for h in host.values())
  assert all(positive_finite(r) for r in (*(h['images_per_s'] for h in host.values()),
                                           *(h['first_chunk_s'] for h in host.values()),
                                           i['embed_images_per_s'], i['pairs_s']))
  images_rate = min(max(h['images_per_s'] for h in host.values()), i['embed_images_per_s'] / 2)
  assert i['ijbc_estimate_s'] == pytest.approx(469_375 / images_rate + i['pairs_s'] * 15_600)
  t = saved['backbone_training']
  assert t['model'] == 'small_cnn 16x16 d=8' and t['pytorch'] == []   # torch off in runlocal
  assert positive_finite(t['engine']['images_per_s']) and t['engine_over_best_pytorch'] is None
  assert t['engine']['images_per_round'] == b.backbone_training.batch_size
  # One engine row per 'library/gradient', each run on that convolution library (its own
  # process); the fastest is the one compared with PyTorch.
  assert [(r['cpu_convolutions'], r['conv_gradient']) for r in t['engines']] == [
      ('ynnpack', 'xla'), ('eigen', 'chunked')] == bench_common.parse_engines(
          b.backbone_training.engines)
  assert t['engine'] == max(t['engines'], key=lambda r: r['images_per_s'])
  m = saved['fedma_matching']
  assert [r['layer'] for r in m['rows']] == [f'pad_net {layer.name}' for layer in
                                             fedma_layers.MATCHED]   # ResNet-18 off in runlocal
  assert [r['neurons'] for r in m['rows']] == [layer.channels(2) for layer in fedma_layers.MATCHED]
  # A neuron: its 3x3 inputs over the cap-wide (3) producers and its BatchNorm scale and bias.
  assert m['rows'][1]['dim'] == 9 * 3 + 2 and m['rows'][0]['dim'] == 9 * 6 + 2
  assert m['rows'][13]['dim'] == 8 * 3 + 1   # C's hidden dense: inputs and bias
  assert m['pad_net_total_s'] == pytest.approx(sum(r['seconds'] for r in m['rows']))
  assert m['resnet18_total_s'] is None
  v = saved['inversion']   # runlocal: one cell, batch 2 x 1 step
  assert [(r['batch'], r['local_steps'], r['images']) for r in v['rows']] == [(2, 1, 2)]
  assert all(positive_finite(r['iteration_s']) and r['compile_s'] >= 0 for r in v['rows'])
  assert all(r['target_s'] == pytest.approx(r['compile_s'] + v['iterations'] * r['iteration_s'])
             for r in v['rows'])
  assert v['grid_s'] == pytest.approx(sum(r['compile_s'] + v['targets'] * v['iterations']
                                          * r['iteration_s'] for r in v['rows']))
  assert f['classes'] == b.fedavg_cnn.cohort.num_clients * b.fedavg_cnn.cohort.identities_per_client
  k, lk = saved['leakage'], b.leakage   # runlocal: one cell, 8 identities against 8 distractors
  assert [(r['identities'], r['distractors']) for r in k['rows']] == [tuple(c) for c in lk.cells]
  # Probes of every identity and distractor, and the exact templates' training images.
  assert [r['embedded_images'] for r in k['rows']] == [
      (i + d) * lk.probes_per_identity + i * lk.exact_images for i, d in lk.cells]
  assert positive_finite(k['embeddings_per_s'])
  for r in k['rows']:
    assert r['embed_s'] == pytest.approx(r['embedded_images'] / k['embeddings_per_s'])
    assert r['per_identity_s'] == pytest.approx((r['embed_s'] + r['score_s']) / r['identities'])
  assert (k['decode']['equivalents'], k['decode']['classes']) == (lk.equivalents, lk.classes)
  n = saved['membership']   # runlocal: 16 members and as many non-members; PAD 100 frames
  assert [(r['samples'], r['embedded_images']) for r in n['rows']] == [
      (m, 2 * m) for m in b.membership.samples]
  for r in n['rows']:
    assert r['embed_s'] == pytest.approx(r['embedded_images'] / n['embeddings_per_s'])
    assert r['per_sample_s'] == pytest.approx((r['embed_s'] + r['score_s']) / r['samples'])
  assert [p['frames'] for p in n['pad']] == list(b.membership.pad_frames)
  assert n['pad'] == [] and n['pad_frames_per_s'] is None   # TINY: no PAD rows, no detector


def test_skipped_and_measured_as_configured(tiny_run):
  config, saved, _, _ = tiny_run
  for res in saved['rounds'].values():
    for row in res['backends']:
      reason = bench_common.skip_reason(config.bench, row['name'], saved['platform']['backend'])
      assert (row['status'] == 'skipped') == (reason is not None), row['name']


def test_every_throughput_is_positive_and_finite(tiny_run):
  _, saved, _, _ = tiny_run
  rates = []
  for res in saved['rounds'].values():
    rows = [r for r in res['backends'] if r['status'] == 'measured']
    assert rows
    rates += [r['images_per_s'] for r in rows]
    rates += [res['sequential']['images_per_s'], res['centralized']['images_per_s']]
    rates += list(res['ratios'].values())
    for r in rows + [res['sequential'], res['centralized']]:
      assert r['repeats'] == len(r['times_s']) >= 1
      assert all(positive_finite(t) for t in r['times_s'] + [r['median_s'], r['first_call_s']])
      assert r['compile_s'] >= 0
  rates.append(saved['eval']['embeddings_per_s'])
  rates.append(saved['eval']['verification']['seconds'])
  for r in saved['scaling']['rows']:
    rates += [r['images_per_s'], r['median_s']]
  f = saved['fedavg_cnn']
  rates += [f['client_flops'], f['peak_gflops'], f['matmul_gflops'], f['conv_gflops']]
  for r in f['engine']:
    rates += [r['images_per_s'], r['gflops'], r['share_of_peak'], r['median_s']]
    assert r['gflops'] == pytest.approx(f['client_flops'] * f['cohort']['cohort_size']
                                        / r['median_s'] / 1e9)
  for row in saved['regularizer']:
    rates += [row['blockwise_seconds'], row['dense_seconds']]
    assert row['blockwise_temp_bytes'] > 0 and row['dense_temp_bytes'] > 0
  assert all(positive_finite(x) for x in rates), rates


def test_images_per_round_is_cohort_times_steps_times_batch(tiny_run):
  config, saved, _, _ = tiny_run
  for name, res in saved['rounds'].items():
    spec = config.bench.cohorts[name]
    expected = spec.cohort_size * spec.local_steps * spec.batch_size
    assert res['cohort']['images_per_round'] == expected
    for row in res['backends'] + [res['sequential'], res['centralized']]:
      if row['status'] == 'measured':
        assert row['images_per_round'] == expected, row['name']
    assert res['centralized']['batch_size'] == spec.cohort_size * spec.batch_size
    assert res['centralized']['steps'] == spec.local_steps
    assert res['centralized']['classes'] == spec.cohort_size * spec.identities_per_client
  scaled = config.bench.cohorts[config.bench.scaling.cohort]
  for row in saved['scaling']['rows']:
    assert row['images_per_round'] == (
        scaled.cohort_size * scaled.local_steps * scaled.batch_size)
  # The FedFV-like cohort (3 clients) pads to the map width 2: 4 rows, 3 of them counted.
  padded = {r['name']: r['padded_cohort'] for r in saved['rounds']['fedfv']['backends']
            if r['status'] == 'measured'}
  assert padded == {'fedfv/vmap/scan': 3, 'fedfv/map2/unroll': 4, 'fedfv/loop/unroll': 3,
                    'fedfv/loop2/unroll': 3}
  threads = {r['name']: r['loop_threads'] for r in saved['rounds']['fedfv']['backends']}
  assert threads['fedfv/loop/unroll'] == 1 and threads['fedfv/loop2/unroll'] == 2
  assert threads['fedfv/vmap/scan'] is None


def test_markdown_lists_every_row(tiny_run):
  _, saved, out, stdout = tiny_run
  text = (out / 'bench.md').read_text()
  assert text.strip() == bench_report.markdown(saved).strip()
  assert text.strip() in stdout
  for res in saved['rounds'].values():
    for row in res['backends']:
      assert f"| {row['name'].split('/', 1)[1]}" in text
  assert 'sequential loop of a jitted step' in text and 'centralized, batch' in text
  for title in ('## (a)-(c)', '## (d)', '## (e)', '## (f)', '## (h)', '## (l)', '## (m)',
                '## (n)'):
    assert title in text


def loop_round_and_sequential(config, name: str):
  """The engine's `loop` round and the sequential baseline on the same state, data and key."""
  model = models.build_backbone(config.model)
  problem = bench_common.make_problem(name, config.bench.cohorts[name], config.data.image_size,
                               config.seed)
  algorithm = algorithms.get('fedpe').build(config, model, problem.fed, step_mode='unroll')
  state = algorithm.init(jax.random.PRNGKey(0))
  ids, weights, data = bench_common.round_inputs(problem, 1, config.seed)
  rng = jax.random.PRNGKey(7)
  eng = engine_lib.RoundEngine(algorithm, backend='loop')
  new_state, _ = eng.run_round(state, ids, weights, data, rng)
  step, init_opt = bench_rounds.make_local_step(config, model)
  model_avg, ws = bench_rounds.sequential_round(step, init_opt, state.server['model'],
                                         state.clients['W'], ids, weights, data, rng)
  return state, new_state, model_avg, ws, ids


def test_sequential_baseline_does_the_loop_backends_work():
  # The fixture's model (TINY's one stage) on runlocal's FedGC-like cohort: 4 clients x 2 steps.
  config = tiny_config()
  state, new_state, model_avg, ws, ids = loop_round_and_sequential(config, 'fedgc')
  flat_engine, tree_engine = jax.tree.flatten(new_state.server['model'])
  flat_seq, tree_seq = jax.tree.flatten(model_avg)
  assert tree_engine == tree_seq
  for a, b in zip(flat_engine, flat_seq):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=2e-5, atol=2e-6)
  # The round trained: the averaged backbone moved away from the broadcast one.
  before = jax.tree.leaves(state.server['model']['params'])
  after = jax.tree.leaves(new_state.server['model']['params'])
  assert any(not np.allclose(a, b) for a, b in zip(after, before))
  # The clients' private class embeddings agree too.
  for k, w in zip(ids, ws):
    np.testing.assert_allclose(np.asarray(w), np.asarray(new_state.clients['W'][k]),
                               rtol=2e-5, atol=2e-6)


def test_centralized_batches_concatenate_the_cohort():
  config = load_config('runlocal')
  spec = config.bench.cohorts.fedfv
  problem = bench_common.make_problem('fedfv', spec, config.data.image_size, config.seed)
  ids, _, data = bench_common.round_inputs(problem, 2, config.seed)    # 3 clients padded to 4
  batches = bench_rounds.centralized_batches(ids, data, problem.fed.num_clients, jax.random.PRNGKey(0))
  assert len(batches) == spec.local_steps
  max_classes = data['class_mask'].shape[1]
  for s, batch in enumerate(batches):
    assert batch['images'].shape[0] == spec.cohort_size * spec.batch_size
    assert batch['class_mask'].shape == (spec.cohort_size * max_classes,)
    assert batch['class_mask'][batch['labels']].all()
    # Row r's samples are client r's, with its local classes moved to r·C_max + c.
    np.testing.assert_array_equal(batch['images'][:spec.batch_size], data['images'][0, s])
    rows = np.repeat(np.arange(spec.cohort_size), spec.batch_size)
    np.testing.assert_array_equal(batch['labels'] // max_classes, rows)


def test_measure_counts_calls_and_stops_at_the_budget():
  calls = []
  fn = lambda x: calls.append(x) or x
  timed = timing.measure(fn, 1.0, warmup=2, repeats=3)
  assert len(calls) == 5 and timed['repeats'] == 3 and timed['median_s'] >= 0
  calls.clear()
  timed = timing.measure(fn, 1.0, warmup=1, repeats=4, budget_s=0.0)
  assert len(calls) == 2 and timed['repeats'] == 1 == len(timed['times_s'])
  with pytest.raises(ValueError, match='warmup=0'):
    timing.measure(fn, 1.0, warmup=0)


def test_variant_names_round_trip():
  for backend, width, name in (('vmap', None, 'vmap'), ('map', 8, 'map8'), ('loop', None, 'loop'),
                               ('loop', 1, 'loop'), ('loop', 4, 'loop4')):
    assert bench_common.variant_name(backend, width) == name
  assert bench_common.parse_variant('loop4') == ('loop', 4) and bench_common.parse_variant('loop') == ('loop', None)
  b = load_config(None).bench
  b.loop_threads = (1, 0, 2)   # 0 = the usable CPUs; a count met twice is measured once
  assert bench_common.loop_thread_counts(b) == list(dict.fromkeys([1, stores.usable_cpus(), 2]))


def test_skip_on_cpu_applies_only_on_cpu():
  b = load_config(None).bench
  assert 'skip_on_cpu' in bench_common.skip_reason(b, 'fedgc/map2/scan', 'cpu')
  assert bench_common.skip_reason(b, 'fedgc/map2/scan', 'gpu') is None
  assert bench_common.skip_reason(b, 'fedgc/loop/scan', 'cpu') is None   # fast with the canonical conv
  assert 'skip_on_cpu' in bench_common.skip_reason(b, 'fedgc/map8/unroll', 'cpu')
  assert bench_common.skip_reason(b, 'fedfv/map8/unroll', 'cpu') is None
  assert bench_common.skip_reason(b, 'fedgc/loop/unroll', 'cpu') is None


@pytest.mark.parametrize('arg', [None, 'runlocal', 'full'])
def test_shipped_configs_validate(arg):
  bench_common.validate(load_config(arg), num_devices=1)


@pytest.mark.parametrize('field,value,message', [
    ('bench.backends', ('vmap', 'pmap'), r"config.bench.backends has 'pmap'; expected entries "
     r"from \('vmap', 'map', 'loop'\)"),
    ('bench.map_widths', (2, 0), r'config.bench.map_widths\[...\]=0; expected a positive'),
    ('bench.loop_threads', (1, -1), r'config.bench.loop_threads has -1; expected non-negative'),
    ('bench.step_modes', ('scan', 'while'), r"config.bench.step_modes has 'while'"),
    ('bench.sections', ('rounds', 'speed'), r"config.bench.sections has 'speed'"),
    ('bench.repeats', 0, r'config.bench.repeats=0; expected a positive integer'),
    ('bench.ijb.crops', 128, r'config.bench.ijb.crops=128; expected more than one chunk of 16 x '
                             'bench.ijb.batch_size = 128'),
    ('bench.fedma_matching.cap_width', 1, r'bench.fedma_matching.cap_width=1 < its '
                                          'client_width=2'),
    ('bench.inversion.local_steps', (1, 0),
     r'config.bench.inversion.local_steps\[...\]=0; expected a positive'),
    ('bench.max_timed_s', 0.0, r'config.bench.max_timed_s=0.0; expected a positive'),
    ('bench.leakage.cells', ((8, 0),), r'config.bench.leakage.cells has \(8, 0\); expected '
     r'\(identities, distractors\)'),
    ('bench.membership.samples', (18,), r'config.bench.membership.samples has 18; expected a '
     'multiple of images_per_identity=4'),
    ('bench.backbone_training.engines', ('eigen/xla', 'eigen'),
     r"bench.backbone_training.engines: 'eigen' is not library/gradient"),
    ('bench.skip', ('scan',), r"config.bench.skip has 'scan'; expected a pattern"),
    ('bench.run_cohorts', ('fedgc', 'huge'), r"config.bench.run_cohorts has 'huge'"),
    ('bench.cohorts.fedfv.cohort_size', 30, r'config.bench.cohorts.fedfv.cohort_size=30 exceeds'),
    ('bench.cohorts.fedgc.batch_size', 0, r'config.bench.cohorts.fedgc.batch_size=0'),
    ('bench.eval.num_pairs', 30,
     r'config.bench.eval.num_pairs=30; expected a multiple of 2 x bench.eval.num_folds = 20'),
    ('bench.regularizer.classes', (), r'config.bench.regularizer.classes is empty'),
    ('bench.scaling.combination', 'loop/unroll', r'the loop backend runs on one device'),
    ('bench.scaling.combination', 'pmap/scan', r"combination: backend 'pmap'"),
    ('bench.scaling.combination', 'vmap/while', r'combination: combination .vmap/while.'),
    ('bench.scaling.device_counts', (8,), r'has 8 but 4 devices are visible'),
    ('algorithm', 'fedgc', r"config.algorithm='fedgc'; the bench runs FedPE"),
    ('bench.one_per_client.rounds', 1,
     r'config.bench.one_per_client.rounds=1; expected an integer of at least 2'),
])
def test_bad_config_values_name_the_field(field, value, message):
  config = load_config('runlocal')
  override(config, field, value)
  with pytest.raises(ValueError, match=message):
    bench_common.validate(config, num_devices=4)


def test_map_width_must_split_over_every_device_count():
  config = load_config('runlocal')
  config.bench.scaling.combination = 'map2/unroll'
  config.bench.scaling.device_counts = (1, 4)
  with pytest.raises(ValueError, match=r'device_counts has 4, which does not divide the map '
                                       r'width 2 of bench.scaling.combination'):
    bench_common.validate(config, num_devices=4)


def test_one_per_client_section_compares_the_run_loop_with_one_jitted_loop(tiny_run):
  config, saved, out, _ = tiny_run
  o = saved['one_per_client']
  run, single = o['run'], o['single']
  # FedFV runlocal (16 clients, steps of 3 images) at TINY's 2 clients per round and 1 step.
  assert o['setting'].startswith('16 clients, 2 per round, 1 steps of 3')
  assert run['rounds'] == config.bench.one_per_client.rounds
  assert run['images_per_round'] == 2 * 1 * 3
  assert sorted(single['variants']) == ['scan/canonical', 'unroll/xla']
  assert single['best'] in single['variants']
  assert single['images_per_s'] == max(v['images_per_s'] for v in single['variants'].values())
  for v in single['variants'].values():
    assert v['steps'] == 2 * 1 and v['batch_size'] == 3
  for rate in (run['rounds_per_s'], run['images_per_s'], single['images_per_s']):
    assert positive_finite(rate)
  assert run['images_per_s'] == pytest.approx(run['images_per_round'] * run['rounds_per_s'])
  assert o['run_vs_single'] == pytest.approx(run['images_per_s'] / single['images_per_s'])
  assert 0 < run['between_rounds_s'] < run['round_s'] < run['first_round_s']
  assert 'run loop / one jitted loop:' in (out / 'bench.md').read_text()


def test_an_engine_entry_must_name_a_library_and_a_gradient():
  assert bench_common.parse_engines(('eigen/chunked', 'ynnpack/xla')) == [
      ('eigen', 'chunked'), ('ynnpack', 'xla')]
  for entry in ('eigen', 'onednn/xla', 'eigen/fast', 'xla/eigen'):
    with pytest.raises(ValueError, match=f"bench.backbone_training.engines: '{entry}' is not "
                                         'library/gradient'):
      bench_common.parse_engines(('ynnpack/xla', entry))
