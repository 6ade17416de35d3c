r"""Where FedFR's state lives and what it costs, from shapes alone (nothing is allocated).

    python -m fedjax_face.proj.fedfr.memory --config=configs/fedfr/fedfr.py
    python -m fedjax_face.proj.fedfr.memory --config=configs/fedfr/fedfr.py:paper \
        --config.federated.num_clients=1000

`RoundState.clients` holds, per client, its local model theta_l (the next round's f_prev and its
personalized backbone), its class embeddings W_l, the DFC branch (Pi, Omega, b) and a flag. With
`engine.client_state='device'` (the default) all of it stays in device memory and the engine
gathers the cohort's rows for a round and scatters them back; with 'host' it stays in host
memory and only the cohort's rows reach the device each round. The server holds theta_g, Phi and
the public images (with their labels), which every round embeds.
"""



import jax
import numpy as np
from absl import app, flags
from ml_collections import config_flags

from fedjax_face import models
from fedjax_face.core import arrays
from fedjax_face.data import federated



def state_bytes(config) -> dict[str, int]:
  """Bytes of each part of FedFR's round state for `config` (its data sizes, backbone, clients):
  per client, for all clients, and on the server."""
  d, c = config.data, config.fedfr
  model = models.build_backbone(config.model)
  size = d.image_size
  backbone = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0),
                                               np.zeros((1, size, size, 3), np.float32),
                                               train=False))
  dim = config.model.embedding_dim
  num_private = d.synthetic.num_identities - d.public_identities
  max_classes = -(-num_private // config.federated.num_clients)   # balanced partition
  per_client = {'local model (theta_l)': arrays.tree_bytes(backbone),
                'class embeddings (W_l)': max_classes * dim * 4}
  if c.dfc:
    per_client['DFC branch (Pi, Omega, b)'] = (dim * dim + dim + max_classes * dim + max_classes) * 4
  per_client['flag'] = 1
  public_images = d.public_identities * d.synthetic.images_per_identity
  server = {'global model (theta_g)': arrays.tree_bytes(backbone)}
  if c.public_data:
    server['public class matrix (Phi)'] = d.public_identities * dim * 4
    server['public images (uint8)'] = public_images * size * size * 3
    server['public labels'] = public_images * 4
  out = {f'client: {k}': v for k, v in per_client.items()}
  out['client: total'] = sum(per_client.values())
  out['all clients'] = out['client: total'] * config.federated.num_clients
  cohort = federated.cohort_size(config.federated.num_clients, config.federated.participation)
  out["a round's cohort (on the device with client_state='host')"] = out['client: total'] * cohort
  out.update({f'server: {k}': v for k, v in server.items()})
  out['server: total'] = sum(server.values())
  return out


def main(argv):
  del argv
  config = flags.FLAGS.config
  print(f'FedFR state, {config.federated.num_clients} clients, {config.model.name} '
        f'{config.data.image_size}x{config.data.image_size}, d = {config.model.embedding_dim}:')
  for name, value in state_bytes(config).items():
    print(f'  {name:58s} {value / 2**20:12.2f} MiB')
  print(f"every client's state lives in {config.engine.client_state} memory between rounds "
        '(engine.client_state)')


if __name__ == '__main__':
  # Defined only when run as a program: other tools define a `config` flag too.
  config_flags.DEFINE_config_file('config', None, 'A configs/fedfr/ file.')
  app.run(main)
