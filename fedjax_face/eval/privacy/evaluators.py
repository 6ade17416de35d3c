"""The 'inversion' evaluator: gradient inversion of the clients' updates of one round
(`inversion.py`; issue 59 part 2).

Threat model: a curious server that knows the model it broadcast. What it sees of the backbone:
- without secure aggregation, each client's update before aggregation; under DP the clipped
  update as sent: the noise is the server's own, added after it has seen the update, so it
  protects nothing here (results.json's `dp_noise` says so);
- with secure aggregation (core/secure_aggregation.py), only the cohort's weighted sum
  Σ_k s_k (u_k − θ) (`secure_sum`: each client's fixed-point share, summed modulo 2^32 and
  decoded, which is the unmasked sum bit for bit since the masks cancel exactly); under DP each
  client first adds its share of the noise, N(0, (σS)² s_k) (core/privacy.py's `noise_share`),
  drawn here from the run's own key (`client_noise_key`) unless `dp.noise_seed='os'` made it
  secret, when a draw of the same std stands in (results.json says which).
The server is given the client's class rows W_k at the round's start: FedGC's server holds and
broadcasts them; FedPE's are private, given to the attacker, so for FedPE the numbers are an
upper bound on what its server learns (`client_rows`). The batch's labels are given
(`labels='true'`) or recovered from the update at batch 1 (`labels='recovered'`,
`recovered_label`): FedGC's rows sent back give iDLG's rule its row gradients (they cross in the
clear, under secure aggregation too); FedPE sends no rows, and the gradient of its final
BatchNorm's shift is ∂L/∂f, read against the W_k it is given (inversion.py's
`label_from_feature_gradient`).

The attack: round `round`'s updates, replayed from the checkpoint before it
(`EvalInputs.replay`), read as a pseudo-gradient (θ_sent − θ_received) / lr. The attacker's model
of it runs the client's own local steps on its dummy batch
(train-mode BatchNorm per step, weight decay, SGD with momentum, W trained as FedPE and FedGC
train it) from the broadcast θ and the client's W, unrolled as Geiping et al. (Sec. 5) attack a
multi-step update, and is matched by cosine with a TV prior (Inverting Gradients) or by L2 (DLG,
`distance='l2'`). Under secure aggregation the model is the same sum over the cohort
(`sum_model`, run client by client: `inversion.make_sum_attack`): every client's dummy batch is
reconstructed jointly, client k's slot with k's rows and labels. A first-order reading (one gradient at θ weighted by the momentum's sums) was
tried and dropped: on a runlocal FedPE round (2 steps of batch 2 at lr 0.1) the true images
(under the best of their flips) were at cosine distance 0.40 from the update under it, against
1e-6 at 1 step. The client's random
flips are a coin the server never sees: each reconstruction is scored against its true image or
that image's mirror, whichever is closer.

Reported per target: PSNR and SSIM of its images against the true ones, and whether the final
global model recognises each reconstruction as the right identity: nearest class embedding (when
the method keeps them) and nearest mean embedding of that identity's training images (up to
`GALLERY_IMAGES` each), beside the same for the true images (the ceiling).

Not attacked under float16 (`model.dtype='float16'`, refused by `check_inversion`): a client's
steps there are loss-scaled from its private scale and skipped where that scale overflows
(core/loss_scale.py), which the attacker's model (`client_update_model`, every SGD step taken)
does not reproduce; the replayed updates themselves are the run's (run/replay.py runs the
method's own client update on the checkpointed state, the kept scale included).

Not attacked: anti-spoofing (FedPAD, FedGPAD). Their clients take Adam steps from a fresh state
(proj/pad/setting.py), whose first step sends lr · g / (|g| + ε): the sign of each coordinate
of the gradient rather than its direction, through which a matching objective has almost no
gradient; and a live / spoof model has no identity to score a reconstruction by.
"""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from fedjax_face import models
from fedjax_face.core import arrays, checks, privacy, secure_aggregation
from fedjax_face.core import engine as engine_lib
from fedjax_face.data import preprocess, stores
from fedjax_face.eval import EvalOutput, Evaluator
from fedjax_face.eval.privacy import inversion
from fedjax_face.eval.recognition import verification
from fedjax_face.models import heads

