"""Fine-tuning compositions: the one `Encoder` plus a small task head (Devlin et al. 2019, section 4, Fig. 4).

- `EncoderForSequenceClassification`: pooled [CLS] output -> dropout -> Linear(H, C) (GLUE; C = 1 is
  regression with MSE, STS-B). ``pooling="mean"`` reads the mean of the tokens' final states instead, with
  no pooler (as sentence encoders do; a masked-LM-only checkpoint trains every token's state but not [CLS]'s,
  whose pooler would start fresh).
- `EncoderForTokenClassification`: every token's final hidden state -> dropout -> Linear(H, C) (NER;
  labels -100 are ignored, BERT section 5.3 labels only the first sub-token of a word).
- `EncoderForQuestionAnswering`: Linear(H, 2) gives a start and an end logit per token (SQuAD, section
  4.2); the loss is the mean of the start and end cross-entropies; SQuAD 2.0's "no answer" points both at
  [CLS], index 0 (section 4.3).
- `EncoderForMultipleChoice`: each (context, ending) pair is encoded, its pooled output -> Linear(H, 1),
  the K scores reshaped to (B, K) and soft-maxed over the choices (SWAG, section 4.4).

The classification and multiple-choice models need the pooler: their ``from_config`` turns
``add_pooler`` on (an encoder checkpoint without one, e.g. ELECTRA or a masked-LM-only BERT, then gets a
freshly initialised pooler, as HF's BertForSequenceClassification does).

Shapes: B batch, K choices, T sequence, H hidden, C labels. Labels use -100 for ignored positions.
Every model keeps its ``from_config`` keyword options in ``self.options`` so that
`attnlab.io.save` / `attnlab.io.load` rebuild it (label names included).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn import Linear

from attnlab.models.config import EncoderConfig
from attnlab.models.encoder import Encoder
from attnlab.models.pretraining import IGNORE_INDEX, EncoderWithHeads, _init_head, masked_lm_loss
from attnlab.nn.pooling import POOLINGS, masked_mean


@dataclass
class SequenceClassifierOutput:
    loss: Tensor | None  # cross-entropy (C > 1) or MSE (C = 1) when labels are given
    logits: Tensor  # (B, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class TokenClassifierOutput:
    loss: Tensor | None  # mean cross-entropy over labels != -100
    logits: Tensor  # (B, T, C)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class QuestionAnsweringOutput:
    loss: Tensor | None  # (CE(start) + CE(end)) / 2
    start_logits: Tensor  # (B, T)
    end_logits: Tensor  # (B, T)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class MultipleChoiceOutput:
    loss: Tensor | None  # cross-entropy over the K choices
    logits: Tensor  # (B, K)
    hidden_states: tuple[Tensor, ...] | None = None
    attentions: tuple[Tensor, ...] | None = None


def _check_dropout(value: float | None, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"{where}: classifier_dropout must be None or a probability in [0, 1), not {value!r}"
        )


def _check_labels(num_labels: int, labels: Sequence[str] | None, where: str) -> list | None:
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise ValueError(f"{where}: num_labels must be an int >= 1, got {num_labels!r}")
    if labels is None:
        return None
    labels = [str(x) for x in labels]
    if len(labels) != num_labels:
        raise ValueError(f"{where}: {len(labels)} label names {labels} for num_labels={num_labels}")
    if len(set(labels)) != len(labels):
        raise ValueError(f"{where}: label names must be distinct, got {labels}")
    return labels


class _TaskModel(EncoderWithHeads):
    """Shared plumbing: the pooler check, the dropout + classifier head, label names, the options
    `attnlab.io.save` records."""

    uses_pooler: bool = False  # the head reads the pooled [CLS] output: ``from_config`` adds a pooler
    head_parameters: tuple[str, ...] = ()  # state-dict prefixes of the head (initialised fresh on transfer)

    def __init__(self, encoder: Encoder, options: dict[str, Any]) -> None:
        if self.uses_pooler and encoder.pooler is None:
            raise ValueError(
                f"{type(self).__name__}: the encoder has no pooler (add_pooler=False); build it with one"
            )
        super().__init__(encoder)
        self.options = options

    @classmethod
    def _encoder_for(cls, config: EncoderConfig) -> Encoder:
        if cls.uses_pooler and not config.add_pooler:
            config = dataclasses.replace(config, add_pooler=True)
        return Encoder(config)

    def _add_classifier(self, num_outputs: int, classifier_dropout: float | None) -> None:
        """``dropout`` (``classifier_dropout``, else the encoder's hidden dropout) and ``classifier``
        Linear(H, num_outputs)."""
        p = self.config.hidden_dropout if classifier_dropout is None else classifier_dropout
        self.dropout = nn.Dropout(p)
        self.classifier = Linear(self.config.hidden_size, num_outputs)

    @property
    def id2label(self) -> dict[int, str]:
        labels = self.options.get("labels")
        n = self.options.get("num_labels", 0)
        return {i: (labels[i] if labels else f"LABEL_{i}") for i in range(n)}

    def head_state_keys(self) -> list[str]:
        """State-dict keys of the task head (everything not under ``encoder.``)."""
        return [k for k in self.state_dict() if not k.startswith("encoder.")]


_Self = TypeVar("_Self", bound="_LabelClassifier")  # from_config returns the subclass it is called on


class _LabelClassifier(_TaskModel):
    """``dropout`` -> ``classifier`` Linear(H, C) over C = ``num_labels`` classes, optionally named by
    ``labels`` (kept in the checkpoint for pipelines)."""

    def __init__(
        self,
        encoder: Encoder,
        num_labels: int = 2,
        labels: Sequence[str] | None = None,
        classifier_dropout: float | None = None,
    ) -> None:
        where = type(self).__name__
        labels = _check_labels(num_labels, labels, where)
        _check_dropout(classifier_dropout, where)
        options = {"num_labels": num_labels, "labels": labels, "classifier_dropout": classifier_dropout}
        super().__init__(encoder, options)
        self._add_classifier(num_labels, classifier_dropout)

    @property
    def num_labels(self) -> int:
        return self.options["num_labels"]

    @classmethod
    def from_config(
        cls: type[_Self],
        config: EncoderConfig,
        num_labels: int = 2,
        labels: Sequence[str] | None = None,
        classifier_dropout: float | None = None,
    ) -> _Self:
        model = cls(cls._encoder_for(config), num_labels, labels, classifier_dropout)
        _init_head(model.classifier, config.initializer_range)
        return model


class EncoderForSequenceClassification(_LabelClassifier):
    """``encoder`` -> pooled [CLS] (B, H) -> dropout -> ``classifier`` Linear(H, C).

    ``num_labels == 1`` is regression (STS-B): the logit is the prediction and the loss is MSE against float
    labels. ``labels`` optionally names the classes (kept in the checkpoint for pipelines).
    ``pooling="mean"``: the classifier reads `masked_mean` of the final hidden states (B, H) instead of the
    pooled [CLS]; the encoder then has no pooler (HF's classes have no such head: attnlab format and ONNX
    only). The option is kept in ``options`` only when it is not the default, so that checkpoints written
    before it existed keep their meaning.
    """

    uses_pooler = True  # the default pooling's; an instance with pooling="mean" sets it False

    def __init__(self, encoder: Encoder, *args: Any, pooling: str = "cls", **kwargs: Any) -> None:
        """``args``, ``kwargs``: `_LabelClassifier`'s (``num_labels``, ``labels``, ``classifier_dropout``)."""
        if pooling not in POOLINGS:
            raise ValueError(f"{type(self).__name__}: pooling must be one of {POOLINGS}, not {pooling!r}")
        self.uses_pooler = pooling == "cls"  # before _TaskModel's pooler check
        super().__init__(encoder, *args, **kwargs)
        if pooling != "cls":
            self.options["pooling"] = pooling

    @property
    def pooling(self) -> str:
        return self.options.get("pooling", "cls")

    @classmethod
    def from_config(  # type: ignore[override]
        cls, config: EncoderConfig, *args: Any, pooling: str = "cls", **kwargs: Any
    ) -> EncoderForSequenceClassification:
        if pooling == "cls":
            return super().from_config(config, *args, **kwargs)
        # no pooler to build (a checkpoint's is not loaded: `attnlab.tasks.task_model` drops its keys)
        model = cls(Encoder(dataclasses.replace(config, add_pooler=False)), *args, pooling=pooling, **kwargs)
        _init_head(model.classifier, config.initializer_range)
        return model

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> SequenceClassifierOutput:
        """``input_ids`` (B, T); ``labels`` (B,) class ids (int) or, for regression, targets (float)."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        if self.pooling == "cls":
            sentence = out.pooled_output  # (B, H)
        else:
            sentence = masked_mean(out.last_hidden_state, attention_mask)  # (B, H)
        logits = self.classifier(self.dropout(sentence))  # (B, C)
        loss = None
        if labels is not None:
            if labels.shape != logits.shape[:1]:
                raise ValueError(
                    f"labels: expected shape ({logits.size(0)},) (B,), got {tuple(labels.shape)}"
                )
            if self.is_regression:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            else:
                if labels.dtype.is_floating_point:
                    raise TypeError(
                        f"labels: classification with {self.num_labels} labels needs integer class ids, "
                        f"got {labels.dtype} (num_labels=1 is regression)"
                    )
                loss = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX)
        return SequenceClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class EncoderForTokenClassification(_LabelClassifier):
    """``encoder`` -> every token (B, T, H) -> dropout -> ``classifier`` Linear(H, C)."""

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> TokenClassifierOutput:
        """``labels`` (B, T): class id of each word's first sub-token, -100 elsewhere (padding included)."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (B, T, C)
        loss = masked_lm_loss(logits, labels) if labels is not None else None
        return TokenClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class EncoderForQuestionAnswering(_TaskModel):
    """``encoder`` -> every token (B, T, H) -> ``qa_outputs`` Linear(H, 2) -> start, end logits (B, T).

    BERT section 4.2 introduces a start vector S and an end vector E; the two rows of ``qa_outputs`` are
    S and E (plus a bias each, as the reference code has).
    """

    def __init__(self, encoder: Encoder) -> None:
        super().__init__(encoder, {})
        self.qa_outputs = Linear(self.config.hidden_size, 2)

    @classmethod
    def from_config(cls, config: EncoderConfig) -> EncoderForQuestionAnswering:
        model = cls(cls._encoder_for(config))
        _init_head(model.qa_outputs, config.initializer_range)
        return model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        start_positions: Tensor | None = None,
        end_positions: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> QuestionAnsweringOutput:
        """``start_positions``, ``end_positions`` (B,): token indices of the answer in each window, 0 ([CLS])
        for a window without the answer or an unanswerable question; indices outside [0, T) are ignored."""
        out = self.encoder(
            input_ids, attention_mask, token_type_ids, position_ids, output_hidden_states, output_attentions
        )
        logits = self.qa_outputs(out.last_hidden_state)  # (B, T, 2)
        start_logits, end_logits = logits.unbind(dim=-1)  # (B, T) each
        loss = None
        if (start_positions is None) != (end_positions is None):
            raise ValueError("give both start_positions and end_positions, or neither")
        if start_positions is not None:
            B, T = start_logits.shape
            for name, pos in (("start_positions", start_positions), ("end_positions", end_positions)):
                if pos.shape != (B,):
                    raise ValueError(f"{name}: expected shape ({B},) (B,), got {tuple(pos.shape)}")
            # A position past the window (a caller's sentinel) is ignored rather than an index error.
            start = torch.where((start_positions >= 0) & (start_positions < T), start_positions, IGNORE_INDEX)
            end = torch.where((end_positions >= 0) & (end_positions < T), end_positions, IGNORE_INDEX)
            loss = (
                F.cross_entropy(start_logits.float(), start, ignore_index=IGNORE_INDEX)
                + F.cross_entropy(end_logits.float(), end, ignore_index=IGNORE_INDEX)
            ) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


class EncoderForMultipleChoice(_TaskModel):
    """Each of the K (context, ending) pairs -> pooled (B*K, H) -> dropout -> ``classifier`` Linear(H, 1),
    reshaped to (B, K): one score per choice, soft-maxed over the choices."""

    uses_pooler = True

    def __init__(self, encoder: Encoder, classifier_dropout: float | None = None) -> None:
        _check_dropout(classifier_dropout, type(self).__name__)
        super().__init__(encoder, {"classifier_dropout": classifier_dropout})
        self._add_classifier(1, classifier_dropout)

    @classmethod
    def from_config(
        cls, config: EncoderConfig, classifier_dropout: float | None = None
    ) -> EncoderForMultipleChoice:
        model = cls(cls._encoder_for(config), classifier_dropout)
        _init_head(model.classifier, config.initializer_range)
        return model

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        labels: Tensor | None = None,
        position_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> MultipleChoiceOutput:
        """``input_ids`` (B, K, T), ``attention_mask`` and ``token_type_ids`` alike; ``labels`` (B,)."""
        if input_ids.dim() != 3:
            raise ValueError(
                f"input_ids: expected shape (B, K, T) for multiple choice, got {tuple(input_ids.shape)}"
            )
        B, K, T = input_ids.shape

        def flat(t: Tensor | None) -> Tensor | None:
            if t is None:
                return None
            if tuple(t.shape) != (B, K, T):
                raise ValueError(f"expected shape {(B, K, T)} (B, K, T) like input_ids, got {tuple(t.shape)}")
            return t.reshape(B * K, T)

        out = self.encoder(
            input_ids.reshape(B * K, T),
            flat(attention_mask),
            flat(token_type_ids),
            position_ids,
            output_hidden_states,
            output_attentions,
        )
        logits = self.classifier(self.dropout(out.pooled_output)).view(B, K)  # (B*K, 1) -> (B, K)
        loss = None
        if labels is not None:
            if labels.shape != (B,):
                raise ValueError(f"labels: expected shape ({B},) (B,), got {tuple(labels.shape)}")
            loss = F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX)
        return MultipleChoiceOutput(loss, logits, out.hidden_states, out.attentions)


TASK_ARCHITECTURES: dict[str, type[_TaskModel]] = {
    "EncoderForSequenceClassification": EncoderForSequenceClassification,
    "EncoderForTokenClassification": EncoderForTokenClassification,
    "EncoderForQuestionAnswering": EncoderForQuestionAnswering,
    "EncoderForMultipleChoice": EncoderForMultipleChoice,
}
