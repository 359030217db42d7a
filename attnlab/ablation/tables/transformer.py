"""The Transformer's Table 3 (Vaswani et al. 2017), the rows that fit Multi30k: (A) heads and key size at
fixed compute, (D) dropout and label smoothing, (E) learned against sinusoidal positions. Newstest2013
EN-DE dev BLEU and perplexity (per wordpiece) from the deck's Table 3 and the paper, against greedy BLEU and
the perplexity per subword on Multi30k's val. The lab's base is ``transformer-cpu`` with 8 heads (on a CPU
2 layers of width 128, `attnlab.ablation.settings`); (A) keeps d_model and varies h, so d_k = d_v =
d_model / h, as the paper."""

from __future__ import annotations

from attnlab.ablation.table import Row, RunConfig, Table

PAPER = "Vaswani et al. 2017, Attention Is All You Need"
BLEU = "BLEU (newstest2013)"
PPL = "PPL (newstest2013, per wordpiece)"


def _model(**overrides: object) -> RunConfig:
    return RunConfig(kind="translate", model_overrides=overrides)


TABLE3 = Table(
    name="transformer-table3",
    title="Transformer Table 3: variations on Multi30k",
    paper=PAPER,
    source="Table 3",
    rows=(
        Row("base (h=8)", _model(num_heads=8), {BLEU: 25.8, PPL: 4.92}),
        Row("(A) h=1", _model(num_heads=1), {BLEU: 24.9, PPL: 5.29}),
        Row("(A) h=4", _model(num_heads=4), {BLEU: 25.5, PPL: 5.00}),
        Row("(A) h=16", _model(num_heads=16), {BLEU: 25.8, PPL: 4.91}),
        Row("(D) P_drop=0.0", _model(num_heads=8, dropout=0.0), {BLEU: 24.6, PPL: 5.77}),
        Row("(D) eps_ls=0.0", _model(num_heads=8, label_smoothing=0.0), {BLEU: 25.3, PPL: 4.67}),
        Row(
            "(E) learned positions",
            _model(num_heads=8, position_embedding="learned"),
            {BLEU: 25.7, PPL: 4.92},
        ),
    ),
    probes=("bleu", "translate_perplexity"),
    columns={"bleu": BLEU, "translate_perplexity": PPL},
    note="Multi30k is 29k short sentences and the runs last minutes, not 100K steps on 4.5M pairs: "
    "dropout and label smoothing, which guard against overfitting long runs, may not pay yet.",
)

TABLES = (TABLE3,)
