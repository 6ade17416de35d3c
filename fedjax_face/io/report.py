"""`results.json` (every metric, its protocol named) and `report.md` (the tables) of a run."""

from fedjax_face.io import files

PAIR_SET_TITLES = {'lfw': 'LFW-like', 'cfp_fp': 'CFP-FP-like', 'agedb_30': 'AgeDB-30-like',
                   'sllfw': 'SLLFW-like', 'cplfw': 'CPLFW-like', 'calfw': 'CALFW-like'}


def pair_set_title(name: str, synthetic: bool) -> str:
  """'LFW-like' for the synthetic benchmark's sets; real sets keep their own name ('lfw')."""
  return PAIR_SET_TITLES.get(name, name) if synthetic else name


def _title(results: dict, name: str) -> str:
  return results.get(name, {}).get('title', PAIR_SET_TITLES.get(name, name))


def verification_table(results_by_method: dict[str, dict]) -> str:
  """Markdown table: one row per method, accuracy (mean ± std over 10 folds) per pair set."""
  pair_sets = []
  for res in results_by_method.values():
    for name in res['verification']:
      if name not in pair_sets:
        pair_sets.append(name)
  known = list(PAIR_SET_TITLES)
  pair_sets.sort(key=lambda p: known.index(p) if p in known else len(known))
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


def _percent(value) -> str:
  return '—' if value is None else f'{value * 100:.2f}'


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


def detail_table(verification: dict[str, dict]) -> str:
  """Markdown table of one run's verification metrics per pair set."""
  lines = ['| pair set | accuracy (%) | threshold | VAL@FAR=1e-3 (%) | AUC | pairs |',
           '| --- | --- | --- | --- | --- | --- |']
  for name, m in verification.items():
    lines.append(f"| {_title(verification, name)} | {m['accuracy'] * 100:.2f} ± "
                 f"{m['accuracy_std'] * 100:.2f} | {m['threshold']:.3f} | "
                 f"{m['val_at_far'] * 100:.2f} ± {m['val_at_far_std'] * 100:.2f} | "
                 f"{m['auc']:.4f} | {m['num_pairs']} |")
  return '\n'.join(lines)


def lookalike_lines(look: dict) -> list[str]:
  """The look-alike diagnostic (FedGC Fig. 3): cosines of cross-client family members vs
  strangers."""
  fmt = lambda v: '—' if v is None else f'{v:.3f}'
  return [f"Cross-client look-alike pairs ({look['pairs']}) vs as many strangers, mean cosine:",
          '', '| of | look-alikes | strangers | same identity |', '| --- | --- | --- | --- |',
          f"| class embeddings | {fmt(look.get('class_cos_lookalike'))} | "
          f"{fmt(look.get('class_cos_stranger'))} | |",
          f"| features | {fmt(look['feature_cos_lookalike'])} | "
          f"{fmt(look['feature_cos_stranger'])} | {fmt(look['feature_cos_same_identity'])} |", '']


def personalized_lines(personal: dict) -> list[str]:
  """The personalized protocol's table (eval/recognition/personalized.py): rates by value, '—'
  where the benchmark's size cannot resolve one."""
  cells = lambda d: {float(k): v for k, v in d.items()}
  tar, tpir = cells(personal['tar']), cells(personal['tpir'])
  header = ([f'TAR@FAR={r:g}' for r in sorted(tar)] + [f'TPIR@FPIR={r:g}' for r in sorted(tpir)])
  values = [tar[r] for r in sorted(tar)] + [tpir[r] for r in sorted(tpir)]
  return [f"Personalized evaluation (FedFR protocol, each client's {personal['model']} model, "
          f"mean over {personal['clients']} clients; per client "
          f"{personal['genuine_pairs']:.0f} genuine / {personal['impostor_pairs']:.0f} impostor "
          f"pairs, {personal['non_mated_probes']:.0f} non-mated probes):", '',
          '| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header),
          '| ' + ' | '.join(_percent(v) for v in values) + ' |', '']


def pad_lines(pad: dict) -> list[str]:
  """The presentation-attack table (eval/pad/): HTER at the named threshold rule, EER, AUC."""
  rule = {'test': "chosen on the target's own scores", 'fixed': 'fixed',
          'validation': "chosen on the data centers' held-out subjects"}[pad['threshold_rule']]
  return [f"Presentation-attack detection, {' & '.join(pad['sources'])} -> {pad['target']} "
          f"({pad['num_videos']} videos: {pad['num_live']} live, {pad['num_spoof']} attack; "
          f"scores averaged per video; threshold {pad['threshold']:.4f} {rule}):", '',
          '| HTER (%) | EER (%) | AUC (%) | FAR (%) | FRR (%) |', '| --- | --- | --- | --- | --- |',
          '| ' + ' | '.join(_percent(pad[k]) for k in ('hter', 'eer', 'auc', 'far', 'frr'))
          + ' |', '',
          'By domain (in-domain: the data centers\' held-out subjects, threshold on their scores):',
          '', '| domain | HTER (%) | EER (%) | AUC (%) |', '| --- | --- | --- | --- |',
          *(f'| {name} | ' + ' | '.join(_percent(m[k]) for k in ('hter', 'eer', 'auc')) + ' |'
            for name, m in [(f"in-domain ({' & '.join(pad['sources'])})", pad['in_domain']),
                            *pad['domains'].items()]), '']


