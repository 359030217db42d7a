"""attnlab.tasks: fine-tuning data and the model-independent parts of its pipelines.

* :mod:`attnlab.tasks.examples`: the records loaders return (``SentenceExample``, ``QAExample``,
  ``TokenExample``, ``MultipleChoiceExample``), ``LoadReport`` and ``DataFormatError``.
* :mod:`attnlab.tasks.loaders`: GLUE TSV, SQuAD JSON, CoNLL columns, SWAG CSV, generic tables, HF datasets.
* :mod:`attnlab.tasks.qa_postprocess`: window logits → answers, null odds, official JSON files.
* :mod:`attnlab.tasks.ner_alignment`: word tags ↔ sub-word tokens.
* Fine-tuning (:mod:`attnlab.tasks.finetune` names them all): ``registry`` (the tasks), ``feature_builder``,
  ``evaluation``, ``finetune_config``, ``finetune_run`` (one run), ``finetune_sweep`` (learning rates x
  seeds); ``task_model`` (a pre-trained encoder into a task model); ``distillation`` (a teacher's loss).
  `attnlab.knowledge` (K-BERT) plugs into them and imports them; nothing here imports it.

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
