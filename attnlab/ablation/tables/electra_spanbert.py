"""ELECTRA against masked LM at equal compute (Clark et al. 2020, Table 1: GLUE dev of ELECTRA-Small and
BERT-Small, trained alike) and SpanBERT's span masking with and without the span-boundary objective
against token masking (Joshi et al. 2020, Tables 5 and 6: SQuAD 2.0 F1). From the papers (the decks print
neither). Every row is a single-segment run (FULL-SENTENCES, no NSP) for the same minutes; the MLM row is
both ELECTRA's BERT-Small and SpanBERT's token masking."""

from __future__ import annotations

from attnlab.ablation.table import Row, RunConfig, Table
from attnlab.ablation.tables.bert import DEFAULT_PROBES

PAPER = (
    "Clark et al. 2020, ELECTRA: Pre-training Text Encoders as Discriminators Rather Than Generators; "
    "Joshi et al. 2020, SpanBERT: Improving Pre-training by Representing and Predicting Spans"
)
GLUE, SQUAD = "GLUE (ELECTRA T1)", "SQuAD 2.0 F1 (SpanBERT T5-6)"
SINGLE = {"instance_format": "full_sentences"}

TABLE = Table(
    name="electra-spanbert",
    title="ELECTRA against MLM at equal compute; SpanBERT's span masking and SBO",
    paper=PAPER,
    source="ELECTRA Table 1, SpanBERT Tables 5-6",
    rows=(
        Row("MLM (token masking)", RunConfig(recipe="mlm"), {GLUE: 75.1, SQUAD: 83.8}),
        Row("ELECTRA", RunConfig(recipe="electra", recipe_overrides=SINGLE), {GLUE: 79.9}),
        Row(
            "span masking",
            RunConfig(recipe="spanbert", recipe_overrides={**SINGLE, "objective": "mlm"}),
            {SQUAD: 85.4},
        ),
        Row("span masking + SBO", RunConfig(recipe="spanbert", recipe_overrides=SINGLE), {SQUAD: 86.8}),
    ),
    probes=DEFAULT_PROBES,
    columns={"sst2_features": GLUE, "conll_features": SQUAD},
    note="the SpanBERT numbers come from two tables with different baselines (Table 5's geometric spans, "
    "Table 6's + SBO); ELECTRA's gain grows with training and a 2-minute run is at its very start.",
)

TABLES = (TABLE,)