GALLERY_IMAGES = 4   # training images per identity in its mean embedding
# The methods whose client update the attacker's model reproduces (`client_update_model`): the
# backbone sent after FedPE's local SGD, with per-client class rows to compute the loss with.
# Others are refused before training: FedAwS / FedFace / FedFV / FedUV / FedFR train other local
# objectives or hold no per-client rows, centralized training has no client, FedPAD / FedGPAD /
# FedMA are anti-spoofing (no class rows).
ATTACKED_METHODS = ('fedpe', 'fedgc')
_FIELDS = ('distance', 'iterations', 'labels', 'learning_rate', 'restarts', 'round', 'signed',
           'targets', 'tv_weight')
LABELS = ('true', 'recovered')


def config_inversion() -> ml_collections.ConfigDict:
  """`config.evals.inversion`: off (targets=0) unless switched on; the local batch and steps are
  the run's own."""
  c = ml_collections.ConfigDict()
  c.round = 1              # the round attacked (1-based; its update replayed from round-1's state)
  c.targets = 0            # clients attacked: the first of that round's cohort; 0 = off (under
                           # secure aggregation all are reconstructed jointly, these scored)
  c.restarts = 1           # random starts, the lowest matching loss kept
  c.iterations = 200       # Adam steps on the images
  c.learning_rate = 0.1    # Adam's rate, /10 at 3/8, 5/8, 7/8 of the iterations
  c.tv_weight = 1e-4       # total-variation prior (0 with distance='l2': DLG)
  c.distance = 'cosine'    # 'cosine' (Inverting Gradients) | 'l2' (DLG)
  c.signed = True          # Adam on the sign of the images' gradient (inversion.make_attack)
  c.labels = 'true'        # the batch's labels: given ('true'), or read from the update at
                           # batch 1 ('recovered': `recovered_label`)
  return c


def check_inversion(config, section) -> None:
  name = 'evals.inversion'
  if sorted(section) != sorted(_FIELDS):
    raise ValueError(f'config.{name} has fields {sorted(section)}; expected {sorted(_FIELDS)}.')
  checks.check_int(f'{name}.targets', section.targets, allow_zero=True)
  for field in ('round', 'restarts', 'iterations'):
    checks.check_int(f'{name}.{field}', section[field])
  checks.check_number(f'{name}.learning_rate', section.learning_rate)
  checks.check_number(f'{name}.tv_weight', section.tv_weight, allow_zero=True)
  checks.check_choice(f'{name}.distance', section.distance, inversion.DISTANCES)
  checks.check_bool(f'{name}.signed', section.signed)
  checks.check_choice(f'{name}.labels', section.labels, LABELS)
  if not section.targets:
    return
  if section.round > config.num_rounds:
    raise ValueError(f'config.{name}.round={section.round}; expected a round of the run, '
                     f'1..{config.num_rounds}.')
  if 'head' not in config:
    raise ValueError(f'config.{name}: algorithm={config.algorithm!r} trains a live / spoof model '
                     'with Adam from a fresh state, whose update carries the signs of its gradient '
                     'only, and has no identity to score by; expected a recognition config.')
  if config.algorithm not in ATTACKED_METHODS:
    raise ValueError(f'config.{name}: algorithm={config.algorithm!r}, whose client update the '
                     f'attack does not model; expected one of {ATTACKED_METHODS}.')
  if section.labels == 'recovered' and config.federated.batch_size != 1:
    raise ValueError(f"config.{name}.labels='recovered' reads one example's label from the "
                     f'update; expected federated.batch_size=1, not {config.federated.batch_size}.')
  if (section.labels == 'recovered' and config.algorithm == 'fedpe'
      and config.secure_aggregation.enabled):
    raise ValueError(f"config.{name}.labels='recovered': FedPE's label is read from its own "
                     "backbone update, which secure aggregation sums with the cohort's; expected "
                     "labels='true' or secure_aggregation.enabled=False.")
  if config.optimizer.get('name', 'sgd') != 'sgd':
    raise ValueError(f'config.{name}: optimizer.name={config.optimizer.name!r}; the update reads '
                     "as a pseudo-gradient only under SGD; expected 'sgd'.")
  if config.model.get('dtype', 'float32') == 'float16':
    # `client_update_model` takes plain SGD steps; a float16 client's are loss-scaled from its
    # private scale and skipped on overflow (core/loss_scale.py), which the model cannot see.
    raise checks.UsageError(
        f"config.model.dtype='float16' with config.{name}.targets={section.targets}: the "
        "attacker's model of a client's update takes every SGD step, while a float16 client "
        'skips the steps its private loss scale overflows; expected model.dtype float32 or '
        f'bfloat16, or {name}.targets=0.')


