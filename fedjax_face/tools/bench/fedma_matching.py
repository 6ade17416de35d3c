"""Section `fedma_matching`: the host time of FedMA's matching of one layer
(`algorithms/fedma/matching.match_layer`: the data centers added in turn, then `iterations`
passes), per layer shape, for the network FedMA trains here (`configs/pad/fedma.py`) and for
ResNet-18's convolutions (64-512 channels, 3x3: a neuron of 9 x in + 2 numbers with its
BatchNorm; the inputs at the cap width), each at the configured number of data centers and cap.

The neurons are random (every data center's drawn apart), so most open new global neurons up to
the cap: the widest, slowest case of the Hungarian assignment.
"""

import time

import numpy as np

from fedjax_face.algorithms.fedma import layers, matching

# ResNet-18's 3x3 convolutions as (input channels, output channels, how many); the stem's 7x7
# on the 6 input channels counts as one more.
RESNET18 = ((64, 64, 4), (64, 128, 1), (128, 128, 3), (128, 256, 1), (256, 256, 3), (256, 512, 1),
            (512, 512, 3))


def _layer_time(width: int, dim: int, clients: int, cap_factor: float, iterations: int,
                seed: int) -> float:
  rng = np.random.default_rng(seed)
  neurons = [rng.normal(size=(width, dim)) / np.sqrt(dim) for _ in range(clients)]
  start = time.perf_counter()
  matching.match_layer(neurons, int(width * cap_factor), iterations=iterations,
                       rng=np.random.default_rng(seed))
  return time.perf_counter() - start


def _neuron_length(layer: layers.Layer, cap_width: int) -> int:
  """A neuron's numbers: its incoming weights over the (cap-wide) inputs, then its BatchNorm
  scale and bias, or its bias."""
  inputs = (sum(layers.MATCHED[p].channels(cap_width) for p in layer.producers)
            if layer.producers else layers.INPUT_CHANNELS)
  dense = layer.kernel[-1].startswith('Dense')
  return (1 if dense else 9) * inputs + (2 if layer.norm else 1)


def _shapes(client_width: int, cap_width: int) -> list[tuple[str, int, int, int]]:
  """(name, neurons, neuron length, how many such layers) of both networks."""
  pad = [(f'pad_net {layer.name}', layer.channels(client_width),
          _neuron_length(layer, cap_width), 1) for layer in layers.MATCHED]
  grow = cap_width / client_width   # ResNet-18's inputs at the same cap
  resnet = [('resnet18 stem 7x7', 64, 49 * layers.INPUT_CHANNELS + 2, 1)]
  resnet += [(f'resnet18 3x3 {cin}->{cout}', cout, 9 * int(cin * grow) + 2, n)
             for cin, cout, n in RESNET18]
  return pad + resnet


def bench_fedma_matching(config, log=print) -> dict:
  s = config.bench.fedma_matching
  rows = []
  for name, width, dim, count in _shapes(s.client_width, s.cap_width):
    if name.startswith('resnet18') and not s.resnet18:
      continue
    seconds = _layer_time(width, dim, s.clients, s.cap_width / s.client_width, s.iterations,
                          config.seed)
    rows.append({'layer': name, 'neurons': width, 'dim': dim, 'layers': count,
                 'seconds': seconds})
    log(f'fedma_matching: {name} ({width} neurons of {dim}): {seconds:.3f} s')
  total = lambda prefix: sum(r['seconds'] * r['layers'] for r in rows
                             if r['layer'].startswith(prefix))
  return {'clients': s.clients, 'cap_factor': s.cap_width / s.client_width,
          'iterations': s.iterations,
          'rows': rows, 'pad_net_total_s': total('pad_net'),
          'resnet18_total_s': total('resnet18') if s.resnet18 else None}


def markdown_lines(r: dict) -> list[str]:
  lines = [f"## (k) FedMA's matching on the host: {r['clients']} data centers, cap "
           f"{r['cap_factor']}x, {r['iterations']} passes, random neurons",
           '| layer | neurons | neuron length | layers of this shape | s per layer |',
           '| --- | ---: | ---: | ---: | ---: |']
  lines += [f"| {row['layer']} | {row['neurons']} | {row['dim']} | {row['layers']} | "
            f"{row['seconds']:.3f} |" for row in r['rows']]
  lines.append(f"whole network: pad_net {r['pad_net_total_s']:.2f} s"
               + ('' if r['resnet18_total_s'] is None
                  else f", ResNet-18's convolutions {r['resnet18_total_s']:.2f} s"))
  return lines
