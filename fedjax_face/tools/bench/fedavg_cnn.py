"""Section `fedavg_cnn`: plain FedAvg of a small classifier CNN, the workload that compares the
engine with a PyTorch loop on the same machine.

The workload (`bench.fedavg_cnn`): every client of the cohort trains the whole model, including a
softmax layer over every identity of the federation, for a few plain SGD steps on random uint8
images; the server takes the mean weighted by the clients' sample counts. The model:

  conv3x3-32 (SAME) -> ReLU -> 2x2 max-pool -> conv3x3-64 -> ReLU -> 2x2 max-pool
  -> dense-128 -> ReLU -> dense-(identities), float32, biases everywhere (PyTorch's defaults).

Figures:
  - images/s of a round through `core.engine.RoundEngine`, for the backend `engine.backend=auto`
    picks on this platform and for each configured loop width;
  - GFLOP/s: XLA's `cost_analysis` FLOPs of one client's compiled update times the clients, over
    the round's time, and its share of the machine's measured peak (`peak_gflops`: the best of a
    large float32 matmul and a large convolution, compiled by XLA on all cores);
  - the same model and cohort as a plain PyTorch loop (`torch_reference.py`: one client at a time
    on 1 and on all usable threads, the clients split over one process per usable core with one
    thread each, and torch's CUDA device when it sees one), only when torch is installed. It is
    not a requirement of the project: `pip install torch` to see those rows.

The engine rows run the conv gradient `policy.resolve_engine` picks from the bench config's
`engine` section (XLA's own on CPU for this CNN), and each row records it; run with
`--config.engine.conv_gradient=chunked` to time the chunked kernel gradient (`models/conv.py`), a
setting a run's config may choose: on XLA CPU's YNNPACK convolutions it took this CNN's conv2
kernel gradient from 9.5 to 3.9 ms a step on one core (BUILD_NOTES.md, "Client step on XLA CPU").
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face.core import aggregation
from fedjax_face.core import engine as engine_lib
from fedjax_face.core import local
from fedjax_face.core import policy
from fedjax_face.core.algorithm import Algorithm, ClientInput, ClientResult, RoundState
from fedjax_face.data import preprocess
from fedjax_face.data import stores
from fedjax_face.models import conv as conv_lib
from fedjax_face.models import initializers
from fedjax_face.models import pooling
from fedjax_face.tools.bench import torch_reference
from fedjax_face.tools.bench.common import images_per_round, make_problem, measured, round_inputs
from fedjax_face.tools.timing import measure


class ClassifierCNN(nn.Module):
  """The workload's model: two conv/ReLU/pool stages, dense-128, dense-`num_classes` logits."""
  num_classes: int
  conv_gradient: str = 'xla'

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    conv = conv_lib.conv_function(self.conv_gradient)
    # The RGB layer's forward pass on 4 channels (one of zeros): XLA CPU's kernel is far faster.
    # Flax's default kernel init, drawn as models/initializers.py draws it: the same values to
    # the last bit, compiled in a fraction of the time (~1 s less of every init here).
    init = initializers.lecun_normal
    for features, layer_conv in ((32, conv_lib.channel_padded(conv)), (64, conv)):
      x = nn.Conv(features, (3, 3), padding=1, conv_general_dilated=layer_conv,
                  kernel_init=init)(x)
      x = pooling.max_pool(nn.relu(x), 2)
    x = nn.relu(nn.Dense(128, kernel_init=init)(x.reshape((x.shape[0], -1))))
    return nn.Dense(self.num_classes, kernel_init=init)(x)