def _method_part(tree):
  """A method's own server or clients state: under 'method' when building blocks wrap it."""
  if isinstance(tree, dict) and set(tree) == {'method', 'blocks'}:
    return tree['method']
  return tree


def _gallery(fed, num_identities: int):
  """(indices into `fed.images`, their identities): up to `GALLERY_IMAGES` per identity."""
  index, owner = [], []
  for k, ids in enumerate(np.asarray(fed.identity_table)):
    for local, identity in enumerate(ids):
      if identity < 0:
        continue
      own = fed.client_indices[k][fed.client_local_labels[k] == local][:GALLERY_IMAGES]
      index.append(own)
      owner.append(np.full(len(own), identity))
  index, owner = np.concatenate(index), np.concatenate(owner)
  assert owner.max() < num_identities
  return index, owner


def _mean_embeddings(embedded: np.ndarray, owner: np.ndarray, num: int) -> np.ndarray:
  total = np.zeros((num, embedded.shape[1]))
  np.add.at(total, owner, embedded)
  return arrays.l2_normalize(total)


def client_rows(server, clients, num_clients: int):
  """(each client's class rows W_k at the round's start `[K, C, d]`, and whose they are), or
  (None, None): the client's own (FedPE: private, given to the attacker, so an upper bound), else
  the server's per-client slots (FedGC: the rows it broadcasts)."""
  if isinstance(clients, dict) and 'W' in clients:
    return clients['W'], "the client's private class rows W_k (an upper bound)"
  w = server.get('W') if isinstance(server, dict) else None
  if w is not None and np.ndim(w) == 3 and np.shape(w)[0] == num_clients:
    return w, 'the class rows W_k the server broadcast'
  return None, None


def _to_uint8(images) -> np.ndarray:
  """Model inputs in [-1, 1] -> uint8 (the inverse of `preprocess.normalize`)."""
  return np.clip(np.round((np.asarray(images) + 1.0) * 127.5), 0, 255).astype(np.uint8)


