"""attnlab.models: `EncoderConfig` and presets, the one configurable `Encoder`, heads and compositions.

See docs/architecture.md. ``ARCHITECTURES`` maps the architecture names a checkpoint's
``config.json`` may carry to classes with ``from_config(config, **options)``.
"""

from attnlab.models.config import SHARING, EncoderConfig
from attnlab.models.encoder import Encoder, EncoderOutput, Pooler, count_parameters, init_bert_weights
from attnlab.models.heads import MaskedLMHead, ReplacedTokenHead, SentencePairHead
from attnlab.models.presets import PRESETS, get_preset
from attnlab.models.pretraining import (
    EncoderForPreTraining,
    PreTrainingOutput,
    ReplacedTokenDetection,
    ReplacedTokenOutput,
    masked_lm_loss,
)
from attnlab.models.task_heads import (
    TASK_ARCHITECTURES,
    EncoderForMultipleChoice,
    EncoderForQuestionAnswering,
    EncoderForSequenceClassification,
    EncoderForTokenClassification,
)

ARCHITECTURES: dict[str, type] = {
    "Encoder": Encoder,
    "EncoderForPreTraining": EncoderForPreTraining,
    "ReplacedTokenDetection": ReplacedTokenDetection,
    **TASK_ARCHITECTURES,  # fine-tuning heads (attnlab.models.task_heads)
}

__all__ = [
    "ARCHITECTURES",
    "PRESETS",
    "SHARING",
    "Encoder",
    "EncoderConfig",
    "EncoderForMultipleChoice",
    "EncoderForPreTraining",
    "EncoderForQuestionAnswering",
    "EncoderForSequenceClassification",
    "EncoderForTokenClassification",
    "EncoderOutput",
    "MaskedLMHead",
    "Pooler",
    "PreTrainingOutput",
    "ReplacedTokenDetection",
    "ReplacedTokenHead",
    "ReplacedTokenOutput",
    "SentencePairHead",
    "TASK_ARCHITECTURES",
    "count_parameters",
    "get_preset",
    "init_bert_weights",
    "masked_lm_loss",
]
