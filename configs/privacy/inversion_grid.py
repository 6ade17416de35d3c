r"""Gradient inversion's grid (issue 59 part 2): FedPE or FedGC in the FedGC paper's setting at the
benchmark's resolution (32 x 32, small CNN), one cell of local batch x local steps a run, trained
briefly and attacked by the 'inversion' evaluator (eval/privacy/evaluators.py) at its last round.

    python -m fedjax_face.main --config=configs/privacy/inversion_grid.py:method=fedpe,batch=4,steps=1 --workdir=/tmp/inversion
    python -m fedjax_face.reproduce --table=privacy3 --out_dir=docs   # every cell, then the table

Argument (comma separated): method=fedpe|fedgc, batch=1|4|16 (the local batch), steps=1|2 (2 is
the setting's `federated.local_steps`), labels=true|recovered (recovered: batch 1 only),
secure (secure aggregation: the server sees only the cohort's sum), runlocal. DP is switched on
by the table's overrides (`dp.enabled`, `dp.target_epsilon`); under `secure` its noise is drawn
by the clients.

The setting, shrunk so that a cell trains and is attacked in minutes on one CPU: 36 clients,
`COHORT` of them a round (the clients attacked: under `secure` they are reconstructed jointly
from their sum), `ROUNDS` rounds (the last one attacked, replayed from the checkpoint before it),
`IMAGES_PER_IDENTITY` images of each of the 360 identities, verification on the LFW-like set
alone, Inverting Gradients at `ITERATIONS` iterations.
"""

from fedjax_face import config_lib
from fedjax_face.algorithms import fedgc, fedpe
from fedjax_face.eval import config_section
from fedjax_face.proj.fedgc import setting

ARGS = {'method': ('fedpe', 'fedgc'), 'batch': ('1', '4', '16'), 'steps': ('1', '2'),
        'labels': ('true', 'recovered'), 'secure': (True,), 'runlocal': (True,)}
COHORT = 8
ROUNDS = 2
IMAGES_PER_IDENTITY = 8
ITERATIONS = 200


def get_config(arg=None):
  args = config_lib.parse_arg(arg, ARGS)
  method = args.get('method', 'fedpe')
  c = setting.config(method, 'runlocal' if args.get('runlocal') else None)
  if method == 'fedgc':
    c.fedgc = fedgc.config_section()
  else:
    c.fedpe = fedpe.config_section()
  c.federated.batch_size = int(args.get('batch', '4'))
  c.federated.local_steps = int(args.get('steps', str(c.federated.local_steps)))
  c.secure_aggregation.enabled = bool(args.get('secure', False))
  c.evals.verification.pair_sets = ('lfw',)
  c.evals.inversion = config_section('inversion')
  c.evals.inversion.labels = args.get('labels', 'true')
  if args.get('runlocal'):
    c.evals.inversion.update(round=c.num_rounds, targets=2, iterations=3)
    return c
  c.num_rounds = ROUNDS
  c.checkpoint_every = 1
  c.federated.participation = COHORT / c.federated.num_clients
  c.data.synthetic.images_per_identity = IMAGES_PER_IDENTITY
  c.data.synthetic.num_pairs = 600
  c.evals.inversion.update(round=ROUNDS, targets=COHORT, iterations=ITERATIONS)
  return c
