"""report.md from results.json: sections appear only for the evaluators a run had."""

from fedjax_face.core import privacy
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


def test_communication_and_privacy_lines():
  comm = {'bytes_per_client_round': {'down': 621504, 'up': 622016,
                                     'down_by_key': {'model': 621504},
                                     'up_by_key': {'model': 621504, 'W': 512},
                                     'down_once': {'public_images': 2_000_000}},
          'client_rounds': 120, 'clients_reached': 4,
          'total_bytes': {'down': 82_580_480, 'up': 74_641_920}}
  assert report.communication_lines(comm) == [
      'Communication per client per round: down 621.5 KB (model 621.5 KB), up 622.0 KB (model '
      '621.5 KB, W 512 B).',
      'Run total over 120 client-rounds: down 82.6 MB, up 74.6 MB. (public_images 2.0 MB counted '
      'once for each of the 4 clients reached.)', '']
  priv = {'epsilon': 3.99, 'delta': 1e-5, 'rounds': 60, 'accountant': 'RDP', 'unit': 'client',
          'sampling': '36 of 36', 'amplified_by_sampling': False, 'clip_norm': 1.0,
          'noise_multiplier': 17.9, 'not_covered': 'the class rows',
          'noise_seed': privacy.NOISE_SEED_CAVEAT['config']}
  lines = report.privacy_lines(priv)
  assert lines[0].startswith('Client-level differential privacy: epsilon = 3.990 at delta = 1e-05 '
                             'after 60 rounds (RDP; unit: client; 36 of 36; without amplification')
  assert lines[1] == ('The noise is drawn from config.seed (recorded in config.json): epsilon '
                      'holds only while the seed is kept secret.')
  assert lines[2] == 'Not covered: the class rows.'
  assert report.privacy_lines({'enabled': False}) == ['Differential privacy: off.', '']


def test_privacy_lines_name_every_noise_multiplier_of_an_extended_run():
  priv = {'epsilon': 5.02, 'delta': 1e-5, 'rounds': 6, 'accountant': 'RDP', 'unit': 'client',
          'sampling': 'all', 'amplified_by_sampling': False, 'clip_norm': 1.0,
          'noise_multiplier': 2.0, 'noise_history': [{'rounds': 4, 'noise_multiplier': 1.5},
                                                      {'rounds': 2, 'noise_multiplier': 2.0}]}
  assert report.privacy_lines(priv)[1] == ('Noise multiplier by stretch of rounds: 4 rounds at '
                                           '1.5, 2 rounds at 2.')
  one = dict(priv, noise_history=[{'rounds': 6, 'noise_multiplier': 2.0}])
  assert not any(line.startswith('Noise multiplier') for line in report.privacy_lines(one))
