"""The Transformer's Table 3 (Vaswani et al. 2017), the rows that fit Multi30k: (A) heads and key size at
fixed compute, (D) dropout and label smoothing, (E) learned against sinusoidal positions. Newstest2013
EN-DE dev BLEU from the deck's Table 3 and the paper. The lab's base is ``transformer-cpu`` (d_model 256,
on a CPU 2 layers) with 4 heads; (A) keeps d_model and varies h, so d_k = d_v = d_model / h, as the paper."""

from __future__ import annotations

from attnlab.ablation.table import Row, RunConfig, Table

PAPER = "Vaswani et al. 2017, Attention Is All You Need"
COLUMN = "BLEU (newstest2013)"


def _model(**overrides: object) -> RunConfig:
    return RunConfig(kind="translate", model_overrides=overrides)


TABLE3 = Table(
    name="transformer-table3",
    title="Transformer Table 3: variations on Multi30k",
    paper=PAPER,
    source="Table 3",
    rows=(
        Row("base (h=8)", _model(num_heads=8), {COLUMN: 25.8}),
        Row("(A) h=1", _model(num_heads=1), {COLUMN: 24.9}),
        Row("(A) h=4", _model(num_heads=4), {COLUMN: 25.5}),
        Row("(A) h=16", _model(num_heads=16), {COLUMN: 25.8}),
        Row("(D) P_drop=0.0", _model(num_heads=8, dropout=0.0), {COLUMN: 24.6}),
        Row("(D) eps_ls=0.0", _model(num_heads=8, label_smoothing=0.0), {COLUMN: 25.3}),
        Row("(E) learned positions", _model(num_heads=8, position_embedding="learned"), {COLUMN: 25.7}),
    ),
    probes=("bleu",),
    columns={"bleu": COLUMN},
    note="Multi30k is 29k short sentences and the runs last minutes, not 100K steps on 4.5M pairs: "
    "dropout and label smoothing, which guard against overfitting long runs, may not pay yet.",
)

TABLES = (TABLE3,)
