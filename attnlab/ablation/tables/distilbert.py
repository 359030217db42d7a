"""DistilBERT's ablation of the triple loss (Sanh et al. 2019, Table 4), from the paper (the deck does not
print it): the change of the GLUE macro-score against the full student (triple loss, initialised from the
teacher's layers). Every row distils the lab's teacher, a BERT-recipe run of the same seed (the baseline
row of BERT's tables), into a student of half its layers."""

from __future__ import annotations

from attnlab.ablation.table import Row, RunConfig, Table
from attnlab.ablation.tables.bert import DEFAULT_PROBES

PAPER = "Sanh et al. 2019, DistilBERT, a distilled version of BERT: smaller, faster, cheaper and lighter"
COLUMN = "delta GLUE macro-score"


def _student(**distill: object) -> RunConfig:
    return RunConfig(kind="distill", distill=distill)


TABLE4 = Table(
    name="distilbert-table4",
    title="DistilBERT Table 4: ablations of the triple loss",
    paper=PAPER,
    source="Table 4",
    rows=(
        Row("triple loss", _student(), {COLUMN: 0.0}),
        Row("no L_cos", _student(alpha_cos=0.0), {COLUMN: -1.46}),
        Row("no L_ce (soft targets)", _student(alpha_ce=0.0), {COLUMN: -2.96}),
        Row("no L_mlm", _student(alpha_mlm=0.0), {COLUMN: -0.31}),
        Row("random initialisation", _student(random_init=True), {COLUMN: -3.69}),
    ),
    probes=DEFAULT_PROBES,
    columns={"sst2_features": COLUMN, "conll_features": COLUMN, "mlm_accuracy": COLUMN},
    note="the lab's teacher has 2 layers, so the student has 1: the initialisation from the teacher hands "
    "over half the network, and the soft targets come from a teacher trained for minutes.",
)

TABLES = (TABLE4,)