def client_update_model(config, r: int):
  """(`grad_fn`, the client's learning rate in round r): the attacker's model of a client's
  pseudo-gradient, `grad_fn(images [S, B, H, W, C] in [-1, 1], θ params, batch_stats, W [C, d],
  labels [S, B], mask [S, B], class_mask [C]) -> (θ − θ_S) / lr`: the client's S local steps on
  `images` from θ and W, unrolled (Geiping et al. Sec. 5) as FedPE and FedGC run them
  (algorithms/common.py: weight decay, then SGD with momentum reset each round, train-mode
  BatchNorm per step, W trained unless the method holds it fixed), random flips left out."""
  model = models.build_backbone(config.model)
  head = dict(config.head)
  if head.get('margin', -1.0) < 0:   # a negative margin: the loss's own (algorithms/common.py)
    head['margin'] = None
  head_kwargs = heads.head_kwargs_from_config(head)
  opt = config.optimizer
  steps = config.federated.local_steps
  # The round's learning-rate factor, as algorithms/common.py:lr_scale_schedule gives it.
  decay = ({int(round(f * config.num_rounds)): opt.decay_factor for f in opt.decay_at}
           if opt.get('schedule', 'constant') != 'constant' else {})
  learning_rate = opt.learning_rate * float(optax.piecewise_constant_schedule(1.0, decay)(r - 1))
  client_opt = optax.chain(optax.add_decayed_weights(opt.weight_decay),
                           optax.sgd(learning_rate, momentum=opt.momentum or None))
  train_w = not config.get('fedpe', {}).get('fixed_class_embeddings', False)

  def grad_fn(images, params, batch_stats, w, labels, mask, class_mask):
    def loss(p, step_images, step_labels, step_mask):
      variables = {'params': p['backbone']}
      if batch_stats:
        variables['batch_stats'] = batch_stats
      features, _ = model.apply(variables, step_images, train=True, mutable=['batch_stats'])
      rows = p['W'] if train_w else jax.lax.stop_gradient(w)
      return heads.loss(features, rows, step_labels, class_mask, step_mask, **head_kwargs)
    p = {'backbone': params, 'W': w}
    opt_state = client_opt.init(p)
    for s in range(steps):   # unrolled: XLA CPU's conv gradients are slow inside a loop
      g = jax.grad(loss)(p, images[s], labels[s], mask[s])
      if not train_w:
        g = {**g, 'W': jnp.zeros_like(w)}
      updates, opt_state = client_opt.update(g, opt_state, p)
      p = optax.apply_updates(p, updates)
    return inversion.pseudo_gradient(params, p['backbone'], learning_rate)

  return grad_fn, learning_rate


def sum_model(grad_fn):
  """The attacker's model of the cohort's weighted sum under secure aggregation (its definition;
  the evaluator runs it client by client, `inversion.make_sum_attack`):
  `summed(images [m, S, B, ...], θ params, batch_stats, W [m, C, d], labels [m, S, B],
  mask [m, S, B], class_mask [m, C], shares [m]) = Σ_k s_k grad_fn(client k's arguments)`,
  the pseudo-gradient of the mean the server decodes (Σ_k s_k = 1 over the real clients)."""
  per_client = jax.vmap(grad_fn, in_axes=(0, None, None, 0, 0, 0, 0))

  def summed(images, params, batch_stats, w, labels, mask, class_mask, shares):
    grads = per_client(images, params, batch_stats, w, labels, mask, class_mask)
    return jax.tree.map(lambda g: jnp.tensordot(shares, g, axes=1), grads)

  return summed


def client_noise_key(round_rng: jax.Array, client_id: int, secret) -> jax.Array:
  """The key client `client_id` draws its share of the DP noise from under secure aggregation,
  as core/engine.py's `_one_client` derives it from the round's key."""
  base = jax.random.fold_in(jax.random.fold_in(round_rng, client_id), privacy.NOISE_STREAM)
  return engine_lib.noise_key(base, secret)


def secure_sum(deltas: list, shares, fraction_bits: int):
  """What secure aggregation reveals of `deltas` (one pytree per client, float32) with
  `shares` `[len(deltas)]`: Σ_k encode(s_k · δ_k) modulo 2^32, decoded (the clients' masks
  cancel exactly in the sum, so this is the server's unmasked sum bit for bit)."""
  def encoded(delta, share):
    share = jnp.float32(share)
    return jax.tree.map(
        lambda x: secure_aggregation.encode(share * x.astype(jnp.float32), fraction_bits)[0],
        delta)
  rings = [encoded(d, s) for d, s in zip(deltas, shares)]
  total = jax.tree.map(lambda *xs: jnp.sum(jnp.stack(xs), axis=0, dtype=jnp.uint32), *rings)
  return jax.tree.map(lambda x: secure_aggregation.decode(x, fraction_bits), total)