def _size(n: int) -> str:
  """Bytes in the largest decimal unit that keeps a leading digit: 621504 -> '621.5 KB'."""
  for unit, scale in (('GB', 1e9), ('MB', 1e6), ('KB', 1e3)):
    if n >= scale:
      return f'{n / scale:,.1f} {unit}'
  return f'{n} B'


def communication_lines(comm: dict) -> list[str]:
  """Bytes per client per round, by what crosses, and the run's totals (core/communication.py)."""
  per = comm['bytes_per_client_round']
  parts = lambda d: ', '.join(f'{k or "all"} {_size(v)}' for k, v in d.items())
  lines = [f"Communication per client per round: down {_size(per['down'])} ({parts(per['down_by_key'])}), "
           f"up {_size(per['up'])} ({parts(per['up_by_key'])}).",
           f"Run total over {comm['client_rounds']} client-rounds: down "
           f"{_size(comm['total_bytes']['down'])}, up {_size(comm['total_bytes']['up'])}."]
  if per['down_once']:
    lines[-1] += (f" ({parts(per['down_once'])} counted once for each of the "
                  f"{comm['clients_reached']} clients reached.)")
  return lines + ['']


def privacy_lines(priv: dict) -> list[str]:
  """The differential-privacy guarantee and what it covers (core/privacy.py)."""
  if not priv.get('enabled', True):
    return ['Differential privacy: off.', '']
  amp = 'with' if priv['amplified_by_sampling'] else 'without'
  lines = [f"Client-level differential privacy: epsilon = {priv['epsilon']:.3f} at delta = "
           f"{priv['delta']:g} after {priv['rounds']} rounds ({priv['accountant']}; unit: "
           f"{priv['unit']}; {priv['sampling']}; {amp} amplification by sampling); clip "
           f"S = {priv['clip_norm']:g}, noise std = {priv['noise_multiplier']:g} x S."]
  if priv.get('not_covered'):
    lines.append(f"Not covered: {priv['not_covered']}.")
  return lines + ['']


def write(workdir: str, results: dict) -> str:
  """Writes results.json and report.md; returns the report's markdown."""
  files.write_json_atomic(files.join(workdir, 'results.json'), results)
  md = [f"# {results['algorithm']} — {results['config_name']}", '',
        f"Rounds: {results['rounds']}; training images seen: {results['images_seen']}; "
        f"wall time: {results['timing']['total_s']:.1f} s.", '']
  verification = results.get('verification')   # absent when config.evals has no such section
  if verification:
    protocol = next(iter(verification.values()))['protocol']
    md += [f'Verification ({protocol}):', '', detail_table(verification), '']
  ident = results.get('identification')
  if ident:
    md += [f"1:N identification ({ident['protocol']}): {ident['num_gallery_identities']} gallery "
           f"templates ({ident['num_enrolled']} enrolled + {ident['num_distractors']} distractors), "
           f"{ident['num_mated']} mated and {ident['num_non_mated']} non-mated probes:", '',
           identification_table({results['config_name']: results}), '']
  personal = results.get('personalized')
  if personal:
    md += personalized_lines(personal)
  if results.get('pad'):
    md += pad_lines(results['pad'])
  sim = results.get('diagnostics', {}).get('class_embedding_similarity')
  if sim:
    md += ['Class-embedding cosine similarity (FedGC Fig. 3 diagnostic):', '',
           '| pairs | mean | std | 99th pct | max |', '| --- | --- | --- | --- | --- |']
    for kind in ('within', 'cross'):
      if sim.get(f'{kind}_mean') is None:
        continue
      md.append(f"| {kind}-client | {sim[f'{kind}_mean']:.3f} | {sim[f'{kind}_std']:.3f} | "
                f"{sim[f'{kind}_p99']:.3f} | {sim[f'{kind}_max']:.3f} |")
    md.append('')
  look = results.get('diagnostics', {}).get('lookalikes')
  if look:
    md += lookalike_lines(look)
  if results.get('communication'):
    md += communication_lines(results['communication'])
  if results.get('privacy'):
    md += privacy_lines(results['privacy'])
  md += ['Plots: ' + ', '.join(results.get('plots', [])), '']
  text = '\n'.join(md)
  files.write_text_atomic(files.join(workdir, 'report.md'), text)
  return text
