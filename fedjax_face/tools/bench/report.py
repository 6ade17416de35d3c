"""The bench's markdown tables (bench.md and the printed summary).
"""

from fedjax_face.tools.bench import backbone_training as bench_backbone_training
from fedjax_face.tools.bench import federation as bench_federation
from fedjax_face.tools.bench import fedma_matching as bench_fedma_matching
from fedjax_face.tools.bench import ijb as bench_ijb
from fedjax_face.tools.bench import partial_fc as bench_partial_fc
from fedjax_face.tools.bench import inversion as bench_inversion
from fedjax_face.tools.bench import attacks as bench_attacks
from fedjax_face.tools.bench import regularizer as bench_regularizer


def _num(x, fmt: str = ',.0f') -> str:
  return '—' if x is None else format(x, fmt)


def rounds_table(rounds: dict) -> str:
  """One markdown table of sections (a)-(c): a row per combination and per baseline."""
  lines = ['| cohort | clients | images/round | how | compile s | s/round | images/s | '
           'x sequential | x centralized |',
           '| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |']
  for name, res in rounds.items():
    c = res['cohort']
    seq = res['sequential']['images_per_s']
    cen = res['centralized']['images_per_s']
    head = f"| {name} | {c['cohort_size']}/{c['num_clients']} | {c['images_per_round']:,} |"
    rows = [(r['name'].split('/', 1)[1], r) for r in res['backends']]
    rows += [('sequential loop of a jitted step', res['sequential']),
             (f"centralized, batch {res['centralized']['batch_size']}", res['centralized'])]
    for label, r in rows:
      if r['status'] == 'skipped':   # the full reason is in bench.json
        field = 'bench.skip_on_cpu' if 'skip_on_cpu' in r['reason'] else 'bench.skip'
        lines.append(f'{head} {label} | skipped ({field}) | | | | |')
        continue
      if r.get('padded_cohort', c['cohort_size']) != c['cohort_size']:
        label += f" (padded to {r['padded_cohort']})"
      lines.append(f"{head} {label} | {r['compile_s']:.2f} | {r['median_s']:.3f} | "
                   f"{r['images_per_s']:,.0f} | {r['images_per_s'] / seq:.2f} | "
                   f"{r['images_per_s'] / cen:.2f} |")
  return '\n'.join(lines)


def summary_lines(rounds: dict) -> list[str]:
  out = []
  for name, res in rounds.items():
    if res['best'] is None:
      out.append(f'- {name}: no backend measured')
      continue
    out.append(f"- {name}: best {res['best']['name'].split('/', 1)[1]} "
               f"{res['best']['images_per_s']:,.0f} images/s = "
               f"{res['ratios']['best_over_sequential']:.2f}x the sequential loop, "
               f"{res['ratios']['best_over_centralized']:.2f}x centralized")
  return out


def fedavg_cnn_lines(f: dict) -> list[str]:
  """Section (h): the engine rows, then the PyTorch rows (or why they are missing)."""
  c = f['cohort']
  lines = [f"## (h) plain FedAvg of a classifier CNN: {c['cohort_size']} clients x "
           f"{c['local_steps']} SGD steps x {c['batch_size']}, {f['image_size']}x"
           f"{f['image_size']}, {f['classes']} classes",
           f"peak {f['peak_gflops']:.0f} GFLOP/s (matmul {f['matmul_gflops']:.0f}, conv "
           f"{f['conv_gflops']:.0f}); one client's update {f['client_flops'] / 1e9:.2f} GFLOP "
           '(XLA cost analysis)',
           '| how | compile s | s/round | images/s | GFLOP/s | share of peak |',
           '| --- | ---: | ---: | ---: | ---: | ---: |']
  for r in f['engine']:
    lines.append(f"| engine {r['name']} ({r['backend']}, {r['loop_threads']} thread(s), "
                 f"{r['step_mode']}) | {r['compile_s']:.2f} | {r['median_s']:.3f} | "
                 f"{r['images_per_s']:,.0f} | {r['gflops']:.1f} | {100 * r['share_of_peak']:.0f}% |")
  for r in f['pytorch']:
    if r['status'] == 'skipped':
      lines.append(f"| {r['name']}: skipped ({r['reason']}) | | | | | |")
    else:
      lines.append(f"| {r['name']} | | {r['median_s']:.3f} | {r['images_per_s']:,.0f} | "
                   f"{r['gflops']:.1f} | {100 * r['gflops'] / f['peak_gflops']:.0f}% |")
  if f['auto_over_best_pytorch'] is not None:
    lines.append(f"engine auto / best PyTorch row: {f['auto_over_best_pytorch']:.2f}")
  return lines


