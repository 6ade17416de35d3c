"""The face-recognition evaluators' markdown: one run's sections of report.md, and the tables
that put several runs side by side (`tools/compare.py`). Pair sets are titled as their results
say (`results['verification'][name]['title']`, set by the data source)."""


def _percent(value) -> str:
  return '—' if value is None else f'{value * 100:.2f}'


def _title(results: dict, name: str) -> str:
  return results.get(name, {}).get('title', name)


def verification_table(results_by_method: dict[str, dict]) -> str:
  """Markdown table: one row per method, accuracy (mean ± std over 10 folds) per pair set, the
  pair sets in the order the runs list them."""
  pair_sets = []
  for res in results_by_method.values():
    for name in res['verification']:
      if name not in pair_sets:
        pair_sets.append(name)
  titles = {}
  for res in results_by_method.values():
    for p in res['verification']:
      titles.setdefault(p, _title(res['verification'], p))
  header = '| method | ' + ' | '.join(titles.get(p, p) for p in pair_sets) + ' | average |'
  lines = [header, '|' + ' --- |' * (len(pair_sets) + 2)]
  for method, res in results_by_method.items():
    accs = [res['verification'][p]['accuracy'] * 100 if p in res['verification'] else None
            for p in pair_sets]
    cells = [f"{a:.2f} ± {res['verification'][p]['accuracy_std'] * 100:.2f}" if a is not None
             else '—' for a, p in zip(accs, pair_sets)]
    known = [a for a in accs if a is not None]
    average = f'{sum(known) / len(known):.2f}' if known else '—'
    lines.append(f'| {method} | ' + ' | '.join(cells) + f' | {average} |')
  return '\n'.join(lines)


def identification_table(results_by_method: dict[str, dict]) -> str:
  """Markdown table of 1:N identification: rank-1 / rank-5 and TPIR at each FPIR, per method."""
  runs = {m: r['identification'] for m, r in results_by_method.items() if r.get('identification')}
  if not runs:
    return ''
  fpirs = sorted({f for r in runs.values() for f in r['tpir_at_fpir']}, key=float, reverse=True)
  lines = ['| method | rank-1 (%) | rank-5 (%) | '
           + ' | '.join(f'TPIR@FPIR={f} (%)' for f in fpirs) + ' |',
           '|' + ' --- |' * (3 + len(fpirs))]
  for method, r in runs.items():
    cells = [_percent(r.get('rank_1')), _percent(r.get('rank_5'))]
    cells += [_percent(r['tpir_at_fpir'].get(f)) for f in fpirs]
    lines.append(f'| {method} | ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines)


def verification_lines(verification: dict[str, dict]) -> list[str]:
  """One run's verification section: the metrics per pair set."""
  protocol = next(iter(verification.values()))['protocol']
  lines = [f'Verification ({protocol}):', '',
           '| pair set | accuracy (%) | threshold | VAL@FAR=1e-3 (%) | AUC | pairs |',
           '| --- | --- | --- | --- | --- | --- |']
  for name, m in verification.items():
    lines.append(f"| {_title(verification, name)} | {m['accuracy'] * 100:.2f} ± "
                 f"{m['accuracy_std'] * 100:.2f} | {m['threshold']:.3f} | "
                 f"{m['val_at_far'] * 100:.2f} ± {m['val_at_far_std'] * 100:.2f} | "
                 f"{m['auc']:.4f} | {m['num_pairs']} |")
  return lines + ['']


def identification_lines(ident: dict, name: str) -> list[str]:
  """One run's 1:N section (`name`: the row's label)."""
  return [f"1:N identification ({ident['protocol']}): {ident['num_gallery_identities']} gallery "
          f"templates ({ident['num_enrolled']} enrolled + {ident['num_distractors']} "
          f"distractors), {ident['num_mated']} mated and {ident['num_non_mated']} non-mated "
          'probes:', '', identification_table({name: {'identification': ident}}), '']


def personalized_lines(personal: dict) -> list[str]:
  """The personalized protocol's table (personalized.py): rates by value, '—' where the
  benchmark's size cannot resolve one; then the spread across clients (the worst 10 % and the
  lowest client) where the results have it (results written before it existed have none)."""
  cells = lambda d: {float(k): v for k, v in d.items()}
  row = lambda tar, tpir: ([tar[r] for r in sorted(tar)] + [tpir[r] for r in sorted(tpir)])
  tar, tpir = cells(personal['tar']), cells(personal['tpir'])
  header = ([f'TAR@FAR={r:g}' for r in sorted(tar)] + [f'TPIR@FPIR={r:g}' for r in sorted(tpir)])
  values = row(tar, tpir)
  lines = [f"Personalized evaluation (FedFR protocol, each client's {personal['model']} model, "
           f"mean over {personal['clients']} clients; per client "
           f"{personal['genuine_pairs']:.0f} genuine / {personal['impostor_pairs']:.0f} impostor "
           f"pairs, {personal['non_mated_probes']:.0f} non-mated probes):", '',
           '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header),
           '| ' + ' | '.join(_percent(v) for v in values) + ' |', '']
  spread = personal.get('spread')
  if not spread:
    return lines
  lines += [f"Spread across the {personal['clients']} clients (worst 10 %: the mean of the lowest "
            f"{spread['worst_clients']} client(s)' values; min: the lowest client's):", '',
            '| | ' + ' | '.join(header) + ' |', '|' + ' --- |' * (len(header) + 1)]
  for label, key in (('worst 10 %', 'worst_10pct'), ('min', 'min')):
    figures = row(cells(spread['tar'][key]), cells(spread['tpir'][key]))
    lines.append(f'| {label} | ' + ' | '.join(_percent(v) for v in figures) + ' |')
  return lines + ['']
