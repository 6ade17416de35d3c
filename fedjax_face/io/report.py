"""`results.json` (every metric, its protocol named) and `report.md` of a run: a header, each
evaluator's section as it gives it (`eval.EvalOutput.markdown`), then the run's communication and
privacy. Nothing here knows a task or a data set."""

from fedjax_face.io import files

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
  adaptive = priv.get('adaptive_clip')
  clip = (f"clip S = {priv['clip_norm']:g}, noise std = {priv['noise_multiplier']:g} x S."
          if not adaptive else
          f"adaptive clip C_t from {adaptive['initial_clip_norm']:g} to "
          f"{adaptive['final_clip_norm']:g} (target quantile {adaptive['target_quantile']:g}), "
          f"noise std = {adaptive['update_noise_multiplier']:.4g} x C_t on the update and "
          f"{adaptive['count_noise_multiplier']:g} on the count of clients under C_t, together "
          f"noise multiplier {priv['noise_multiplier']:g}.")
  lines = [f"Client-level differential privacy: epsilon = {priv['epsilon']:.3f} at delta = "
           f"{priv['delta']:g} after {priv['rounds']} rounds ({priv['accountant']}; unit: "
           f"{priv['unit']}; {priv['sampling']}; {amp} amplification by sampling); {clip}"]
  if 'epsilon_pld' in priv:   # written since the PLD accountant was added
    pld = priv['epsilon_pld']
    lines.append(f"PLD accountant (unit: {priv['unit']}; replace-one neighbours): "
                 + (f'epsilon = {pld:.3f} at delta = {priv["delta"]:g}.'
                    if isinstance(pld, (int, float)) else f'{pld}.'))
  history = priv.get('noise_history', [])
  if len(history) > 1:   # an extended run: its rounds ran at several noise multipliers
    lines.append('Noise multiplier by stretch of rounds: ' + ', '.join(
        f"{h['rounds']} rounds at {h['noise_multiplier']:g}" for h in history) + '.')
  if priv.get('noise_seed'):
    lines.append(f"The noise is {priv['noise_seed']}.")
  if priv.get('not_covered'):
    lines.append(f"Not covered: {priv['not_covered']}.")
  return lines + ['']


def write(workdir: str, results: dict, sections: list[str] = ()) -> str:
  """Writes results.json and report.md (`sections`: the evaluators' markdown lines, in order);
  returns the report's markdown."""
  files.write_json_atomic(files.join(workdir, 'results.json'), results)
  md = [f"# {results['algorithm']} — {results['config_name']}", '',
        f"Rounds: {results['rounds']}; training images seen: {results['images_seen']}; "
        f"wall time: {results['timing']['total_s']:.1f} s.", '']
  md += list(sections)
  if results.get('communication'):
    md += communication_lines(results['communication'])
  if results.get('privacy'):
    md += privacy_lines(results['privacy'])
  md += ['Plots: ' + ', '.join(results.get('plots', [])), '']
  text = '\n'.join(md)
  files.write_text_atomic(files.join(workdir, 'report.md'), text)
  return text