def round_noise_std(dp: privacy.DpSpec, replay, r: int):
  """σS of round r's noise shares: under adaptive clipping σ_Δ times the clip C_t that round r
  ran at (held by the state it trained from: the engine's `round_clip`), else the spec's fixed
  σS. Read from the replay only when adaptive (the state costs a checkpoint restore)."""
  if not dp.adaptive:
    return dp.noise_std
  return dp.noise_std_at(engine_lib.round_clip(dp, replay.state_before(r)))


def secure_view(replay, r: int, cohort: np.ndarray, updates: list, sent) -> tuple[dict, dict]:
  """(the decoded sum Σ_k s_k (u_k − θ [+ noise share]) of round r's backbone updates, as the
  server of a run with secure aggregation sees it, and how it was made: each real client's
  share s_k, and where its DP noise came from). Reads the replay's simulation as the engine ran
  the round (run/simulation.py's `train_round`): the padded cohort, the example counts, the
  round's key, the engine's DP and secure-aggregation specs."""
  sim = replay.sim
  engine = sim.engine
  num_clients = sim.fed.num_clients
  padded = np.asarray(sim.cohorts.padded(r - 1, engine.cohort_multiple()))
  real = padded < num_clients
  weights = np.where(real, sim.num_examples[np.minimum(padded, num_clients - 1)], 0.0)
  shares = np.asarray(engine_lib.aggregation_shares(jnp.asarray(weights, jnp.float32),
                                                    engine.dp), np.float32)[real]
  assert np.array_equal(padded[real], cohort)
  deltas = [jax.tree.map(lambda u, o: u.astype(jnp.float32) - o.astype(jnp.float32),
                         update['model'], sent) for update in updates]
  dp, how = engine.dp, {'shares': [float(x) for x in shares]}
  if dp is None:
    how['dp_noise'] = 'none (no DP)'
  else:
    round_rng = jax.random.fold_in(sim.root_rng, r)
    own = replay.config.dp.get('noise_seed', 'config') != 'os'
    secret = engine.noise_secret if own else None
    std = round_noise_std(dp, replay, r)
    deltas = [privacy.noise_share(delta, std * jnp.sqrt(jnp.float32(share)),
                                  client_noise_key(round_rng, int(k), secret))
              for delta, share, k in zip(deltas, shares, cohort)]
    how['dp_noise'] = (
        f"each client's share N(0, (sigma S)^2 s_k), sigma S = {float(std):.4g}"
        + (f" (round {r}'s adaptive clip)" if dp.adaptive else '') + ', '
        + ("the run's own draws" if own else "drawn afresh with the run's std (dp.noise_seed="
           "'os': the run's draws are secret)"))
  return secure_sum(deltas, shares, engine.secure.fraction_bits), how


