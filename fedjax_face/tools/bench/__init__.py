r"""Throughput of the round engine against the ways peers run clients, all on the same machine.

    python -m fedjax_face.tools.bench --config=configs/bench.py --out=/tmp/bench

Prints markdown tables and writes `<out>/bench.json` (every figure, the config and the platform).
Sections (keys of bench.json; `bench.sections` picks them):

  rounds       (a) images/s of a FedPE round through `core.engine.RoundEngine` for every backend
               (vmap, map at each width, loop) x local-step mode (scan, unroll), per cohort
               (FedGC-like, FedFV-like, large), on padded round data from `data.federated`;
               (b) the same clients as a Python loop over clients and steps calling one jitted
               local step, then the weighted average (how fedjax and pfl-research run clients);
               (c) centralized training on the same images: each local step's K client batches
               concatenated into one batch of K·B over all the cohort's classes.
  regularizer  (d) FedGC's server step vs the number of classes (`bench_regularizer.bench_row`).
  eval         (e) backbone embeddings/s in eval mode; the 10-fold verification protocol's time.
  scaling      (f) the best non-loop combination with the clients axis over 1, 2, 4, ... devices.
  one_per_client  (g) FedFV's run loop (8 of 1,000 one-identity clients) as rounds/s and host time
               between rounds, against one jitted loop over the same images (`one_per_client`).
  fedavg_cnn   (h) plain FedAvg of a small classifier CNN on random data: images/s, GFLOP/s and
               the share of this machine's measured peak, beside the same loop in PyTorch when
               torch is installed (`fedavg_cnn`).
  ijb          (i) an IJB evaluation's costs: loose crops decoded and aligned on the host, the
               backbone's (IResNet-50's) embedding rate, pair scoring with the ROC, and the time
               of one IJB-C evaluation from them (`ijb`).
  backbone_training  (j) IResNet-50's training images/s at batch 64 beside PyTorch's own
               IResNet-50 (threads, and one process per core) when torch is installed.
  fedma_matching  (k) FedMA's host matching time per layer, for its network and for ResNet-18's
               convolutions (`fedma_matching`).
  inversion    (l) gradient inversion of one client's update: compile time and time per
               iteration per local batch and steps, one target's time, issue 59's grid's
               (`inversion`).
  leakage      (m) the identity-leakage evaluator's cost per attacked identity (embedding the
               probes and exact templates, scoring a kind), and FedFV's broadcast decode
               (`attacks`).
  membership   (n) the membership evaluator's cost per scored sample (embedding members and
               non-members, the cosines and AUCs), and PAD's label_loss scoring (`attacks`).
  federation   (o) a federation over Flower against the simulator: bytes per round as serialized
               messages beside the ledger's, seconds per round in the simulator, in process over
               Flower messages (protobuf, holders, server) and over real processes on loopback
               (transport: the difference) (`federation`). Run only when named: it starts real
               processes; skipped without flwr.
  partial_fc   (p) a 100k-class (and, opt-in, 1M-class) head's step with and without Partial FC:
               images/s and XLA's memory analysis (`partial_fc`). Run only when named.

How figures are taken (`timing.measure`): each call's result is blocked on (`jax.block_until_ready`);
`warmup` untimed calls come first, the first of them traces and compiles; then up to `repeats`
timed calls, stopped early once they pass `max_timed_s`; the median is the steady-state figure and
`compile_s` is the first call's time minus that median. Round inputs arrive as host numpy arrays,
as `federated.sample_round` hands them to the engine in a run, so host-to-device copies are part of
every round; drawing the batches is not. Images per round count only real clients' valid samples
(from the round's sample mask), never the padding clients of a padded cohort.

Sizes and what is skipped live in `configs/bench.py`; skipped combinations appear in bench.json with
`status: skipped` and the reason.

Modules: `common` (names, checks, the synthetic problem), `rounds` (a-c), `server_step` (d),
`evaluation` (e), `scaling` (f), `one_per_client` (g), `fedavg_cnn` (h), `ijb` (i),
`backbone_training` (j), `fedma_matching` (k), `inversion` (l), `attacks` (m, n),
`federation` (o), `partial_fc` (p), `torch_reference` (the PyTorch rows' models and processes), `report` (the
tables), `pipeline` (the real-data input pipeline, its own command); `run` below runs the
configured sections.
"""

import json
import os
import time


