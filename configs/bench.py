r"""Throughput bench: every engine backend x local-step mode against the ways peers run clients.

    python -m fedjax_face.tools.bench --config=configs/bench.py --out=/tmp/bench
    python -m fedjax_face.tools.bench --config=configs/bench.py:runlocal --out=/tmp/bench_small
    python -m fedjax_face.tools.bench --config=configs/bench.py:full --out=/tmp/bench_full   # GPU / TPU

Section (f) sees only the visible devices; on CPU force some first:
    XLA_FLAGS=--xla_force_host_platform_device_count=4 python -m fedjax_face.tools.bench ...

The model, head and optimizer are the experiment's (`config_lib.base_config`), so the figures are
those of the default FedPE run; `--config.model.name=iresnet18 --config.data.image_size=112`
measures another backbone. Resize a cohort with e.g.
`--config.bench.cohorts.large.num_clients=256 --config.bench.cohorts.large.cohort_size=256`.

Argument: `runlocal` (seconds on CPU, for tests) or `full` (accelerator sizes: a 256-client large
cohort, nothing skipped, more repeats, the server step up to 20,000 classes).
"""

import ml_collections

from fedjax_face import config_lib
from fedjax_face.algorithms import fedfv, fedgc, fedpe
from fedjax_face.proj.fedfv import setting as fedfv_setting


def cohort(num_clients: int, cohort_size: int, identities_per_client: int,
           images_per_identity: int, local_steps: int,
           batch_size: int) -> ml_collections.ConfigDict:
  """`cohort_size` of `num_clients` clients, each training `local_steps` batches of `batch_size`."""
  return ml_collections.ConfigDict(dict(
      num_clients=num_clients, cohort_size=cohort_size,
      identities_per_client=identities_per_client, images_per_identity=images_per_identity,
      local_steps=local_steps, batch_size=batch_size))