def recovered_label(config, update: dict, sent_params, rows, class_mask, learning_rate: float
                    ) -> tuple[int, str]:
  """(the label of a batch-1 client's example read from its update, the rule that gave it):
  FedGC, iDLG's sign rule on the row gradients of the W_k it sent back (`inversion.idlg_label`;
  where no single row is opposed to all others, the row with the lowest mean cosine to them);
  FedPE, the final BatchNorm shift's gradient (∂L/∂f) against the rows the attacker is given
  (`inversion.label_from_feature_gradient`). Read from the whole update: with several local
  steps of one image each it names one label for all of them."""
  valid = np.flatnonzero(np.asarray(class_mask))
  if 'W' in update:
    grads = inversion.row_gradients(rows, update['W'], learning_rate,
                                    config.optimizer.weight_decay)[valid]
    try:
      return int(valid[inversion.idlg_label(grads)]), 'idlg_sign'
    except ValueError:
      unit = grads / np.maximum(np.linalg.norm(grads, axis=1, keepdims=True), 1e-30)
      cos = unit @ unit.T
      return int(valid[np.argmin(cos.sum(axis=1) - np.diag(cos))]), 'idlg_lowest_cosine'
  shift = update['model']['params'].get('features', {}).get('bias')
  if shift is None:
    raise ValueError(f"config.evals.inversion.labels='recovered': {config.model.name} has no "
                     "final BatchNorm shift ('features'/'bias') to read the label from; expected "
                     "labels='true'.")
  feature_grad = (np.asarray(sent_params['features']['bias'], np.float64)
                  - np.asarray(shift, np.float64)) / learning_rate
  return inversion.label_from_feature_gradient(feature_grad, rows, class_mask), 'feature_gradient'


