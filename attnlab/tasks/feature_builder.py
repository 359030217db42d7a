"""Feature builders: the plug-in that turns a task's examples into model inputs and pads them into batches.

A fine-tuning run and its evaluation call a builder's two methods and nothing else about features:

- ``build(spec, tokenizer, examples, labels, *, training, max_length, with_token_types, stride,
  max_query_length, regression) -> (features, FeatureReport)``;
- ``collate(features, pad_id) -> batch``.

`TaskFeatures` is BERT's (`attnlab.tasks.features`, every kind of task). K-BERT's
`attnlab.knowledge.features.KnowledgeInjector` is another (each sentence a tree, a visible matrix in the
batch), given as ``FinetuneConfig.knowledge``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import torch

from attnlab.tasks.features import (
    Feature,
    FeatureReport,
    classification_features,
    collate,
    multiple_choice_features,
    qa_features,
    token_classification_features,
)
from attnlab.tasks.registry import TaskSpec


class FeatureBuilder(Protocol):
    def build(
        self, spec: TaskSpec, tokenizer: Any, examples: Sequence[Any], labels: Sequence[str] | None, *,
        training: bool, max_length: int, with_token_types: bool, stride: int = 128,
        max_query_length: int = 64, regression: bool = False,
    ) -> tuple[list[Feature], FeatureReport]: ...  # fmt: skip

    def collate(self, features: Sequence[Feature], pad_id: int = 0) -> dict[str, torch.Tensor]: ...


def build_features(
    spec: TaskSpec,
    tokenizer: Any,
    examples: Sequence[Any],
    labels: Sequence[str] | None,
    *,
    training: bool,
    max_length: int,
    with_token_types: bool,
    stride: int = 128,
    max_query_length: int = 64,
    regression: bool = False,
) -> tuple[list[Feature], FeatureReport]:
    """BERT's features of ``examples`` for ``spec``'s kind of task, and the report of what was cut."""
    report = FeatureReport(spec.name)
    label_to_id = {name: i for i, name in enumerate(labels)} if labels else None
    kind = "regression" if regression else spec.kind
    if kind in ("classification", "regression"):
        feats = classification_features(
            tokenizer, examples, max_length, label_to_id, kind == "regression", with_token_types, report
        )
    elif kind == "token":
        feats = token_classification_features(
            tokenizer, examples, label_to_id, max_length, min(stride, max_length // 4), False,
            with_token_types, report,
        )  # fmt: skip
    elif kind == "qa":
        feats = qa_features(
            tokenizer, examples, max_length, stride, max_query_length, training, with_token_types, report
        )
    else:
        feats = multiple_choice_features(tokenizer, examples, max_length, with_token_types, report)
    report.log()
    return feats, report


class TaskFeatures:
    """The default feature builder: `build_features` and `attnlab.tasks.features.collate`."""

    def build(self, spec: TaskSpec, tokenizer: Any, examples: Sequence[Any], labels: Sequence[str] | None,
              **options: Any) -> tuple[list[Feature], FeatureReport]:  # fmt: skip
        return build_features(spec, tokenizer, examples, labels, **options)

    def collate(self, features: Sequence[Feature], pad_id: int = 0) -> dict[str, torch.Tensor]:
        return collate(features, pad_id)


def batches_of(
    builder: FeatureBuilder, features: Sequence[Feature], batch_size: int, pad_id: int = 0
) -> Iterator[dict[str, torch.Tensor]]:
    """Consecutive padded batches in order, padded by ``builder`` (for evaluation)."""
    for start in range(0, len(features), batch_size):
        yield builder.collate(features[start : start + batch_size], pad_id)


__all__ = ["FeatureBuilder", "TaskFeatures", "batches_of", "build_features"]
