"""The FedGPAD paper's setting (its Sec. IV-A and the authors' code: docs/references.md,
fedgpad-setting), shared by configs/pad/.

Data centers = the source domains of a leave-one-out protocol of the embedded PAD benchmark
(`data/synthetic/pad_benchmark.py`), every one in every round; one local step a round with a
fresh Adam at lr 1e-2 and balanced batches (FedGPAD 16 live + 16 attack frames, FedPAD's ResNet-18
32 + 32); RGB + HSV input; HTER / EER / AUC on the target domain, frame scores averaged per
video. The defaults run in minutes on 2 CPU cores: 32x32 input (depth maps 4x4), the networks at
1/8 width, 400 rounds; `paper` puts back 256x256 and the full width. (XLA CPU spends about a second on one 64x64 batch's gradient of
this network on 2 cores, against ~0.1 s forward: BUILD_NOTES.md, "Known XLA quirks".)
"""

import itertools

import ml_collections

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgpad, fedma
from fedjax_face.data.sources import pad as pad_source
from fedjax_face.data.synthetic import pad_benchmark

# FedPAD's detector (`backbone=`): the paper's ResNet-18 (§IV-A4, the default), or the Table II
# network without ES and Dec (FedPAD as this project first ran it, and as FedGPAD minus the
# disentanglement).
BACKBONES = {'resnet18': 'pad_resnet18', 'pad_net': 'pad_net'}
PROTOCOLS = tuple(pad_benchmark.PROTOCOLS)   # 'OCI_M', 'OMI_C', 'OCM_I', 'ICM_O'
# `centers=OMIS` config arguments: the data centers in order (Tables VIII-IX).
CENTERS = tuple(''.join(p) for r in range(1, len(pad_benchmark.DOMAIN_NAMES))
                for p in itertools.permutations(pad_benchmark.DOMAIN_NAMES, r))
# `attacks=print-video` config arguments (Table X): the attack types each data center trains on,
# in order. The paper's 'video' attacks are the screen ones: a still shown on a display, a replay.
ATTACK_TYPES = {'print': 'print+cut', 'video': 'display+replay'}
ATTACKS_ARGS = tuple('-'.join(p) for r in range(1, len(pad_benchmark.DOMAIN_NAMES))
                     for p in itertools.product(ATTACK_TYPES, repeat=r))


def center_attacks(arg: str) -> tuple[str, ...]:
  """`data.pad.center_attacks` of an `attacks=print-video` config argument."""
  return tuple(ATTACK_TYPES[t] for t in arg.split('-'))


def pad_config(algorithm: str, protocol: str = 'OCI_M', runlocal: bool = False,
               paper: bool = False, centers: str | None = None,
               target: str | None = None, backbone: str = 'resnet18') -> ml_collections.ConfigDict:
  """A PAD config for `algorithm` ('fedpad' | 'fedgpad'), its own section not added: the
  protocol's data centers and target, or `centers` (e.g. 'OMIS') and `target` instead. FedPAD's
  configs (and its baselines Single, Fused, All, which train FedPAD's detector) take `backbone`
  (`BACKBONES`); FedGPAD's network is always Table II's."""
  sources, protocol_target = pad_benchmark.PROTOCOLS[protocol]
  sources = tuple(centers) if centers else sources
  target = target or protocol_target
  c = config_lib.base_config('anti_spoofing')
  c.algorithm = algorithm
  c.num_rounds = 400
  c.log_every = 50
  c.checkpoint_every = 200
  c.data.source = 'pad'
  c.data.image_size = 32
  c.data.pad = pad_source.config_section(sources, target)
  c.federated.num_clients = len(sources)
  c.federated.participation = 1.0
  c.federated.local_steps = 1            # one local step per round (the authors' code)
  resnet = algorithm == 'fedpad' and BACKBONES[backbone] == 'pad_resnet18'
  # FedPAD: 64 a data center (§IV-A4); FedGPAD: 16 live + 16 attack (the authors' code, and the
  # paper's 16), as the Table II variant of FedPAD has always trained.
  c.federated.batch_size = 64 if resnet else 32
  c.federated.balanced_classes = True
  c.optimizer.name = 'adam'              # afresh every round
  c.optimizer.learning_rate = 1e-2
  c.optimizer.momentum = 0.0
  c.optimizer.weight_decay = 0.0         # not given by the paper
  c.model.name = BACKBONES[backbone] if algorithm == 'fedpad' else 'pad_net'
  c.model.width = 8                      # 1/8 of the paper's width (64: Table II, ResNet-18)
  c.model.image_size = c.data.image_size
  c.model.disentangle = algorithm == 'fedgpad'
  c.model.batch_norm_groups = 1          # All's `batch_norm=per_center`: one per data center
  if paper:
    c.data.image_size = c.model.image_size = 256
    c.model.width = 64
  if runlocal:
    c.num_rounds = 2
    c.log_every = 1
    c.checkpoint_every = 1
    c.data.image_size = c.model.image_size = 32
    c.model.width = 2
    c.federated.batch_size = 8
    p = c.data.pad
    p.subjects, p.test_subjects, p.live_videos, p.attack_videos, p.frames = 4, 2, 1, 2, 2
    c.eval.batch_size = 64
  return c