def run(config, out_dir: str, log=print) -> dict:
  """Runs the sections of `config.bench.sections`; writes bench.json and bench.md to `out_dir`."""
  # The sections are imported here, not when the package is: every process a section spawns
  # (backbone_training's engine rows, the PyTorch rows of torch_reference, which imports numpy
  # alone) imports this package first, and would otherwise import JAX, Flax and every other
  # section with it (~5 s of start-up a process; ~1.4 s of it scipy.optimize for FedMA).
  # pylint: disable=g-import-not-at-top
  from fedjax_face import models
  from fedjax_face.core import policy
  from fedjax_face.tools.bench.attacks import bench_leakage, bench_membership
  from fedjax_face.tools.bench.backbone_training import bench_backbone_training
  from fedjax_face.tools.bench.common import make_problem, platform_info, validate
  from fedjax_face.tools.bench.evaluation import bench_eval
  from fedjax_face.tools.bench.fedavg_cnn import bench_fedavg_cnn
  from fedjax_face.tools.bench.federation import bench_federation
  from fedjax_face.tools.bench.fedma_matching import bench_fedma_matching
  from fedjax_face.tools.bench.inversion import bench_inversion
  from fedjax_face.tools.bench.ijb import bench_ijb
  from fedjax_face.tools.bench.one_per_client import bench_one_per_client
  from fedjax_face.tools.bench.partial_fc import bench_partial_fc
  from fedjax_face.tools.bench.report import markdown
  from fedjax_face.tools.bench.rounds import bench_cohort
  from fedjax_face.tools.bench.scaling import bench_scaling, best_parallel_combination
  from fedjax_face.tools.bench.server_step import bench_regularizer_section
  # pylint: enable=g-import-not-at-top
  validate(config)
  t_start = time.perf_counter()
  os.makedirs(out_dir, exist_ok=True)
  b = config.bench
  info = platform_info()
  # The baselines, eval and scaling's default: no while loops, so the gradient a run would pick
  # for unrolled loop steps. Each round combination picks its own (`bench_cohort`).
  conv_gradient = policy.conv_gradient_for(config, 'loop', 'unroll')
  model = models.build_backbone(config.model, conv_gradient=conv_gradient)
  results = {'platform': info,
             'model': (f'{config.model.name} w={config.model.width} '
                       f'd={config.model.embedding_dim} {config.data.image_size}x'
                       f'{config.data.image_size}'),
             'config': config.to_dict()}
  problems = {}

  def problem(name):
    if name not in problems:
      problems[name] = make_problem(name, b.cohorts[name], config.data.image_size, config.seed)
    return problems[name]

  if 'rounds' in b.sections:
    results['rounds'] = {name: bench_cohort(config, model, problem(name), info['backend'], log)
                         for name in b.run_cohorts}
  if 'regularizer' in b.sections:
    results['regularizer'] = bench_regularizer_section(config, log)
  if 'eval' in b.sections:
    results['eval'] = bench_eval(config, model, log)
  if 'scaling' in b.sections:
    combination = b.scaling.combination
    if combination == 'best':
      combination = best_parallel_combination(results['rounds'][b.scaling.cohort])
    results['scaling'] = bench_scaling(config, problem(b.scaling.cohort), combination, log)
  if 'one_per_client' in b.sections:
    results['one_per_client'] = bench_one_per_client(config, log)
  if 'fedavg_cnn' in b.sections:
    results['fedavg_cnn'] = bench_fedavg_cnn(config, log)
  if 'ijb' in b.sections:
    results['ijb'] = bench_ijb(config, log)
  if 'backbone_training' in b.sections:
    results['backbone_training'] = bench_backbone_training(config, log)
  if 'fedma_matching' in b.sections:
    results['fedma_matching'] = bench_fedma_matching(config, log)
  if 'inversion' in b.sections:
    results['inversion'] = bench_inversion(config, log)
  if 'leakage' in b.sections:
    results['leakage'] = bench_leakage(config, model, log)
  if 'membership' in b.sections:
    results['membership'] = bench_membership(config, model, log)
  if 'federation' in b.sections:
    results['federation'] = bench_federation(config, log)
  if 'partial_fc' in b.sections:
    results['partial_fc'] = bench_partial_fc(config, log)
  results['total_s'] = time.perf_counter() - t_start
  results['platform']['load_average_1min_end'] = os.getloadavg()[0] if hasattr(
      os, 'getloadavg') else None
  text = markdown(results)
  with open(os.path.join(out_dir, 'bench.json'), 'w') as f:
    json.dump(results, f, indent=2)
  with open(os.path.join(out_dir, 'bench.md'), 'w') as f:
    f.write(text + '\n')
  return results
