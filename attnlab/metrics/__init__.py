"""attnlab.metrics: GLUE metrics, SQuAD EM/F1 (v1.1, v2.0), seqeval NER F1, BLEU via sacrebleu.

Each function keeps its reference's scale; `attnlab.metrics.scale` puts a fine-tuning's scores on one,
percent (0-100).

No torch here: every function takes plain Python sequences or numpy arrays.
"""

from attnlab.metrics.bleu import BleuResult, corpus_bleu
from attnlab.metrics.classification import (
    GLUE_TASK_METRICS,
    accuracy,
    canonical_glue_task,
    f1,
    glue_metrics,
    matthews_corrcoef,
    pearson,
    spearman,
)
from attnlab.metrics.ner import ner_metrics
from attnlab.metrics.scale import fractions_to_percent, score_label
from attnlab.metrics.squad import (
    exact_match,
    f1_score,
    normalize_answer,
    squad_v1_scores,
    squad_v2_scores,
)

__all__ = [
    "GLUE_TASK_METRICS",
    "BleuResult",
    "accuracy",
    "canonical_glue_task",
    "corpus_bleu",
    "exact_match",
    "f1",
    "f1_score",
    "fractions_to_percent",
    "glue_metrics",
    "matthews_corrcoef",
    "ner_metrics",
    "normalize_answer",
    "pearson",
    "score_label",
    "spearman",
    "squad_v1_scores",
    "squad_v2_scores",
]
