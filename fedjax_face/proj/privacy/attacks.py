r"""What each method reveals, attacked (issue 59 part 6): one table per setting, the rows each
method without DP, with clipping alone, and at epsilon = 16 and 4; the columns its accuracy (or
HTER), the threat model, identity leakage, gradient inversion and membership inference, each
measured by its evaluator (eval/privacy/) in the run's own final evaluation.

    python -m fedjax_face.reproduce --table=privacy4 --out_dir=docs   # FedPE, FedGC
    python -m fedjax_face.reproduce --table=privacy5 --out_dir=docs   # FedFV, FedAwS, FedUV, FedFace
    python -m fedjax_face.reproduce --table=privacy6 --out_dir=docs   # FedPAD, FedGPAD

The runs are the privacy tables' own (Tables 1 and 2: the same config and DP overrides) with the
attacks switched on (`ATTACKS_*`), so their training is the same; the attacks' results go into
results.json, and the table reads only that. The run saves the checkpoints its attacks replay
from (`run/schedule.replay_checkpoints`); `checkpoint_keep` covers them.

A run the divergence guard stopped (the noised runs, as in Tables 1 and 2) has no final
evaluation. `reproduce` evaluates its last accepted checkpoint (`Table.evaluate_diverged`,
tools/tables/run.py `last_accepted`) with these attacks. An attack that replays rounds replays
the latest its checkpoints allow. The row is marked, and a note names the rounds, the commits,
and what moved; a run stopped before its first checkpoint is marked so.

Where the noise is drawn decides what it protects. In these runs the server adds it after it
has seen each client's clipped update, so the curious server's views (leakage of the rows it
receives, inversion of the update) see the clipped update with no noise: DP bounds what the
released model says about a client (membership), not what the server is sent.
"""

from fedjax_face.tools.tables.spec import Row, Run, Table

DP_LEVELS = (('off', ()),
             ('eps=inf (clip only)', (('dp.enabled', 'True'), ('dp.noise_multiplier', '0.0'))),
             ('eps=16.0', (('dp.enabled', 'True'), ('dp.target_epsilon', '16.0'))),
             ('eps=4.0', (('dp.enabled', 'True'), ('dp.target_epsilon', '4.0'))))

# The FedGC paper's setting (configs/fedgc/: 60 rounds, every client each round): the last
# round's updates attacked; 256 identities' rows against 200 distractors as docs/privacy.md's
# first measurement; 4 clients inverted (their local batch of 32, 2 steps: the setting's own).
GC_ROUNDS = 60
ATTACKS_GC = (('evals.inversion.round', str(GC_ROUNDS)), ('evals.inversion.targets', '4'),
              ('evals.membership.samples', '512'))
LEAKAGE_GC = (('evals.leakage.round', str(GC_ROUNDS)), ('evals.leakage.max_identities', '256'),
              ('evals.leakage.num_distractors', '200'))
# FedFV's setting (configs/fedfv/: 1,500 rounds, 8 of 1,000 clients a round): the server's views
# over the last 64 rounds (about 400 identities): the run keeps the 64 checkpoints they replay
# from and its last.
FV_ROUNDS, FV_WINDOW = 1500, 64
ATTACKS_FV = (('evals.leakage.round', str(FV_ROUNDS)), ('evals.leakage.rounds', str(FV_WINDOW)),
              ('evals.leakage.max_identities', '1000'), ('evals.leakage.num_distractors', '200'),
              ('evals.membership.samples', '512'), ('checkpoint_keep', str(FV_WINDOW + 1)))
# PAD (configs/pad/: three data centers, 400 rounds): every frame, and every subject, of the
# centers' training and held-out subjects; no inversion (eval/privacy/evaluators.py says why).
ATTACKS_PAD = (('evals.membership.samples', '100000'), ('evals.membership.subject_level', 'True'))

SERVER_NOISE = 'server noise after receipt'
THREATS = {   # method -> what the curious server receives; the third party holds the model
    'fedpe': 'server: θ updates (W_k stays); third party: θ',
    'fedgc': 'server: θ updates and W_k in the clear; third party: θ',
    'fedfv': 'server: θ and w_i; client: equivalents; third party: θ, W',
    'fedaws': 'server: θ and w_i; third party: θ, W',
    'fedface': 'server: θ and w_i; third party: θ, W',
    'feduv': "server: θ and W′ (no codeword); third party: θ, W′",
    'fedpad': 'server: the whole model; third party: the model',
    'fedgpad': 'server: the shared parts; third party: the model',
}

RECOGNITION_COLUMNS = ('verification/lfw/accuracy', 'privacy/epsilon',
                       'leakage/kinds/server_rows/rank1',
                       'leakage/kinds/server_rows/tar_at_far/0.01',
                       'leakage/kinds/server_rows/exact/rank1',
                       'leakage/kinds/server_rows/random/rank1')
RECOGNITION_TITLES = ('LFW-like', 'epsilon', 'server rows rank-1', 'server rows TAR@1e-2',
                      'exact template rank-1', 'random rank-1')
GC_COLUMNS = RECOGNITION_COLUMNS + ('inversion/psnr', 'inversion/ssim',
                                    'inversion/identity_match_mean_embedding',
                                    'membership/attacks/identity_cosine/auc',
                                    'membership/attacks/class_cosine/auc')
GC_TITLES = RECOGNITION_TITLES + ('inversion PSNR (dB)', 'inversion SSIM',
                                  'inverted identity named', 'MI AUC (image)',
                                  'MI AUC (class row)')