def get_config(arg=None):
  args = config_lib.parse_arg(arg, {'runlocal': (True,), 'full': (True,)})
  if len(args) > 1:
    raise ValueError(f'config argument {arg!r}: runlocal and full exclude each other.')
  c = config_lib.base_config()
  c.algorithm = 'fedpe'   # the bench drives FedPE's client update (make_local_step mirrors it)
  c.fedpe = fedpe.config_section()
  c.fedgc = fedgc.config_section()   # section (d) benches FedGC's server step

  b = c.bench = ml_collections.ConfigDict()
  b.sections = ('rounds', 'regularizer', 'eval', 'scaling', 'one_per_client', 'fedavg_cnn', 'ijb',
                'backbone_training', 'fedma_matching', 'inversion', 'leakage', 'membership')
  b.backends = ('vmap', 'map', 'loop')     # engine.BACKENDS; 'map' once per map width
  b.map_widths = (2, 4, 8)
  b.loop_threads = (1, 0)                  # 'loop' on 1 thread and on 0 = the usable CPUs (auto)
  b.step_modes = ('scan', 'unroll')        # core.local.STEP_MODES
  b.warmup = 1                             # untimed calls first; the first one compiles
  b.repeats = 3                            # timed calls; the median is reported
  b.max_timed_s = 10.0                     # a combination's timed calls stop once past this
  # Combinations not run, as fnmatch patterns over '<cohort>/<backend>/<step mode>' with the
  # backend written vmap, map<width>, loop ('large/map8/scan', '*/*/scan'). They are listed in
  # bench.json as skipped, with the pattern as the reason.
  b.skip = ()
  # Also skipped when jax.default_backend() == 'cpu', to keep the CPU run ~5 minutes: `map` on
  # the FedGC-like and large cohorts. With the canonical conv gradient in while loops
  # (models/conv.py) map runs but trails the loop on every cohort (BUILD_NOTES.md, "Known XLA
  # quirks", has the unskipped run), so the FedFV-like cohort alone shows it.
  b.skip_on_cpu = ('fedgc/map*/*', 'large/map*/*')
  # The cohorts, measured in `run_cohorts` order.
  fl = c.federated
  b.cohorts = ml_collections.ConfigDict()
  # FedGC-like: the default experiment (36 clients of 10 identities x 40 images, all selected).
  b.cohorts.fedgc = cohort(fl.num_clients, fl.num_clients,
                           c.data.synthetic.num_identities // fl.num_clients,
                           c.data.synthetic.images_per_identity, fl.local_steps, fl.batch_size)
  # FedFV-like: one identity per client, 8 clients selected out of 1000 per round.
  b.cohorts.fedfv = cohort(1000, 8, 1, 10, fl.local_steps, fl.batch_size)
  # Large: many clients of 32 images each (2 identities x 16), one local epoch of 2 x 16.
  b.cohorts.large = cohort(64, 64, 2, 16, 2, 16)
  b.run_cohorts = ('fedgc', 'fedfv', 'large')

  # (d) FedGC's server step (bench_regularizer.bench_row), d and R as in the paper's scale-up.
  b.regularizer = ml_collections.ConfigDict()
  b.regularizer.classes = (1000, 2000, 4000)
  b.regularizer.dim = 512
  b.regularizer.block = 1024
  b.regularizer.classes_per_client = 100
  b.regularizer.repeats = 3
  b.regularizer.time_max_classes = 50_000    # above: compiled memory only, no timed step
  b.regularizer.dense_max_classes = 100_000  # above: the dense step is not even compiled

  # (e) evaluation: backbone embeddings/s in eval mode; the 10-fold protocol on num_pairs pairs.
  b.eval = ml_collections.ConfigDict()
  b.eval.batch_size = c.eval.batch_size
  b.eval.num_pairs = 6000
  b.eval.num_folds = 10

  # (f) the clients axis sharded over 1, 2, 4, ... visible devices (engine.make_mesh).
  b.scaling = ml_collections.ConfigDict()
  b.scaling.cohort = 'fedgc'
  b.scaling.combination = 'best'   # best non-loop of section (a), or e.g. 'vmap/scan', 'map8/scan'
  b.scaling.device_counts = ()     # () = powers of two up to the visible count, and that count

  # (g) the FedFV setting as it runs (configs/fedfv/ defaults) against one jitted loop over the
  # same images: the rounds after the first (which compiles) give the steady-state round.
  b.one_per_client = ml_collections.ConfigDict()
  b.one_per_client.rounds = 150
  b.one_per_client.run = one_per_client_run(runlocal=False)   # the FedFV run it times

  # (h) plain FedAvg of a classifier CNN on random data (conv32-pool-conv64-pool-dense128-dense360),
  # the workload of the comparison with a PyTorch loop: 36 clients of 10 identities x 8 images,
  # 2 plain SGD steps of 32 each at learning rate 0.1.
  b.fedavg_cnn = ml_collections.ConfigDict()
  b.fedavg_cnn.cohort = cohort(36, 36, 10, 8, 2, 32)
  b.fedavg_cnn.image_size = 32
  b.fedavg_cnn.learning_rate = 0.1
  b.fedavg_cnn.loop_threads = (1, 2)   # loop widths measured beside engine.backend=auto
  b.fedavg_cnn.torch = True            # the PyTorch rows, when torch is installed

  # (i) an IJB evaluation's costs (tools/bench/ijb.py): IResNet-50 on aligned 112 px crops.
  b.ijb = ml_collections.ConfigDict()
  b.ijb.model = 'iresnet50'
  b.ijb.image_size = 112
  b.ijb.dim = 512
  b.ijb.batch_size = 64
  # Loose-crop files decoded and aligned for the host rate, in the evaluator's chunks of 16
  # batches: four chunks. `distinct_crops` rendered faces among them, each written repeatedly.
  b.ijb.crops = 4096
  b.ijb.distinct_crops = 128
  b.ijb.crop_size = 150
  b.ijb.templates = 23_124           # IJB-C's
  b.ijb.num_pairs = 1_000_000

  # (j) a backbone's training images/s beside PyTorch's (tools/bench/backbone_training.py).
  b.backbone_training = ml_collections.ConfigDict()
  b.backbone_training.model = 'iresnet50'
  b.backbone_training.image_size = 112
  b.backbone_training.dim = 512
  b.backbone_training.width = 0          # small_cnn / gn_cnn only
  b.backbone_training.batch_size = 64
  b.backbone_training.classes = 1000
  b.backbone_training.torch = True       # the PyTorch rows, when torch is installed
  # An engine row per 'library/gradient': XLA CPU's convolution library (core/xla_flags.py:
  # CPU_CONVOLUTIONS; each row in its own process on CPU) and the conv gradient (models/conv.py:
  # CONV_GRADIENTS). The fastest is compared.
  b.backbone_training.engines = ('ynnpack/xla', 'ynnpack/chunked', 'eigen/xla', 'eigen/chunked')

  # (k) FedMA's host matching per layer (tools/bench/fedma_matching.py): configs/pad/fedma.py's
  # widths (a data center's and the cap) and data centers, and ResNet-18's convolutions.
  b.fedma_matching = ml_collections.ConfigDict()
  b.fedma_matching.client_width = 8
  b.fedma_matching.cap_width = 12
  b.fedma_matching.clients = 3
  b.fedma_matching.iterations = 5
  b.fedma_matching.resnet18 = True

  # (l) Gradient inversion of one update (tools/bench/inversion.py): issue 59's grid of local
  # batches x local steps (1 and the setting's), 8 targets a cell, 200 iterations each
  # (evals.inversion's default); `timed_iterations` measure the rate.
  b.inversion = ml_collections.ConfigDict()
  b.inversion.batch_sizes = (1, 4, 16)
  b.inversion.local_steps = tuple(sorted({1, c.federated.local_steps}))
  b.inversion.targets = 8
  b.inversion.iterations = 200
  b.inversion.timed_iterations = 20

  # (m) the identity-leakage evaluator's cost (tools/bench/attacks.py), per (identities,
  # distractors): evals.leakage's defaults (64, 64), the privacy tables' (proj/privacy/attacks.py:
  # LEAKAGE_GC 256 against 200, ATTACKS_FV up to 1,000 against 200); probes and exact images at
  # the evaluator's defaults; FedFV's decode at configs/fedfv/'s n = 100 equivalents of k = 2
  # among its 1,000 identities. `rate_images` measure the embedding rate.
  b.leakage = ml_collections.ConfigDict()
  b.leakage.cells = ((64, 64), (256, 200), (1000, 200))
  b.leakage.probes_per_identity = 4
  b.leakage.exact_images = 8
  b.leakage.equivalents = 100
  b.leakage.classes = 1000
  b.leakage.group_size = 2
  b.leakage.share_threshold = 0.35
  b.leakage.rate_images = 512
  # (n) the membership evaluator's cost: the tables' 512 members (ATTACKS_GC / ATTACKS_FV) and
  # docs/privacy.md's runlocal 16, 4 images an identity, the class cosine over 1,000 rows; PAD's
  # 100,000 frames a side (ATTACKS_PAD's cap).
  b.membership = ml_collections.ConfigDict()
  b.membership.samples = (16, 512)
  b.membership.images_per_identity = 4
  b.membership.classes = 1000
  b.membership.pad_frames = (100_000,)
  b.membership.rate_images = 512
  # PAD's detector (proj/pad/setting.py: FedGPAD's PadNet, 1/8 of the paper's width, 32 px).
  b.membership.pad_model = ml_collections.ConfigDict(dict(
      name='pad_net', width=8, image_size=32, disentangle=True, batch_norm_groups=1))
  # (o) a federation over Flower (tools/bench/federation.py): the config every party reads, its
  # holders and rounds. Not among the default sections: it starts real processes (a SuperLink,
  # a SuperNode and a ClientApp per holder, ~1-2 min on 2 cores); name it in bench.sections.
  b.federation = ml_collections.ConfigDict()
  b.federation.config = 'configs/fedgc/fedpe.py:runlocal'
  b.federation.num_clients = 2
  b.federation.rounds = 4
  # (p) Partial FC (tools/bench/partial_fc.py): one local step of the experiment's backbone with
  # a `classes`-row head at each sample rate, arcface_torch's batch of 128 a device and its
  # 0.1. Not among the default sections (a 100k-class step takes seconds on CPU); name it in
  # bench.sections. Add 1,000,000 to `classes` for the 1M-class rows (~3 GiB of arguments at
  # d = 128 beside the logits: opt-in, minutes on a 2-core CPU).
  b.partial_fc = ml_collections.ConfigDict()
  b.partial_fc.classes = (100_000,)
  b.partial_fc.sample_rates = (1.0, 0.1)
  b.partial_fc.batch_size = 128
  b.partial_fc.loss = 'cosface'

  if args.get('runlocal'):
    runlocal(c)
  if args.get('full'):
    full(c)
  return c


