r"""FedFR's pre-training: centralized CosFace (s = 30, m = 0.4) on the public identities only.

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py --workdir=/tmp/fedfr_pretrain

Every FedFR run starts from this run's final model and public class matrix
(`--config.init_from=/tmp/fedfr_pretrain`); evaluated as it is, it is Table 1's first row.

Argument (comma separated): ids=N (Fig. 4's scenario of N identities per client: the same
training identities as the federated runs of that scenario), paper (the paper's sizes), runlocal,
partial_fc=R (Partial FC: each step trains a share R of the public class centers, the batch's
classes always among them, arcface_torch's `sample_rate`; models/partial_fc.py. For a public set
of 100k-1M identities; any centralized config takes `--config.head.sample_rate=R` the same way),
class_shards=S (W and its optimizer state split into S equal shards over S devices, or S / D
shards on each of `--config.engine.num_devices=D`, as arcface_torch shards its head over ranks;
algorithms/sharded_classes.py; sets engine.backend='loop'):

    python -m fedjax_face.main --config=configs/fedfr/pretrain.py:partial_fc=0.1,class_shards=8 \
        --workdir=/tmp/pre_pfc8
"""

# arcface_torch's configs use 0.1 (its README's tables), 0.2 and 0.3; 0.5 samples at runlocal's
# sizes (8 public classes, batch 4: rate 0.1 would keep every center).
PARTIAL_FC_RATES = ('0.1', '0.2', '0.3', '0.5')
# Shards of the class matrix: a power of two up to a host of 8 accelerators times 8 (the public
# class count must divide by it, checked when the run is built).
CLASS_SHARDS = ('1', '2', '4', '8', '16', '32', '64')

from fedjax_face import config_lib
from fedjax_face.algorithms import centralized
from fedjax_face.proj.fedfr import setting


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'ids': setting.IDS_PER_CLIENT, 'paper': (True,),
                                    'runlocal': (True,), 'partial_fc': PARTIAL_FC_RATES,
                                    'class_shards': CLASS_SHARDS})
  runlocal = bool(args.get('runlocal'))
  c = setting.pretraining_config(runlocal=runlocal, paper=bool(args.get('paper')))
  if 'ids' in args:
    setting.set_identities_per_client(c, int(args['ids']), runlocal,
                                      paper=bool(args.get('paper')))
  if 'partial_fc' in args:
    c.head.sample_rate = float(args['partial_fc'])
  if 'class_shards' in args:
    c.centralized = centralized.config_section()
    c.centralized.class_shards = int(args['class_shards'])
    c.engine.backend = 'loop'   # the one client's program spans the classes mesh
  return c
