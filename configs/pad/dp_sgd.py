r"""Subject-level DP-SGD inside each data center (algorithms/pad_dp_sgd.py) on FedPAD or FedGPAD:
batches drawn by subject (2 frames a subject, 1 live and 1 attack), each subject kept in a step
with probability 0.5, each subject's gradient clipped to 1, Gaussian noise on the sum, BatchNorm
frozen; ε reported in results.json['method_state']['dp_sgd'].

    python -m fedjax_face.main --config=configs/pad/dp_sgd.py:method=fedpad,epsilon=4 \
        --workdir=/tmp/fedpad_dpsgd_eps4

Argument (comma separated): method=fedpad|fedgpad (default fedpad); epsilon=1|2|4|8|16 (the
noise multiplier solved for it at δ = 1e-5; default: noise multiplier 1); clip_only (noise
multiplier 0: the subject draws, frozen BatchNorm and clipping alone, ε = inf, the cost of
everything but the noise); unit=subject|frame (`fedgpad.dp_sgd.clip_unit`); and the method's own
arguments (protocol=, centers=, target=, attacks=, backbone= for FedPAD, paper, runlocal).
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import pad_dp_sgd
from fedjax_face.proj.pad import setting

OWN = {'method': ('fedpad', 'fedgpad'), 'epsilon': ('1', '2', '4', '8', '16'),
       'clip_only': (True,), 'unit': ('subject', 'frame')}
FRAMES_PER_SUBJECT = 2


def get_config(arg=None):
  items = [item for item in (arg or '').split(',') if item]
  own = ','.join(i for i in items if i.partition('=')[0].strip() in OWN)
  rest = ','.join(i for i in items if i.partition('=')[0].strip() not in OWN)
  args = config_lib.parse_arg(own, OWN)
  if 'epsilon' in args and args.get('clip_only'):
    raise ValueError(f"config arguments epsilon={args['epsilon']} and clip_only: clip_only runs "
                     'without noise (epsilon = inf); expected one of them.')
  c = setting.method_config(args.get('method', 'fedpad'), rest or None)
  p = c.data.pad
  p.subject_frames = FRAMES_PER_SUBJECT
  c.federated.batch_size = (p.subjects - p.test_subjects) * FRAMES_PER_SUBJECT
  c.fedgpad.dp_sgd = pad_dp_sgd.config_section()
  d = c.fedgpad.dp_sgd
  d.enabled = True
  d.clip_unit = args.get('unit', 'subject')
  if 'epsilon' in args:
    d.target_epsilon = float(args['epsilon'])
  if args.get('clip_only'):
    d.noise_multiplier = 0.0
  return c
