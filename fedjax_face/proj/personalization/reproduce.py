r"""The personalization baselines against FedFR on FedFR's personalized protocol (issue 61 part 5):
one table of our own asking, over seeds, with verdicts.

    python -m fedjax_face.reproduce --table=personalization1 --seeds=0,1,2 --out_dir=docs

Table 1 (recognition, docs/personalization_table1.md): FedFR as configs/fedfr/fedfr.py runs it
(Table 1's FedFR run of docs/fedfr_table1.md, the same config), FedBN, FedRep, FedPer, Ditto and
APFL, each started from the same seed's pre-training (configs/fedfr/pretrain.py), which is shown
as the first row: what every method starts from. Columns: the four personalized means of FedFR's
tables (proj/fedfr/reproduce.py's `PERSONAL`, each client scored with its own model), the worst
10 % of the clients at two of those rates (`results.json` -> `personalized` -> `spread` -> `tar` |
`tpir` -> `worst_10pct`: the mean of the lowest ceil(K / 10) clients' values, with K = 10 the
worst client's own value), and the generic LFW-like accuracy of each method's shared model.

No paper compares these methods in FedFR's setting, so the orderings are questions of ours
(`Table.own_orderings`): is FedFR ahead of each baseline on each personalized column, judged by
the verdict rule (tools/tables/verdict.py) as a paper's ordering would be.

The table is a paper of its own here (`docs/personalization.md`, `results/personalization_tables`)
rather than a table of proj/fedfr/reproduce.py, for two reasons: its orderings are ours, and a
page's verdicts are corrected over its family (Benjamini-Hochberg over every table of
docs/<paper>.md), so adding them to FedFR's page would change the verdicts of the paper's own
claims; and its pre-training and FedFR runs have the same workdir names as FedFR Table 1's, whose
archive (results/fedfr_tables) holds runs of another commit that these must not replace.
"""

from fedjax_face.proj.fedfr import reproduce as fedfr_tables
from fedjax_face.tools.tables.spec import Ordering, Row, Run, Table

PRETRAIN = fedfr_tables.PRETRAIN
PERSONAL = fedfr_tables.PERSONAL
WORST = ('personalized/spread/tar/worst_10pct/0.001',
         'personalized/spread/tpir/worst_10pct/0.1')
GENERIC = ('verification/lfw/accuracy',)
COLUMNS = PERSONAL + WORST + GENERIC
TITLES = (fedfr_tables.PERSONAL_TITLES
          + ('worst 10 % pers. TAR@FAR=1e-3', 'worst 10 % pers. TPIR@FPIR=1e-1',
             'generic LFW acc.'))

FEDFR = 'FedFR'
BASELINES = (('FedBN', Run('fedfr/fedbn', init_from=PRETRAIN)),
             ('FedRep', Run('fedfr/fedrep', init_from=PRETRAIN)),
             ('FedPer', Run('fedfr/fedrep', 'fedper', init_from=PRETRAIN)),
             ('Ditto', Run('fedfr/ditto', init_from=PRETRAIN)),
             ('APFL', Run('fedfr/apfl', init_from=PRETRAIN)))
FEDFR_RUN = Run('fedfr/fedfr', init_from=PRETRAIN)   # FedFR Table 1's '+ DFC (FedFR)' run
ROWS = (('pre-trained (public identities)', PRETRAIN), (FEDFR, FEDFR_RUN)) + BASELINES


def _against_baselines() -> tuple[Ordering, ...]:
  """FedFR against each baseline on every personalized column (the means and the worst 10 %)."""
  return tuple(Ordering((FEDFR,), (label,), column, f'FedFR, against {label}')
               for label, _ in BASELINES for column in PERSONAL + WORST)


SETTING = ("ours: FedFR's setting (proj/fedfr/setting.py): the small CNN (width 16, 128-d, 32x32) "
           'on the synthetic benchmark, 100 public identities pre-trained centrally, 100 private '
           'ones over 10 clients x 10, 20 images each (12 train / 8 personalized test), 30 rounds '
           "of E = 1, every method started from the same seed's pre-training; compared: each "
           "client's own model on its own identities (FedFR: its DFC branch; FedBN: its "
           'BatchNorm layers; FedRep / FedPer: its head; Ditto: its personal model; APFL: its '
           "mix), mean over the 10 clients and the worst 10 % of them (the lowest ceil(10 / 10) "
           "= 1 client's value) (%); generic: each method's shared model on the LFW-like pairs "
           "(FedBN with the pre-trained BatchNorm layers, FedRep / FedPer with the pre-trained "
           'head). No paper reports these methods in this setting.')

TABLES = {
    1: Table('Personalization baselines against FedFR (recognition)', 'results', COLUMNS,
             tuple(Row(label, run, (None,) * len(COLUMNS)) for label, run in ROWS),
             'none (no paper compares these methods in this setting)', SETTING, titles=TITLES,
             orderings=_against_baselines(), own_orderings=True),
}