def one_per_client_run(runlocal: bool) -> ml_collections.ConfigDict:
  """Section (g)'s run: the FedFV default (or its runlocal size), without evaluation, checkpoints
  or logging."""
  c = fedfv_setting.one_per_client_config('fedfv', runlocal=runlocal)
  c.fedfv = fedfv.config_section()
  if runlocal:
    c.fedfv.num_equivalent = 4
  c.evals = ml_collections.ConfigDict()
  c.checkpoint_every = 0
  return c


def runlocal(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Seconds on CPU: a tiny model and cohorts that still pad (3 clients at map width 2)."""
  config_lib.runlocal(c)
  c.data.image_size = 8
  c.model.width = 2
  c.model.embedding_dim = 8
  c.model.num_stages = 3   # the small CNN's own default, named so that a flag can set it
  b = c.bench
  b.map_widths = (2,)
  b.loop_threads = (1, 2)   # named, not 0: the same combinations on every machine
  b.repeats = 2
  b.skip_on_cpu = ('large/*/scan',)
  b.cohorts.fedgc = cohort(4, 4, 2, 4, 2, 4)
  b.cohorts.fedfv = cohort(20, 3, 1, 3, 2, 4)
  b.cohorts.large = cohort(8, 8, 1, 4, 1, 4)
  b.regularizer.classes = (40, 80)
  b.regularizer.dim = 8
  b.regularizer.block = 32
  b.regularizer.classes_per_client = 10
  b.regularizer.repeats = 1
  b.eval.batch_size = 32
  b.eval.num_pairs = 200
  b.one_per_client.rounds = 4
  b.one_per_client.run = one_per_client_run(runlocal=True)
  b.fedavg_cnn.cohort = cohort(4, 4, 2, 4, 2, 4)
  b.fedavg_cnn.image_size = 8
  b.fedavg_cnn.torch = False   # the tests never depend on an optional package
  b.ijb.model, b.ijb.image_size, b.ijb.dim, b.ijb.batch_size = 'small_cnn', 16, 8, 8
  b.ijb.crop_size, b.ijb.templates, b.ijb.num_pairs = 48, 50, 1000
  b.ijb.crops, b.ijb.distinct_crops = 256, 4   # two chunks of 16 batches of 8
  t = b.backbone_training
  t.model, t.image_size, t.dim, t.width, t.batch_size, t.classes = 'small_cnn', 16, 8, 2, 8, 10
  t.torch = False
  t.engines = ('ynnpack/xla', 'eigen/chunked')
  m = b.fedma_matching
  m.client_width, m.cap_width, m.resnet18 = 2, 3, False
  b.inversion.batch_sizes, b.inversion.local_steps, b.inversion.timed_iterations = (2,), (1,), 2
  k = b.leakage
  k.cells, k.probes_per_identity, k.exact_images, k.rate_images = ((8, 8),), 2, 2, 16
  k.equivalents, k.classes = 4, 16
  n = b.membership
  n.samples, n.classes, n.pad_frames, n.rate_images = (16,), 16, (100,), 16
  n.pad_model.width, n.pad_model.image_size = 2, 16
  b.partial_fc.classes, b.partial_fc.batch_size = (400,), 8
  return c


def full(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Accelerator sizes: nothing skipped, a 256-client large cohort, more repeats."""
  b = c.bench
  b.repeats = 5
  b.max_timed_s = 60.0
  b.skip_on_cpu = ()
  b.cohorts.large = cohort(256, 256, 2, 16, 2, 16)
  b.regularizer.classes = (1000, 5000, 10000, 20000)
  b.regularizer.block = 4096
  b.ijb.batch_size = 256                 # embedding batches as large as an accelerator takes
  b.ijb.crops = 16384                    # four chunks of 16 batches of 256
  b.backbone_training.batch_size = 128   # arcface_torch's batch per GPU
  b.partial_fc.classes = (100_000, 1_000_000)
  return c