FV_COLUMNS = RECOGNITION_COLUMNS + ('leakage/kinds/projection_update/rank1',
                                    'leakage/kinds/broadcast_shared/rank1',
                                    'leakage/kinds/released/rank1',
                                    'membership/attacks/identity_cosine/auc',
                                    'membership/attacks/class_cosine/auc')
FV_TITLES = RECOGNITION_TITLES + ("W′ update rank-1", 'broadcast (linked) rank-1',
                                  'released W rank-1', 'MI AUC (image)', 'MI AUC (class row)')
PAD_COLUMNS = ('pad/hter', 'pad/auc', 'privacy/epsilon', 'membership/attacks/label_loss/auc',
               'membership/subject_level/label_loss/auc',
               'membership/subject_level/label_loss/null_sd')
PAD_TITLES = ('HTER', 'AUC', 'epsilon', 'MI AUC (frames)', 'MI AUC (subjects)',
              'subjects: null sd')


def threat(method: str, level: str) -> str:
  """The row's threat model: what the curious server receives, and for DP rows that the noise
  comes after it has seen them."""
  return THREATS[method] + ('' if level == 'off' else f'; {SERVER_NOISE}')


def rows(method: str, label: str, run, columns: tuple) -> list[Row]:
  """`method` at each of `DP_LEVELS` (`run(*overrides)` its Run), no paper's numbers."""
  return [Row(f'{label} {level}', run(*overrides), (None,) * len(columns),
              threat=threat(method, level)) for level, overrides in DP_LEVELS]


def _gc_run(method: str):
  attacks = ATTACKS_GC + (LEAKAGE_GC if method == 'fedgc' else ())
  return lambda *o: Run(f'fedgc/{method}', 'loss=softmax', o + attacks)


def _fv_run(method: str):
  return lambda *o: Run(f'fedfv/{method}', '', o + ATTACKS_FV)


def _pad_run(method: str):
  return lambda *o: Run(f'pad/{method}', 'protocol=OCI_M', o + ATTACKS_PAD)


TABLES = {
    4: Table('What each method reveals, attacked: the FedGC setting', 'results', GC_COLUMNS,
             tuple(rows('fedpe', 'FedPE', _gc_run('fedpe'), GC_COLUMNS)
                   + rows('fedgc', 'FedGC', _gc_run('fedgc'), GC_COLUMNS)),
             'none (no paper attacks these methods)',
             'ours: FedPE and FedGC in the FedGC paper setting of configs/fedgc/ (36 clients, all '
             'in every round, 60 rounds, small CNN at 32 x 32, softmax), seed 0, clip S = 1, '
             'delta = 1e-5, RDP accountant with replace-one neighbours. Leakage: the rows the '
             'server receives in round 60 as enrollment templates against new images of the '
             'same 256 identities among 200 distractors (rank-1 and TAR in %; the exact '
             "template is the mean embedding of the identity's training images, random the "
             'chance level); FedPE sends no rows (—). Inversion: Inverting Gradients on 4 '
             "clients' round-60 updates (FedPE's attacker is given its private W_k: an upper "
             'bound), identity named by the nearest mean embedding (fraction). Membership: '
             '512 training images against as many of held-out identities.',
             titles=GC_TITLES, column_digits=(2, 2, 1, 1, 1, 1, 2, 3, 2, 3, 3),
             evaluate_diverged=True),
    5: Table('What each method reveals, attacked: the FedFV setting', 'results', FV_COLUMNS,
             tuple(row for method, label in (('fedfv', 'FedFV'), ('fedaws', 'FedAwS'),
                                             ('feduv', 'FedUV'), ('fedface', 'FedFace'))
                   for row in rows(method, label, _fv_run(method), FV_COLUMNS)),
             'none (no paper attacks these methods)',
             'ours: configs/fedfv/ (1,000 clients of one identity, 8 a round, 1,500 rounds, '
             'GroupNorm CNN), seed 0, clip S = 1, delta = 1e-5, RDP accountant with replace-one '
             f'neighbours. Leakage over the last {FV_WINDOW} rounds (the server holds the rows '
             "of their cohorts' identities, a client's latest kept) against 200 distractors "
             "(%); FedUV's W′ update is the control; the curious client's view is one round's "
             'broadcast, decoded by linking equivalents that share a member. Membership: 512 '
             'training images against as many of held-out identities.',
             titles=FV_TITLES, column_digits=(2, 2, 1, 1, 1, 1, 1, 1, 1, 3, 3),
             evaluate_diverged=True),
    6: Table('What each method reveals, attacked: face anti-spoofing (O&C&I -> M)', 'results',
             PAD_COLUMNS,
             tuple(rows('fedpad', 'FedPAD', _pad_run('fedpad'), PAD_COLUMNS)
                   + rows('fedgpad', 'FedGPAD', _pad_run('fedgpad'), PAD_COLUMNS)),
             'none (no paper attacks these methods)',
             'ours: the PAD setting of configs/pad/ (three data centers, 400 rounds), seed 0, '
             'clip S = 1, delta = 1e-5, RDP accountant with replace-one neighbours; HTER and AUC '
             "in %. Membership: the true label's loss of every frame of the centers' training "
             'subjects against every frame of their held-out subjects, and per subject (mean '
             'over its frames) with the AUC\'s standard deviation under no leakage.',
             titles=PAD_TITLES, column_digits=(2, 2, 2, 3, 3, 3),
             evaluate_diverged=True),
}