def fedavg_classifier(model: ClassifierCNN, identity_table: np.ndarray, image_size: int,
                      learning_rate: float, step_mode: str) -> Algorithm:
  """FedAvg of the whole classifier: clients run plain SGD on softmax cross-entropy over every
  identity (their local labels mapped through `identity_table` [clients, classes per client]),
  the server averages the parameters with weights n_k."""
  optimizer = optax.sgd(learning_rate)
  classes = jnp.asarray(identity_table)

  def loss_fn(params, batch, identities):
    logits = model.apply({'params': params}, preprocess.normalize(batch['images']))
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, identities[batch['labels']])
    mask = batch['mask'].astype(jnp.float32)
    return (losses * mask).sum() / jnp.maximum(mask.sum(), 1.0)

  def init(rng):
    shape = (1, image_size, image_size, 3)
    params = model.init(rng, jnp.zeros(shape, jnp.float32))['params']
    return RoundState(server={'params': params}, clients={}, round=jnp.zeros((), jnp.int32))

  def broadcast(server, client_ids, round_index, rng):
    del round_index, rng
    return ClientInput(shared=server, per_client={'identities': classes[client_ids]})

  def client_update(client_input: ClientInput, private, data, rng) -> ClientResult:
    del private, rng   # no client state; plain SGD draws nothing
    identities = client_input.per_client['identities']

    def step(carry, batch):
      params, opt_state = carry
      loss, grads = jax.value_and_grad(loss_fn)(params, batch, identities)
      updates, opt_state = optimizer.update(grads, opt_state, params)
      return (optax.apply_updates(params, updates), opt_state), loss

    params = client_input.shared['params']
    steps = {k: data[k] for k in ('images', 'labels', 'mask')}   # [steps, batch, ...] each
    (params, _), losses = local.run_steps(local.skip_if_empty(step),
                                          (params, optimizer.init(params)), steps, mode=step_mode)
    return ClientResult(update={'params': params}, private={}, metrics={'loss': losses.mean()})

  def server_update(server, updates, weights, client_ids, round_index, rng):
    del server, client_ids, round_index, rng
    return {'params': aggregation.weighted_mean(updates['params'], weights)}

  return Algorithm(name='fedavg_cnn', init=init, broadcast=broadcast, client_update=client_update,
                   server_update=server_update, eval_variables=lambda server: server,
                   class_embeddings=lambda state: None)


def peak_gflops(timing: dict) -> dict:
  """This machine's float32 GFLOP/s in XLA on all cores, each the fastest of its timed calls: a
  2048^3 matmul and a 3x3 conv of 64 -> 64 channels on 32 x 56 x 56 inputs. The higher of the two
  is the peak the shares are taken of."""
  a = jnp.ones((2048, 2048), jnp.float32)
  x = jnp.ones((32, 56, 56, 64), jnp.float32)
  k = jnp.ones((3, 3, 64, 64), jnp.float32)
  conv = lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), 'SAME',
                                                   dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
  out = {}
  for name, fn, args, flops in (('matmul', lambda a: a @ a, (a,), 2 * 2048**3),
                                ('conv', conv, (x, k), 2 * 32 * 56 * 56 * 9 * 64 * 64)):
    # The fastest call, not the median: a peak is what the machine can do.
    out[f'{name}_gflops'] = flops / min(measure(jax.jit(fn), *args, **timing)['times_s']) / 1e9
  out['peak_gflops'] = max(out.values())
  return out


def client_flops(algorithm: Algorithm, state: RoundState, client_ids: np.ndarray, data: dict,
                 rng: jax.Array) -> float:
  """XLA's FLOP count of one client's compiled update (the first of the round)."""
  client_input = algorithm.broadcast(state.server, jnp.asarray(client_ids[:1]), state.round, rng)
  one = ClientInput(client_input.shared, jax.tree.map(lambda x: x[0], client_input.per_client))
  first = jax.tree.map(lambda x: x[0], data)
  compiled = jax.jit(algorithm.client_update).lower(one, {}, first, rng).compile()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  return float(cost['flops'])


def torch_rows(spec, image_size: int, num_classes: int, learning_rate: float, timing: dict,
               seed: int) -> list[dict]:
  """The same model and cohort as a PyTorch loop (skipped without torch): one client at a time in
  this process on 1 and on all usable threads, on CUDA when torch sees it, and the clients split
  over one process per usable core, one thread each (`torch_reference.PerCore`)."""
  if not torch_reference.available():
    return [{'name': 'pytorch', 'status': 'skipped',
             'reason': 'torch is not installed (optional: pip install torch)'}]
  import torch  # pylint: disable=g-import-not-at-top
  spec = spec.to_dict()
  args = (spec, image_size, num_classes, learning_rate, seed)
  clients = spec['cohort_size']
  images_per = clients * spec['local_steps'] * spec['batch_size']
  start = torch_reference.initial_cnn_state(image_size, num_classes, seed)
  mean = lambda sums: {k: sum(s[k] for s in sums) / clients for k in start}
  rows = []
  threads_before = torch.get_num_threads()
  train = torch_reference.cnn_clients(*args)
  for threads in dict.fromkeys((1, stores.usable_cpus())):
    torch.set_num_threads(threads)
    timed = measure(lambda: mean([train(start, range(clients))]), **timing)
    rows.append(measured({'name': f'pytorch {torch.__version__}, {threads} thread(s)',
                          'threads': threads}, images_per, timed))
  torch.set_num_threads(threads_before)
  processes = min(stores.usable_cpus(), clients)
  pool = torch_reference.PerCore(processes, torch_reference.cnn_clients, args)
  chunks = [c.tolist() for c in np.array_split(np.arange(clients), processes)]
  try:
    timed = measure(lambda: mean(pool.map([(start, chunk) for chunk in chunks])), **timing)
  finally:
    pool.close()
  rows.append(measured({'name': f'pytorch {torch.__version__}, {processes} process(es) x 1 '
                                'thread', 'threads': 1, 'processes': processes},
                       images_per, timed))
  if torch.cuda.is_available():
    on_cuda = torch_reference.cnn_clients(*args, device='cuda')
    timed = measure(lambda: mean([on_cuda(start, range(clients))]), **timing)
    rows.append(measured({'name': f'pytorch {torch.__version__}, cuda '
                                  f'({torch.cuda.get_device_name()})', 'threads': None},
                         images_per, timed))
  return rows


