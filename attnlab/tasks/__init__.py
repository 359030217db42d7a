"""attnlab.tasks: fine-tuning data and the model-independent parts of its pipelines.

* :mod:`attnlab.tasks.examples`: the records loaders return (``SentenceExample``, ``QAExample``,
  ``TokenExample``, ``MultipleChoiceExample``), ``LoadReport`` and ``DataFormatError``.
* :mod:`attnlab.tasks.loaders`: GLUE TSV, SQuAD JSON, CoNLL columns, SWAG CSV, generic tables, HF datasets.
* :mod:`attnlab.tasks.qa_postprocess`: window logits → answers, null odds, official JSON files.
* :mod:`attnlab.tasks.ner_alignment`: word tags ↔ sub-word tokens.

See docs/architecture.md. Nothing imported here needs torch.
"""

from attnlab.tasks.examples import (
    DataFormatError,
    LabelSetDiff,
    LoadedExamples,
    LoadReport,
    MultipleChoiceExample,
    QAExample,
    SentenceExample,
    TokenExample,
    check_label_sets,
    compare_label_sets,
)

__all__ = [
    "DataFormatError",
    "LabelSetDiff",
    "LoadReport",
    "LoadedExamples",
    "MultipleChoiceExample",
    "QAExample",
    "SentenceExample",
    "TokenExample",
    "check_label_sets",
    "compare_label_sets",
]
