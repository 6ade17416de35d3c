r"""Single: the detector trained by one data center alone (the FedGPAD paper's Single rows;
FedPAD's training with one client), scored on every other domain.

    python -m fedjax_face.main --config=configs/pad/single.py:center=O --workdir=/tmp/pad_single_O

One run gives the center's Single row of every protocol it is a data center of (Table III reads
the other domains' scores), its in-domain error (its own held-out subjects), and so one row of
the benchmark's calibration (Table I).

Argument (comma separated): center=O|C|I|M|S (default O), target=<another domain> (the one
reported first; default the first other domain), attacks=print|video (train on one attack type
only: Table X), backbone=resnet18|pad_net (FedPAD's detector: default resnet18), paper,
runlocal.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad
from fedjax_face.data.synthetic import pad_benchmark
from fedjax_face.proj.pad import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'center': pad_benchmark.DOMAIN_NAMES,
                                    'target': pad_benchmark.DOMAIN_NAMES,
                                    'attacks': tuple(setting.ATTACK_TYPES), 'paper': (True,),
                                    'runlocal': (True,),
                                    'backbone': tuple(setting.BACKBONES)})
  center = args.get('center', 'O')
  others = [d for d in pad_benchmark.DOMAIN_NAMES if d != center]
  target = args.get('target', others[0])
  if target == center:
    raise ValueError(f'config arguments center={center!r} and target={target!r}; expected a '
                     f'target other than the data center, one of {tuple(others)}.')
  c = setting.pad_config('fedpad', centers=center, target=target,
                         runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                         backbone=args.get('backbone', 'resnet18'))
  c.data.pad.extra_targets = tuple(d for d in others if d != target)
  if 'attacks' in args:
    c.data.pad.center_attacks = setting.center_attacks(args['attacks'])
  c.federated.num_clients = 1
  c.fedgpad = fedgpad.config_section()
  return c