def fedma_config(arg: str | None) -> ml_collections.ConfigDict:
  """configs/pad/fedma.py: FedMA on FedPAD's `backbone=pad_net` network (EI, C, Dep), each data
  center at the width FedPAD trains and the matched widths capped at 1.5 times it; the same local
  steps in all as FedPAD's 400 rounds of one: 16 matching rounds, one for the output layers and
  8 FedAvg rounds, 16 steps each (`protocol=`, `centers=`, `target=`, `paper`, `runlocal`)."""
  args = config_lib.parse_arg(arg, {'protocol': PROTOCOLS, 'centers': CENTERS,
                                    'target': pad_benchmark.DOMAIN_NAMES, 'paper': (True,),
                                    'runlocal': (True,)})
  c = pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'),
                 runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                 centers=args.get('centers'), target=args.get('target'), backbone='pad_net')
  c.algorithm = 'fedma'
  c.fedma = fedma.config_section()
  c.fedma.client_width = c.model.width
  c.model.width = c.model.width * 3 // 2   # the cap
  c.federated.local_steps = 16
  c.num_rounds = fedma.L + 1 + 8
  c.log_every = 5
  c.checkpoint_every = 5
  if args.get('runlocal'):
    c.federated.local_steps = 1
    c.num_rounds = fedma.L + 2
  return c


def personalization_config(algorithm: str, arg: str | None,
                           own_args: dict | None = None) -> tuple[ml_collections.ConfigDict, dict]:
  """configs/pad/{fedbn,fedrep,ditto,apfl}.py: FedPAD's detector and data centers (`protocol=`,
  or `centers=` and `target=`, `backbone=`, `paper`, `runlocal`) trained by the personalization
  method `algorithm`, whose section the caller adds. `own_args`: the method's own arguments.
  Returns the config and the parsed arguments."""
  args = config_lib.parse_arg(arg, {**(own_args or {}), 'protocol': PROTOCOLS, 'centers': CENTERS,
                                    'target': pad_benchmark.DOMAIN_NAMES,
                                    'backbone': tuple(BACKBONES), 'paper': (True,),
                                    'runlocal': (True,)})
  c = pad_config('fedpad', protocol=args.get('protocol', 'OCI_M'),
                 runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                 centers=args.get('centers'), target=args.get('target'),
                 backbone=args.get('backbone', 'resnet18'))
  c.algorithm = algorithm
  return c, args


def method_config(algorithm: str, arg: str | None) -> ml_collections.ConfigDict:
  """configs/pad/fedgpad.py and fedpad.py: `protocol=`, or `centers=` and `target=`,
  `attacks=`, `paper`, `runlocal`, and FedPAD's `backbone=`; the method's section added."""
  allowed = {'protocol': PROTOCOLS, 'centers': CENTERS, 'target': pad_benchmark.DOMAIN_NAMES,
             'attacks': ATTACKS_ARGS, 'paper': (True,), 'runlocal': (True,)}
  if algorithm == 'fedpad':
    allowed['backbone'] = tuple(BACKBONES)
  args = config_lib.parse_arg(arg, allowed)
  c = pad_config(algorithm, protocol=args.get('protocol', 'OCI_M'),
                 runlocal=bool(args.get('runlocal')), paper=bool(args.get('paper')),
                 centers=args.get('centers'), target=args.get('target'),
                 backbone=args.get('backbone', 'resnet18'))
  if 'attacks' in args:
    c.data.pad.center_attacks = center_attacks(args['attacks'])
  c.fedgpad = fedgpad.config_section()
  return c