def make_inversion(config, section, setup) -> Evaluator | None:
  """The evaluator (module docstring); None when off (`targets=0`)."""
  if not section.targets:
    return None
  grad_fn, learning_rate = client_update_model(config, section.round)
  steps = config.federated.local_steps
  fed = setup.fed_view
  identity_table = np.asarray(fed.identity_table)
  gallery_index, gallery_owner = _gallery(fed, fed.num_identities)
  gallery_images, ok = stores.take(fed.images, gallery_index)
  gallery_images, gallery_owner = gallery_images[ok], gallery_owner[ok]

  secure = bool(config.secure_aggregation.enabled)
  options = dict(iterations=section.iterations, learning_rate=section.learning_rate,
                 tv_weight=section.tv_weight, distance=section.distance, signed=section.signed)
  # Under secure aggregation `sum_model`'s objective, client by client (2 arguments shared: θ
  # and the BatchNorm statistics).
  attack = (inversion.make_sum_attack(grad_fn, 2, **options) if secure
            else inversion.make_attack(grad_fn, **options))

  def recognised(inputs, means, images: np.ndarray, identities: np.ndarray) -> dict:
    """Per image: is the right identity the nearest class embedding / mean embedding?"""
    embedded = verification.compute_embeddings(inputs.embed, images,
                                               batch_size=config.eval.batch_size, flip=False)
    out = {'mean_embedding': np.argmax(embedded @ means.T, axis=1) == identities}
    if inputs.class_embeddings is not None:
      rows = arrays.l2_normalize(np.asarray(inputs.class_embeddings, np.float64))
      out['class_embedding'] = np.argmax(embedded @ rows.T, axis=1) == identities
    return out

  def evaluate(inputs) -> EvalOutput | None:
    if inputs.replay is None:   # a mid-run evaluation, or another process: nothing replayed
      return None
    r = section.round
    updates = inputs.replay(r)
    state = inputs.replay.state_before(r)
    cohort, data = inputs.replay.round_batches(r)
    server, clients = _method_part(state.server), _method_part(state.clients)
    if 'model' not in server or not all('model' in u for u in updates):
      raise ValueError(f'config.evals.inversion: {config.algorithm}\'s updates carry no backbone '
                       "('model') the attack can match; expected a method that sends it.")
    rows, rows_from = client_rows(server, clients, fed.num_clients)
    if rows is None:
      raise ValueError(f'config.evals.inversion: {config.algorithm} keeps no per-client class rows '
                       "('W') to compute a client's loss with; expected FedPE or FedGC.")
    sent = server['model']
    cohort_rows = jnp.asarray(np.asarray(rows)[np.asarray(cohort)])
    true_labels = np.asarray(data['labels'])
    labels, recovery = true_labels, None
    if section.labels == 'recovered':
      read = [recovered_label(config, u, sent['params'], cohort_rows[i], data['class_mask'][i],
                              learning_rate) for i, u in enumerate(updates)]
      labels = np.broadcast_to(np.array([label for label, _ in read], true_labels.dtype)
                               [:, None, None], true_labels.shape)
      valid = np.asarray(data['mask'], bool)
      recovery = {'accuracy': float(np.mean(labels[valid] == true_labels[valid])),
                  'rules': sorted({rule for _, rule in read})}
    gallery = verification.compute_embeddings(inputs.embed, gallery_images,
                                              batch_size=config.eval.batch_size, flip=False)
    means = _mean_embeddings(gallery, gallery_owner, fed.num_identities)
    rng = jax.random.PRNGKey(config.seed)
    statistics = sent.get('batch_stats', {})
    num_targets = min(section.targets, len(cohort))
    if secure:   # one attack on the sum: every client of the cohort reconstructed jointly
      total, how = secure_view(inputs.replay, r, np.asarray(cohort), updates, sent)
      target = jax.tree.map(lambda x: -x / learning_rate, total['params'])
      joint, loss = inversion.invert(
          attack, target, data['images'].shape, jax.random.fold_in(rng, r), sent['params'],
          statistics, cohort_rows, jnp.asarray(labels), data['mask'], data['class_mask'],
          jnp.asarray(how['shares']), restarts=section.restarts)
      reconstructions = [(joint[t], loss) for t in range(num_targets)]
      seen = (f'only the weighted sum of the {len(cohort)} clients\' updates (secure '
              'aggregation; all reconstructed jointly)')
      dp_noise = how['dp_noise']
    else:
      reconstructions = []
      for t in range(num_targets):
        target = inversion.pseudo_gradient(sent['params'], updates[t]['model']['params'],
                                           learning_rate)
        reconstructions.append(inversion.invert(
            attack, target, data['images'][t].shape, jax.random.fold_in(rng, int(cohort[t])),
            sent['params'], statistics, cohort_rows[t], jnp.asarray(labels[t]), data['mask'][t],
            data['class_mask'][t], restarts=section.restarts))
      seen = 'each update before aggregation'
      dp_noise = ("none in what it attacks: the clipped update as sent, the server's own noise "
                  'added after it sees it' if config.dp.enabled else 'none (no DP)')
    per_target, true_tiles, recon_tiles, names = [], [], [], []
    match_recon, match_true, most_frequent = {}, {}, []
    for t, (recon, loss) in enumerate(reconstructions):
      k = int(cohort[t])
      images, mask = data['images'][t], data['mask'][t]
      valid = np.asarray(mask).reshape(-1)
      true = np.asarray(images).reshape((-1,) + images.shape[2:])[valid]
      recon = _to_uint8(recon).reshape((-1,) + images.shape[2:])[valid]
      mirror = np.asarray(preprocess.horizontal_flip(true))
      p_true, p_mirror = inversion.psnr(recon, true), inversion.psnr(recon, mirror)
      closer = np.where((p_mirror > p_true)[:, None, None, None], mirror, true)
      psnr = np.maximum(p_true, p_mirror)
      ssim = inversion.ssim(recon, closer)
      identities = identity_table[k, true_labels[t].reshape(-1)[valid]]
      got = recognised(inputs, means, recon, identities)
      ceiling = recognised(inputs, means, closer, identities)
      # Chance for the identity column: naming every image the batch's most frequent identity (a
      # reconstruction that carries nothing of the image can reach it if it is named as one of
      # the client's identities at all).
      most_frequent.append(np.full(len(identities), np.max(np.unique(
          identities, return_counts=True)[1]) / len(identities)))
      for kind in got:
        match_recon.setdefault(kind, []).append(got[kind])
        match_true.setdefault(kind, []).append(ceiling[kind])
      per_target.append({
          'client': k, 'images': int(len(true)), 'matching_loss': float(loss),
          'psnr': float(np.mean(psnr)), 'ssim': float(np.mean(ssim)),
          **{f'identity_match_{kind}': float(np.mean(v)) for kind, v in got.items()},
          'identity_chance': float(most_frequent[-1][0])})
      true_tiles.append(closer)
      recon_tiles.append(recon)
      names += [str(i) for i in identities]
    given = ('the labels it recovered from the update' if recovery else "the batch's true labels")
    results = {
        'round': r, 'distance': section.distance, 'labels': section.labels, 'local_steps': steps,
        'batch_size': config.federated.batch_size, 'secure_aggregation': secure,
        'threat_model': f'curious server: {seen}, given {given} and {rows_from}',
        'dp_noise': dp_noise,
        **({'label_recovery': recovery} if recovery else {}),
        'psnr': float(np.mean([t['psnr'] for t in per_target])),
        'ssim': float(np.mean([t['ssim'] for t in per_target])),
        **{f'identity_match_{kind}': float(np.mean(np.concatenate(v)))
           for kind, v in match_recon.items()},
        **{f'identity_match_{kind}_true_images': float(np.mean(np.concatenate(v)))
           for kind, v in match_true.items()},
        'identity_chance': float(np.mean(np.concatenate(most_frequent))),
        'targets': per_target}
    scalars = {key: value for key, value in results.items()
               if key in ('psnr', 'ssim') or key.startswith('identity_match')}
    if recovery:
      scalars['label_recovery_accuracy'] = recovery['accuracy']
    # The grid: each target's true images on one row, its reconstructions on the next.
    cols = max(len(x) for x in true_tiles)
    rows_of = lambda x: np.concatenate([x, np.full((cols - len(x),) + x.shape[1:], 255, np.uint8)])
    grid = np.concatenate([rows_of(x) for pair in zip(true_tiles, recon_tiles) for x in pair])
    return EvalOutput(
        results=results, scalars=scalars, figures={},
        arrays={'inversion.npz': {'true': np.concatenate(true_tiles),
                                  'reconstructed': np.concatenate(recon_tiles)}},
        images={'inversion.png': {'images': grid, 'rows': 2 * len(true_tiles), 'cols': cols}},
        markdown=markdown(results))

  return Evaluator('inversion', evaluate)