def markdown(results: dict) -> str:
  """The whole report: platform line, then one table per section run."""
  p = results['platform']
  parts = [f"# fedjax_face bench: {p['backend']} ({p['device_kind']}) x{p['device_count']}, "
           f"jax {p['jax_version']}, load {_num(p['load_average_1min'], '.2f')}",
           f"model {results['model']}; FedPE; steady state = median of timed rounds, "
           'compile excluded']
  if 'rounds' in results:
    parts += ['## (a)-(c) round throughput', rounds_table(results['rounds']), '',
              *summary_lines(results['rounds'])]
  if 'regularizer' in results:
    parts += ['## (d) FedGC server step (gradient correction)',
              bench_regularizer.markdown_table(results['regularizer'])]
  if 'eval' in results:
    e = results['eval']
    parts += ['## (e) evaluation', '| what | figure |', '| --- | ---: |',
              f"| backbone eval, batch {e['batch_size']} | {e['embeddings_per_s']:,.0f} "
              'embeddings/s |',
              f"| {e['verification']['num_folds']}-fold verification protocol, "
              f"{e['verification']['num_pairs']:,} pairs | {e['verification']['seconds']:.3f} s |"]
  if 'scaling' in results:
    s = results['scaling']
    parts += [f"## (f) device scaling: {s['cohort']} cohort, {s['combination']} "
              f"(devices visible: {s['visible_devices']})",
              '| devices | clients (padded) | images/s | x 1 device |',
              '| ---: | ---: | ---: | ---: |']
    one = next((r['images_per_s'] for r in s['rows']
                if r['status'] == 'measured' and r['devices'] == 1), None)
    for r in s['rows']:
      if r['status'] == 'skipped':
        parts.append(f"| {r['devices']} | skipped: {r['reason']} | | |")
      else:
        ratio = _num(r['images_per_s'] / one, '.2f') if one else '—'
        parts.append(f"| {r['devices']} | {r['padded_cohort']} | {r['images_per_s']:,.0f} | "
                     f'{ratio} |')
  if 'one_per_client' in results:
    o = results['one_per_client']
    run, single = o['run'], o['single']
    parts += [f"## (g) one identity per client: FedFV's run loop ({o['setting']})",
              '| what | rounds/s | images/s | per round |', '| --- | ---: | ---: | ---: |',
              f"| run loop ({run['rounds']} rounds, the first excluded) | "
              f"{run['rounds_per_s']:.1f} | {run['images_per_s']:,.0f} | "
              f"{run['round_s'] * 1e3:.1f} ms, of which {run['between_rounds_s'] * 1e3:.2f} ms "
              'between rounds |',
              f"| one jitted loop ({single['best']}) | | {single['images_per_s']:,.0f} | |",
              f"run loop / one jitted loop: {o['run_vs_single']:.2f}"]
  if 'fedavg_cnn' in results:
    parts += fedavg_cnn_lines(results['fedavg_cnn'])
  if 'ijb' in results:
    parts += bench_ijb.markdown_lines(results['ijb'])
  if 'backbone_training' in results:
    parts += bench_backbone_training.markdown_lines(results['backbone_training'])
  if 'fedma_matching' in results:
    parts += bench_fedma_matching.markdown_lines(results['fedma_matching'])
  if 'inversion' in results:
    parts += bench_inversion.markdown_lines(results['inversion'])
  if 'leakage' in results:
    parts += bench_attacks.leakage_markdown_lines(results['leakage'])
  if 'membership' in results:
    parts += bench_attacks.membership_markdown_lines(results['membership'])
  if 'federation' in results:
    parts += ['## (o) a federation over Flower', bench_federation.markdown_table(
        results['federation'])]
  if 'partial_fc' in results:
    parts += bench_partial_fc.markdown_lines(results['partial_fc'])
  parts.append(f"\ntotal {results['total_s']:.1f} s")
  return '\n'.join(parts)
