"""report.md from results.json: sections appear only for the evaluators a run had."""

from fedjax_face.io import report


def test_a_run_without_verification_writes_its_report(tmp_path):
  results = {'algorithm': 'fedfv', 'config_name': 'fedfv-100/cosface/one_per_client',
             'rounds': 3, 'images_seen': 720, 'timing': {'total_s': 1.5}, 'plots': []}
  text = report.write(str(tmp_path), results)
  assert text.startswith('# fedfv — fedfv-100/cosface/one_per_client\n\nRounds: 3; training '
                         'images seen: 720; wall time: 1.5 s.')
  assert 'Verification' not in text
  assert (tmp_path / 'report.md').read_text() == text
  assert (tmp_path / 'results.json').exists()