def markdown(results: dict) -> list[str]:
  """report.md's section: the attack, its threat model, and each target's scores."""
  kinds = [k[len('identity_match_'):] for k in results
           if k.startswith('identity_match_') and not k.endswith('_true_images')]
  lines = [f"Gradient inversion of round {results['round']}'s updates ({results['distance']}, "
           f"{results['local_steps']} local steps of batch {results['batch_size']}); threat "
           f"model: {results['threat_model']}; DP noise: {results['dp_noise']}."
           + (f" Labels recovered: {100 * results['label_recovery']['accuracy']:.1f} % right "
              f"({', '.join(results['label_recovery']['rules'])})."
              if 'label_recovery' in results else '')
           + ' Identity matched by the global model, reconstruction (true images):', '',
           '| client | images | PSNR dB | SSIM | ' + ' | '.join(kinds) + ' |',
           '| --- | --- | --- | --- | ' + ' | '.join('---' for _ in kinds) + ' |']
  for t in results['targets']:
    lines.append(f"| {t['client']} | {t['images']} | {t['psnr']:.2f} | {t['ssim']:.3f} | "
                 + ' | '.join(f"{t[f'identity_match_{k}']:.2f}" for k in kinds) + ' |')
  lines.append(f"| all | | {results['psnr']:.2f} | {results['ssim']:.3f} | " + ' | '.join(
      f"{results[f'identity_match_{k}']:.2f} ({results[f'identity_match_{k}_true_images']:.2f})"
      for k in kinds) + ' |')
  lines += ['', f"Chance for the identity columns: {results['identity_chance']:.2f} (every image "
                "named its batch's most frequent identity). Reconstructions: inversion.png (true "
                'images, then their reconstructions, one pair of rows per client).', '']
  return lines