def bench_fedavg_cnn(config, log=print) -> dict:
  """The section: engine rows (auto and each loop width), GFLOP/s, share of peak, PyTorch rows."""
  f = config.bench.fedavg_cnn
  timing = dict(warmup=config.bench.warmup, repeats=config.bench.repeats,
                budget_s=config.bench.max_timed_s)
  problem = make_problem('fedavg_cnn', f.cohort, f.image_size, config.seed)
  fed = problem.fed
  num_classes = fed.num_identities
  backend, step_mode, auto_threads, conv_gradient = policy.resolve_engine(
      _engine_config(config, f.cohort.local_steps))
  model = ClassifierCNN(num_classes=num_classes, conv_gradient=conv_gradient)
  algorithm = fedavg_classifier(model, np.asarray(fed.identity_table), f.image_size,
                                f.learning_rate, step_mode)
  # Compiled as one program: the eager init's parameters, to the last bit (models/initializers.py).
  state = jax.jit(algorithm.init)(jax.random.PRNGKey(config.seed))
  rng = jax.random.fold_in(jax.random.PRNGKey(config.seed), 1)
  peak = peak_gflops(timing)
  log(f"fedavg_cnn: peak {peak['peak_gflops']:.0f} GFLOP/s (matmul {peak['matmul_gflops']:.0f}, "
      f"conv {peak['conv_gflops']:.0f})")
  ids, _, data = round_inputs(problem, 1, config.seed)
  flops = client_flops(algorithm, state, ids, data, rng)
  real_clients = int((ids < fed.num_clients).sum())
  variants = [('auto', backend, auto_threads)]
  variants += [('loop', 'loop', t) for t in f.loop_threads]
  rows = []
  for label, name, threads in variants:
    eng = engine_lib.RoundEngine(algorithm, backend=name, loop_threads=threads)
    ids, weights, data = round_inputs(problem, eng.cohort_multiple(), config.seed)
    timed = measure(eng.run_round, state, ids, weights, data, rng, **timing)
    row = measured({'name': label, 'backend': name, 'loop_threads': threads,
                    'step_mode': step_mode, 'conv_gradient': conv_gradient},
                   images_per_round(ids, data, fed.num_clients), timed)
    row['gflops'] = flops * real_clients / timed['median_s'] / 1e9
    row['share_of_peak'] = row['gflops'] / peak['peak_gflops']
    rows.append(row)
    log(f"fedavg_cnn/{label}: {row['images_per_s']:,.0f} images/s, {row['gflops']:.1f} GFLOP/s "
        f"({100 * row['share_of_peak']:.0f}% of peak)")
  reference = torch_rows(f.cohort, f.image_size, num_classes, f.learning_rate, timing,
                         config.seed) if f.torch else []
  for row in reference:
    if row['status'] == 'measured':
      row['gflops'] = flops * real_clients / row['median_s'] / 1e9
      log(f"fedavg_cnn/{row['name']}: {row['images_per_s']:,.0f} images/s")
  best_torch = max((r['images_per_s'] for r in reference if r['status'] == 'measured'),
                   default=None)
  return {'cohort': f.cohort.to_dict(), 'image_size': f.image_size,
          'classes': num_classes, 'learning_rate': f.learning_rate,
          'client_flops': flops, **peak, 'engine': rows, 'pytorch': reference,
          'auto_over_best_pytorch': rows[0]['images_per_s'] / best_torch if best_torch else None}


def _engine_config(config, local_steps: int) -> ml_collections.ConfigDict:
  """The fields `policy.resolve_engine` reads: the run's engine section, this cohort's steps and
  the model's name (a CNN's: not an IResNet)."""
  return ml_collections.ConfigDict({'engine': config.engine.to_dict(),
                                    'federated': {'local_steps': local_steps},
                                    'model': {'name': 'classifier_cnn'}})
